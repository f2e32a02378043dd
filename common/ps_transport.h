// How a client reaches the parameter servers: one asynchronous call per
// (ps, request). The gRPC implementation is the real one; an in-process one
// (ps_server/in_process_transport.h) calls VariableStores directly, for the
// single-process reference trainer and for tests of the client's logic.
//
// Thread-safety: implementations are safe for concurrent calls.
#ifndef PST_COMMON_PS_TRANSPORT_H_
#define PST_COMMON_PS_TRANSPORT_H_

#include <functional>

#include "absl/status/status.h"
#include "proto/pstrain.pb.h"

namespace pst::common {

class PsTransport {
 public:
  using Done = std::function<void(absl::Status)>;
  virtual ~PsTransport() = default;

  virtual int num_ps() const = 0;
  // Each call eventually runs `done` exactly once, possibly on another
  // thread; the request and response must outlive that. REQUIRES: 0 <= ps <
  // num_ps().
  virtual void Pull(int ps, const proto::PullRequest* request, proto::PullResponse* response,
                    Done done) = 0;
  virtual void Push(int ps, const proto::PushRequest* request, proto::PushResponse* response,
                    Done done) = 0;
  virtual void PushPull(int ps, const proto::PushPullRequest* request,
                        proto::PullResponse* response, Done done) = 0;
  virtual void PullRows(int ps, const proto::PullRowsRequest* request,
                        proto::PullRowsResponse* response, Done done) = 0;
  virtual void PushRows(int ps, const proto::PushRowsRequest* request,
                        proto::PushRowsResponse* response, Done done) = 0;
  // A human-readable name of ps `ps` for error messages ("ps 1 at h:2222").
  virtual std::string Describe(int ps) const = 0;
};

}  // namespace pst::common

#endif  // PST_COMMON_PS_TRANSPORT_H_
