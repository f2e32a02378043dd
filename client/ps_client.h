// The worker's view of the parameter servers. It routes by the chief's
// placement plan and fans every request out to all ps in parallel:
//
//  - Dense variables are exchanged as one flat float vector per variable,
//    in the order of `dense_names`. A dense variable is either whole in the
//    plan or cut into 'div' pieces (TrainingConfig.dense_piece_bytes), which
//    may live on different ps; the client cuts and joins them. A step's
//    pieces go to each ps in requests of about kRequestBytes, at most
//    kRequestsInFlight per ps at a time, so a big tensor's transfer, the
//    ps's update of it and the answer pipeline instead of waiting on one
//    giant message.
//  - Sparse tables (logical variables split into partitions, or hash
//    embeddings) are read and updated by rows, by global id. The client
//    deduplicates ids before sending, sums the gradients of duplicate ids,
//    routes each id to its partition ('mod', 'div' or hash), and reassembles
//    the rows in the caller's order.
//
// Thread-compatible: one caller at a time (the training loop). Distinct
// PsClients may share a transport and be used concurrently.
#ifndef PST_CLIENT_PS_CLIENT_H_
#define PST_CLIENT_PS_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/ps_transport.h"
#include "proto/pstrain.pb.h"

namespace pst::client {

using Values = std::vector<std::vector<float>>;
// Views of caller-owned memory, one per dense variable (or per table of a
// row call), so that callers with their own buffers (numpy arrays, torch
// tensors) exchange values without copies.
using ValueSpans = std::vector<std::span<float>>;
using GradientSpans = std::vector<std::span<const float>>;

// Views of `values`, for the span overloads.
GradientSpans SpansOf(const Values& values);

class PsClient {
 public:
  // Requests to one ps are filled with pieces up to this many payload bytes
  // (dense_piece_bytes, the chief's cut, is as big by default), so that a
  // ps's share of a step of a few MB goes out in more requests than are in
  // flight: while the later ones travel, the ps updates and answers the
  // first. Measured with ps_bench on 2 cores, a 4 MB PushPull ran at
  // 2.5-2.7 GB/s in 1 MiB requests, 2.8-3.5 in 512 KiB ones, 2.6 in 256 KiB
  // ones and 1.8-1.9 in 128 KiB ones (each call costs its own work).
  // A ps whose whole share fits in kRequestsInFlight requests (2 MiB) gets
  // requests of up to twice this: cutting it finer would only add calls,
  // all in one wave (the MLP's 800 KB layer in two requests trained 5%
  // slower).
  static constexpr int64_t kRequestBytes = 512 << 10;
  // Requests per ps on the wire at once.
  static constexpr int kRequestsInFlight = 4;

  // Errors: FailedPrecondition if a dense name is neither a whole variable
  // nor a complete set of 'div' pieces in the plan, or the plan names a ps
  // the transport does not have.
  // `request_bytes` replaces kRequestBytes (tests use small ones).
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(
      const proto::PlacementPlan& plan, const std::vector<std::string>& dense_names,
      std::shared_ptr<common::PsTransport> transport, int worker_index, uint64_t incarnation,
      int64_t request_bytes = kRequestBytes);

  // Fetches every dense variable into `values` (resized as needed). Returns
  // the smallest version among them: the number of pushes every variable
  // has seen, i.e. the global step in async training.
  absl::StatusOr<int64_t> Pull(Values* values);
  // Pull into caller memory: values[k] must hold exactly dense variable
  // k's elements (InvalidArgument naming it otherwise).
  absl::StatusOr<int64_t> Pull(const ValueSpans& values);

  // Pushes `grads` tagged with `step` (SYNC: the version they were computed
  // from; ASYNC and SSP: this worker's push count) and `base_version` (the
  // version they were computed from), then fetches the values, in one round
  // trip per ps. In SYNC and SSP the ps answer once this worker may go on.
  // Returns the smallest version, as Pull does. `position` is the data
  // position of the gradients' batch (PushRequest.position; -1: none).
  absl::StatusOr<int64_t> PushPull(int64_t step, int64_t base_version, const Values& grads,
                                   Values* values, int64_t position = -1);
  // PushPull from and into caller memory (sizes checked as Pull's).
  absl::StatusOr<int64_t> PushPull(int64_t step, int64_t base_version, const GradientSpans& grads,
                                   const ValueSpans& values, int64_t position = -1);

  // Push alone, tagged as PushPull's push; returns the smallest version
  // after it. (Training uses PushPull; this is for benchmarks and tools.)
  absl::StatusOr<int64_t> Push(int64_t step, int64_t base_version, const Values& grads,
                               int64_t position = -1);

  // The ids of one table in one request.
  struct TableIds {
    std::string table;  // the logical variable's name
    std::span<const int64_t> ids;
  };

  // Rows of one or more tables: out[k] gets [tables[k].ids.size(), dim]
  // row-major, in the caller's id order.
  // Errors: NotFound for an unknown table; InvalidArgument for an id out of
  // range (checked here, before anything is sent, and again by the ps).
  absl::Status PullRows(std::span<const TableIds> tables, Values* out);
  // Into caller memory: out[k] must hold exactly tables[k].ids.size() * dim
  // floats (InvalidArgument naming the table otherwise).
  absl::Status PullRows(std::span<const TableIds> tables, const ValueSpans& out);

  // Adds gradient rows: grads[k] is [tables[k].ids.size(), dim]. `step` as
  // PushPull's (SYNC: the version the gradients were computed from). In
  // SYNC (set_sync) the push lists every partition of every table in the
  // plan, with no ids where it has none: each partition sums a step's
  // pushes and divides by their number, so every push must reach it.
  // Errors: as PullRows, and InvalidArgument for a gradient of the wrong size.
  absl::Status PushRows(int64_t step, std::span<const TableIds> tables, const Values& grads);
  absl::Status PushRows(int64_t step, std::span<const TableIds> tables,
                        const GradientSpans& grads);

  // The dense variables in the order of Create's `dense_names`, with their
  // whole shapes.
  struct DenseInfo {
    std::string name;
    std::vector<int64_t> shape;
  };
  std::vector<DenseInfo> DenseVariables() const;

  // The restore generation pushes are tagged with (see PushRequest): the
  // ps refuse pushes of another generation. Starts at 0. A new one also
  // empties the top-k residual: gradients of parameters a restore replaced
  // never reach the new ones.
  void set_generation(int64_t generation);
  // The job trains in SYNC mode (see PushRows). Default false.
  void set_sync(bool sync) { sync_ = sync; }
  // The dtype dense gradients and pulled values travel in
  // (TrainingConfig.wire_dtype): DT_BFLOAT16 halves the bytes, converted
  // here and on the ps (common/bf16.h); anything else is float32, the
  // default. Rows always travel as float32.
  void set_wire_dtype(proto::DType dtype) {
    wire_dtype_ = dtype == proto::DT_BFLOAT16 ? proto::DT_BFLOAT16 : proto::DT_FLOAT32;
  }
  proto::DType wire_dtype() const { return wire_dtype_; }
  // In (0, 1]: each push sends only this share of every dense gradient
  // piece, its largest entries, and keeps the rest in a residual added to
  // the next push's gradient (common/sparse_gradient.h); the residual moves
  // on only once a push is answered, so a push sent again after a failure
  // is the same push. 0 (the default): whole gradients, in the wire dtype.
  void set_topk_ratio(double ratio);
  double topk_ratio() const { return topk_ratio_; }

  // Dense payload bytes the calls that succeeded sent and received, in the
  // wire dtype (message headers and rows not counted).
  struct WireBytes {
    int64_t pushed = 0;
    int64_t pulled = 0;
  };
  WireBytes dense_wire_bytes() const { return wire_bytes_; }

  // Requests a step's dense push makes (over every ps).
  int num_dense_requests() const { return static_cast<int>(requests_.size()); }

  // Width of a table's rows. Errors: NotFound.
  absl::StatusOr<int> TableDim(const std::string& table) const;
  std::vector<std::string> TableNames() const;

 private:
  // A contiguous range of a dense variable held by one ps under one name:
  // the whole variable, or one of its 'div' pieces.
  struct Piece {
    std::string name;
    std::vector<int64_t> shape;
    int ps = 0;
    int64_t offset = 0;  // first element within the variable
    int64_t size = 0;    // elements
  };
  struct DenseVar {
    std::string name;
    std::vector<int64_t> shape;  // the whole variable's
    int64_t size = 0;            // elements
    std::vector<Piece> pieces;
  };
  // One request's worth of pieces to one ps.
  struct Request {
    int ps = 0;
    int part = 0;  // PushRequest.part: its index among the requests to that ps
    std::vector<std::pair<int, int>> pieces;  // (dense variable, piece)
  };
  struct Table {
    std::string name;
    int64_t rows = 0;  // 0 for hash embeddings
    int dim = 1;
    proto::Routing routing = proto::ROUTING_NONE;
    std::vector<std::string> partition_names;  // by partition index
    std::vector<int> partition_ps;
  };
  // Where each unique id of a table goes.
  struct Routed {
    std::vector<int64_t> unique;
    std::vector<int32_t> index;  // caller position -> unique position
    std::vector<int> partition;  // per unique id
  };

  PsClient(std::vector<DenseVar> dense, std::vector<Request> requests,
           absl::flat_hash_map<std::string, Table> tables,
           std::shared_ptr<common::PsTransport> transport, int worker_index, uint64_t incarnation);

  absl::StatusOr<const Table*> FindTable(const std::string& name) const;
  absl::StatusOr<Routed> Route(const Table& table, std::span<const int64_t> ids) const;
  // Runs one call per ps in `targets` and waits for all; the first error,
  // annotated with the ps.
  absl::Status FanOut(const std::vector<int>& targets,
                      const std::function<void(int ps, common::PsTransport::Done)>& start);
  // Runs start(r, done) for every r in requests_, at most kRequestsInFlight
  // per ps at once, and waits for all; the first error, annotated with its
  // ps.
  absl::Status RunRequests(const std::function<void(int r, common::PsTransport::Done)>& start);
  // Fills one PushRequest per entry of requests_, gradient payloads left in
  // `grads` (or, with top-k, in compressed_) and added to `buffers`, whose
  // slices the transport counts in `pins`. REQUIRES: PreparePush(grads)
  // succeeded.
  absl::Status BuildPushes(int64_t step, int64_t base_version, const GradientSpans& grads,
                           int64_t position,
                           const std::function<proto::PushRequest*(int r)>& request,
                           common::PayloadPins* pins,
                           std::vector<common::DenseBuffers>* buffers) const;
  // Per request, the spans of `values` (one per dense variable) that the
  // answers' payloads go into. Errors: InvalidArgument for a wrong size.
  absl::StatusOr<std::vector<common::DenseBuffers>> ValueBuffers(const ValueSpans& values) const;
  // Resizes `values` for every dense variable; views of it.
  ValueSpans Resized(Values* values) const;
  // Payload bytes of every dense variable in the wire dtype: what one
  // dense pull (or uncompressed push) moves.
  int64_t DensePayloadBytes() const;
  // Top-k: fills compressed_ and next_residual_ from `grads` and
  // residual_; returns the payload bytes. REQUIRES: sizes checked.
  int64_t Compress(const GradientSpans& grads);
  // Payload bytes a push of `grads` sends, compressing them first with
  // top-k. Errors: InvalidArgument for a wrong size.
  absl::StatusOr<int64_t> PreparePush(const GradientSpans& grads);
  // Checks request r's answer (its payloads already in place) and lowers
  // *min_version.
  absl::Status CheckDense(int r, const proto::PullResponse& response,
                          int64_t* min_version) const;

  std::vector<DenseVar> dense_;
  std::vector<Request> requests_;
  absl::flat_hash_map<std::string, Table> tables_;
  std::shared_ptr<common::PsTransport> transport_;
  const int worker_index_;
  const uint64_t incarnation_;
  int64_t generation_ = 0;
  bool sync_ = false;
  proto::DType wire_dtype_ = proto::DT_FLOAT32;
  WireBytes wire_bytes_;
  double topk_ratio_ = 0;
  // Top-k, per dense variable: the residual the last answered push left,
  // the one the push in flight leaves, and per piece its payload (the
  // indices' bits, then the values).
  std::vector<std::vector<float>> residual_, next_residual_;
  std::vector<std::vector<std::vector<float>>> compressed_;
};

}  // namespace pst::client

#endif  // PST_CLIENT_PS_CLIENT_H_
