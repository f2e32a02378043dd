#include "chief/chief.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "chief/coordinator.h"
#include "chief/grpc_coordinator_service.h"
#include "common/checkpoint_format.h"
#include "common/grpc_channel.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/placement.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "proto/pstrain.grpc.pb.h"
#include "worker/grpc_ps_transport.h"
#include "worker/mlp.h"
#include "worker/mnist_reader.h"
#include "worker/model_spec.h"
#include "worker/ps_client.h"
#include "worker/training_loops.h"

namespace pst::chief {
namespace {

struct PsPeer {
  std::string address;
  std::unique_ptr<proto::ParameterServer::Stub> stub;
  uint64_t incarnation = 0;
  absl::Time last_ok;
};

// Creates this ps's variables, retrying while it is not up yet.
absl::Status CreateOnPs(PsPeer* ps, const proto::CreateVariablesRequest& request,
                        absl::Time deadline, const common::StopSignal& stop) {
  absl::Duration backoff = absl::Milliseconds(50);
  for (;; backoff = std::min(2 * backoff, absl::Seconds(1))) {
    grpc::ClientContext context;
    common::SetDeadline(&context, absl::Seconds(2), /*wait_for_ready=*/true);
    proto::CreateVariablesResponse response;
    grpc::Status status = ps->stub->CreateVariables(&context, request, &response);
    if (status.ok()) break;
    const bool retry = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                       status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    absl::Status s = common::FromGrpcStatus(status);
    if (!retry) {
      return absl::Status(s.code(), absl::StrCat("ps at ", ps->address, ": ", s.message()));
    }
    if (stop.WaitFor(backoff)) return absl::CancelledError("stopped while creating variables");
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "ps at ", ps->address, " did not come up within --startup_timeout_s: ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<proto::HealthResponse> ProbePs(PsPeer* ps, absl::Duration timeout) {
  grpc::ClientContext context;
  common::SetDeadline(&context, timeout);
  proto::HealthRequest request;
  request.set_caller("chief");
  proto::HealthResponse response;
  grpc::Status status = ps->stub->Health(&context, request, &response);
  if (!status.ok()) return common::FromGrpcStatus(status);
  return response;
}

void ShutdownAllPs(std::vector<PsPeer>& ps, const std::string& reason) {
  absl::BlockingCounter pending(static_cast<int>(ps.size()));
  std::vector<grpc::ClientContext> contexts(ps.size());
  std::vector<proto::ShutdownResponse> responses(ps.size());
  proto::ShutdownRequest request;
  request.set_reason(reason);
  for (size_t i = 0; i < ps.size(); ++i) {
    common::SetDeadline(&contexts[i], absl::Seconds(5));
    ps[i].stub->async()->Shutdown(&contexts[i], &request, &responses[i],
                                  [&pending](grpc::Status) { pending.DecrementCount(); });
  }
  pending.Wait();
}

// The model's quality on held-out data, with the parameters the ps hold now.
// Runs `call(i)` for every ps on its own thread and returns the first error.
absl::Status ForEachPs(size_t n, const std::function<absl::Status(size_t)>& call) {
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) threads.emplace_back([&, i] { statuses[i] = call(i); });
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : statuses) PST_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

// Saves a checkpoint of every ps at `step` and commits it with the manifest.
absl::Status SaveCheckpoint(std::vector<PsPeer>& ps, const ChiefOptions& options,
                            const proto::ClusterState& state, int64_t step) {
  const std::string dir =
      absl::StrCat(options.checkpoint_dir, "/", common::CheckpointDirName(step));
  if (common::ReadManifest(dir).ok()) return absl::OkStatus();  // saved already
  const absl::Time start = absl::Now();
  std::vector<proto::SaveResponse> saved(ps.size());
  PST_RETURN_IF_ERROR(ForEachPs(ps.size(), [&](size_t i) -> absl::Status {
    grpc::ClientContext context;
    common::SetDeadline(&context, absl::Minutes(10));
    proto::SaveRequest request;
    request.set_directory(dir);
    request.set_num_ps(static_cast<int>(ps.size()));
    grpc::Status s = ps[i].stub->Save(&context, request, &saved[i]);
    if (!s.ok()) {
      return absl::Status(
          common::FromGrpcStatus(s).code(),
          absl::StrCat("saving ps ", i, " at ", ps[i].address, ": ", s.error_message()));
    }
    return absl::OkStatus();
  }));
  proto::CheckpointManifest manifest;
  manifest.set_format_version(1);
  manifest.set_global_step(step);
  *manifest.mutable_plan() = state.plan();
  *manifest.mutable_training() = state.training();
  manifest.set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
  int64_t bytes = 0;
  double snapshot = 0;
  for (const proto::SaveResponse& r : saved) {
    *manifest.add_shards() = r.shard();
    bytes += r.shard().bytes();
    snapshot = std::max(snapshot, r.snapshot_seconds());
  }
  PST_RETURN_IF_ERROR(common::WriteManifest(dir, manifest));
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  spdlog::info(
      "saved checkpoint {}: {:.1f} MB in {:.2f} s ({:.0f} MB/s), variables locked "
      "{:.1f} ms at most for the snapshot",
      dir, bytes / 1e6, secs, secs > 0 ? bytes / 1e6 / secs : 0.0, snapshot * 1e3);
  return common::PruneCheckpoints(options.checkpoint_dir, options.keep_checkpoints);
}

// Restores every ps from the newest checkpoint that passes its checks; an
// unusable one is reported by name and the next older is tried. Returns the
// step restored, or nullopt when there is no checkpoint.
absl::StatusOr<std::optional<int64_t>> RestoreLatest(std::vector<PsPeer>& ps,
                                                     const ChiefOptions& options) {
  for (const std::string& dir : common::ListCheckpoints(options.checkpoint_dir)) {
    absl::StatusOr<common::CheckpointReport> report = common::InspectCheckpoint(dir);
    if (!report.ok()) {
      spdlog::warn("checkpoint {} is unusable, trying an older one: {}", dir,
                   report.status().message());
      continue;
    }
    PST_ASSIGN_OR_RETURN(proto::CheckpointManifest manifest, common::ReadManifest(dir));
    const absl::Time start = absl::Now();
    std::vector<proto::RestoreResponse> restored(ps.size());
    PST_RETURN_IF_ERROR(ForEachPs(ps.size(), [&](size_t i) -> absl::Status {
      grpc::ClientContext context;
      common::SetDeadline(&context, absl::Minutes(10));
      proto::RestoreRequest request;
      request.set_directory(dir);
      *request.mutable_manifest() = manifest;
      grpc::Status s = ps[i].stub->Restore(&context, request, &restored[i]);
      if (!s.ok()) {
        return absl::Status(common::FromGrpcStatus(s).code(),
                            absl::StrCat("restoring ps ", i, " at ", ps[i].address, " from ", dir,
                                         ": ", s.error_message()));
      }
      return absl::OkStatus();
    }));
    const double secs = absl::ToDoubleSeconds(absl::Now() - start);
    spdlog::info(
        "restored from {} (step {}, written by {} ps, loaded onto {}): every ps read the "
        "{:.1f} MB checkpoint in {:.2f} s ({:.0f} MB/s each)",
        dir, manifest.global_step(), manifest.shards_size(), ps.size(), report->total_bytes / 1e6,
        secs, secs > 0 ? report->total_bytes / 1e6 / secs : 0.0);
    return std::optional<int64_t>(manifest.global_step());
  }
  return std::optional<int64_t>();
}

struct EvalResult {
  nlohmann::json metrics;   // test_accuracy/test_loss, or test_auc/test_logloss
  std::string line;         // for the log
  int64_t global_step = 0;  // updates applied to the dense variables
};

absl::StatusOr<EvalResult> Evaluate(const proto::ClusterState& state, const ChiefOptions& options) {
  PST_ASSIGN_OR_RETURN(std::vector<worker::ModelVariable> variables,
                       worker::ModelVariables(options.training));
  const std::vector<std::string> addresses(state.ps_addresses().begin(),
                                           state.ps_addresses().end());
  PST_ASSIGN_OR_RETURN(
      std::unique_ptr<worker::PsClient> client,
      worker::PsClient::Create(state.plan(), worker::DenseNames(variables),
                               worker::MakeGrpcPsTransport(addresses, options.timing.rpc_timeout),
                               -1, 0));
  EvalResult result;
  if (options.training.model() == "wide_deep") {
    PST_ASSIGN_OR_RETURN(worker::CtrDataset held_out,
                         worker::LoadCtrSplit(options.training, /*held_out=*/true, 0, 1));
    PST_ASSIGN_OR_RETURN(worker::CtrEval eval,
                         worker::EvaluateWideDeep(options.training, held_out, client.get()));
    result.metrics = {
        {"test_auc", eval.auc}, {"test_logloss", eval.logloss}, {"test_examples", eval.examples}};
    result.line = absl::StrFormat("test AUC %.4f, test log-loss %.4f on %d held-out example(s)",
                                  eval.auc, eval.logloss, eval.examples);
    result.global_step = eval.version;
    return result;
  }
  PST_ASSIGN_OR_RETURN(worker::MlpConfig mlp_config, worker::MlpConfigFor(options.training));
  worker::Values params;
  PST_ASSIGN_OR_RETURN(result.global_step, client->Pull(&params));
  PST_ASSIGN_OR_RETURN(worker::Dataset test,
                       worker::LoadFashionMnist(options.data_dir, worker::Split::kTest));
  worker::Mlp model(mlp_config);
  PST_ASSIGN_OR_RETURN(
      worker::Mlp::Eval eval,
      model.Evaluate(params, test.features.data(), test.labels.data(), test.num_examples));
  result.metrics = {{"test_accuracy", eval.accuracy}, {"test_loss", eval.loss}};
  result.line = absl::StrFormat("test accuracy %.4f, test loss %.4f", eval.accuracy, eval.loss);
  return result;
}

absl::Status WriteSummary(const std::string& path, const nlohmann::json& summary) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << summary.dump(2) << "\n";
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunChief(const ChiefOptions& options, const common::StopSignal& stop) {
  const absl::Time job_start = absl::Now();
  const common::ClusterSpec& cluster = options.tf.cluster;
  const common::Timing& timing = options.timing;

  // Plan.
  PST_ASSIGN_OR_RETURN(proto::PlacementPlan plan,
                       worker::BuildPlan(options.training, static_cast<int>(cluster.ps.size())));
  proto::ClusterState initial;
  *initial.mutable_plan() = plan;
  for (const std::string& address : cluster.ps) initial.add_ps_addresses(address);
  initial.set_num_workers(static_cast<int>(cluster.worker.size()));
  *initial.mutable_training() = options.training;
  proto::SyncConfig* sync = initial.mutable_training()->mutable_sync();
  sync->set_num_workers(static_cast<int>(cluster.worker.size()));
  if (sync->replicas_to_aggregate() > sync->num_workers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--replicas_to_aggregate=", sync->replicas_to_aggregate(), " exceeds the ",
                     sync->num_workers(), " worker(s) in the cluster"));
  }
  const int quorum =
      sync->replicas_to_aggregate() > 0 ? sync->replicas_to_aggregate() : sync->num_workers();
  spdlog::info("mode {}{}", absl::AsciiStrToLower(proto::SyncMode_Name(sync->mode())),
               sync->mode() == proto::SYNC ? absl::StrCat(": ", quorum, " of ", sync->num_workers(),
                                                          " gradients averaged per step")
               : sync->mode() == proto::SSP ? absl::StrCat(": staleness ", sync->staleness())
                                            : std::string());
  const std::vector<int64_t> bytes = common::BytesPerPs(plan);
  spdlog::info("placement ({}): {} variable(s) over {} ps, bytes per ps: [{}]", plan.policy(),
               plan.variables_size(), plan.num_ps(), absl::StrJoin(bytes, ", "));

  // Serve the coordinator from the start, so workers can find it; they are
  // told to retry until the variables exist.
  Coordinator coordinator(initial, timing.peer_timeout);
  GrpcCoordinatorService service(&coordinator);
  PST_ASSIGN_OR_RETURN(std::unique_ptr<grpc::Server> server,
                       common::StartServer(cluster.CoordinatorAddress(), {&service}));
  spdlog::info("coordinator serving on {}", cluster.CoordinatorAddress());

  std::vector<PsPeer> ps(cluster.ps.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    ps[i].address = cluster.ps[i];
    ps[i].stub = proto::ParameterServer::NewStub(common::MakeChannel(cluster.ps[i]));
  }

  absl::Status status = [&]() -> absl::Status {
    // Create and initialize the variables, on every ps in parallel.
    const absl::Time deadline = absl::Now() + timing.startup_timeout;
    std::vector<absl::Status> created(ps.size());
    {
      std::vector<std::thread> threads;
      for (size_t i = 0; i < ps.size(); ++i) {
        threads.emplace_back([&, i] {
          proto::CreateVariablesRequest request;
          *request.mutable_optimizer() = options.training.optimizer();
          *request.mutable_sync() = initial.training().sync();
          for (const auto& entry : plan.variables()) {
            if (entry.ps_index() == static_cast<int>(i)) *request.add_variables() = entry.spec();
          }
          created[i] = CreateOnPs(&ps[i], request, deadline, stop);
        });
      }
      for (std::thread& t : threads) t.join();
    }
    for (const absl::Status& s : created) PST_RETURN_IF_ERROR(s);
    for (PsPeer& p : ps) {
      PST_ASSIGN_OR_RETURN(proto::HealthResponse health, ProbePs(&p, absl::Seconds(5)));
      p.incarnation = health.incarnation();
      p.last_ok = absl::Now();
      spdlog::info("{} at {} holds {} variable(s), {} element(s)", health.task(), p.address,
                   health.num_variables(), health.num_elements());
    }
    int64_t last_saved_step = 0;
    if (!options.checkpoint_dir.empty()) {
      PST_ASSIGN_OR_RETURN(std::optional<int64_t> step, RestoreLatest(ps, options));
      if (step.has_value()) last_saved_step = *step;
    }
    coordinator.SetPhase(proto::PHASE_RUNNING);
    spdlog::info("variables initialized; waiting for {} worker(s)", cluster.worker.size());
    absl::Time last_save_time = absl::Now();

    // Watch until every worker is done.
    const absl::Time running_since = absl::Now();
    std::vector<int> active;  // workers still training, as last told to the ps
    absl::Time next_log = running_since + timing.log_every;
    for (;;) {
      stop.WaitFor(timing.heartbeat_interval);
      const absl::Time now = absl::Now();
      if (stop.stopped()) {
        coordinator.RequestStop(stop.reason());
        coordinator.WaitAllDone(absl::Seconds(5));
        return absl::CancelledError(stop.reason());
      }
      const Coordinator::Snapshot snap = coordinator.Check(now);
      if (snap.all_done) break;
      if (!options.checkpoint_dir.empty() &&
          ((options.save_steps > 0 && snap.global_step >= last_saved_step + options.save_steps) ||
           (options.save_secs > 0 && now - last_save_time >= absl::Seconds(options.save_secs)))) {
        PST_RETURN_IF_ERROR(SaveCheckpoint(ps, options, coordinator.State(), snap.global_step));
        last_saved_step = snap.global_step;
        last_save_time = absl::Now();
      }
      // A worker that finished or left no longer counts: lower the SYNC
      // quorum and drop it from SSP's slowest clock, so nobody waits for it.
      if (snap.active != active) {
        active = snap.active;
        proto::MembershipRequest membership;
        for (int w : active) membership.add_active_workers(w);
        membership.set_replicas_to_aggregate(quorum);
        for (PsPeer& p : ps) {
          grpc::ClientContext context;
          common::SetDeadline(&context, absl::Seconds(5));
          proto::MembershipResponse response;
          grpc::Status s = p.stub->SetMembership(&context, membership, &response);
          if (!s.ok()) {
            spdlog::warn("could not update membership on {}: {}", p.address, s.error_message());
          }
        }
        if (initial.training().sync().mode() != proto::ASYNC) {
          spdlog::info("{} worker(s) still training; sync quorum now {}", active.size(),
                       std::max<size_t>(1, std::min<size_t>(quorum, active.size())));
        }
      }
      if (!snap.silent.empty()) {
        return absl::UnavailableError(absl::StrCat("worker(s) ", absl::StrJoin(snap.silent, ", "),
                                                   " sent no heartbeat for ",
                                                   absl::FormatDuration(timing.peer_timeout)));
      }
      if (snap.registered < static_cast<int>(cluster.worker.size()) &&
          now - running_since > timing.startup_timeout) {
        return absl::DeadlineExceededError(
            absl::StrCat("only ", snap.registered, " of ", cluster.worker.size(),
                         " worker(s) registered within --startup_timeout_s"));
      }
      for (size_t i = 0; i < ps.size(); ++i) {
        absl::StatusOr<proto::HealthResponse> health =
            ProbePs(&ps[i], timing.heartbeat_interval + absl::Seconds(1));
        if (health.ok() && health->incarnation() != ps[i].incarnation) {
          return absl::DataLossError(
              absl::StrCat("ps ", i, " at ", ps[i].address, " restarted and lost its variables"));
        }
        if (health.ok()) {
          ps[i].last_ok = now;
        } else if (now - ps[i].last_ok > timing.peer_timeout) {
          return absl::UnavailableError(absl::StrCat(
              "ps ", i, " at ", ps[i].address, " is unreachable: ", health.status().message()));
        }
      }
      if (now >= next_log) {
        next_log = now + timing.log_every;
        const double secs = absl::ToDoubleSeconds(now - running_since);
        spdlog::info("step {} | epoch {} | loss {:.4f} | {:.0f} examples/s | workers {}/{} done",
                     snap.global_step, snap.epoch + 1, snap.loss,
                     secs > 0 ? snap.examples / secs : 0.0, snap.done, cluster.worker.size());
      }
    }
    const double train_secs = absl::ToDoubleSeconds(absl::Now() - running_since);
    const Coordinator::Snapshot final_snap = coordinator.Check(absl::Now());
    if (final_snap.left_early == static_cast<int>(cluster.worker.size())) {
      return absl::AbortedError("every worker left before finishing; see their logs");
    }

    PST_ASSIGN_OR_RETURN(EvalResult eval, Evaluate(coordinator.State(), options));
    if (!options.checkpoint_dir.empty()) {
      PST_RETURN_IF_ERROR(SaveCheckpoint(ps, options, coordinator.State(), eval.global_step));
    }
    const double examples_per_sec = train_secs > 0 ? final_snap.examples / train_secs : 0;
    spdlog::info("done: {}, global step {}, {:.0f} examples/s, {:.1f} s training", eval.line,
                 eval.global_step, examples_per_sec, train_secs);
    // Rows each ps created for hash embeddings (0 without them), and the
    // training-mode figures. Every push reaches each ps holding dense
    // variables, so counts are taken from the ps that saw the most.
    std::vector<int64_t> hash_rows;
    int64_t applied = 0, staleness_sum = 0, staleness_max = 0, stale_dropped = 0, duplicates = 0,
            max_clock_gap = 0;
    double parked_seconds = 0;
    for (PsPeer& p : ps) {
      absl::StatusOr<proto::HealthResponse> health = ProbePs(&p, absl::Seconds(5));
      hash_rows.push_back(health.ok() ? health->hash_rows() : -1);
      if (!health.ok()) continue;
      if (health->gradients_applied() > applied) {
        applied = health->gradients_applied();
        staleness_sum = health->staleness_sum();
      }
      staleness_max = std::max(staleness_max, health->staleness_max());
      stale_dropped = std::max(stale_dropped, health->stale_dropped());
      duplicates = std::max(duplicates, health->duplicates_ignored());
      max_clock_gap = std::max(max_clock_gap, health->max_clock_gap());
      parked_seconds = std::max(parked_seconds, health->parked_seconds());
    }
    const double mean_staleness = applied > 0 ? double(staleness_sum) / applied : 0.0;
    spdlog::info(
        "mode {}: staleness mean {:.2f} max {}, {} stale gradient(s) dropped, {} "
        "duplicate(s) ignored, {:.1f} s waited at barriers",
        absl::AsciiStrToLower(proto::SyncMode_Name(initial.training().sync().mode())),
        mean_staleness, staleness_max, stale_dropped, duplicates, parked_seconds);
    if (options.training.model() == "wide_deep" && options.training.buckets_per_field() == 0) {
      spdlog::info("hash embedding rows per ps: [{}]", absl::StrJoin(hash_rows, ", "));
    }
    if (!options.summary_json.empty()) {
      nlohmann::json summary = eval.metrics;
      summary["hash_rows_per_ps"] = hash_rows;
      summary["mode"] =
          absl::AsciiStrToLower(proto::SyncMode_Name(initial.training().sync().mode()));
      summary["staleness_mean"] = mean_staleness;
      summary["staleness_max"] = staleness_max;
      summary["stale_dropped"] = stale_dropped;
      summary["duplicates_ignored"] = duplicates;
      summary["barrier_wait_seconds"] = parked_seconds;
      summary["max_clock_gap"] = max_clock_gap;
      summary.update({
          {"model", options.training.model()},
          {"global_step", eval.global_step},
          {"pushes", final_snap.pushes},
          {"examples", final_snap.examples},
          {"examples_per_sec", examples_per_sec},
          {"train_seconds", train_secs},
          {"wall_seconds", absl::ToDoubleSeconds(absl::Now() - job_start)},
          {"num_workers", cluster.worker.size()},
          {"num_ps", cluster.ps.size()},
      });
      PST_RETURN_IF_ERROR(WriteSummary(options.summary_json, summary));
      spdlog::info("wrote {}", options.summary_json);
    }
    return absl::OkStatus();
  }();

  coordinator.SetPhase(proto::PHASE_DONE);
  coordinator.RequestStop(status.ok() ? "job done" : std::string(status.message()));
  ShutdownAllPs(ps, status.ok() ? "job done" : absl::StrCat("job failed: ", status.message()));
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  return status;
}

}  // namespace pst::chief
