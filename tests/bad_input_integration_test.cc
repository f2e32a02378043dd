// Hostile and malformed requests sent as raw gRPC calls to a real ps_server:
// each gets a clear status, changes nothing, and leaves the ps serving.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/checkpoint_format.h"
#include "rpc/grpc_channel.h"
#include "common/tensor_util.h"
#include "proto/pstrain.grpc.pb.h"
#include "tests/test_cluster.h"
#include "tests/test_requests.h"

namespace pst::testing {
namespace {

namespace fs = std::filesystem;

constexpr absl::Duration kTimeout = absl::Seconds(60);

proto::VariableSpec Spec(const std::string& name, const std::vector<int64_t>& shape) {
  return FloatSpec(name, shape, /*seed=*/7);
}

// Every regular file below `dir`, with its size, for "nothing was written"
// checks.
std::vector<std::pair<std::string, uintmax_t>> FilesUnder(const std::string& dir) {
  std::vector<std::pair<std::string, uintmax_t>> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    std::error_code size_ec;
    if (!it->is_regular_file(size_ec)) continue;
    files.emplace_back(it->path().string(), it->file_size(size_ec));
  }
  std::sort(files.begin(), files.end());
  return files;
}

class BadInputTest : public LonePsTest {
 protected:
  void SetUp() override {
    LonePsTest::SetUp();
    if (HasFatalFailure()) return;
    proto::CreateVariablesRequest create;
    *create.add_variables() = Spec("w", {64, 16});
    create.mutable_optimizer()->set_name("sgd");
    create.mutable_optimizer()->set_learning_rate(0.1f);
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout, /*wait_for_ready=*/true);
    proto::CreateVariablesResponse created;
    grpc::Status status = stub_->CreateVariables(&context, create, &created);
    ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << ps_->output();
    ASSERT_TRUE(PullAll(&before_).ok());
    proto::HealthResponse health;
    ASSERT_TRUE(Health(&health).ok());
    incarnation_ = health.incarnation();
  }

  grpc::Status Health(proto::HealthResponse* health) {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    return stub_->Health(&context, proto::HealthRequest(), health);
  }
  grpc::Status PullAll(proto::PullResponse* response) {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    return stub_->Pull(&context, proto::PullRequest(), response);
  }
  grpc::Status Save(const std::string& checkpoint, proto::SaveResponse* response = nullptr,
                    const std::string& base = "") {
    proto::SaveResponse ignored;
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    proto::SaveRequest request;
    request.set_checkpoint(checkpoint);
    request.set_base(base);
    request.set_num_ps(1);
    request.set_incarnation(incarnation_);
    return stub_->Save(&context, request, response != nullptr ? response : &ignored);
  }
  grpc::Status Restore(const std::string& checkpoint, const proto::CheckpointManifest& manifest,
                       const std::vector<proto::CheckpointLink>& chain = {}) {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    proto::RestoreRequest request;
    request.set_checkpoint(checkpoint);
    *request.mutable_manifest() = manifest;
    for (const proto::CheckpointLink& link : chain) *request.add_chain() = link;
    request.set_generation(1);
    proto::RestoreResponse response;
    return stub_->Restore(&context, request, &response);
  }

  // The ps still serves, with the parameters it had after SetUp.
  void ExpectServingAndUnchanged(const std::string& after) {
    proto::HealthResponse health;
    grpc::Status status = Health(&health);
    ASSERT_TRUE(status.ok()) << "after " << after << ": " << status.error_message() << "\n"
                             << ps_->output();
    EXPECT_EQ(health.generation(), 0) << "after " << after;
    proto::PullResponse now;
    ASSERT_TRUE(PullAll(&now).ok()) << "after " << after;
    ASSERT_EQ(now.values_size(), before_.values_size());
    for (int i = 0; i < now.values_size(); ++i) {
      EXPECT_EQ(now.values(i).data(), before_.values(i).data()) << "after " << after;
    }
  }

  proto::PullResponse before_;
  uint64_t incarnation_ = 0;
};

TEST_F(BadInputTest, Save_WithAPathForAName_IsInvalidArgument_AndWritesNothing) {
  const std::string outside = TestDir() + "/outside";
  fs::create_directories(outside);
  for (const std::string& name :
       {std::string(), std::string(".."), std::string("/"), outside,
        absl::StrCat("../", fs::path(outside).filename().string()), std::string("ckpt-1/.."),
        std::string("ckpt-1/../../x"), std::string("ckpt-")}) {
    grpc::Status status = Save(name);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "'" << name << "'";
    EXPECT_NE(status.error_message().find("not a checkpoint name"), std::string::npos)
        << status.error_message();
    if (name.empty()) continue;
    // Nor is a path the base of an incremental save.
    status = Save("ckpt-000000000003", nullptr, name);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "base '" << name << "'";
  }
  EXPECT_TRUE(fs::is_empty(outside));
  EXPECT_TRUE(FilesUnder(checkpoint_dir_).empty());
  ExpectServingAndUnchanged("saves named by paths");
}

TEST_F(BadInputTest, Save_IntoAPlantedSymlink_IsRefused_AndWritesNothingThere) {
  const std::string target = TestDir() + "/target";
  fs::create_directories(target);
  fs::create_directory_symlink(target, checkpoint_dir_ + "/ckpt-000000000005");
  grpc::Status status = Save("ckpt-000000000005");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_NE(status.error_message().find("symbolic link"), std::string::npos)
      << status.error_message();
  EXPECT_TRUE(fs::is_empty(target));
  ExpectServingAndUnchanged("a save into a link");
}

TEST_F(BadInputTest, Restore_OfPathsRepeatsAndLinks_IsRefused_AndChangesNothing) {
  proto::SaveResponse saved;
  grpc::Status status = Save("ckpt-000000000001", &saved);
  ASSERT_TRUE(status.ok()) << status.error_message();
  proto::CheckpointManifest good;
  good.set_format_version(1);
  *good.add_shards() = saved.shard();

  struct Case {
    std::string what;
    std::string checkpoint;
    proto::CheckpointManifest manifest;
    grpc::StatusCode code;
    std::vector<proto::CheckpointLink> chain = {};  // an incremental one's links
  };
  std::vector<Case> cases;
  for (const char* name : {"", "..", "/etc", "ckpt-1/..", "ckpt-1/../.."}) {
    cases.push_back({absl::StrCat("checkpoint '", name, "'"), name, good,
                     grpc::StatusCode::INVALID_ARGUMENT});
  }
  for (const char* file : {"/etc/passwd", "../../../../etc/passwd", "", ".", "x/../shard-0-of-1.pst"}) {
    Case c{absl::StrCat("shard file '", file, "'"), "ckpt-000000000001", good,
           grpc::StatusCode::INVALID_ARGUMENT};
    c.manifest.mutable_shards(0)->set_file(file);
    cases.push_back(c);
  }
  {
    Case c{"one shard listed 1000 times", "ckpt-000000000001", good,
           grpc::StatusCode::INVALID_ARGUMENT};
    for (int i = 1; i < 1000; ++i) *c.manifest.add_shards() = saved.shard();
    cases.push_back(c);
  }
  {
    Case c{"no shards", "ckpt-000000000001", good, grpc::StatusCode::INVALID_ARGUMENT};
    c.manifest.clear_shards();
    cases.push_back(c);
  }
  {
    Case c{"a size the file does not have", "ckpt-000000000001", good,
           grpc::StatusCode::DATA_LOSS};
    c.manifest.mutable_shards(0)->set_bytes(saved.shard().bytes() + 1);
    cases.push_back(c);
  }
  {
    Case c{"a crc32 the file does not have", "ckpt-000000000001", good,
           grpc::StatusCode::DATA_LOSS};
    c.manifest.mutable_shards(0)->set_crc32(saved.shard().crc32() ^ 1);
    cases.push_back(c);
  }
  {
    Case c{"a checkpoint that is not there", "ckpt-000000000099", good,
           grpc::StatusCode::NOT_FOUND};
    cases.push_back(c);
  }
  // An incremental checkpoint's links: each checked as the checkpoint is.
  for (const char* name : {"..", "/etc", "ckpt-1/.."}) {
    proto::CheckpointLink link;
    link.set_checkpoint(name);
    *link.mutable_manifest() = good;
    cases.push_back({absl::StrCat("chain link '", name, "'"),
                     "ckpt-000000000001",
                     good,
                     grpc::StatusCode::INVALID_ARGUMENT,
                     {link}});
  }
  {
    proto::CheckpointLink link;
    link.set_checkpoint("ckpt-000000000001");
    *link.mutable_manifest() = good;
    link.mutable_manifest()->mutable_shards(0)->set_file("../../../../etc/passwd");
    cases.push_back({"a chain link's shard file by path",
                     "ckpt-000000000001",
                     good,
                     grpc::StatusCode::INVALID_ARGUMENT,
                     {link}});
    link.mutable_manifest()->mutable_shards(0)->set_file(saved.shard().file());
    link.set_checkpoint("ckpt-000000000098");
    cases.push_back({"a chain link that is not there",
                     "ckpt-000000000001",
                     good,
                     grpc::StatusCode::NOT_FOUND,
                     {link}});
  }
  // A shard replaced by a link to a file the ps user can read.
  const std::string linked = checkpoint_dir_ + "/ckpt-000000000002";
  fs::create_directories(linked);
  fs::create_symlink("/etc/passwd", linked + "/shard-0-of-1.pst");
  cases.push_back({"a shard that is a symbolic link", "ckpt-000000000002", good,
                   grpc::StatusCode::FAILED_PRECONDITION});

  for (const Case& c : cases) {
    status = Restore(c.checkpoint, c.manifest, c.chain);
    EXPECT_EQ(status.error_code(), c.code) << c.what << ": " << status.error_message();
    EXPECT_EQ(status.error_message().find("root:"), std::string::npos)
        << c.what << " leaked a file's contents: " << status.error_message();
    ExpectServingAndUnchanged(c.what);
  }
  // The good manifest still restores.
  status = Restore("ckpt-000000000001", good);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

// The two phases of a save: a WRITE needs a SNAPSHOT kept, and DISCARD
// drops it.
TEST_F(BadInputTest, SaveWrite_WithoutAKeptSnapshot_IsFailedPrecondition) {
  auto save = [&](proto::SaveRequest::Phase phase, proto::SaveResponse* response) {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    proto::SaveRequest request;
    request.set_phase(phase);
    request.set_checkpoint("ckpt-000000000007");
    request.set_num_ps(1);
    request.set_incarnation(incarnation_);
    return stub_->Save(&context, request, response);
  };
  proto::SaveResponse response;
  grpc::Status status = save(proto::SaveRequest::WRITE, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_TRUE(FilesUnder(checkpoint_dir_).empty());
  ASSERT_TRUE(save(proto::SaveRequest::SNAPSHOT, &response).ok());
  EXPECT_TRUE(response.holds_dense());
  EXPECT_TRUE(FilesUnder(checkpoint_dir_).empty()) << "a snapshot alone writes nothing";
  ASSERT_TRUE(save(proto::SaveRequest::DISCARD, &response).ok());
  status = save(proto::SaveRequest::WRITE, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  ASSERT_TRUE(save(proto::SaveRequest::SNAPSHOT, &response).ok());
  status = save(proto::SaveRequest::WRITE, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(FilesUnder(checkpoint_dir_).size(), 1u);
  ExpectServingAndUnchanged("the phases of a save");
}

// A ps started without --checkpoint_dir writes and reads no checkpoint.
TEST(BadInputNoDirTest, SaveAndRestore_WithoutCheckpointDir_AreFailedPrecondition) {
  LocalSpec spec = PickLocalSpec(1, 1, 1);
  auto ps = TestProcess::Start({BinaryPath("ps_server"), "--chief_timeout_s=0"},
                               {"TF_CONFIG=" + TfConfigJson(spec, "ps", 0)});
  ASSERT_TRUE(ps.ok()) << ps.status();
  auto stub = proto::ParameterServer::NewStub(rpc::MakeChannel(spec.ps[0], rpc::RpcSettings()));
  proto::HealthResponse health;
  {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout, /*wait_for_ready=*/true);
    ASSERT_TRUE(stub->Health(&context, proto::HealthRequest(), &health).ok());
  }
  {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    proto::SaveRequest request;
    request.set_checkpoint("ckpt-000000000001");
    request.set_num_ps(1);
    request.set_incarnation(health.incarnation());
    proto::SaveResponse response;
    grpc::Status status = stub->Save(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(status.error_message().find("--checkpoint_dir"), std::string::npos)
        << status.error_message();
  }
  {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    proto::RestoreRequest request;
    request.set_checkpoint("ckpt-000000000001");
    proto::RestoreResponse response;
    grpc::Status status = stub->Restore(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
}

// A disk that fills during a shard write: a clear RESOURCE_EXHAUSTED, no
// temp file left, and the ps serves on. Needs root (a small tmpfs).
TEST_F(BadInputTest, Save_OnAFullDisk_IsResourceExhausted_AndLeavesNoTempFile) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  // A variable larger than the tmpfs.
  proto::CreateVariablesRequest create;
  *create.add_variables() = Spec("big", {1024, 256});  // 1 MiB
  create.mutable_optimizer()->set_name("sgd");
  create.mutable_optimizer()->set_learning_rate(0.1f);
  {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    proto::CreateVariablesResponse created;
    ASSERT_TRUE(stub_->CreateVariables(&context, create, &created).ok());
  }
  ASSERT_TRUE(PullAll(&before_).ok());
  if (::mount("tmpfs", checkpoint_dir_.c_str(), "tmpfs", 0, "size=256k") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  }
  grpc::Status status = Save("ckpt-000000000003");
  const std::vector<std::pair<std::string, uintmax_t>> left = FilesUnder(checkpoint_dir_);
  ::umount2(checkpoint_dir_.c_str(), MNT_DETACH);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  for (const auto& [path, size] : left) ADD_FAILURE() << "left behind: " << path;
  ExpectServingAndUnchanged("a save to a full disk");
}

// A Save that arrives as the ps stops gets a clear answer (done, or refused
// as the ps is going), and the ps exits cleanly either way.
TEST_F(BadInputTest, Save_JustAfterSigterm_IsAnsweredAndThePsExitsCleanly) {
  ps_->Signal(SIGTERM);
  grpc::Status status = Save("ckpt-000000000004");
  EXPECT_TRUE(status.ok() || status.error_code() == grpc::StatusCode::UNAVAILABLE ||
              status.error_code() == grpc::StatusCode::CANCELLED)
      << status.error_code() << ": " << status.error_message();
  std::optional<int> exited = ps_->WaitForExit(kTimeout);
  ASSERT_TRUE(exited.has_value()) << ps_->output();
  EXPECT_EQ(ExitCode(*exited), 0) << ps_->output();
}

// ---------------------------------------------------------------------------
// Hard limits: small requests that would make the ps allocate without bound.

TEST_F(BadInputTest, Pull_NamingAVariableAMillionTimes_IsInvalidArgument) {
  proto::PullRequest pull;
  for (int i = 0; i < 1000000; ++i) *pull.add_names() = "w";
  grpc::ClientContext context;
  rpc::SetDeadline(&context, kTimeout);
  proto::PullResponse response;
  grpc::Status status = stub_->Pull(&context, pull, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("more than once"), std::string::npos)
      << status.error_message();
  ExpectServingAndUnchanged("a pull naming w 10^6 times");
}

TEST_F(BadInputTest, HugeOrManyVariables_AreResourceExhausted_AndNothingIsCreated) {
  auto create = [&](const proto::CreateVariablesRequest& request) {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    proto::CreateVariablesResponse response;
    return stub_->CreateVariables(&context, request, &response);
  };
  proto::CreateVariablesRequest one;
  one.mutable_optimizer()->set_name("sgd");
  one.mutable_optimizer()->set_learning_rate(0.1f);
  *one.add_variables() = Spec("huge", {int64_t{1} << 32});  // 16 GiB
  grpc::Status status = create(one);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_NE(status.error_message().find("--max_variable_bytes"), std::string::npos)
      << status.error_message();
  proto::CreateVariablesRequest many;
  *many.mutable_optimizer() = one.optimizer();
  for (int i = 0; i < 1000; ++i) *many.add_variables() = Spec(absl::StrCat("v", i), {1 << 30});
  status = create(many);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  proto::HealthResponse health;
  ASSERT_TRUE(Health(&health).ok());
  EXPECT_EQ(health.num_variables(), 1) << "only SetUp's w";
  ExpectServingAndUnchanged("huge CreateVariables");
}

TEST_F(BadInputTest, PullRowsOfFreshHashIds_StoresNoRow) {
  proto::CreateVariablesRequest create;
  create.mutable_optimizer()->set_name("sgd");
  create.mutable_optimizer()->set_learning_rate(0.1f);
  proto::VariableSpec hash = Spec("h/part_0", {0, 1});
  hash.set_variable("h");
  hash.set_routing(proto::HASH);
  hash.set_partition(0);
  hash.set_num_partitions(1);
  *hash.mutable_full_shape() = hash.shape();
  *create.add_variables() = hash;
  {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    proto::CreateVariablesResponse response;
    grpc::Status status = stub_->CreateVariables(&context, create, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  // 4Mi ids, the default --max_ids_per_request; 10 rounds, 40Mi ids in all
  // (the 100 rounds take two minutes here on 2 busy cores).
  constexpr int kIds = 4 << 20;
  constexpr int kRounds = 10;
  proto::PullRowsRequest request;
  proto::RowIds* rows = request.add_rows();
  rows->set_name("h/part_0");
  for (int round = 0; round < kRounds; ++round) {
    rows->clear_ids();
    for (int i = 0; i < kIds; ++i) rows->add_ids(int64_t{round} * kIds + i + 1);
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    proto::PullRowsResponse response;
    grpc::Status status = stub_->PullRows(&context, request, &response);
    ASSERT_TRUE(status.ok()) << "round " << round << ": " << status.error_message();
    ASSERT_EQ(response.values(0).data().size(), size_t{kIds} * sizeof(float));
  }
  proto::HealthResponse health;
  ASSERT_TRUE(Health(&health).ok());
  EXPECT_EQ(health.hash_rows(), 0) << kRounds << " reads of " << kIds << " fresh ids stored rows";
  ExpectServingAndUnchanged("PullRows of fresh ids");
}

TEST_F(BadInputTest, CountersAndWorkerIndicesOutOfRange_AreInvalidArgument) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  auto push = [&](int32_t worker, int64_t step) {
    proto::PushRequest request;
    request.set_worker_index(worker);
    request.set_step(step);
    request.add_names("w");
    const std::vector<int64_t> dims = {64, 16};
    common::PackFloats(std::vector<float>(64 * 16, 1.0f), common::Shape(dims.begin(), dims.end()),
                       request.add_gradients());
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    proto::PushResponse response;
    return stub_->Push(&context, request, &response);
  };
  for (int32_t worker : {-1, std::numeric_limits<int32_t>::max()}) {
    grpc::Status status = push(worker, 0);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << "worker " << worker << ": " << status.error_message();
  }
  for (int64_t step : {kMax, kMin}) {
    grpc::Status status = push(0, step);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << "step " << step << ": " << status.error_message();
  }
  for (auto [clock, min_version] : {std::pair{kMax, int64_t{0}}, std::pair{kMin, int64_t{0}},
                                    std::pair{int64_t{0}, kMax}, std::pair{int64_t{0}, kMin}}) {
    proto::PullRequest pull;
    pull.set_worker_index(0);
    pull.set_clock(clock);
    pull.set_min_version(min_version);
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    proto::PullResponse response;
    grpc::Status status = stub_->Pull(&context, pull, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << "clock " << clock << ", min_version " << min_version << ": " << status.error_message();
  }
  ExpectServingAndUnchanged("counters at INT64 extremes");
}

// 10^5 SSP pulls whose clock is far ahead of every worker: refused at once
// (INT64_MAX), or parked up to --max_parked_pulls and refused beyond.
TEST(BadInputParkTest, ParkedSspPulls_AreBounded_AndThePsServesOn) {
  LocalSpec spec = PickLocalSpec(1, 1, 1);
  auto ps = TestProcess::Start(
      {BinaryPath("ps_server"), "--chief_timeout_s=0", "--max_parked_pulls=100"},
      {"TF_CONFIG=" + TfConfigJson(spec, "ps", 0)});
  ASSERT_TRUE(ps.ok()) << ps.status();
  auto stub = proto::ParameterServer::NewStub(rpc::MakeChannel(spec.ps[0], rpc::RpcSettings()));
  proto::CreateVariablesRequest create;
  *create.add_variables() = Spec("b", {4});
  create.mutable_optimizer()->set_name("sgd");
  create.mutable_optimizer()->set_learning_rate(0.1f);
  create.mutable_sync()->set_mode(proto::SSP);
  create.mutable_sync()->set_num_workers(2);
  create.mutable_sync()->set_staleness(1);
  {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout, /*wait_for_ready=*/true);
    proto::CreateVariablesResponse response;
    ASSERT_TRUE(stub->CreateVariables(&context, create, &response).ok());
  }
  constexpr int kPulls = 100000;
  constexpr int kCap = 100;
  struct Call {
    grpc::ClientContext context;
    proto::PullRequest request;
    proto::PullResponse response;
    grpc::Status status;
    bool done = false;
  };
  std::vector<std::unique_ptr<Call>> calls(kPulls);
  absl::Mutex mu;
  int finished = 0;
  std::map<grpc::StatusCode, int> codes;
  for (int i = 0; i < kPulls; ++i) {
    calls[i] = std::make_unique<Call>();
    Call& call = *calls[i];
    call.request.set_worker_index(i % 2);
    // Half at INT64_MAX, half merely far ahead (parkable).
    call.request.set_clock(i % 2 == 0 ? std::numeric_limits<int64_t>::max() : int64_t{1} << 40);
    rpc::SetDeadline(&call.context, absl::Seconds(240));
    stub->async()->Pull(&call.context, &call.request, &call.response,
                        [&, i](grpc::Status status) {
                          absl::MutexLock lock(&mu);
                          calls[i]->status = std::move(status);
                          calls[i]->done = true;
                          ++codes[calls[i]->status.error_code()];
                          ++finished;
                        });
  }
  // Every pull but the parked ones is answered at once.
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                        +[](int* n) { return *n >= kPulls - kCap; }, &finished),
                                    absl::Seconds(120)))
        << finished << " of " << kPulls << " answered";
    EXPECT_EQ(codes[grpc::StatusCode::INVALID_ARGUMENT], kPulls / 2) << "clock INT64_MAX";
    EXPECT_EQ(codes[grpc::StatusCode::RESOURCE_EXHAUSTED], kPulls / 2 - kCap) << "past the cap";
  }
  {
    proto::HealthResponse health;
    grpc::ClientContext context;
    rpc::SetDeadline(&context, kTimeout);
    ASSERT_TRUE(stub->Health(&context, proto::HealthRequest(), &health).ok());
    EXPECT_EQ(health.parked_pulls(), kCap) << "pulls parked, ever";
  }
  // The parked ones end when their callers give up.
  {
    absl::MutexLock lock(&mu);
    for (auto& call : calls) {
      if (!call->done) call->context.TryCancel();
    }
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                        +[](int* n) { return *n == kPulls; }, &finished),
                                    absl::Seconds(60)));
    EXPECT_EQ(codes[grpc::StatusCode::CANCELLED], kCap);
  }
  proto::HealthResponse health;
  grpc::ClientContext context;
  rpc::SetDeadline(&context, kTimeout);
  grpc::Status status = stub->Health(&context, proto::HealthRequest(), &health);
  EXPECT_TRUE(status.ok()) << status.error_message() << "\n" << (*ps)->output();
}

}  // namespace
}  // namespace pst::testing
