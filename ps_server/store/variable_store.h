// The variables one ps holds, and the logic of every data-plane request:
// create, pull, push (apply the optimizer), and their sparse forms by row
// id (PullRows, PushRows), with full validation.
//
// A request is checked completely before any state changes: a push with one
// bad gradient among ten applies none of them.
//
// Kinds of variable (VariableSpec.routing):
//   ROUTING_NONE  a whole variable; row ids are 0 .. shape[0)-1.
//   MOD, DIV      one partition of a logical variable of full_shape; row ids
//                 are global (ids of the logical variable) and must belong
//                 to this partition. Local row r holds global row
//                 row_offset + r * row_stride, and starts with the values the
//                 unpartitioned variable has there.
//   HASH          a hash embedding, shape [0, dim...]: any int64 id with
//                 uint64(id) % num_partitions == partition; a row is made on
//                 first touch (a pull or a push), or with admit_after > 1 on
//                 the admit_after-th touch. Element j of row `id` starts at
//                 element (uint64(id) mod 2^62) * dim + j of the initializer
//                 (so a non-negative id gets the values row `id` of a dense
//                 variable with the same initializer has; ids equal modulo
//                 2^62 start alike). GLOROT_UNIFORM takes its fans from
//                 full_shape, which must then have full_shape[0] > 0.
// Row values travel as [len(ids), dim] tensors, dim being the product of the
// dimensions after the first (1 for a rank-1 variable).
//
// Training modes (SyncConfig, set by the first Create): ASYNC applies each
// push when it arrives. SYNC averages replicas_to_aggregate pushes for the
// variable's current version into one update; pushes for an older version
// are dropped as stale. Row pushes (PushRows) in SYNC are summed per id
// (RowAggregate, row_aggregate.h) and applied as one row push per step,
// each id's sum divided by the number of pushes aggregated; every row
// variable then moves one version per step, as a dense one does, and a
// worker's push lists every partition (PsClient sends empty ones). SSP applies pushes at once and
// tracks each worker's clock. A pull that may not proceed yet (SYNC: a version not reached; SSP:
// too far ahead of the slowest active worker) is parked: PullWhenReady
// returns at once and completes its callback later, from the thread whose
// push or membership change makes it ready. Every mode drops a repeated
// (worker, incarnation, step) push: a retry is applied exactly once.
//
// The store is a facade over its parts, each in its own file:
//   Variable      (variable.h) one variable: dense values, slots, version,
//                 SYNC accumulator, striped row locks, row reads/updates;
//   HashRowTable  (hash_row_table.h) a hash embedding's rows and admission;
//   SyncLedger    (sync_ledger.h) the training mode: config, membership,
//                 clocks, duplicate detection, parked pulls;
//   the store     (variable_store.cc) the name -> Variable map, the
//                 optimizer and the restore generation; checks a request
//                 whole, then hands each variable its part;
//   StoreRestorer (store_restorer.h) a restore from a checkpoint, absorbed
//                 record by record and swapped in at Commit;
//   snapshots     (store_snapshot.cc: Snapshot, Cut, Digest) and state
//                 transfer (store_state.cc: ExportState, LoadState).
//
// Thread-safety: all methods are safe to call concurrently. mu_ guards the
// name -> variable map, the optimizer and the generation: data-plane calls
// hold it shared (so pushes to different variables proceed in parallel),
// Create, Snapshot, ExportState and a restore's commit exclusively. Each
// variable has its own lock and striped row locks (variable.h says what a
// reader sees of a concurrent push); the SyncLedger its own mutex.
// Lock order: mu_, then the ledger's mutex, then a Variable's mu, then one
// of its row stripes; SYNC's row aggregates: mu_, row_sync_mu_ (the map
// alone, never held while taking another lock), then one RowSync's mu,
// then the Variable's mu. Parked pulls complete (their Done runs) with no
// lock held.
#ifndef PST_PS_SERVER_STORE_VARIABLE_STORE_H_
#define PST_PS_SERVER_STORE_VARIABLE_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/checkpoint_format.h"
#include "common/tensor_util.h"
#include "proto/pstrain.pb.h"
#include "ps_server/store/admission_filter.h"
#include "ps_server/store/change_log.h"
#include "ps_server/store/disk_tier.h"
#include "ps_server/store/optimizer.h"
#include "ps_server/store/row_aggregate.h"
#include "ps_server/store/state_export.h"
#include "ps_server/store/store_restorer.h"
#include "ps_server/store/sync_ledger.h"

namespace pst::ps {

class Variable;

class VariableStore {
 public:
  struct Options {
    // Largest variable accepted, in elements (default 4 Gi floats = 16 GiB).
    // For a hash variable, the limit applies to one row.
    int64_t max_variable_elements = int64_t{1} << 32;
    // Admission (admit_after > 1): the bytes of each hash table's counting
    // filter (AdmissionFilter; the ps's --admission_filter_bytes), allocated
    // on its first count: ids may be admitted early, never late.
    int64_t admission_filter_bytes = AdmissionFilter::kDefaultBytes;
    // The disk tier (--table_store_dir), or null: hash tables with a
    // capacity keep the rows past it there (HashRowTable::UseDisk). Shared
    // by every store of the ps (its backup copies too).
    std::shared_ptr<DiskTier> disk_tier;
    // Row ids one PullRows or PushRows may list, over all its variables
    // (ps flag --max_ids_per_request): more is refused with InvalidArgument
    // before any id is looked at.
    int64_t max_ids_per_request = int64_t{1} << 22;
    // Largest PullRows answer, in payload bytes (the gRPC message limit): a
    // pull whose rows would not fit is refused with ResourceExhausted up
    // front, instead of being built and then dropped by gRPC.
    int64_t max_response_bytes = int64_t{512} << 20;
    // Bytes of dense variables and their optimizer slots this store may
    // hold (ps flag --max_variable_bytes): a Create past it is refused with
    // ResourceExhausted before anything is allocated.
    int64_t max_store_bytes = int64_t{64} << 30;
    // Rows one hash embedding (one partition) may hold (--max_table_rows):
    // a row push that would store more is refused with ResourceExhausted.
    // Reads store no row.
    int64_t max_hash_rows = int64_t{1} << 26;
    // Pulls parked at once (--max_parked_pulls); one more is answered
    // ResourceExhausted at once. ExpireParked bounds how long each waits.
    int64_t max_parked_pulls = 4096;
    // Worker indices accepted when the job's SyncConfig names no
    // num_workers (with one, [0, num_workers)).
    int32_t max_workers = 1 << 16;
  };

  // Largest step, clock or min_version a request may carry: far beyond any
  // job, and small enough that step + 1 never overflows.
  static constexpr int64_t kMaxCounter = int64_t{1} << 62;

  VariableStore() : VariableStore(Options()) {}
  explicit VariableStore(Options options);
  const Options& options() const { return options_; }

  // Creates and initializes the variables, all or nothing. A variable that
  // already exists with an identical spec is left as it is (the call is
  // idempotent, so a restarted chief can repeat it), its initial_values
  // unused: values kept or restored are never overwritten. A new variable
  // with initial_values takes them instead of its initializer. Returns how
  // many were new.
  // Errors: InvalidArgument for a bad spec (partition fields included),
  // initializer or optimizer, a name repeated in the request, or initial
  // values of the wrong count or byte size, non-finite, or for a hash
  // embedding;
  // AlreadyExists for a name that exists with a different spec;
  // FailedPrecondition if the optimizer differs from the one the store was
  // first created with.
  absl::StatusOr<int> Create(const proto::CreateVariablesRequest& request);

  // Copies the named variables (all but hash variables, if `names` is empty,
  // sorted by name), in `dtype` (float32 or bf16; unset: float32).
  // Errors: NotFound for an unknown name; FailedPrecondition for a hash
  // variable (use PullRows); InvalidArgument for another dtype.
  absl::Status Pull(const google::protobuf::RepeatedPtrField<std::string>& names,
                    proto::PullResponse* response, proto::DType dtype = proto::DT_FLOAT32) const;

  // Applies each gradient (float32 or bf16) with the optimizer.
  // Errors: InvalidArgument if names and gradients differ in count, a name
  // repeats, a gradient's dtype/shape/size does not match its variable, or
  // a gradient holds NaN or Inf, or wire_dtype is neither unset, float32
  // nor bf16; NotFound for an unknown variable;
  // FailedPrecondition for a hash variable (use PushRows). On any error
  // nothing is applied. With OptimizerConfig.skip_nonfinite, rows (slices
  // along axis 0) holding NaN or Inf are skipped and counted in the stats
  // instead.
  // With `payloads`, gradient k's data is payloads[k] (pieces of gRPC's
  // receive buffer, rpc::DecodePush) and the tensors' own data is
  // ignored; InvalidArgument if their counts differ.
  using Payloads = std::vector<std::vector<std::string_view>>;
  absl::Status Push(const proto::PushRequest& request, proto::PushResponse* response,
                    const Payloads* payloads = nullptr);

  // Push, then Pull of the pushed names once they may be read (SYNC: version
  // push.step + 1; SSP: clock push.step + 1), blocking the caller until then.
  // For in-process use; the gRPC service parks with PushPullWhenReady.
  // Errors: as Push.
  absl::Status PushPull(const proto::PushPullRequest& request, proto::PullResponse* response);

  // Completion callback of a parked call; runs exactly once.
  using Done = SyncLedger::Done;

  // Pull that waits, without blocking the caller, until the request may be
  // served (see the class comment); then fills `response` and runs `done`,
  // on this thread if it can be served now. Returns a ticket for
  // CancelWaiter, or 0 when `done` already ran. `request` and `response`
  // must live until `done` runs.
  uint64_t PullWhenReady(const proto::PullRequest* request, proto::PullResponse* response,
                         Done done);
  // Push, then PullWhenReady for the pushed names at push.step + 1. A push
  // error completes `done` at once.
  // `payloads` as in Push; it need only live until this returns. Sets
  // `*applied`, when given, to whether the push was taken (applied, or
  // recognized as a repeat) before this returns.
  uint64_t PushPullWhenReady(const proto::PushPullRequest* request, proto::PullResponse* response,
                             Done done, const Payloads* payloads = nullptr,
                             bool* applied = nullptr);
  // Removes a parked call; true if it was still parked (then the caller
  // finishes the call and `done` never runs).
  bool CancelWaiter(uint64_t ticket);
  // Completes every parked call with `status` (shutdown).
  void CancelAllWaiters(const absl::Status& status);
  // Answers DeadlineExceeded to every call parked for longer than
  // `max_wait` (a pull whose version or clock never comes: a lost worker,
  // or a hostile clock). Returns how many.
  int ExpireParked(absl::Duration max_wait);

  // Sets the workers that take part and the SYNC quorum (lowered to the
  // number of active workers if larger). Applies any aggregation the new
  // quorum completes, and wakes parked pulls.
  // Errors: InvalidArgument for a worker index outside [0, num_workers) or
  // a quorum < 1.
  absl::Status SetMembership(const proto::MembershipRequest& request);

  // Copies rows by global id: one [len(ids), dim] tensor and the variable's
  // version per RowIds, in order. Not-yet-admitted hash ids read as zeros;
  // every listed hash id counts as one touch (and may create its row).
  // Errors: NotFound for an unknown name; InvalidArgument for an id out of
  // range, in another partition, or repeated within one RowIds, or for more
  // than Options::max_ids_per_request ids; ResourceExhausted when the answer
  // would exceed Options::max_response_bytes. On any error nothing changes
  // (no rows made, no touches counted).
  // Whether a variable (or partition) of this name is here.
  bool Holds(const std::string& name) const;
  // Whether PullRows(request) may change the store: it names a hash
  // variable, whose rows a pull makes, or counts touches of (admission).
  bool PullMayChangeRows(const proto::PullRowsRequest& request) const;
  absl::Status PullRows(const proto::PullRowsRequest& request,
                        proto::PullRowsResponse* response) const;

  // Applies each [len(ids), dim] gradient to its rows with the optimizer
  // (lazily: untouched rows and their slots stay; Adam's t is the variable's
  // update count). Each variable's version grows by one per push, and the
  // push counts in pushes_applied. Gradients of not-yet-admitted hash ids
  // count as touches and are dropped (Stats::unadmitted_dropped).
  // Errors: as Pull rows, plus InvalidArgument for rows and gradients
  // differing in count, a variable twice in one push, a gradient not of
  // dtype float32 and shape [len(ids), dim] with the matching payload, or
  // NaN/Inf in a gradient; FailedPrecondition before any variable exists.
  // On any error nothing is applied. With OptimizerConfig.skip_nonfinite,
  // rows holding NaN/Inf are skipped instead, counted in
  // response->rows_skipped() and Stats::nonfinite_skipped. A repeat of an
  // applied push (same worker, nonzero incarnation and step) is acknowledged
  // and not applied again.
  absl::Status PushRows(const proto::PushRowsRequest& request, proto::PushRowsResponse* response);

  // What a snapshot holds of each worker's pushes (a cut; see Snapshot).
  struct Cut {
    std::vector<proto::WorkerCut> workers;  // by worker index
    // SYNC: gradients accumulated (dense or rows) and not applied, or
    // variables at different versions (a step applied to some only).
    bool sync_pending = false;
    int64_t max_version = 0;  // highest version of a dense variable (SYNC: of any)
    bool holds_dense = false;   // some variable here is dense
    bool holds_any = false;     // some variable is here
    // Not OK when the disk tier failed to read a table's rows: the copy
    // is then empty and must not be saved.
    absl::Status error;
    // SnapshotChanges: the snapshot's number, for SnapshotWritten (0: not
    // tracked); and whether an incremental one found no base (the copy
    // then empty, nothing else set).
    int64_t seq = 0;
    bool base_unknown = false;
  };

  // A save's snapshot in a chain of incremental checkpoints
  // (ps_server/store/change_log.h).
  struct SnapshotChanges {
    // Notes which rows change from this snapshot on (if it did not
    // already); false: stops noting and forgets.
    bool track = false;
    // Incremental: only what changed since the snapshot written last, as
    // the checkpoint `base` (SnapshotWritten): the dense variables whose
    // version moved, and each table's changed rows (with their entries)
    // and the ids it no longer stores (ShardRecord::removed_ids). "": a
    // full snapshot.
    std::string base;
  };

  // A copy of every variable (values, slots, version, hash rows), sorted by
  // name, all taken at one instant: the store is held exclusively for the
  // copy, so no push is half-way through and none starts (the memory for
  // the dense copies is allocated before). Sets `*held`, when given, to how
  // long pushes were held, and `*cut` to what the copy holds of each
  // worker's pushes: its position after its last dense push, the lowest and
  // highest step of its last push over every dense part (equal when no
  // dense step of it is half applied here; SYNC tracks no steps, see
  // Cut::sync_pending), and its last row push.
  //
  // With `copy_budget` (a fraction of the dense variables' bytes, > 0), the
  // dense variables are not copied: each record reads its variable when
  // written (ShardRecord::dense), and a change before that copies the
  // variable first while the copies fit the budget, or waits until the
  // record is read (dense_snapshot.h), for at most a second, then copies
  // past the budget. Records should be written (or dropped) promptly.
  //
  // With `changes`, the snapshot is one of a chain (SnapshotChanges); a
  // Snapshot without leaves the chain as it is. An incremental snapshot
  // whose base is not the snapshot written last (none written since the
  // store was restored or tracking began, another written since, or
  // variables created since) sets Cut::base_unknown and copies nothing.
  std::vector<common::ShardRecord> Snapshot(absl::Duration* held = nullptr, Cut* cut = nullptr,
                                            double copy_budget = 0,
                                            const SnapshotChanges* changes = nullptr,
                                            const std::string& spill_dir = "") const;
  // With `copy_budget`, a full snapshot's hash tables in memory (not those
  // with a disk tier, which stream) are copied before the instant, while
  // pushes go on, each row under its stripe's lock, their changes noted;
  // at the instant only the rows changed since are copied again, so that
  // pushes are held for those, not for every row. With `spill_dir`, that
  // copy goes to an unlinked file there and the records stream it
  // (ps_server/store/table_precopy.h): no copy of the rows in memory.
  //
  // The tracked snapshot `seq` (Cut::seq) was written as the checkpoint
  // `checkpoint`: the base of the next incremental one.
  void SnapshotWritten(int64_t seq, const std::string& checkpoint);

  // The whole store as parts of about `part_bytes` each (store_state.cc),
  // taken at one instant: every variable's spec, values, slots, version,
  // sync accumulator, hash rows and admission counts, and the mode's state
  // (generation, quorum, membership, clocks, de-duplication, positions).
  // LoadState of every part in order into an empty store with the same
  // Options makes it equal to this one, so that the same changes after take
  // both through the same states. Not the Stats counters. The rows of a
  // table with a disk tier are read from a cut of it as the parts are taken
  // (state_export.h); the rest is copied now. Errors: the disk tier's,
  // cutting a table.
  absl::StatusOr<std::unique_ptr<StateExport>> ExportState(int64_t part_bytes) const;
  // Takes one part of ExportState, in order (part 0 into an empty store).
  // Errors: InvalidArgument for a part that does not fit the store (rows
  // out of range, sizes that differ from the variable's), or part 0 sent to
  // a store that holds variables; NotFound for an unknown variable;
  // ResourceExhausted past Options::max_hash_rows; Create's for part 0.
  absl::Status LoadState(const proto::StoreChunk& chunk);

  // A 64-bit hash (FNV-1a) of every variable's name, version, values and
  // slots, and of each hash row with its id, in id order: equal for two
  // stores that went through the same changes, whatever the order their
  // hash tables were filled in, and whichever tier holds a row. Takes a
  // Snapshot (a copy of the store; tables with a disk tier streamed).
  // Errors: the disk tier's, reading a table's rows.
  absl::StatusOr<uint64_t> Digest() const;

  // Loads the variables this store holds from `records`, the shards of a
  // checkpoint written by any number of ps: each variable or partition takes
  // the rows that belong to it (by global row, or by hash id) from every
  // record of the same logical variable, with its slots, and the highest
  // version among them. Sync accumulators, clocks and duplicate detection
  // restart. Everything is checked before anything changes.
  // Errors: FailedPrecondition naming the variable when the checkpoint lacks
  // it or some of its rows, when its row width differs, or when its slots do
  // not match this optimizer's. Sets the store's restore generation: from
  // then on, pushes (Push, PushPull, PushRows) of any other generation are
  // refused with Aborted, and calls parked before the restore are answered
  // Aborted. The generation starts at 0.
  absl::Status Restore(const std::vector<const common::ShardRecord*>& records,
                       int64_t generation = 0);

  // Restore in stages, for shards read one record at a time (Absorb every
  // record, then Commit): see store_restorer.h.
  using Restorer = StoreRestorer;
  // The variables as they are now are the ones a restore fills.
  // `reset_slots`: a variable saved with another optimizer than it trains
  // with here restores its values with fresh slots (RestoreRequest
  // .reset_slots) instead of failing the restore.
  std::unique_ptr<Restorer> BeginRestore(bool reset_slots = false);
  int64_t generation() const;

  // Stripes of row locks per variable.
  static constexpr int kRowStripes = 64;

  struct Stats {
    int num_variables = 0;
    int64_t num_elements = 0;  // hash variables: rows held * dim
    int64_t pushes_applied = 0;
    int64_t hash_rows = 0;           // rows held by hash variables
    int64_t nonfinite_skipped = 0;   // gradient rows skipped for NaN/Inf
    int64_t unadmitted_dropped = 0;  // gradient rows of not-yet-admitted ids
    // Training-mode figures (dense pushes).
    int64_t gradients_applied = 0;
    int64_t staleness_sum = 0;
    int64_t staleness_max = 0;
    int64_t stale_dropped = 0;
    int64_t duplicates_ignored = 0;
    int64_t parked_pulls = 0;
    double parked_seconds = 0;
    int64_t max_clock_gap = 0;
    int64_t generation = 0;   // restore generation
    int64_t max_version = 0;  // highest version of a dense variable
    // Worker -> data position after its last dense push (cleared by Restore).
    absl::flat_hash_map<int32_t, int64_t> worker_positions;
    // Time spent applying pushes (the optimizer, and SYNC's accumulation),
    // locks held, summed over threads.
    double apply_seconds = 0;
    // Rows held per embedding table: hash variables and the partitions of
    // row-routed (MOD, DIV) variables, by the logical variable's name.
    absl::flat_hash_map<std::string, int64_t> table_rows;
    // Hash tables, by the logical variable's name: rows evicted, rows made
    // (ids admitted), pushed rows of ids not admitted yet.
    // The disk tier: rows there now, rows read there (pulled or brought
    // back) and written there (evicted to it).
    struct TableFigures {
      int64_t evictions = 0;
      int64_t admissions = 0;
      int64_t refused = 0;
      int64_t rows_on_disk = 0;
      int64_t disk_reads = 0;
      int64_t disk_writes = 0;
      TableFigures& operator+=(const TableFigures& o);
    };
    absl::flat_hash_map<std::string, TableFigures> tables;
    // `tables`' figures summed over every table.
    TableFigures AllTables() const;
  };
  Stats GetStats() const;

  ~VariableStore();

 private:
  friend class StoreRestorer;  // its Commit swaps the restored state in

  // Whether the named variable is there, or NotFound.
  absl::StatusOr<Variable*> Find(const std::string& name) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Aborted unless `generation` is this store's restore generation.
  absl::Status CheckGeneration(int64_t generation) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // InvalidArgument unless 0 <= value < kMaxCounter.
  static absl::Status CheckCounter(int64_t value, absl::string_view what);
  // InvalidArgument when `rows` list more than max_ids_per_request ids.
  absl::Status CheckIdCount(const google::protobuf::RepeatedPtrField<proto::RowIds>& rows,
                            absl::string_view op) const;
  // SYNC readiness of a parked pull (SyncLedger::VersionsReached): the
  // variables it names (every dense one, if none) reached min_version.
  bool VersionsReachedLocked(const proto::PullRequest& request) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Push without waking parked pulls (the caller wakes them). With `answer`,
  // in ASYNC mode, also what a Pull of the pushed names would return right
  // after this push, taken under the same variable locks while the values
  // are still in cache (PushPull needs no second pass over them); `answer`
  // is left as it was in the other modes and for a repeated push.
  absl::Status PushNoWake(const proto::PushRequest& request, proto::PushResponse* response,
                          const Payloads* payloads, proto::PullResponse* answer = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Serves every parked pull that is ready now.
  void WakeWaiters() ABSL_LOCKS_EXCLUDED(mu_);

  // SYNC: a row variable's aggregate of the step in flight. `generation`
  // and `step` say which state it was summed for: one of another restore
  // generation, or for a step other than the variable's version now (a
  // restore put the version back), is stale and emptied before use (a
  // restore keeps the Variable objects and does not know of these).
  struct RowSync {
    explicit RowSync(int64_t dim) : aggregate(dim) {}
    absl::Mutex mu;
    int64_t generation ABSL_GUARDED_BY(mu) = 0;
    int64_t step ABSL_GUARDED_BY(mu) = 0;
    RowAggregate aggregate ABSL_GUARDED_BY(mu);
  };
  // The RowSync of `var`, made on first use when `make` (else null if it
  // has none). The pointer lives as long as the store.
  RowSync* RowSyncOf(const Variable& var, bool make = true) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Empties `sync` if it was summed for another state than `var`'s now.
  void RefreshRowSyncLocked(RowSync& sync, const Variable& var) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync.mu);
  // Applies `sync`'s mean to `var` once `quorum` pushes are in; adds the
  // rows of ids not admitted to `*dropped`. Returns whether it applied.
  bool MaybeApplyRowSyncLocked(RowSync& sync, Variable& var, int quorum, int64_t* dropped)
      ABSL_SHARED_LOCKS_REQUIRED(mu_) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync.mu);
  // PushRows without waking parked pulls; `*wake` says whether it should.
  absl::Status PushRowsNoWake(const proto::PushRowsRequest& request,
                              proto::PushRowsResponse* response, bool* wake)
      ABSL_LOCKS_EXCLUDED(mu_);
  // SYNC's PushRows after the checks: adds each variable's rows to its
  // aggregate, applying the ones the push completes.
  struct RowUpdate;
  absl::Status PushRowsSync(const proto::PushRowsRequest& request,
                            const std::vector<RowUpdate>& updates,
                            proto::PushRowsResponse* response, bool* applied)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Snapshot's parts: the hash tables copied before the instant (at most one
  // snapshot at a time copies them: precopy_mu_), and the instant itself.
  struct Precopy;
  std::vector<Precopy> TakePrecopies(const std::string& spill_dir) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(precopy_mu_);
  std::vector<common::ShardRecord> SnapshotAt(absl::Duration* held, Cut* cut, double copy_budget,
                                              const SnapshotChanges* changes,
                                              std::vector<Precopy>* precopies) const;
  mutable absl::Mutex precopy_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  const Options options_;
  // The training mode and parked pulls; its mutex comes after mu_.
  SyncLedger ledger_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Variable>> variables_ ABSL_GUARDED_BY(mu_);
  // The optimizers the variables train with, by their checked settings:
  // the job's, and each group's. Never removed (variables point at them).
  absl::flat_hash_map<std::string, std::unique_ptr<Optimizer>> optimizers_ ABSL_GUARDED_BY(mu_);
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  // The first Create's optimizer (the job's); set_up_: whether one came.
  bool set_up_ ABSL_GUARDED_BY(mu_) = false;
  proto::OptimizerConfig optimizer_config_ ABSL_GUARDED_BY(mu_);
  // Bytes of dense values and slots held (Options::max_store_bytes).
  int64_t store_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> pushes_applied_{0};
  std::atomic<int64_t> nonfinite_skipped_{0};
  std::atomic<int64_t> unadmitted_dropped_{0};
  std::atomic<int64_t> gradients_applied_{0};
  std::atomic<int64_t> staleness_sum_{0};
  std::atomic<int64_t> staleness_max_{0};
  std::atomic<int64_t> stale_dropped_{0};
  std::atomic<int64_t> duplicates_ignored_{0};
  std::atomic<int64_t> apply_nanos_{0};
  // Incremental snapshots: which rows changed since which snapshot. Taken
  // after mu_ and before a Variable's mu (Snapshot, a restore's commit), or
  // alone.
  mutable absl::Mutex changes_mu_;
  mutable ChangeLog changes_ ABSL_GUARDED_BY(changes_mu_);
  // SYNC: row variables' aggregates, by variable (or partition) name.
  mutable absl::Mutex row_sync_mu_;
  mutable absl::flat_hash_map<std::string, std::unique_ptr<RowSync>> row_sync_
      ABSL_GUARDED_BY(row_sync_mu_);
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_VARIABLE_STORE_H_
