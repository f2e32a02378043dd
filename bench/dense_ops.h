// The dense cases' operations, as a worker runs them, in a thread of
// ps_bench (cases.cc) or in a worker process (worker_process.cc) alike.
#ifndef PST_BENCH_DENSE_OPS_H_
#define PST_BENCH_DENSE_OPS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "bench/case_runner.h"
#include "client/ps_client.h"
#include "common/ps_transport.h"
#include "proto/pstrain.pb.h"

namespace pst::bench {

// The gradients a dense case of `size` floats pushes: small enough that
// SGD at the benchmark's learning rate keeps the values finite.
client::Values DenseGradients(int64_t size);

// A client of `plan`'s dense variable of `size` floats, for worker `index`
// (`incarnation`) over `transport`, moving it as `wire` says (float32,
// bf16 or topk:RATIO). Errors: those of client::PsClient::Create.
absl::StatusOr<std::unique_ptr<client::PsClient>> MakeDenseClient(
    const proto::PlacementPlan& plan, int64_t size, const std::string& wire,
    std::shared_ptr<common::PsTransport> transport, int index, uint64_t incarnation);

// One operation `op` (push, pull or pushpull) of `client` on its variable of
// `size` floats, pushing `*grads`, pulling into `*out`, numbering its
// pushes from `*step` on: it returns the float32 bytes of the parameters
// moved, whatever the wire carries, so that a setting's rate compares with
// float32's as the training speed would. Every pointer outlives the Op.
Op MakeDenseOp(const std::string& op, client::PsClient* client, int64_t size, int64_t* step,
               const client::Values* grads, client::Values* out);

}  // namespace pst::bench

#endif  // PST_BENCH_DENSE_OPS_H_
