// Where each shard's primary is in a replicated job (PlacementPlan.replicas
// 2), and a PsTransport that sends each request for a shard to that ps.
//
// A PsClient addresses its requests to shards (a plan entry's ps_index);
// without replication shard g is ps g. When the chief moves a shard (its
// primary was lost and the backup promoted), it says so with a new routing
// version (HeartbeatResponse.shards); Set takes it, and every request from
// then on goes to the new primary.
//
// A request in flight when its ps is lost is sent again, the same request,
// to the shard's new primary: the routed transport holds a call that failed
// as a lost ps fails (UNAVAILABLE, DEADLINE_EXCEEDED, or NOT_FOUND /
// FAILED_PRECONDITION from a ps that came back empty) until its shard moves,
// then resends it. The ps' de-duplication applies it once, whether the
// backup had it or not, so a SYNC step is aggregated from the same
// gradients as without the loss. The call fails with its first error when
// nothing moves within kRerouteWait, or at once while calls are not held
// (SetHold(false): the chief restores from a checkpoint instead, or the
// worker stops).
//
// Thread-safe: routes are read on every request and set from the
// heartbeat thread.
#ifndef PST_CLIENT_SHARD_ROUTES_H_
#define PST_CLIENT_SHARD_ROUTES_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/ps_transport.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "proto/pstrain.pb.h"

namespace pst::client {

class ShardRoutes {
 public:
  // Longest a failed call waits for its shard to move.
  static constexpr absl::Duration kRerouteWait = absl::Seconds(30);

  // Shard g on ps g, for `num_shards` shards; `replicated`: calls that fail
  // as a lost ps fails wait for their shard to move.
  explicit ShardRoutes(int num_shards, bool replicated = false);
  // Routes from `plan` (its shards' primaries, when replicated).
  static std::shared_ptr<ShardRoutes> FromPlan(const proto::PlacementPlan& plan, int64_t version);

  // Takes the primaries of `shards` (by shard) when `version` is newer than
  // the routes held; ignores an older one, and entries beyond num_shards or
  // naming no ps. Returns whether anything changed.
  bool Set(int64_t version, const google::protobuf::RepeatedPtrField<proto::ShardCopies>& shards);

  int num_shards() const { return static_cast<int>(ps_.size()); }
  int PsOf(int shard) const { return ps_[shard].load(std::memory_order_acquire); }
  int64_t version() const { return version_.load(std::memory_order_acquire); }
  bool replicated() const { return replicated_; }

  // Waits until `shard` is on a ps other than `from` (true), or until
  // `deadline`, or while calls are not held (false).
  bool AwaitMove(int shard, int from, absl::Time deadline) const;
  // Whether failed calls wait for their shard to move (the default), or
  // fail at once: ends every wait when false (the worker stops, or the ps
  // are being restored from a checkpoint).
  void SetHold(bool hold);

 private:
  const bool replicated_;
  std::vector<std::atomic<int>> ps_;
  std::atomic<int64_t> version_{0};
  mutable absl::Mutex mu_;  // for the waits; routes change under it
  bool hold_ ABSL_GUARDED_BY(mu_) = true;
};

// Sends each request for shard g to routes->PsOf(g) over `base`, which
// reaches the ps by their index. num_ps() is the number of shards.
std::unique_ptr<common::PsTransport> MakeRoutedTransport(std::shared_ptr<common::PsTransport> base,
                                                         std::shared_ptr<const ShardRoutes> routes);

}  // namespace pst::client

#endif  // PST_CLIENT_SHARD_ROUTES_H_
