// One parameter server's control logic, over its VariableStore: what
// CreateVariables, SetMembership, Health, Save and Restore do, whoever
// calls them. The gRPC service (grpc_ps_service.h) checks the caller and
// hands each call here; the in-process control (in_process_control.h)
// calls it directly.
//
// A save comes in phases (SaveRequest.phase): SNAPSHOT copies the
// variables at one instant (pushes held for the copy) and keeps the copy,
// answering its cut; WRITE writes the copy kept under
// checkpoint_dir/<checkpoint>; SNAPSHOT_AND_WRITE does both; DISCARD drops
// the copy kept. Saves and restores run on threads of their own, at most
// kMaxBackgroundJobs at once.
//
// Thread-safe. Does not own the store, which must outlive it.
#ifndef PST_PS_SERVER_PS_NODE_H_
#define PST_PS_SERVER_PS_NODE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/checkpoint_format.h"
#include "proto/pstrain.pb.h"
#include "ps_server/background_work.h"
#include "ps_server/variable_store.h"

namespace pst::ps {

// Fault injection for tests: when this environment variable holds N > 0,
// every Save waits N ms after its snapshot before writing the shard (and
// says so in the log), so a test can kill the ps in the middle of a save.
inline constexpr char kSaveDelayEnv[] = "PSTRAIN_TEST_SAVE_DELAY_MS";

class PsNode {
 public:
  struct Options {
    int ps_index = 0;
    std::string task;  // "ps-0", for Health
    uint64_t incarnation = 0;
    // Checkpoints are saved and restored only under it ("": none, and Save
    // and Restore are refused).
    std::string checkpoint_dir;
    // Waited between a save's snapshot and its file (kSaveDelayEnv).
    absl::Duration save_delay = absl::ZeroDuration();
  };

  // Saves and restores running at once at most; more are refused with
  // RESOURCE_EXHAUSTED.
  static constexpr int kMaxBackgroundJobs = 2;

  PsNode(VariableStore* store, Options options);

  VariableStore* store() const { return store_; }
  const Options& options() const { return options_; }

  // VariableStore::Create; logs the variables made.
  absl::Status CreateVariables(const proto::CreateVariablesRequest& request,
                               proto::CreateVariablesResponse* response);
  absl::Status SetMembership(const proto::MembershipRequest& request);
  // This ps's identity, sizes and training figures.
  void Health(proto::HealthResponse* response) const;

  // Runs `done` exactly once, with the call's status, perhaps before this
  // returns and perhaps on another thread; `request` and `response` must
  // live until then.
  using Done = std::function<void(absl::Status)>;

  // One phase of a save (see the file comment). A write's call finishes
  // when the file is durable. Errors: FailedPrecondition without a
  // checkpoint_dir, for another incarnation, or for a WRITE with no snapshot
  // kept; InvalidArgument for a name that is not ckpt-<digits> or a num_ps
  // that does not include this ps; ResourceExhausted past
  // kMaxBackgroundJobs or for a full disk; Unavailable once stopping.
  void Save(const proto::SaveRequest* request, proto::SaveResponse* response, Done done);
  // Streams every shard of the checkpoint, keeping the rows this ps holds,
  // then swaps them in. Errors: as Save, plus InvalidArgument for shard
  // names that are not the manifest's shard-<i>-of-<n>.pst each once,
  // DataLoss for a shard that differs from the manifest or fails its
  // checksums, FailedPrecondition for a checkpoint that does not fit this
  // ps's variables (VariableStore::Restorer).
  void Restore(const proto::RestoreRequest* request, proto::RestoreResponse* response, Done done);

  // Refuses Save and Restore from now on, and waits until every one running
  // has finished its call.
  void StopBackgroundWork();

 private:
  // checkpoint_dir/<name>; errors as Save's for the name.
  absl::StatusOr<std::string> CheckpointPath(const std::string& name) const;
  absl::Status RestoreFrom(const std::string& dir, const proto::RestoreRequest& request,
                           proto::RestoreResponse* response);
  // Takes the store's snapshot and fills the response's cut and figures.
  std::shared_ptr<const std::vector<common::ShardRecord>> TakeSnapshot(
      proto::SaveResponse* response);

  VariableStore* const store_;
  const Options options_;
  // The snapshot a SNAPSHOT phase kept for the WRITE that follows.
  absl::Mutex kept_mu_;
  std::shared_ptr<const std::vector<common::ShardRecord>> kept_ ABSL_GUARDED_BY(kept_mu_);
  // Save and Restore calls running on their own threads. Last: destroyed
  // (joined) first.
  BackgroundWork background_;
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_PS_NODE_H_
