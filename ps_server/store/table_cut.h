// A save's cut of a hash table with a disk tier, as a stream of rows
// (common::ShardRowStream) that the checkpoint writer reads after the
// store's lock is let go: the rows the table held in memory at the cut, in
// a scratch table of the tier, merged in id order with the rows it held on
// disk at the cut (a pinned View). A disk row of an id also in memory is
// the stale copy a row brought back leaves, and one last updated before
// the ttl's cutoff is gone: neither is given. Nothing of the table is held
// in RAM, so a save of a table bigger than memory needs none.
//
// Thread-compatible; the views are read-only, so training goes on.
#ifndef PST_PS_SERVER_STORE_TABLE_CUT_H_
#define PST_PS_SERVER_STORE_TABLE_CUT_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>

#include "common/checkpoint_format.h"
#include "ps_server/store/disk_tier.h"

namespace pst::ps {

// `memory`: the rows in memory at the cut; `disk`: the table on disk at the
// cut; disk rows last updated before `stale_before` are gone. `tier` keeps
// the views' tier alive (it must be theirs). `rows`, when known, is what
// Count gives without a scan (the writer checks the stream against it).
std::unique_ptr<common::ShardRowStream> MakeTableCut(
    std::shared_ptr<DiskTier> tier, std::unique_ptr<DiskTier::View> memory,
    std::unique_ptr<DiskTier::View> disk,
    int64_t stale_before = std::numeric_limits<int64_t>::min(),
    std::optional<int64_t> rows = std::nullopt);

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_TABLE_CUT_H_
