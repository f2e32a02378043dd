#include "ps_server/grpc_ps_service.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <new>
#include <thread>
#include <type_traits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint_format.h"
#include "common/grpc_caller.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/safe_file.h"
#include "common/shard_reader.h"
#include "common/status_macros.h"
#include "common/wire_codec.h"

namespace pst::ps {
namespace {

// Runs `fn` (returning absl::Status) and finishes the call with its result.
// Nothing a library throws escapes into gRPC.
template <typename Fn>
grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* context, Fn&& fn) {
  absl::Status status;
  try {
    status = fn();
  } catch (const std::bad_alloc&) {
    status = absl::ResourceExhaustedError("ps is out of memory for this request");
  } catch (const std::exception& e) {
    status = absl::InternalError(absl::StrCat("ps: ", e.what()));
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(common::ToGrpcStatus(status));
  return reactor;
}

// A call that may be parked in the store until it can be served: finished
// by the store's callback, or by a cancellation (deadline, client gone,
// server shutdown) if that comes first. Deletes itself when gRPC is done.
class ParkedCall : public grpc::ServerUnaryReactor {
 public:
  explicit ParkedCall(VariableStore* store) : store_(store) {}

  // `park` hands the store the completion callback and returns its ticket.
  // The callback may run (and finish the call) before `park` returns, on this
  // or another thread; the reactor stays alive until both Start and OnDone
  // have happened.
  void Start(const std::function<uint64_t(VariableStore::Done)>& park) {
    const uint64_t ticket = park(
        [this](absl::Status status) { Finish(common::ToGrpcStatus(BeforeFinish(status))); });
    bool delete_now;
    {
      absl::MutexLock lock(&mu_);
      ticket_ = ticket;
      if (cancelled_ && ticket_ != 0 && store_->CancelWaiter(ticket_)) {
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled while waiting"));
      }
      started_ = true;
      delete_now = done_;
    }
    if (delete_now) delete this;
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (ticket_ != 0 && store_->CancelWaiter(ticket_)) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled while waiting"));
    }
  }
  void OnDone() override {
    bool delete_now;
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
      delete_now = started_;
    }
    if (delete_now) delete this;
  }

 protected:
  // Runs when the store has answered, before the call finishes with the
  // status it returns.
  virtual absl::Status BeforeFinish(absl::Status status) { return status; }

 private:
  VariableStore* const store_;
  absl::Mutex mu_;
  uint64_t ticket_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

// A Pull or PushPull received as raw bytes: it owns the parsed request and
// the response, and answers with the values' payloads moved into slices.
template <typename Request>
class RawPullCall final : public ParkedCall {
 public:
  RawPullCall(VariableStore* store, grpc::ByteBuffer* response_bytes)
      : ParkedCall(store), response_bytes_(response_bytes) {}

  Request* request() { return &request_; }
  proto::PullResponse* response() { return &response_; }

 private:
  absl::Status BeforeFinish(absl::Status status) override {
    if (status.ok()) *response_bytes_ = common::EncodePullResponse(&response_);
    return status;
  }

  Request request_;
  proto::PullResponse response_;
  grpc::ByteBuffer* const response_bytes_;
};

// Parses `bytes` into the call's request and parks it with `park`, or
// finishes it at once with the parse error. A PushPull's gradients stay in
// the receive slices (`gradients`, alive until `park` returns).
template <typename Request>
grpc::ServerUnaryReactor* StartRawPull(
    VariableStore* store, const grpc::ByteBuffer* bytes, grpc::ByteBuffer* response,
    const std::function<uint64_t(RawPullCall<Request>*, const VariableStore::Payloads*,
                                 VariableStore::Done)>& park) {
  auto* call = new RawPullCall<Request>(store, response);
  common::ReceivedGradients gradients;
  absl::Status parsed;
  if constexpr (std::is_same_v<Request, proto::PushPullRequest>) {
    parsed = common::DecodePushPull(*bytes, call->request(), &gradients);
  } else {
    grpc::ByteBuffer request_bytes(*bytes);  // shares the slices
    parsed = common::ParseMessage(&request_bytes, call->request());
  }
  call->Start([&](VariableStore::Done done) -> uint64_t {
    if (!parsed.ok()) {
      done(parsed);
      return 0;
    }
    return park(call, &gradients.payloads, std::move(done));
  });
  return call;
}

}  // namespace

GrpcPsService::GrpcPsService(VariableStore* store, int ps_index, std::string task,
                             uint64_t incarnation, common::StopSignal* stop,
                             std::string checkpoint_dir)
    : store_(store),
      ps_index_(ps_index),
      task_(std::move(task)),
      incarnation_(incarnation),
      stop_(stop),
      checkpoint_dir_(std::move(checkpoint_dir)),
      background_(kMaxBackgroundJobs) {
  const std::string service = proto::ParameterServer::service_full_name();
  BoundRequestSize(&GrpcPsService::CreateVariables, service, "CreateVariables");
  BoundRequestSize(&GrpcPsService::SetMembership, service, "SetMembership");
  BoundRequestSize(&GrpcPsService::Save, service, "Save");
  BoundRequestSize(&GrpcPsService::Restore, service, "Restore");
  BoundRequestSize(&GrpcPsService::Health, service, "Health");
  BoundRequestSize(&GrpcPsService::Shutdown, service, "Shutdown");
  TouchChief();
  if (const char* delay = std::getenv(kSaveDelayEnv); delay != nullptr) {
    int ms = 0;
    if (absl::SimpleAtoi(delay, &ms) && ms > 0) save_delay_ = absl::Milliseconds(ms);
  }
}

std::vector<std::string> GrpcPsService::RawMethodNames() {
  std::vector<std::string> names;
  for (const char* method : {"Pull", "Push", "PushPull"}) {
    names.push_back(absl::StrCat("/", proto::ParameterServer::service_full_name(), "/", method));
  }
  return names;
}

void GrpcPsService::TouchChief() {
  last_chief_contact_ns_.store(absl::ToUnixNanos(absl::Now()), std::memory_order_relaxed);
}

absl::Time GrpcPsService::last_chief_contact() const {
  return absl::FromUnixNanos(last_chief_contact_ns_.load(std::memory_order_relaxed));
}

grpc::ServerUnaryReactor* GrpcPsService::CreateVariables(
    grpc::CallbackServerContext* context, const proto::CreateVariablesRequest* request,
    proto::CreateVariablesResponse* response) {
  const common::Caller caller = common::CallerOf(*context);
  if (absl::Status allowed = common::RequireChief(caller, "CreateVariables"); !allowed.ok()) {
    return FinishWith(context, [&] { return allowed; });
  }
  TouchChief();
  return FinishWith(context, [&]() -> absl::Status {
    absl::StatusOr<int> created = store_->Create(*request);
    if (!created.ok()) return created.status();
    response->set_created(*created);
    if (*created > 0) spdlog::info("created {} variable(s)", *created);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* GrpcPsService::Pull(grpc::CallbackServerContext* context,
                                              const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response) {
  return StartRawPull<proto::PullRequest>(
      store_, request, response,
      [this, caller = common::CallerOf(*context)](auto* call, const VariableStore::Payloads*,
                                                  VariableStore::Done done) -> uint64_t {
        if (absl::Status allowed =
                common::RequireChiefOrWorker(caller, call->request()->worker_index(), "Pull");
            !allowed.ok()) {
          done(allowed);
          return 0;
        }
        return store_->PullWhenReady(call->request(), call->response(), std::move(done));
      });
}

grpc::ServerUnaryReactor* GrpcPsService::Push(grpc::CallbackServerContext* context,
                                              const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response) {
  return FinishWith(context, [&]() -> absl::Status {
    proto::PushRequest push;
    common::ReceivedGradients gradients;
    PST_RETURN_IF_ERROR(common::DecodePush(*request, &push, &gradients));
    PST_RETURN_IF_ERROR(
        common::RequireWorker(common::CallerOf(*context), push.worker_index(), "Push"));
    proto::PushResponse pushed;
    PST_RETURN_IF_ERROR(store_->Push(push, &pushed, &gradients.payloads));
    *response = common::SerializeMessage(pushed);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* GrpcPsService::PushPull(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  return StartRawPull<proto::PushPullRequest>(
      store_, request, response,
      [this, caller = common::CallerOf(*context)](auto* call,
                                                  const VariableStore::Payloads* payloads,
                                                  VariableStore::Done done) -> uint64_t {
        if (absl::Status allowed =
                common::RequireWorker(caller, call->request()->push().worker_index(), "PushPull");
            !allowed.ok()) {
          done(allowed);
          return 0;
        }
        return store_->PushPullWhenReady(call->request(), call->response(), std::move(done),
                                         payloads);
      });
}

grpc::ServerUnaryReactor* GrpcPsService::PullRows(grpc::CallbackServerContext* context,
                                                  const proto::PullRowsRequest* request,
                                                  proto::PullRowsResponse* response) {
  return FinishWith(context, [&]() -> absl::Status {
    PST_RETURN_IF_ERROR(common::RequireChiefOrWorker(common::CallerOf(*context), -1, "PullRows"));
    return store_->PullRows(*request, response);
  });
}

grpc::ServerUnaryReactor* GrpcPsService::PushRows(grpc::CallbackServerContext* context,
                                                  const proto::PushRowsRequest* request,
                                                  proto::PushRowsResponse* response) {
  return FinishWith(context, [&]() -> absl::Status {
    PST_RETURN_IF_ERROR(
        common::RequireWorker(common::CallerOf(*context), request->worker_index(), "PushRows"));
    return store_->PushRows(*request, response);
  });
}

grpc::ServerUnaryReactor* GrpcPsService::SetMembership(grpc::CallbackServerContext* context,
                                                       const proto::MembershipRequest* request,
                                                       proto::MembershipResponse* response) {
  const common::Caller caller = common::CallerOf(*context);
  if (absl::Status allowed = common::RequireChief(caller, "SetMembership"); !allowed.ok()) {
    return FinishWith(context, [&] { return allowed; });
  }
  TouchChief();
  return FinishWith(context, [&] { return store_->SetMembership(*request); });
}

absl::StatusOr<std::string> GrpcPsService::CheckpointPath(const std::string& name) const {
  if (checkpoint_dir_.empty()) {
    return absl::FailedPreconditionError(
        "this ps has no --checkpoint_dir: it neither saves nor restores checkpoints (give every "
        "ps and the chief the same shared directory)");
  }
  PST_RETURN_IF_ERROR(common::CheckCheckpointName(name));
  return absl::StrCat(checkpoint_dir_, "/", name);
}

grpc::ServerUnaryReactor* GrpcPsService::Save(grpc::CallbackServerContext* context,
                                              const proto::SaveRequest* request,
                                              proto::SaveResponse* response) {
  if (absl::Status allowed = common::RequireChief(common::CallerOf(*context), "Save");
      !allowed.ok()) {
    return FinishWith(context, [&] { return allowed; });
  }
  TouchChief();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status started = [&]() -> absl::Status {
    const proto::SaveRequest::Phase phase = request->phase();
    if (phase == proto::SaveRequest::DISCARD) {
      absl::MutexLock lock(&kept_mu_);
      kept_ = nullptr;
      reactor->Finish(grpc::Status::OK);
      return absl::OkStatus();
    }
    std::string dir;
    if (phase != proto::SaveRequest::SNAPSHOT) {
      PST_ASSIGN_OR_RETURN(dir, CheckpointPath(request->checkpoint()));
    } else if (checkpoint_dir_.empty()) {
      PST_RETURN_IF_ERROR(CheckpointPath("").status());  // the same refusal
    }
    if (request->num_ps() < 1 || ps_index_ >= request->num_ps()) {
      return absl::InvalidArgumentError(absl::StrCat("save of a job of ", request->num_ps(),
                                                     " ps sent to ps ", ps_index_));
    }
    if (request->incarnation() != incarnation_) {
      // Restarted since the chief last looked: the variables it would save
      // are not the job's (none, or not yet restored).
      return absl::FailedPreconditionError(absl::StrFormat(
          "this ps is incarnation %016x, not %016x: it restarted and lost its variables, and "
          "saves nothing until the chief has restored it",
          incarnation_, request->incarnation()));
    }
    const std::string path =
        dir.empty() ? std::string()
                    : absl::StrCat(dir, "/", common::ShardFileName(ps_index_, request->num_ps()));
    return background_.Start(
        "save",
        [this, dir, path, phase, response]() -> absl::Status {
          std::shared_ptr<const std::vector<common::ShardRecord>> records;
          const int64_t pushes_before = store_->GetStats().pushes_applied;
          if (phase == proto::SaveRequest::WRITE) {
            absl::MutexLock lock(&kept_mu_);
            if (kept_ == nullptr) {
              return absl::FailedPreconditionError(
                  "WRITE without a SNAPSHOT kept: this ps holds no snapshot to write");
            }
            records = kept_;
          } else {
            records = TakeSnapshot(response);
            if (phase == proto::SaveRequest::SNAPSHOT) {
              absl::MutexLock lock(&kept_mu_);
              kept_ = records;  // replaces an older one never written
              return absl::OkStatus();
            }
          }
          PST_RETURN_IF_ERROR(common::MakeDirectory(dir));
          PST_RETURN_IF_ERROR(common::FsyncDirectory(checkpoint_dir_));
          // Training comes first: on a busy machine the write takes the CPU
          // time training leaves (Linux applies a nice value to one thread).
          setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
          if (save_delay_ > absl::ZeroDuration()) {
            // Fault injection for tests: a save slow enough to be killed during.
            spdlog::info("writing {} after a delay of {} ({})", path,
                         absl::FormatDuration(save_delay_), kSaveDelayEnv);
            absl::SleepFor(save_delay_);
          }
          const absl::Time write_start = absl::Now();
          PST_RETURN_IF_ERROR(common::WriteShardFile(path, *records, response->mutable_shard()));
          response->mutable_shard()->set_ps_index(ps_index_);
          response->set_write_seconds(absl::ToDoubleSeconds(absl::Now() - write_start));
          response->set_pushes_during(store_->GetStats().pushes_applied - pushes_before);
          if (phase == proto::SaveRequest::WRITE) {
            absl::MutexLock lock(&kept_mu_);
            if (kept_ == records) kept_ = nullptr;
          }
          spdlog::info("saved {} ({} bytes) in {:.3f} s", path, response->shard().bytes(),
                       response->write_seconds());
          return absl::OkStatus();
        },
        [reactor](absl::Status status) { reactor->Finish(common::ToGrpcStatus(status)); });
  }();
  if (!started.ok()) reactor->Finish(common::ToGrpcStatus(started));
  return reactor;
}

std::shared_ptr<const std::vector<common::ShardRecord>> GrpcPsService::TakeSnapshot(
    proto::SaveResponse* response) {
  const absl::Time start = absl::Now();
  absl::Duration held;
  VariableStore::Cut cut;
  auto records = std::make_shared<const std::vector<common::ShardRecord>>(
      store_->Snapshot(&held, &cut));
  response->set_snapshot_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  response->set_locked_seconds(absl::ToDoubleSeconds(held));
  for (proto::WorkerCut& w : cut.workers) *response->add_cut() = std::move(w);
  response->set_sync_pending(cut.sync_pending);
  response->set_max_version(cut.max_version);
  response->set_holds_dense(cut.holds_dense);
  return records;
}

void GrpcPsService::StopBackgroundWork() { background_.Stop(); }

absl::Status GrpcPsService::RestoreFrom(const std::string& dir,
                                        const proto::RestoreRequest& request,
                                        proto::RestoreResponse* response) {
  std::unique_ptr<VariableStore::Restorer> restorer = store_->BeginRestore();
  int64_t bytes = 0;
  for (const proto::CheckpointShard& shard : request.manifest().shards()) {
    const std::string path = absl::StrCat(dir, "/", shard.file());
    PST_ASSIGN_OR_RETURN(std::unique_ptr<common::ShardReader> reader,
                         common::ShardReader::Open(path));
    if (reader->file_bytes() != shard.bytes()) {
      return absl::DataLossError(absl::StrCat("checkpoint shard ", path, " is ",
                                              reader->file_bytes(), " bytes, the manifest says ",
                                              shard.bytes()));
    }
    while (true) {
      common::ShardRecord record;
      // Records of variables this ps does not hold are checked, not kept.
      PST_ASSIGN_OR_RETURN(const bool more,
                           reader->Next(&record, [&](const proto::VariableSpec& spec) {
                             return restorer->Holds(spec);
                           }));
      if (!more) break;
      if (restorer->Holds(record.spec)) PST_RETURN_IF_ERROR(restorer->Absorb(record));
    }
    if (reader->file_crc32() != shard.crc32()) {
      return absl::DataLossError(absl::StrCat("checkpoint shard ", path, " has crc32 ",
                                              reader->file_crc32(), ", the manifest says ",
                                              shard.crc32()));
    }
    bytes += reader->file_bytes();
  }
  PST_RETURN_IF_ERROR(restorer->Commit(request.generation()));
  response->set_bytes_read(bytes);
  response->set_variables_restored(store_->GetStats().num_variables);
  spdlog::info("restored {} variable(s) from {} ({} bytes read), generation {}",
               response->variables_restored(), dir, bytes, request.generation());
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* GrpcPsService::Restore(grpc::CallbackServerContext* context,
                                                 const proto::RestoreRequest* request,
                                                 proto::RestoreResponse* response) {
  if (absl::Status allowed = common::RequireChief(common::CallerOf(*context), "Restore");
      !allowed.ok()) {
    return FinishWith(context, [&] { return allowed; });
  }
  TouchChief();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status started = [&]() -> absl::Status {
    PST_ASSIGN_OR_RETURN(const std::string dir, CheckpointPath(request->checkpoint()));
    PST_RETURN_IF_ERROR(common::CheckManifestShards(request->manifest()));
    return background_.Start(
        "restore",
        [this, dir, request, response] { return RestoreFrom(dir, *request, response); },
        [reactor](absl::Status status) { reactor->Finish(common::ToGrpcStatus(status)); });
  }();
  if (!started.ok()) reactor->Finish(common::ToGrpcStatus(started));
  return reactor;
}

grpc::ServerUnaryReactor* GrpcPsService::Health(grpc::CallbackServerContext* context,
                                                const proto::HealthRequest* request,
                                                proto::HealthResponse* response) {
  const common::Caller caller = common::CallerOf(*context);
  if (absl::Status allowed = common::RequireChiefOrWorker(caller, -1, "Health"); !allowed.ok()) {
    return FinishWith(context, [&] { return allowed; });
  }
  // Only the chief's word keeps a ps waiting for it (--chief_timeout_s).
  if (request->caller() == "chief" && common::RequireChief(caller, "").ok()) TouchChief();
  return FinishWith(context, [&] {
    VariableStore::Stats stats = store_->GetStats();
    response->set_task(task_);
    response->set_incarnation(incarnation_);
    response->set_num_variables(stats.num_variables);
    response->set_num_elements(stats.num_elements);
    response->set_pushes_applied(stats.pushes_applied);
    response->set_hash_rows(stats.hash_rows);
    response->set_nonfinite_skipped(stats.nonfinite_skipped);
    response->set_gradients_applied(stats.gradients_applied);
    response->set_staleness_sum(stats.staleness_sum);
    response->set_staleness_max(stats.staleness_max);
    response->set_stale_dropped(stats.stale_dropped);
    response->set_duplicates_ignored(stats.duplicates_ignored);
    response->set_parked_pulls(stats.parked_pulls);
    response->set_parked_seconds(stats.parked_seconds);
    response->set_max_clock_gap(stats.max_clock_gap);
    response->set_generation(stats.generation);
    response->set_max_version(stats.max_version);
    for (const auto& [worker, position] : stats.worker_positions) {
      (*response->mutable_worker_positions())[worker] = position;
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* GrpcPsService::Shutdown(grpc::CallbackServerContext* context,
                                                  const proto::ShutdownRequest* request,
                                                  proto::ShutdownResponse* response) {
  if (absl::Status allowed = common::RequireChief(common::CallerOf(*context), "Shutdown");
      !allowed.ok()) {
    spdlog::warn("refused a shutdown: {}", allowed.message());
    return FinishWith(context, [&] { return allowed; });
  }
  stop_->Stop(absl::StrCat("shutdown requested: ", request->reason()));
  return FinishWith(context, [] { return absl::OkStatus(); });
}

}  // namespace pst::ps
