// VariableStore::ExportState and LoadState (store_state.cc): a store rebuilt
// from its parts equals the original bit for bit, and goes on through the
// same states under the same changes: SYNC's half-aggregated step,
// de-duplication, hash rows and admission counts (exact and shared) are
// carried.
#include <unistd.h>

#include <filesystem>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ps_server/store/store_test_util.h"
#include "ps_server/store/variable_store.h"

namespace pst::ps {
namespace {

using namespace testing_util;  // NOLINT: the helpers of every replication test

// Every part of `store`'s state, in order.
std::vector<proto::StoreChunk> AllParts(const VariableStore& store, int64_t part_bytes) {
  absl::StatusOr<std::unique_ptr<StateExport>> state = store.ExportState(part_bytes);
  EXPECT_TRUE(state.ok()) << state.status();
  if (!state.ok()) return {};
  absl::StatusOr<std::vector<proto::StoreChunk>> parts = TakeAllParts(**state);
  EXPECT_TRUE(parts.ok()) << parts.status();
  return parts.ok() ? *std::move(parts) : std::vector<proto::StoreChunk>{};
}

VariableStore::Options SmallAdmission() {
  VariableStore::Options options;
  options.admission_filter_bytes = 8 << 10;  // the smallest filter
  return options;
}

proto::CreateVariablesRequest Create() {
  proto::CreateVariablesRequest request;
  *request.add_variables() = Dense("w", {16, 8});
  *request.add_variables() = Dense("b", {8});
  *request.add_variables() = Hash("emb", 4, /*admit_after=*/3);
  *request.mutable_optimizer() = Adam();
  request.mutable_sync()->set_mode(proto::SYNC);
  request.mutable_sync()->set_num_workers(2);
  return request;
}

// A SYNC push of worker `worker` for `step` (read at version `step`).
proto::PushRequest SyncPush(int worker, int64_t step, std::mt19937& rng) {
  proto::PushRequest push = DensePush(worker, step, rng);
  push.set_base_version(step);
  return push;
}

// Row pulls and pushes of worker `worker` at `step`: rows made, touches
// counted.
void RowTraffic(VariableStore& store, int worker, int64_t step, uint32_t seed) {
  std::mt19937 rng(seed);
  proto::PushRowsRequest push = RowPush(worker, step, rng);
  push.mutable_rows(0)->set_name("emb/part_0");
  proto::PullRowsRequest pull;
  *pull.add_rows() = push.rows(0);
  proto::PullRowsResponse pulled;
  ASSERT_TRUE(store.PullRows(pull, &pulled).ok());
  proto::PushRowsResponse pushed;
  ASSERT_TRUE(store.PushRows(push, &pushed).ok());
}

TEST(StoreStateTest, StoreRebuiltFromItsPartsEqualsItAndGoesOnTheSame) {
  VariableStore original(SmallAdmission());
  ASSERT_TRUE(original.Create(Create()).ok());
  std::mt19937 rng(1);
  proto::PushResponse response;
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(original.Push(SyncPush(0, step, rng), &response).ok());
    ASSERT_TRUE(original.Push(SyncPush(1, step, rng), &response).ok());
    for (int w = 0; w < 2; ++w) RowTraffic(original, w, step, static_cast<uint32_t>(step * 2 + w));
  }
  // Half of step 3: worker 0's gradient accumulated, not applied.
  const proto::PushRequest half = SyncPush(0, 3, rng);
  ASSERT_TRUE(original.Push(half, &response).ok());
  ASSERT_EQ(original.GetStats().max_version, 3);

  const std::vector<proto::StoreChunk> parts = AllParts(original, /*part_bytes=*/1024);
  ASSERT_GT(parts.size(), 3u);
  VariableStore copy(SmallAdmission());
  for (const proto::StoreChunk& part : parts) {
    EXPECT_EQ(part.parts(), static_cast<int>(parts.size()));
    ASSERT_TRUE(copy.LoadState(part).ok()) << "part " << part.part();
  }
  EXPECT_EQ(copy.Digest().value(), original.Digest().value());
  EXPECT_EQ(copy.GetStats().hash_rows, original.GetStats().hash_rows);
  EXPECT_GT(copy.GetStats().hash_rows, 0);

  // The same changes after: the retry of worker 0's half is a repeat on
  // both, worker 1's completes step 3, and row traffic counts alike.
  const proto::PushRequest other = SyncPush(1, 3, rng);
  for (VariableStore* store : {&original, &copy}) {
    ASSERT_TRUE(store->Push(half, &response).ok());
    EXPECT_TRUE(response.duplicate());
    ASSERT_TRUE(store->Push(other, &response).ok());
    EXPECT_FALSE(response.duplicate());
    EXPECT_EQ(store->GetStats().max_version, 4);
    // SYNC row pushes: emb is at version 3 (steps 0-2), so these are its
    // step 3 and half of its step 4.
    for (int w = 0; w < 2; ++w) RowTraffic(*store, w, 3, 100 + w);
    RowTraffic(*store, 0, 4, 100);  // ids touched again: admitted now
  }
  EXPECT_EQ(copy.Digest().value(), original.Digest().value());
  EXPECT_EQ(copy.GetStats().hash_rows, original.GetStats().hash_rows);
}

TEST(StoreStateTest, EmptyStoreIsOnePart) {
  VariableStore empty;
  const std::vector<proto::StoreChunk> parts = AllParts(empty, 1 << 20);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_FALSE(parts[0].has_create());
  VariableStore copy;
  EXPECT_TRUE(copy.LoadState(parts[0]).ok());
  EXPECT_EQ(copy.GetStats().num_variables, 0);
}

TEST(StoreStateTest, PartsThatDoNotFitTheStoreAreRefused) {
  VariableStore original;
  ASSERT_TRUE(original.Create(Create()).ok());
  std::vector<proto::StoreChunk> parts = AllParts(original, 1 << 20);
  ASSERT_EQ(parts.size(), 2u);
  VariableStore copy;
  ASSERT_TRUE(copy.LoadState(parts[0]).ok());
  EXPECT_EQ(copy.LoadState(parts[0]).code(), absl::StatusCode::kInvalidArgument)
      << "part 0 again, to a store that holds variables";

  proto::StoreChunk unknown = parts[1];
  unknown.mutable_variables(0)->set_name("nope");
  EXPECT_EQ(copy.LoadState(unknown).code(), absl::StatusCode::kNotFound);

  proto::StoreChunk past_the_end;
  proto::VariableChunk* rows = past_the_end.add_variables();
  rows->set_name("w");
  rows->set_row_begin(15);
  rows->mutable_values()->assign(2 * 8 * sizeof(float), '\0');  // rows 15 and 16 of 16
  rows->add_slots()->assign(2 * 8 * sizeof(float), '\0');
  rows->add_slots()->assign(2 * 8 * sizeof(float), '\0');
  past_the_end.set_part(1);
  EXPECT_EQ(copy.LoadState(past_the_end).code(), absl::StatusCode::kInvalidArgument);

  proto::StoreChunk slots_missing = past_the_end;
  slots_missing.mutable_variables(0)->set_row_begin(0);
  slots_missing.mutable_variables(0)->mutable_slots()->RemoveLast();
  EXPECT_EQ(copy.LoadState(slots_missing).code(), absl::StatusCode::kInvalidArgument);

  proto::StoreChunk ragged = parts[1];
  for (proto::VariableChunk& c : *ragged.mutable_variables()) {
    if (c.name() == "emb/part_0") c.add_ids(7);  // an id without its row
  }
  EXPECT_EQ(copy.LoadState(ragged).code(), absl::StatusCode::kInvalidArgument);

  proto::StoreChunk bad_counts;
  bad_counts.set_part(1);
  proto::VariableChunk* counts = bad_counts.add_variables();
  counts->set_name("emb/part_0");
  counts->set_admission("PSAF not a filter");
  absl::Status refused = copy.LoadState(bad_counts);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("admission"), std::string::npos) << refused;

  proto::StoreChunk bad_entries = parts[1];
  for (proto::VariableChunk& c : *bad_entries.mutable_variables()) {
    if (c.name() == "emb/part_0") c.add_row_last(3);  // an index entry without its count
  }
  EXPECT_EQ(copy.LoadState(bad_entries).code(), absl::StatusCode::kInvalidArgument);
}

// A table with rows on disk is exported from a cut of both tiers, read as
// the parts are taken: the copy loaded from them is the table as it was at
// the export, whatever the pushes since, and the other parts come first.
// With ttl, rows on disk gone by the export are left out without a scan at
// the export: the parts planned for them go empty.
TEST(StoreStateTest, TableWithRowsOnDisk_IsSentAsItWasAtTheExport_ReadAsThePartsAreTaken) {
  for (const char* eviction : {"lru", "ttl:2"}) {
    SCOPED_TRACE(eviction);
    const std::string dir =
        absl::StrCat(::testing::TempDir(), "/store_state_test_tier_", getpid());
    std::filesystem::remove_all(dir);
    VariableStore::Options options = SmallAdmission();
    options.disk_tier = DiskTier::Open(dir, {}).value();
    proto::CreateVariablesRequest create;
    *create.add_variables() = Dense("w", {16, 8});
    proto::VariableSpec emb = Hash("emb", 4, /*admit_after=*/1);
    emb.set_capacity(10);
    emb.set_eviction(eviction);
    *create.add_variables() = emb;
    *create.mutable_optimizer() = Adam();
    {
      VariableStore original(options);
      ASSERT_TRUE(original.Create(create).ok());
      for (int64_t step = 0; step < 12; ++step) RowTraffic(original, 0, step, 40 + step);
      ASSERT_GT(original.GetStats().AllTables().rows_on_disk, 10);
      const uint64_t at_export = original.Digest().value();

      std::unique_ptr<StateExport> state = original.ExportState(/*part_bytes=*/1024).value();
      // Pushes after the export move rows between the tiers and change them.
      for (int64_t step = 12; step < 20; ++step) RowTraffic(original, 1, step, 90 + step);
      ASSERT_NE(original.Digest().value(), at_export);

      VariableStore copy(options);
      int64_t rows_seen = 0;
      int empty_table_parts = 0;
      bool table_parts_began = false;
      while (state->taken() < state->parts()) {
        absl::StatusOr<proto::StoreChunk> part = state->Next();
        ASSERT_TRUE(part.ok()) << part.status();
        EXPECT_EQ(part->part(), state->taken() - 1);
        EXPECT_EQ(part->parts(), state->parts());
        for (const proto::VariableChunk& c : part->variables()) {
          if (c.name() != "emb/part_0" || !c.admission().empty()) continue;
          if (c.ids_size() == 0 && !table_parts_began) continue;  // the version, first
          table_parts_began = true;
          EXPECT_EQ(c.row_last_size(), c.ids_size());
          rows_seen += c.ids_size();
          empty_table_parts += c.ids_size() == 0 ? 1 : 0;
        }
        ASSERT_TRUE(copy.LoadState(*part).ok()) << "part " << part->part();
      }
      EXPECT_EQ(state->Next().status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_TRUE(table_parts_began);
      EXPECT_GT(rows_seen, std::string(eviction) == "lru" ? 20 : 5);
      // lru: every row counted is sent; ttl:2: enough rows on disk are gone
      // by the export that a planned part goes empty.
      if (std::string(eviction) == "lru") {
        EXPECT_EQ(empty_table_parts, 0);
      } else {
        EXPECT_GT(empty_table_parts, 0);
      }
      EXPECT_EQ(copy.Digest().value(), at_export);
      EXPECT_EQ(copy.GetStats().hash_rows + copy.GetStats().AllTables().rows_on_disk, rows_seen);
    }
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace pst::ps
