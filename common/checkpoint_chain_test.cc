// Checkpoints as a whole (checkpoint_chain.h): listing, chains of
// incremental checkpoints, retention by chain, and the checks a restore
// makes, over real directories and shard files.
#include "common/checkpoint_chain.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_format.h"
#include "common/checkpoint_test_records.h"
#include "common/temp_dir_test.h"
#include "gtest/gtest.h"

namespace pst::common {
namespace {

namespace fs = std::filesystem;

class CheckpointChainTest : public TempDirTest {
 protected:
  CheckpointChainTest() : TempDirTest("checkpoint_chain_test") {}
};

// Creates <root>/ckpt-<step>, with a manifest when `committed`.
void MakeCheckpointDir(const std::string& root, int64_t step, bool committed) {
  const std::string dir = (fs::path(root) / CheckpointDirName(step)).string();
  fs::create_directories(dir);
  std::ofstream(fs::path(dir) / "shard-0-of-1.pst") << "partial";
  if (committed) {
    proto::CheckpointManifest m;
    m.set_format_version(1);
    m.set_global_step(step);
    ASSERT_TRUE(WriteManifest(dir, m).ok());
  }
}

TEST_F(CheckpointChainTest, ListCheckpoints_NewestFirstAndOnlyCommitted) {
  MakeCheckpointDir(dir_, 100, true);
  MakeCheckpointDir(dir_, 2000, true);
  MakeCheckpointDir(dir_, 300, true);
  MakeCheckpointDir(dir_, 5000, false);  // no manifest
  // A manifest that does not parse is not a checkpoint either.
  fs::create_directories(Path("ckpt-000000000400"));
  WriteBytes(Path("ckpt-000000000400/MANIFEST.json"), "not json");
  fs::create_directories(Path("ckpt-abc"));  // not a step
  WriteBytes(Path("ckpt-000000000700"), "a file, not a directory");

  const std::vector<std::string> want = {Path("ckpt-000000002000"), Path("ckpt-000000000300"),
                                         Path("ckpt-000000000100")};
  EXPECT_EQ(ListCheckpoints(dir_), want);
  EXPECT_TRUE(ListCheckpoints(Path("absent")).empty());
}

TEST_F(CheckpointChainTest, PruneCheckpoints_KeepsNewestAndRemovesOldDebrisOnly) {
  MakeCheckpointDir(dir_, 100, true);
  MakeCheckpointDir(dir_, 200, true);
  MakeCheckpointDir(dir_, 300, true);
  MakeCheckpointDir(dir_, 400, true);
  MakeCheckpointDir(dir_, 250, false);  // old debris of an interrupted save
  MakeCheckpointDir(dir_, 500, false);  // a save in progress
  WriteBytes(Path("notes.txt"), "keep me");
  fs::create_directories(Path("other_dir"));
  fs::create_directories(Path("ckpt-latest"));

  ASSERT_TRUE(PruneCheckpoints(dir_, 2, Path("ckpt-000000000400")).ok());
  const std::vector<std::string> want = {Path("ckpt-000000000400"), Path("ckpt-000000000300")};
  EXPECT_EQ(ListCheckpoints(dir_), want);
  EXPECT_FALSE(fs::exists(Path("ckpt-000000000100")));
  EXPECT_FALSE(fs::exists(Path("ckpt-000000000200")));
  EXPECT_FALSE(fs::exists(Path("ckpt-000000000250")));
  EXPECT_TRUE(fs::exists(Path("ckpt-000000000500/shard-0-of-1.pst")));
  EXPECT_TRUE(fs::exists(Path("notes.txt")));
  EXPECT_TRUE(fs::exists(Path("other_dir")));
  EXPECT_TRUE(fs::exists(Path("ckpt-latest")));

  // Keeping more than exist changes nothing.
  ASSERT_TRUE(PruneCheckpoints(dir_, 10, Path("ckpt-000000000400")).ok());
  EXPECT_EQ(ListCheckpoints(dir_), want);
}

TEST_F(CheckpointChainTest, PruneCheckpoints_WithoutCommittedCheckpoint_TouchesNothing) {
  MakeCheckpointDir(dir_, 100, false);
  ASSERT_TRUE(PruneCheckpoints(dir_, 1, Path("ckpt-000000000100")).ok());
  EXPECT_TRUE(fs::exists(Path("ckpt-000000000100")));
  EXPECT_TRUE(PruneCheckpoints(Path("absent"), 1, Path("absent/ckpt-000000000100")).ok());
}

TEST_F(CheckpointChainTest, PruneCheckpoints_KeepBelowOne_IsInvalidArgument) {
  MakeCheckpointDir(dir_, 100, true);
  EXPECT_EQ(PruneCheckpoints(dir_, 0, Path("ckpt-000000000100")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(fs::exists(Path("ckpt-000000000100")));
}

// After a fall back from a newer checkpoint that failed its checks, the
// next save is older by step than it: with keep=1 that save is what stays.
TEST_F(CheckpointChainTest, PruneCheckpoints_KeepOne_KeepsTheVerifiedSaveOverANewerStep) {
  MakeCheckpointDir(dir_, 100, true);
  MakeCheckpointDir(dir_, 200, true);  // the corrupt one the job fell back from
  MakeCheckpointDir(dir_, 150, true);  // the save just made and checked
  ASSERT_TRUE(PruneCheckpoints(dir_, 1, Path("ckpt-000000000150")).ok());
  const std::vector<std::string> want = {Path("ckpt-000000000150")};
  EXPECT_EQ(ListCheckpoints(dir_), want);
}

TEST_F(CheckpointChainTest, PruneCheckpoints_UnverifiedSave_RemovesNothing) {
  MakeCheckpointDir(dir_, 100, true);
  MakeCheckpointDir(dir_, 200, true);
  MakeCheckpointDir(dir_, 50, false);
  ASSERT_TRUE(PruneCheckpoints(dir_, 1, Path("ckpt-000000000300")).ok());  // not there
  EXPECT_EQ(ListCheckpoints(dir_).size(), 2u);
  EXPECT_TRUE(fs::exists(Path("ckpt-000000000050")));
}

// A manifest that exists but cannot be read or parsed is not debris: it may
// be a good checkpoint on a bad day (permissions, a newer build's format).
TEST_F(CheckpointChainTest, PruneCheckpoints_NeverRemovesAnUnreadableManifest) {
  MakeCheckpointDir(dir_, 100, false);
  WriteBytes(Path("ckpt-000000000100/MANIFEST.json"), "{ not json");
  MakeCheckpointDir(dir_, 200, false);
  WriteBytes(Path("ckpt-000000000200/MANIFEST.json"), "{}");
  ASSERT_EQ(::chmod(Path("ckpt-000000000200/MANIFEST.json").c_str(), 0), 0);
  MakeCheckpointDir(dir_, 300, true);
  ASSERT_TRUE(PruneCheckpoints(dir_, 1, Path("ckpt-000000000300")).ok());
  EXPECT_TRUE(fs::exists(Path("ckpt-000000000100/MANIFEST.json")));
  EXPECT_TRUE(fs::exists(Path("ckpt-000000000200/MANIFEST.json")));
  EXPECT_TRUE(fs::exists(Path("ckpt-000000000300/MANIFEST.json")));
}

// Writes a two-ps checkpoint at step 1200 whose plan places the sample
// records two on each ps, and returns its directory. `lost_on_ps1`: ps 1
// wrote an empty shard (it had restarted and held nothing).
std::string WriteGoodCheckpoint(const std::string& root, bool lost_on_ps1 = false) {
  const std::string dir = (fs::path(root) / CheckpointDirName(1200)).string();
  fs::create_directories(dir);
  std::vector<ShardRecord> all = SampleRecords();
  std::vector<std::vector<ShardRecord>> per_ps = {{all[0], all[1]}, {all[2], all[3]}};
  proto::CheckpointManifest m;
  m.set_format_version(1);
  m.set_global_step(1200);
  m.mutable_plan()->set_num_ps(2);
  for (int ps = 0; ps < 2; ++ps) {
    for (const ShardRecord& r : per_ps[ps]) {
      proto::PlacementPlan::Entry* entry = m.mutable_plan()->add_variables();
      *entry->mutable_spec() = r.spec;
      entry->set_ps_index(ps);
    }
  }
  if (lost_on_ps1) per_ps[1].clear();
  for (int ps = 0; ps < 2; ++ps) {
    proto::CheckpointShard shard;
    const std::string path = (fs::path(dir) / ShardFileName(ps, 2)).string();
    EXPECT_TRUE(WriteShardFile(path, per_ps[ps], &shard).ok());
    shard.set_ps_index(ps);
    *m.add_shards() = shard;
  }
  EXPECT_TRUE(WriteManifest(dir, m).ok());
  return dir;
}

TEST_F(CheckpointChainTest, InspectCheckpoint_GoodCheckpoint) {
  const std::string dir = WriteGoodCheckpoint(dir_);
  absl::StatusOr<CheckpointReport> report = InspectCheckpoint(dir);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->global_step, 1200);
  EXPECT_EQ(report->num_ps, 2);
  EXPECT_EQ(report->total_bytes, static_cast<int64_t>(fs::file_size(dir + "/shard-0-of-2.pst") +
                                                      fs::file_size(dir + "/shard-1-of-2.pst")));
  ASSERT_EQ(report->variables.size(), 4u);
  const auto& v = report->variables;
  EXPECT_EQ(v[0].name, "dense_0/kernel");
  EXPECT_EQ(v[0].shape, "[3, 4]");
  EXPECT_EQ(v[0].rows, 3);
  EXPECT_EQ(v[0].version, 17);
  EXPECT_EQ(v[0].slots, 2);
  EXPECT_EQ(v[0].ps_index, 0);
  EXPECT_EQ(v[1].name, "dense_0/bias");
  EXPECT_EQ(v[1].shape, "[5]");
  EXPECT_EQ(v[1].slots, 0);
  EXPECT_EQ(v[2].name, "emb/part_0");
  EXPECT_EQ(v[2].shape, "[4 ids, 3]");
  EXPECT_EQ(v[2].rows, 4);
  EXPECT_EQ(v[2].version, 9);
  EXPECT_EQ(v[2].slots, 1);
  EXPECT_EQ(v[2].ps_index, 1);
  EXPECT_EQ(v[3].name, "table/part_1");
  EXPECT_EQ(v[3].shape, "[2, 2]");
  EXPECT_EQ(v[3].ps_index, 1);
}

TEST_F(CheckpointChainTest, InspectCheckpoint_ShardDiffersFromManifest_IsDataLoss) {
  const std::string dir = WriteGoodCheckpoint(dir_);
  const std::string shard = dir + "/shard-1-of-2.pst";
  {
    // Overwrite one byte in place: same size, different crc32.
    std::fstream f(shard, std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(20);
    char c = 0;
    f.read(&c, 1);
    f.seekp(20);
    c = static_cast<char>(c ^ 0x10);
    f.write(&c, 1);
  }
  absl::StatusOr<CheckpointReport> report = InspectCheckpoint(dir);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kDataLoss) << report.status();
  EXPECT_TRUE(Contains(std::string(report.status().message()), "shard-1-of-2.pst"));
  EXPECT_TRUE(Contains(std::string(report.status().message()), "crc32"));
}

TEST_F(CheckpointChainTest, InspectCheckpoint_ShardSizeDiffers_IsDataLoss) {
  const std::string dir = WriteGoodCheckpoint(dir_);
  const std::string shard = dir + "/shard-0-of-2.pst";
  WriteBytes(shard, ReadBytes(shard) + "!");
  absl::StatusOr<CheckpointReport> report = InspectCheckpoint(dir);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kDataLoss) << report.status();
  EXPECT_TRUE(Contains(std::string(report.status().message()), "shard-0-of-2.pst"));
}

TEST_F(CheckpointChainTest, InspectCheckpoint_PlannedVariableInNoShard_IsDataLossNamingIt) {
  // Every file and checksum is good; only the plan tells that ps 1's
  // variables are missing.
  const std::string dir = WriteGoodCheckpoint(dir_, /*lost_on_ps1=*/true);
  absl::StatusOr<CheckpointReport> report = InspectCheckpoint(dir);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kDataLoss) << report.status();
  EXPECT_TRUE(Contains(std::string(report.status().message()), "'emb/part_0' on ps 1"))
      << report.status();
  EXPECT_TRUE(Contains(std::string(report.status().message()), "incomplete")) << report.status();
}

TEST_F(CheckpointChainTest, InspectCheckpoint_MissingShardOrManifest_IsNotFound) {
  const std::string dir = WriteGoodCheckpoint(dir_);
  fs::remove(dir + "/shard-1-of-2.pst");
  EXPECT_EQ(InspectCheckpoint(dir).status().code(), absl::StatusCode::kNotFound);
  fs::remove(dir + "/" + kManifestFile);
  EXPECT_EQ(InspectCheckpoint(dir).status().code(), absl::StatusCode::kNotFound);
}

// Writes checkpoint `step` under `root` as one ps would save the sample
// records (all of them, or for an incremental one only `records`), with
// the plan placing all four, incremental on `base` ("": full).
std::string WriteLink(const std::string& root, int64_t step, const std::string& base,
                      std::vector<ShardRecord> records, int num_ps = 1) {
  const std::string dir = (fs::path(root) / CheckpointDirName(step)).string();
  fs::create_directories(dir);
  proto::CheckpointManifest m;
  m.set_format_version(1);
  m.set_global_step(step);
  m.set_base(base);
  for (const ShardRecord& r : SampleRecords()) {
    proto::PlacementPlan::Entry* entry = m.mutable_plan()->add_variables();
    *entry->mutable_spec() = r.spec;
  }
  for (int ps = 0; ps < num_ps; ++ps) {
    proto::CheckpointShard shard;
    const std::string path = (fs::path(dir) / ShardFileName(ps, num_ps)).string();
    EXPECT_TRUE(WriteShardFile(path, ps == 0 ? records : std::vector<ShardRecord>(), &shard).ok());
    shard.set_ps_index(ps);
    *m.add_shards() = shard;
  }
  EXPECT_TRUE(WriteManifest(dir, m).ok());
  return dir;
}

// What an incremental save of the samples holds when only the hash table
// changed: its record (some rows, an id removed), no dense record.
std::vector<ShardRecord> HashOnly() {
  ShardRecord hash = SampleRecords()[2];
  hash.removed_ids = {99};
  return {hash};
}

TEST_F(CheckpointChainTest, CheckpointChain_FollowsEachBaseToTheFullCheckpoint) {
  const std::string full = WriteLink(dir_, 100, "", SampleRecords());
  const std::string one = WriteLink(dir_, 200, CheckpointDirName(100), HashOnly());
  const std::string two = WriteLink(dir_, 300, CheckpointDirName(200), HashOnly());
  absl::StatusOr<std::vector<std::string>> chain = CheckpointChain(two);
  ASSERT_TRUE(chain.ok()) << chain.status();
  EXPECT_EQ(*chain, (std::vector<std::string>{full, one, two}));
  EXPECT_EQ(*CheckpointChain(full), std::vector<std::string>{full});

  absl::StatusOr<proto::RestoreRequest> request = RestoreRequestFor(two);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->checkpoint(), CheckpointDirName(300));
  EXPECT_EQ(request->manifest().base(), CheckpointDirName(200));
  ASSERT_EQ(request->chain_size(), 2);
  EXPECT_EQ(request->chain(0).checkpoint(), CheckpointDirName(100));
  EXPECT_EQ(request->chain(0).manifest().global_step(), 100);
  EXPECT_EQ(request->chain(1).checkpoint(), CheckpointDirName(200));
  EXPECT_EQ(RestoreRequestFor(full)->chain_size(), 0);
}

TEST_F(CheckpointChainTest, CheckpointChain_BrokenLinks_AreDataLossNamingTheLink) {
  WriteLink(dir_, 100, "", SampleRecords());
  auto expect_loss = [&](const std::string& dir, const std::string& part) {
    absl::StatusOr<std::vector<std::string>> chain = CheckpointChain(dir);
    EXPECT_EQ(chain.status().code(), absl::StatusCode::kDataLoss) << chain.status();
    EXPECT_TRUE(Contains(std::string(chain.status().message()), part));
    EXPECT_EQ(InspectCheckpoint(dir).status().code(), absl::StatusCode::kDataLoss);
  };
  expect_loss(WriteLink(dir_, 200, CheckpointDirName(150), HashOnly()), "is missing");
  expect_loss(WriteLink(dir_, 210, "../ckpt-000000000100", HashOnly()), "not a checkpoint name");
  expect_loss(WriteLink(dir_, 90, CheckpointDirName(100), HashOnly()), "not older");
  expect_loss(WriteLink(dir_, 220, CheckpointDirName(100), HashOnly(), /*num_ps=*/2), "of 1");
  fs::create_directories(Path(CheckpointDirName(230)));
  WriteBytes(Path(CheckpointDirName(230) + "/MANIFEST.json"), "{ not json");
  expect_loss(WriteLink(dir_, 240, CheckpointDirName(230), HashOnly()), "cannot be read");
}

// Each link is checked; a link with no dense record passes, the chain
// holding them; a corrupt link fails its own checks and every later one's,
// so that a restore lands on the last good link before it.
TEST_F(CheckpointChainTest, InspectCheckpoint_Incremental_ChecksEveryLink) {
  WriteLink(dir_, 100, "", SampleRecords());
  const std::string one = WriteLink(dir_, 200, CheckpointDirName(100), HashOnly());
  const std::string two = WriteLink(dir_, 300, CheckpointDirName(200), HashOnly());
  absl::StatusOr<CheckpointReport> report = InspectCheckpoint(two);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->global_step, 300);
  EXPECT_EQ(report->chain, (std::vector<std::string>{CheckpointDirName(100), CheckpointDirName(200),
                                                     CheckpointDirName(300)}));
  ASSERT_EQ(report->variables.size(), 1u);
  EXPECT_EQ(report->variables[0].name, "emb/part_0");
  EXPECT_EQ(report->variables[0].removed, 1);
  const int64_t link_bytes = static_cast<int64_t>(fs::file_size(two + "/shard-0-of-1.pst"));
  EXPECT_EQ(report->total_bytes, link_bytes);
  EXPECT_GT(report->chain_bytes, 2 * link_bytes);

  // Without its full checkpoint the plan's dense variables are in no link.
  const std::string alone = WriteLink(Path("other"), 300, "", HashOnly());
  EXPECT_EQ(InspectCheckpoint(alone).status().code(), absl::StatusCode::kDataLoss);

  const std::string shard = one + "/shard-0-of-1.pst";
  std::string bytes = ReadBytes(shard);
  bytes[bytes.size() / 2] ^= 0x10;
  WriteBytes(shard, bytes);
  EXPECT_EQ(InspectCheckpoint(one).status().code(), absl::StatusCode::kDataLoss);
  const absl::Status later = InspectCheckpoint(two).status();
  EXPECT_EQ(later.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(std::string(later.message()), "is incremental on " + one)) << later;
  EXPECT_TRUE(InspectCheckpoint(Path(CheckpointDirName(100))).ok());
}

// A link's hash record replaces a row, adds one and removes one; its dense
// record replaces the earlier one. Folded, the chain is what a full save
// of the link's instant holds, as FoldLink and as a checkpoint of its own.
TEST_F(CheckpointChainTest, FoldLink_AndWriteFoldedCheckpoint_GiveTheLinksInstant) {
  const std::vector<ShardRecord> full = SampleRecords();
  WriteLink(dir_, 100, "", full);
  ShardRecord hash = full[2];  // ids {-5, 12, 1 << 40, 3}, dim 3, one slot
  hash.version = 10;
  hash.hash_ids = {12, 77};
  hash.rows = 2;
  hash.values = Ramp(6, 50.0f);
  hash.slots = {Ramp(6, 60.0f)};
  hash.removed_ids = {-5, 1234};  // 1234: never stored, nothing to remove
  ShardRecord dense = full[1];
  dense.version = 18;
  dense.values = Ramp(5, 9.0f);
  const std::string link = WriteLink(dir_, 200, CheckpointDirName(100), {dense, hash});

  std::vector<ShardRecord> folded = full;
  ASSERT_TRUE(FoldLink(&folded, {dense, hash}, "link").ok());
  ASSERT_EQ(folded.size(), 4u);
  EXPECT_EQ(folded[0].values, full[0].values) << "unchanged";
  EXPECT_EQ(folded[1].values, dense.values);
  EXPECT_EQ(folded[1].version, 18);
  const ShardRecord& h = folded[2];
  EXPECT_EQ(h.version, 10);
  EXPECT_EQ(h.hash_ids, (std::vector<int64_t>{int64_t{1} << 40, 3, 12, 77}));
  std::vector<float> want = {10, 10.5f, 11, 11.5f, 12, 12.5f};  // ids 1<<40 and 3, kept
  const std::vector<float> later = Ramp(6, 50.0f);
  want.insert(want.end(), later.begin(), later.end());
  EXPECT_EQ(h.values, want);
  EXPECT_TRUE(h.removed_ids.empty());

  ShardRecord stranger = full[1];
  stranger.spec.set_name("not/there");
  EXPECT_EQ(FoldLink(&folded, {stranger}, "link").code(), absl::StatusCode::kDataLoss);

  const std::string out = Path("folded");
  fs::create_directories(out);
  ASSERT_TRUE(WriteFoldedCheckpoint(link, out).ok());
  absl::StatusOr<CheckpointReport> report = InspectCheckpoint(out);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->chain.size(), 1u) << "it stands alone";
  EXPECT_EQ(report->global_step, 200);
  absl::StatusOr<std::vector<ShardRecord>> read = ReadShardFile(out + "/shard-0-of-1.pst");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 4u);
  EXPECT_EQ((*read)[2].hash_ids, h.hash_ids);
  EXPECT_EQ((*read)[2].values, h.values);
  EXPECT_EQ((*read)[1].values, dense.values);
}

// keep counts chains: the verified one's and the newest others stay whole,
// every link of an older chain goes.
TEST_F(CheckpointChainTest, PruneCheckpoints_CountsWholeChains) {
  WriteLink(dir_, 100, "", SampleRecords());
  WriteLink(dir_, 150, CheckpointDirName(100), HashOnly());
  WriteLink(dir_, 200, "", SampleRecords());
  WriteLink(dir_, 250, CheckpointDirName(200), HashOnly());
  WriteLink(dir_, 260, CheckpointDirName(250), HashOnly());
  WriteLink(dir_, 300, "", SampleRecords());
  WriteLink(dir_, 350, CheckpointDirName(300), HashOnly());
  ASSERT_TRUE(PruneCheckpoints(dir_, 2, Path(CheckpointDirName(350))).ok());
  EXPECT_EQ(ListCheckpoints(dir_),
            (std::vector<std::string>{Path(CheckpointDirName(350)), Path(CheckpointDirName(300)),
                                      Path(CheckpointDirName(260)), Path(CheckpointDirName(250)),
                                      Path(CheckpointDirName(200))}));
  for (const std::string& dir : ListCheckpoints(dir_)) {
    EXPECT_TRUE(InspectCheckpoint(dir).ok()) << dir << " lost a link it needs";
  }
  ASSERT_TRUE(PruneCheckpoints(dir_, 1, Path(CheckpointDirName(350))).ok());
  EXPECT_EQ(ListCheckpoints(dir_),
            (std::vector<std::string>{Path(CheckpointDirName(350)), Path(CheckpointDirName(300))}));
}

// A link whose chain lost a link to an interrupted save or a removal can
// never be restored: it goes once older than the save verified. One whose
// base cannot be read now stays, as that base does.
TEST_F(CheckpointChainTest, PruneCheckpoints_BrokenChains) {
  WriteLink(dir_, 100, CheckpointDirName(50), HashOnly());  // no ckpt-50 at all
  MakeCheckpointDir(dir_, 110, /*committed=*/false);
  WriteLink(dir_, 120, CheckpointDirName(110), HashOnly());  // on debris
  fs::create_directories(Path(CheckpointDirName(130)));
  WriteBytes(Path(CheckpointDirName(130) + "/MANIFEST.json"), "{ not json");
  WriteLink(dir_, 140, CheckpointDirName(130), HashOnly());  // on an unreadable one
  WriteLink(dir_, 200, "", SampleRecords());
  ASSERT_TRUE(PruneCheckpoints(dir_, 5, Path(CheckpointDirName(200))).ok());
  EXPECT_FALSE(fs::exists(Path(CheckpointDirName(100))));
  EXPECT_FALSE(fs::exists(Path(CheckpointDirName(110))));
  EXPECT_FALSE(fs::exists(Path(CheckpointDirName(120))));
  EXPECT_TRUE(fs::exists(Path(CheckpointDirName(130))));
  EXPECT_TRUE(fs::exists(Path(CheckpointDirName(140))));
  EXPECT_TRUE(fs::exists(Path(CheckpointDirName(200))));
}

}  // namespace
}  // namespace pst::common
