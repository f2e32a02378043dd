// How a client reaches the parameter servers: one asynchronous call per
// (ps, request). The gRPC implementation is the real one; an in-process one
// (ps_server/in_process_transport.h) calls VariableStores directly, for the
// single-process reference trainer and for tests of the client's logic.
//
// Thread-safety: implementations are safe for concurrent calls.
#ifndef PST_COMMON_PS_TRANSPORT_H_
#define PST_COMMON_PS_TRANSPORT_H_

#include <functional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "common/payload_pins.h"
#include "proto/pstrain.pb.h"

namespace pst::common {

// Float payloads of a dense call kept in the caller's memory rather than in
// the messages (see the *Dense calls).
struct DenseBuffers {
  // The payload of the request's k-th gradient tensor, whose data is empty.
  std::vector<std::span<const float>> gradients;
  // Where the answer's k-th value goes; its tensor comes back with empty
  // data once the payload, exactly values[k].size() floats, is there.
  std::vector<std::span<float>> values;
  // Counts what the transport still holds of `gradients` after the call
  // (rpc/wire_codec.h); the caller waits on it before reusing them.
  // Required for calls with gradients.
  PayloadPins* pins = nullptr;
};

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

  // Pull, PushPull and Push with payloads in `buffers` (which must outlive
  // the call, unchanged). An answer's value payload of another size than
  // its buffer fails the call with DataLoss. These defaults copy payloads
  // into and out of the messages; the gRPC transport sends gradients from
  // the buffers as they are and receives values straight into them.
  virtual void PullDense(int ps, const proto::PullRequest* request, const DenseBuffers* buffers,
                         proto::PullResponse* response, Done done);
  virtual void PushPullDense(int ps, const proto::PushPullRequest* request,
                             const DenseBuffers* buffers, proto::PullResponse* response,
                             Done done);
  virtual void PushDense(int ps, const proto::PushRequest* request, const DenseBuffers* buffers,
                         proto::PushResponse* response, Done done);
};

}  // namespace pst::common

#endif  // PST_COMMON_PS_TRANSPORT_H_
