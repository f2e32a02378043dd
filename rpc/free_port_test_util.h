// For the rpc/ tests that start a real server: a loopback port to listen on.
#ifndef PST_RPC_FREE_PORT_TEST_UTIL_H_
#define PST_RPC_FREE_PORT_TEST_UTIL_H_

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace pst::rpc::testing {

// A port the kernel just handed out and took back.
inline int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace pst::rpc::testing

#endif  // PST_RPC_FREE_PORT_TEST_UTIL_H_
