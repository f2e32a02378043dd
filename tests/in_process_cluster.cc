#include "tests/in_process_cluster.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "client/shard_routes.h"
#include "common/checkpoint_chain.h"
#include "common/checkpoint_format.h"
#include "common/status_macros.h"
#include "data/libsvm.h"
#include "data/mnist_reader.h"
#include "device/device_mapping.h"
#include "models/mlp.h"
#include "models/mlp_model.h"
#include "models/model_spec.h"
#include "worker/trainer.h"

namespace pst::testing {
namespace {

constexpr absl::Duration kHeartbeat = absl::Seconds(1);  // the chief's, on its ManualClock

// Writes `n` examples in IDX format, as data/mnist_reader.h reads them.
void WriteIdx(const std::string& dir, const std::string& prefix, int n, uint32_t seed) {
  auto be32 = [](std::ofstream& out, uint32_t v) {
    const char bytes[4] = {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
    out.write(bytes, 4);
  };
  std::mt19937 rng(seed);
  std::ofstream images(absl::StrCat(dir, "/", prefix, "-images-idx3-ubyte"), std::ios::binary);
  be32(images, 0x803);
  be32(images, n);
  be32(images, 28);
  be32(images, 28);
  for (int i = 0; i < n * 784; ++i) images.put(static_cast<char>(rng() % 256));
  std::ofstream labels(absl::StrCat(dir, "/", prefix, "-labels-idx1-ubyte"), std::ios::binary);
  be32(labels, 0x801);
  be32(labels, n);
  for (int i = 0; i < n; ++i) labels.put(static_cast<char>(rng() % 10));
}

// Writes `n` libsvm examples of 3 features among 24 raw ids; returns the
// table ids they map to (hash table), sorted.
std::vector<int64_t> WriteLibsvm(const std::string& path, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::ofstream out(path);
  std::set<int64_t> ids;
  for (int i = 0; i < n; ++i) {
    out << rng() % 2;
    std::set<uint64_t> raw;
    while (raw.size() < 3) raw.insert(1 + rng() % 24);
    for (uint64_t r : raw) {
      out << " " << r << ":" << (1 + rng() % 4) * 0.25;
      ids.insert(data::LibsvmFeatureId(r, /*buckets=*/0));
    }
    out << "\n";
  }
  return {ids.begin(), ids.end()};
}

// A worker's PsTransport: the in-process one, through the gate.
class GatedTransport final : public common::PsTransport {
 public:
  GatedTransport(std::shared_ptr<ps::InProcessPsTransport> inner, Gate* gate)
      : inner_(std::move(inner)), gate_(gate) {}

  int num_ps() const override { return inner_->num_ps(); }
  void Pull(int ps, const proto::PullRequest* request, proto::PullResponse* response,
            Done done) override {
    inner_->Pull(ps, request, response, std::move(done));
  }
  void Push(int ps, const proto::PushRequest* request, proto::PushResponse* response,
            Done done) override {
    if (absl::Status passed = gate_->Pass(ps, *request); !passed.ok()) return done(passed);
    inner_->Push(ps, request, response, std::move(done));
  }
  void PushPull(int ps, const proto::PushPullRequest* request, proto::PullResponse* response,
                Done done) override {
    if (absl::Status passed = gate_->Pass(ps, request->push()); !passed.ok()) return done(passed);
    if (gate_->TakeLostAnswer(ps, request->push())) {
      // The request reaches the ps, which answers into buffers of its own
      // (its answer may come later: a parked SYNC pull); the worker hears
      // that the connection broke.
      auto lost_request = std::make_shared<proto::PushPullRequest>(*request);
      auto lost_response = std::make_shared<proto::PullResponse>();
      inner_->PushPull(ps, lost_request.get(), lost_response.get(),
                       [lost_request, lost_response](absl::Status) {});
      return done(absl::UnavailableError("the answer was lost (in-process test)"));
    }
    inner_->PushPull(ps, request, response, std::move(done));
  }
  void PullRows(int ps, const proto::PullRowsRequest* request, proto::PullRowsResponse* response,
                Done done) override {
    inner_->PullRows(ps, request, response, std::move(done));
  }
  void PushRows(int ps, const proto::PushRowsRequest* request, proto::PushRowsResponse* response,
                Done done) override {
    if (absl::Status passed = gate_->PassRows(ps, *request); !passed.ok()) return done(passed);
    inner_->PushRows(ps, request, response, std::move(done));
  }
  std::string Describe(int ps) const override { return inner_->Describe(ps); }

 private:
  const std::shared_ptr<ps::InProcessPsTransport> inner_;
  Gate* const gate_;
};

}  // namespace

// ManualClock.

ManualClock::ManualClock() : now_(absl::FromUnixSeconds(1'000'000'000)) {}

absl::Time ManualClock::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

bool ManualClock::WaitFor(absl::Duration timeout, const common::StopSignal& stop) {
  absl::MutexLock lock(&mu_);
  if (!free_) {
    const int64_t ticket = entered_++;
    auto passed = [this, ticket]()
                      ABSL_SHARED_LOCKS_REQUIRED(mu_) { return free_ || allowed_ > ticket; };
    mu_.Await(absl::Condition(&passed));
  }
  now_ += timeout;
  return stop.stopped();
}

bool ManualClock::Tick(absl::Duration limit) {
  absl::MutexLock lock(&mu_);
  if (finished_) return true;
  ++allowed_;
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return ReadyLocked(); };
  return mu_.AwaitWithTimeout(absl::Condition(&ready), limit);
}

bool ManualClock::AwaitWaiting(absl::Duration limit) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return ReadyLocked(); };
  return mu_.AwaitWithTimeout(absl::Condition(&ready), limit);
}

void ManualClock::RunFree() {
  absl::MutexLock lock(&mu_);
  free_ = true;
}

void ManualClock::Finish() {
  absl::MutexLock lock(&mu_);
  finished_ = true;
}

void ManualClock::Restart() {
  absl::MutexLock lock(&mu_);
  free_ = false;
  finished_ = false;
  allowed_ = entered_;
}

// Gate.

Gate::Gate(int num_workers)
    : hold_(num_workers, INT64_MAX), held_(num_workers, -1), cut_(num_workers, false) {}

void Gate::HoldAt(int worker, int64_t position) {
  absl::MutexLock lock(&mu_);
  hold_[worker] = position;
}

bool Gate::AwaitHeld(int worker, int64_t position, absl::Duration limit) {
  absl::MutexLock lock(&mu_);
  auto held = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return held_[worker] == position; };
  return mu_.AwaitWithTimeout(absl::Condition(&held), limit);
}

void Gate::Cut(int worker) {
  absl::MutexLock lock(&mu_);
  cut_[worker] = true;
}

void Gate::Mend(int worker) {
  absl::MutexLock lock(&mu_);
  cut_[worker] = false;
}

void Gate::LoseAnswer(int worker, int64_t position) {
  absl::MutexLock lock(&mu_);
  lose_[{worker, position}];
}

int64_t Gate::FirstPosition(int worker, int64_t generation) const {
  absl::MutexLock lock(&mu_);
  auto it = first_in_generation_.find({worker, generation});
  return it == first_in_generation_.end() ? -1 : it->second;
}

int64_t Gate::FirstPositionOf(int worker, uint64_t incarnation) const {
  absl::MutexLock lock(&mu_);
  auto it = first_of_incarnation_.find({worker, incarnation});
  return it == first_of_incarnation_.end() ? -1 : it->second;
}

absl::Status Gate::PassRows(int ps, const proto::PushRowsRequest& push) {
  (void)ps;
  const int w = push.worker_index();
  absl::MutexLock lock(&mu_);
  // SYNC tags a row push with its step, which is the worker's data position
  // in these lockstep jobs.
  auto open = [&]()
                  ABSL_SHARED_LOCKS_REQUIRED(mu_) { return cut_[w] || push.step() < hold_[w]; };
  if (!open()) {
    held_[w] = push.step();
    mu_.Await(absl::Condition(&open));
    held_[w] = -1;
  }
  if (cut_[w]) return absl::UnavailableError("this worker is cut off (in-process test)");
  return absl::OkStatus();
}

absl::Status Gate::Pass(int ps, const proto::PushRequest& push) {
  (void)ps;
  const int w = push.worker_index();
  absl::MutexLock lock(&mu_);
  first_in_generation_.emplace(std::make_pair(w, push.generation()), push.position());
  first_of_incarnation_.emplace(std::make_pair(w, push.incarnation()), push.position());
  auto open = [&]()
                  ABSL_SHARED_LOCKS_REQUIRED(mu_) { return cut_[w] || push.position() < hold_[w]; };
  if (!open()) {
    held_[w] = push.position();
    mu_.Await(absl::Condition(&open));
    held_[w] = -1;
  }
  if (cut_[w]) return absl::UnavailableError("this worker is cut off (in-process test)");
  return absl::OkStatus();
}

bool Gate::TakeLostAnswer(int ps, const proto::PushRequest& push) {
  absl::MutexLock lock(&mu_);
  auto it = lose_.find({push.worker_index(), push.position()});
  if (it == lose_.end()) return false;
  if (it->second.size() <= static_cast<size_t>(ps)) it->second.resize(ps + 1, false);
  if (it->second[ps]) return false;
  it->second[ps] = true;
  return true;
}

// The workers' coordinator client: in-process, and every answer wakes
// InProcessCluster::Await.
class InProcessCluster::ObservedClient final : public client::CoordinatorClient {
 public:
  ObservedClient(InProcessCluster* cluster, chief::Coordinator* coordinator)
      : cluster_(cluster), inner_(coordinator, &cluster->clock_) {}

  chief::InProcessCoordinatorClient& inner() { return inner_; }

  absl::StatusOr<proto::RegisterResponse> Register(const proto::RegisterRequest& request,
                                                   absl::Duration timeout) override {
    auto answer = inner_.Register(request, timeout);
    cluster_->Observe();
    return answer;
  }
  absl::StatusOr<proto::HeartbeatResponse> Heartbeat(const proto::HeartbeatRequest& request,
                                                     absl::Duration timeout) override {
    auto answer = inner_.Heartbeat(request, timeout);
    cluster_->Observe();
    return answer;
  }
  absl::Status WorkerDone(const proto::WorkerDoneRequest& request,
                          absl::Duration timeout) override {
    auto answer = inner_.WorkerDone(request, timeout);
    cluster_->Observe();
    return answer;
  }
  absl::StatusOr<proto::ClaimWorkerIndexResponse> ClaimWorkerIndex(
      const proto::ClaimWorkerIndexRequest& request, absl::Duration timeout) override {
    return inner_.ClaimWorkerIndex(request, timeout);
  }

 private:
  InProcessCluster* const cluster_;
  chief::InProcessCoordinatorClient inner_;
};

// InProcessCluster.

InProcessCluster::InProcessCluster(Config config) : config_(config), gate_(config.num_workers) {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  dir_ = absl::StrCat(::testing::TempDir(), "/in_process_cluster_",
                      test != nullptr ? absl::StrCat(test->test_suite_name(), ".", test->name())
                                      : std::string("reference"),
                      "_", reinterpret_cast<uintptr_t>(this));
  std::filesystem::remove_all(dir_);
  data_dir_ = dir_ + "/data";
  checkpoint_dir_ = dir_ + "/checkpoints";
  summary_json_ = dir_ + "/summary.json";
  std::filesystem::create_directories(data_dir_);
  std::filesystem::create_directories(checkpoint_dir_);
  WriteIdx(data_dir_, "train", config.train_examples, 7);
  WriteIdx(data_dir_, "t10k", 8, 8);

  for (int i = 0; i < config.num_ps; ++i) {
    options_.tf.cluster.ps.push_back(absl::StrCat("ps-", i, ".in-process:1"));
  }
  for (int i = 0; i < config.num_workers; ++i) {
    options_.tf.cluster.worker.push_back(absl::StrCat("worker-", i, ".in-process:1"));
  }
  options_.tf.cluster.chief.push_back("chief.in-process:1");
  proto::TrainingConfig& training = options_.training;
  if (config.model == "logreg") {
    // A hash table (--buckets=0) and a bias, on libsvm lines of a few
    // features each, every example a training one.
    training.set_model("logreg");
    training.set_buckets(0);
    training.set_eval_fraction(0);
    training.set_data(data_dir_ + "/train.svm");
    table_ids_ = WriteLibsvm(training.data(), config.train_examples, 7);
  } else {
    training.set_model("mlp");
    training.add_hidden_units(8);
  }
  training.set_batch_size(config.batch_size);
  training.set_epochs(config.epochs);
  training.set_seed(11);
  training.mutable_optimizer()->set_name("sgd");
  training.mutable_optimizer()->set_learning_rate(0.1f);
  training.mutable_sync()->set_mode(config.mode);
  training.set_ps_replicas(config.ps_replicas);
  options_.timing.heartbeat_interval = kHeartbeat;
  options_.timing.peer_timeout = 3 * kHeartbeat;
  options_.timing.startup_timeout = absl::Hours(1);
  options_.timing.rpc_timeout = absl::Seconds(30);
  options_.timing.recovery_timeout = absl::Minutes(1);
  options_.timing.log_every = absl::Hours(1);
  options_.data_dir = data_dir_;
  options_.summary_json = summary_json_;
  options_.checkpoint_dir = checkpoint_dir_;
  options_.save_steps = config.save_steps;
  options_.incremental_save_steps = config.incremental_save_steps;
  options_.keep_checkpoints = 10;
  options_.progress = common::ProgressMode::kOff;

  ps::InProcessPs::Options ps_options;
  ps_options.checkpoint_dir = checkpoint_dir_;
  ps_ = std::make_shared<ps::InProcessPs>(config.num_ps, ps_options);
  transport_ = std::make_shared<ps::InProcessPsTransport>(ps_);

  clients_.resize(config.num_workers);
  worker_stops_.resize(config.num_workers);
  worker_threads_.resize(config.num_workers);
  worker_status_.resize(config.num_workers);
  incarnations_.assign(config.num_workers, 0);
}

InProcessCluster::~InProcessCluster() {
  // Workers first: cut off (a push held at the gate fails), stopped, and
  // every pull parked on a ps answered.
  for (int w = 0; w < config_.num_workers; ++w) {
    if (worker_stops_[w] != nullptr) worker_stops_[w]->Stop("the test ends");
    gate_.Cut(w);
  }
  for (int p = 0; p < config_.num_ps; ++p) {
    ps_->server(p)->store.CancelAllWaiters(absl::CancelledError("the test ends"));
  }
  for (std::thread& t : worker_threads_) {
    if (t.joinable()) t.join();
  }
  if (chief_thread_.joinable()) {
    chief_stop_->Stop("the test ends");
    clock_.RunFree();
    chief_thread_.join();
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

int64_t InProcessCluster::final_step() const {
  return chief::ExpectedFinalStep(options_.training, config_.num_workers, config_.train_examples);
}

void InProcessCluster::StartChief() {
  absl::StatusOr<chief::JobPlan> plan = chief::PlanJob(options_);
  ASSERT_TRUE(plan.ok()) << plan.status();
  plan_ = std::make_unique<chief::JobPlan>(*std::move(plan));
  coordinator_ = std::make_unique<chief::Coordinator>(plan_->initial, options_.timing.peer_timeout);
  control_ = std::make_unique<ps::InProcessPsControl>(ps_);
  chief_stop_ = std::make_unique<common::StopSignal>();
  clock_.Restart();
  chief::Job::Collaborators with;
  with.ps = control_.get();
  with.coordinator = coordinator_.get();
  with.clock = &clock_;
  with.evaluate = [this](const proto::ClusterState& state) { return Evaluate(state); };
  with.job_start = clock_.Now();
  job_ = std::make_unique<chief::Job>(options_, *plan_, std::move(with), *chief_stop_);
  for (auto& client : clients_) {
    if (client != nullptr) client->inner().Connect(coordinator_.get());
  }
  chief_done_ = std::make_shared<absl::Notification>();
  chief_thread_ = std::thread([this, done = chief_done_] {
    chief_status_ = job_->Run();
    done->Notify();
    clock_.Finish();
  });
  ASSERT_TRUE(clock_.AwaitWaiting()) << "the chief did not get through its start";
}

void InProcessCluster::StartWorker(int index) {
  if (worker_threads_[index].joinable()) worker_threads_[index].join();
  incarnations_[index] = 100 * (index + 1) + (incarnations_[index] % 100) + 1;
  clients_[index] = std::make_unique<ObservedClient>(this, coordinator_.get());
  worker_stops_[index] = std::make_unique<common::StopSignal>();
  gate_.Mend(index);
  worker::TrainerOptions options;
  options.worker_index = index;
  options.incarnation = incarnations_[index];
  options.coordinator_address = "in-process";
  options.data_dir = data_dir_;
  options.heartbeat_interval = absl::Milliseconds(5);
  options.startup_timeout = absl::Seconds(30);
  options.rpc_timeout = absl::Seconds(30);
  options.recovery_timeout = absl::Seconds(30);
  options.device_specs = {device::LogicalDeviceSpec()};
  worker_threads_[index] = std::thread([this, index, options] {
    worker::WorkerConnections connections;
    connections.coordinator = clients_[index].get();
    connections.ps_transport = [this](const std::vector<std::string>&, absl::Duration) {
      return std::make_shared<GatedTransport>(transport_, &gate_);
    };
    connections.ps_control = [this](const std::vector<std::string>&) {
      return std::make_unique<ps::InProcessPsControl>(ps_);
    };
    worker_status_[index] = worker::RunWorker(options, connections, *worker_stops_[index]);
  });
}

void InProcessCluster::StartWorkers() {
  for (int w = 0; w < config_.num_workers; ++w) StartWorker(w);
}

absl::Status InProcessCluster::CrashChief() {
  control_->Disconnect();
  for (auto& client : clients_) {
    if (client != nullptr) client->inner().Connect(nullptr);
  }
  // Its own wait for the workers to finish ends at once: none will.
  for (int w = 0; w < config_.num_workers; ++w) coordinator_->GiveUp(w);
  chief_stop_->Stop("crashed (in-process test)");
  clock_.RunFree();
  chief_thread_.join();
  old_coordinators_.push_back(std::move(coordinator_));
  old_controls_.push_back(std::move(control_));
  old_plans_.push_back(std::move(plan_));
  old_jobs_.push_back(std::move(job_));
  return chief_status_;
}

absl::Status InProcessCluster::CrashWorker(int index) {
  // Stopped before its held push fails, so that it says nothing more.
  clients_[index]->inner().Connect(nullptr);
  worker_stops_[index]->Stop("crashed (in-process test)");
  gate_.Cut(index);
  worker_threads_[index].join();
  return worker_status_[index];
}

void InProcessCluster::SettleAt(int64_t position) {
  for (int w = 0; w < config_.num_workers; ++w) gate_.HoldAt(w, position);
  for (int w = 0; w < config_.num_workers; ++w) {
    ASSERT_TRUE(gate_.AwaitHeld(w, position)) << "worker " << w << " never reached " << position;
  }
  ASSERT_TRUE(Await([&] {
    const chief::Coordinator::Snapshot snap = Check();
    return std::all_of(snap.positions.begin(), snap.positions.end(),
                       [&](int64_t p) { return p == position; });
  })) << "the heartbeats never told the coordinator position "
      << position;
  ASSERT_TRUE(clock_.Tick());
  ASSERT_TRUE(clock_.Tick());
}

void InProcessCluster::ReleaseAll() {
  for (int w = 0; w < config_.num_workers; ++w) gate_.Release(w);
}

void InProcessCluster::Observe() {
  absl::MutexLock lock(&mu_);
  ++calls_;
}

bool InProcessCluster::Await(const std::function<bool()>& done, absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  absl::MutexLock lock(&mu_);
  while (!done()) {
    const uint64_t seen = calls_;
    auto called = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return calls_ != seen; };
    if (!mu_.AwaitWithDeadline(absl::Condition(&called), deadline)) return done();
  }
  return true;
}

absl::Status InProcessCluster::FinishJob() {
  if (!Await([&] { return Check().all_done; })) {
    return absl::DeadlineExceededError("the workers did not finish");
  }
  for (int ticks = 0; ticks < 20 && !chief_done_->HasBeenNotified(); ++ticks) {
    if (!clock_.Tick()) break;
  }
  if (!chief_done_->HasBeenNotified()) return absl::DeadlineExceededError("the job did not end");
  chief_thread_.join();
  // Every worker hears the end on its next heartbeat, and exits.
  for (int w = 0; w < config_.num_workers; ++w) {
    if (worker_threads_[w].joinable()) worker_threads_[w].join();
    if (!worker_status_[w].ok()) {
      return absl::InternalError(absl::StrCat("worker ", w, ": ", worker_status_[w].ToString()));
    }
  }
  return chief_status_;
}

std::vector<client::Values> InProcessCluster::evaluated() const {
  absl::MutexLock lock(&mu_);
  return evaluated_;
}

proto::HealthResponse InProcessCluster::Health(int ps) {
  proto::HealthResponse health;
  ps_->server(ps)->node.Health(proto::HealthRequest(), &health);
  return health;
}

std::optional<proto::CheckpointManifest> InProcessCluster::Checkpoint(int64_t step) const {
  const std::string dir = absl::StrCat(checkpoint_dir_, "/", common::CheckpointDirName(step));
  if (!common::InspectCheckpoint(dir).ok()) return std::nullopt;
  absl::StatusOr<proto::CheckpointManifest> manifest = common::ReadManifest(dir);
  if (!manifest.ok()) return std::nullopt;
  return *std::move(manifest);
}

absl::StatusOr<chief::EvalResult> InProcessCluster::Evaluate(const proto::ClusterState& state) {
  PST_ASSIGN_OR_RETURN(std::vector<models::ModelVariable> variables,
                       models::ModelVariables(options_.training));
  PST_ASSIGN_OR_RETURN(
      std::unique_ptr<client::PsClient> client,
      client::PsClient::Create(
          state.plan(), models::DenseNames(variables),
          client::MakeRoutedTransport(
              transport_, client::ShardRoutes::FromPlan(state.plan(), state.routing_version())),
          -1, 0));
  chief::EvalResult result;
  client::Values params;
  PST_ASSIGN_OR_RETURN(result.global_step, client->Pull(&params));
  if (config_.model == "logreg") {
    // The parameters: the bias, then the rows of every id of the data.
    const client::PsClient::TableIds tables[] = {{"logreg/weights", table_ids_}};
    client::Values rows;
    PST_RETURN_IF_ERROR(client->PullRows(tables, &rows));
    params.push_back(std::move(rows[0]));
    result.metrics = {{"table_rows", static_cast<double>(table_ids_.size())}};
    result.line = absl::StrCat(table_ids_.size(), " table rows");
    absl::MutexLock lock(&mu_);
    evaluated_.push_back(std::move(params));
    return result;
  }
  PST_ASSIGN_OR_RETURN(models::MlpConfig config, models::MlpConfigFor(options_.training));
  PST_ASSIGN_OR_RETURN(data::Dataset test, data::LoadFashionMnist(data_dir_, data::Split::kTest));
  PST_ASSIGN_OR_RETURN(models::Mlp::Eval eval,
                       models::Mlp(config).Evaluate(params, test.features.data(),
                                                    test.labels.data(), test.num_examples));
  result.metrics = {{"test_accuracy", eval.accuracy}, {"test_loss", eval.loss}};
  result.line = absl::StrCat("test accuracy ", eval.accuracy, ", test loss ", eval.loss);
  absl::MutexLock lock(&mu_);
  evaluated_.push_back(std::move(params));
  return result;
}

client::Values InProcessCluster::FaultFreeParameters(const Config& config) {
  InProcessCluster cluster(config);
  cluster.StartChief();
  cluster.StartWorkers();
  const absl::Status finished = cluster.FinishJob();
  EXPECT_TRUE(finished.ok()) << finished;
  const std::vector<client::Values> evaluated = cluster.evaluated();
  EXPECT_EQ(evaluated.size(), 1u);
  return evaluated.empty() ? client::Values() : evaluated.back();
}

}  // namespace pst::testing
