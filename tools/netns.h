// A network namespace joined to this one by a veth pair: a "machine" of its
// own on this one, for benchmarks and tests that need real links (shaped,
// cut, lossy). Needs root and iproute2.
//
// Names never repeat: a namespace and its veth ends carry this process's pid
// and a sequence number that this process never hands out twice. Deleting a
// namespace frees the veth inside it asynchronously, so a name reused right
// after a deletion may still be taken. Removal deletes the veth first (which
// is synchronous and takes both ends), then the namespace.
#ifndef PST_TOOLS_NETNS_H_
#define PST_TOOLS_NETNS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pst::tools {

// The ip(8) binary, or "" when there is none.
std::string IpPath();

// A number this process has not handed out before (0, 1, 2, ...), for names
// and subnets that must not repeat. Thread-safe.
int NextNetSequence();

// "<prefix><pid><role><sequence>": an interface name no other process uses,
// nor this one for another sequence number. With a prefix of at most 2
// characters it fits Linux's 15 for sequence numbers below 100000.
std::string InterfaceName(absl::string_view prefix, char role, int sequence);

class VethNamespace {
 public:
  // Creates namespace "pst<prefix><pid>_<sequence>" with lo up, and a veth
  // pair: host_veth() here and inner_veth() inside, both up, without
  // addresses. `prefix`: at most 2 characters. On an error, removes what it
  // made. Errors: Internal naming the command that failed, how it ended and
  // what it printed.
  static absl::StatusOr<std::unique_ptr<VethNamespace>> Create(absl::string_view prefix);

  // Remove(); an error is printed to stderr.
  ~VethNamespace();
  VethNamespace(const VethNamespace&) = delete;
  VethNamespace& operator=(const VethNamespace&) = delete;

  // Deletes the veth pair, then the namespace; does nothing the second time.
  // Errors: Internal as for Create (then nothing is tried again).
  absl::Status Remove();

  const std::string& name() const { return name_; }
  const std::string& host_veth() const { return host_veth_; }
  const std::string& inner_veth() const { return inner_veth_; }
  // The sequence number in the names, for a subnet of this link alone.
  int sequence() const { return sequence_; }

  // Runs the shell command line `command` inside the namespace ("ip netns
  // exec"). Its output, or an error as for Create.
  absl::StatusOr<std::string> Run(const std::string& command) const;
  // `argv` prefixed to run inside the namespace (argv[0] a path).
  std::vector<std::string> Wrap(std::vector<std::string> argv) const;

 private:
  VethNamespace() = default;

  std::string ip_;  // IpPath(), or "ip" to fail with the shell's message
  std::string name_, host_veth_, inner_veth_;
  int sequence_ = 0;
  bool namespace_made_ = false, veth_made_ = false;
};

}  // namespace pst::tools

#endif  // PST_TOOLS_NETNS_H_
