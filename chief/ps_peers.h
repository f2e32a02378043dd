// The chief's calls to its ps, over common::PsControl (gRPC in the daemon,
// in-process in tests): create the variables, probe, fan a call out to
// every ps, shut them down.
//
// Thread-safety: the functions are as safe as the PsControl they call.
#ifndef PST_CHIEF_PS_PEERS_H_
#define PST_CHIEF_PS_PEERS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/process.h"
#include "common/ps_control.h"
#include "proto/pstrain.pb.h"

namespace pst::chief {

// A ps as the chief knows it: where it is, and the incarnation it was last
// created or restored in.
struct PsPeer {
  std::string address;
  uint64_t incarnation = 0;
  absl::Time last_ok;
};

// Creates ps `index`'s variables, retrying while it is not up yet, until
// `deadline` on `clock`. Returns how many were new (the rest existed
// already: a ps that kept its state). Errors: DeadlineExceeded naming
// `address` and --startup_timeout_s; Cancelled when `stop` stopped; the ps's
// own refusal, prefixed with "ps at <address>".
absl::StatusOr<int> CreateOnPs(common::PsControl& control, int index, const std::string& address,
                               const proto::CreateVariablesRequest& request, absl::Time deadline,
                               common::Clock& clock, const common::StopSignal& stop);

// The initial values of a plan entry as little-endian float32 bytes, or ""
// for its initializer (a spec model's values from its file:
// models::SpecInitialValues::ValuesFor).
using InitialValuesFn =
    std::function<absl::StatusOr<std::string>(const proto::VariableSpec& entry)>;

// Initial values a create request carries at most, beside its specs (one
// entry with more goes alone), so that requests stay well under the ps's
// control-message limit (--grpc_max_control_message_mb, 16 MiB by default).
inline constexpr int64_t kCreateValuesBytes = 4 << 20;
// One entry's values at most (it goes alone in its request).
inline constexpr int64_t kMaxEntryValuesBytes = 12 << 20;

// Creates every variable `state.plan()` places in shard `shard` on ps
// `index` (the ps serving it: `shard` itself but after a failover), with
// `state.training()`'s optimizer and sync, as CreateOnPs does (in a
// replicated plan, the ps's own shard names its backup: the ps forwards
// them to it; `restoring`: every copy is restored next, so the primary
// forwards to its backup afresh: CreateVariablesRequest.restart_backup). Without
// `values` (null) in one request; with them, in as many as keep each
// request's values under kCreateValuesBytes. A ps whose incarnation
// changes between those requests (it restarted half-created) is created
// again from the first. Returns how many were new. Errors: CreateOnPs's;
// those of `values`; InvalidArgument for an entry whose values exceed
// kMaxEntryValuesBytes (cut it with --dense_piece_bytes or a --partitioner).
absl::StatusOr<int> CreatePlanOnPs(common::PsControl& control, int shard, int index,
                                   const std::string& address, const proto::ClusterState& state,
                                   const InitialValuesFn& values, absl::Time deadline,
                                   common::Clock& clock, const common::StopSignal& stop,
                                   bool restoring = false);

// ps `index`'s Health, asked as the chief; with `digest`, with its copies'
// digests (HealthRequest.digest).
absl::StatusOr<proto::HealthResponse> ProbePs(common::PsControl& control, int index,
                                              absl::Duration timeout, bool digest = false);

// Runs `call(i)` for every ps on its own thread and returns the first error.
absl::Status ForEachPs(size_t n, const std::function<absl::Status(size_t)>& call);

// Tells every ps, in parallel, to exit; waits at most a few seconds for the
// answers, and ignores failures.
void ShutdownAllPs(common::PsControl& control, const std::string& reason);

}  // namespace pst::chief

#endif  // PST_CHIEF_PS_PEERS_H_
