// A save's cut of a hash table with a disk tier, as a stream of rows
// (common::ShardRowStream) that the checkpoint writer reads after the
// store's lock is let go: the rows the table held in memory at the cut, in
// a scratch table of the tier, merged in id order with the rows it held on
// disk at the cut (a pinned View). A disk row of an id also in memory is
// the stale copy a row brought back leaves, and one last updated before
// the ttl's cutoff is gone: neither is given. Nothing of the table is held
// in RAM, so a save of a table bigger than memory needs none. A Reader
// gives the same rows one at a time, for a caller that takes them in
// pieces (a resync's parts, store_state.cc).
//
// Thread-compatible; the views are read-only, so training goes on. A
// Reader must not outlive its cut.
#ifndef PST_PS_SERVER_STORE_TABLE_CUT_H_
#define PST_PS_SERVER_STORE_TABLE_CUT_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/checkpoint_format.h"
#include "ps_server/store/disk_tier.h"

namespace pst::ps {

class TableCut : public common::ShardRowStream {
 public:
  // `memory`: the rows in memory at the cut; `disk`: the table on disk at
  // the cut; disk rows last updated before `stale_before` are gone. `tier`
  // keeps the views' tier alive (it must be theirs). `rows`, when known, is
  // what Count gives without a scan (the writer checks the stream against
  // it); `max_rows` bounds it (rows in memory and ids on disk at the cut,
  // gone ones included), or is -1 when not known.
  TableCut(std::shared_ptr<DiskTier> tier, std::unique_ptr<DiskTier::View> memory,
           std::unique_ptr<DiskTier::View> disk,
           int64_t stale_before = std::numeric_limits<int64_t>::min(),
           std::optional<int64_t> rows = std::nullopt, int64_t max_rows = -1);

  absl::StatusOr<int64_t> Count() const override;
  // Count without a scan, when the cut knows it.
  std::optional<int64_t> KnownCount() const { return rows_; }
  // At least Count, known without a scan (-1: not given).
  int64_t max_rows() const { return rows_.has_value() ? *rows_ : max_rows_; }
  absl::Status ForEach(RowFn fn) const override;

  // The rows ForEach gives, one at a time.
  class Reader {
   public:
    // At a row; false at the end, or at an error (status()).
    bool Valid() const { return at_ != nullptr; }
    // REQUIRES: Valid().
    void Next();
    int64_t id() const { return at_->id(); }
    std::span<const float> row() const { return at_->row(); }  // valid until Next
    int64_t last() const { return at_->last(); }
    double count() const { return at_->count(); }
    // The views' read errors; DataLoss at a value that does not decode.
    absl::Status status() const;

   private:
    friend class TableCut;
    explicit Reader(const TableCut& cut);
    // Moves to the next row to give, past stale rows and stale copies.
    void Settle();
    std::unique_ptr<DiskTier::Cursor> memory_;
    std::unique_ptr<DiskTier::Cursor> disk_;
    const int64_t stale_before_;
    DiskTier::Cursor* at_ = nullptr;
  };
  std::unique_ptr<Reader> Read() const;

 private:
  // Declared first: the views go before their tier.
  const std::shared_ptr<DiskTier> tier_;
  const std::unique_ptr<DiskTier::View> memory_;
  const std::unique_ptr<DiskTier::View> disk_;
  const int64_t stale_before_;
  const std::optional<int64_t> rows_;
  const int64_t max_rows_;
};

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_TABLE_CUT_H_
