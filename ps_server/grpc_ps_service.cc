#include "ps_server/grpc_ps_service.h"

#include <exception>
#include <memory>
#include <new>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "rpc/grpc_caller.h"
#include "rpc/grpc_status.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "rpc/wire_codec.h"

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
  reactor->Finish(rpc::ToGrpcStatus(status));
  return reactor;
}

// A completion that finishes `reactor` with its status.
PsNode::Done FinishOn(grpc::ServerUnaryReactor* reactor) {
  return [reactor](absl::Status status) { reactor->Finish(rpc::ToGrpcStatus(status)); };
}

// Runs `start`, which hands the call to PsNode with a completion that
// finishes `reactor`; finishes it with an error instead if a library throws
// first (the completion has not run then: nothing was applied).
template <typename Fn>
grpc::ServerUnaryReactor* StartOn(grpc::ServerUnaryReactor* reactor, Fn&& start) {
  try {
    start();
  } catch (const std::bad_alloc&) {
    reactor->Finish(
        rpc::ToGrpcStatus(absl::ResourceExhaustedError("ps is out of memory for this request")));
  } catch (const std::exception& e) {
    reactor->Finish(rpc::ToGrpcStatus(absl::InternalError(absl::StrCat("ps: ", e.what()))));
  }
  return reactor;
}

// A call that may be parked in the store until it can be served: finished
// by the store's callback, or by a cancellation (deadline, client gone,
// server shutdown) if that comes first. Deletes itself when gRPC is done.
class ParkedCall : public grpc::ServerUnaryReactor {
 public:
  ParkedCall() = default;

  // The store the call parks in; set by `park` (Start) before it returns.
  void UseStore(std::shared_ptr<VariableStore> store) { store_ = std::move(store); }

  // `park` hands the store the completion callback and returns its ticket.
  // The callback may run (and finish the call) before `park` returns, on this
  // or another thread; the reactor stays alive until both Start and OnDone
  // have happened.
  void Start(const std::function<uint64_t(VariableStore::Done)>& park) {
    const uint64_t ticket =
        park([this](absl::Status status) { Finish(rpc::ToGrpcStatus(BeforeFinish(status))); });
    bool delete_now;
    {
      absl::MutexLock lock(&mu_);
      ticket_ = ticket;
      if (cancelled_ && ticket_ != 0 && store_ != nullptr && store_->CancelWaiter(ticket_)) {
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
    if (ticket_ != 0 && store_ != nullptr && store_->CancelWaiter(ticket_)) {
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
  std::shared_ptr<VariableStore> store_;
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
  explicit RawPullCall(grpc::ByteBuffer* response_bytes) : response_bytes_(response_bytes) {}

  Request* request() { return &request_; }
  proto::PullResponse* response() { return &response_; }

 private:
  absl::Status BeforeFinish(absl::Status status) override {
    if (status.ok()) *response_bytes_ = rpc::EncodePullResponse(&response_);
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
    const grpc::ByteBuffer* bytes, grpc::ByteBuffer* response,
    const std::function<uint64_t(RawPullCall<Request>*, const VariableStore::Payloads*,
                                 VariableStore::Done)>& park) {
  auto* call = new RawPullCall<Request>(response);
  rpc::ReceivedGradients gradients;
  absl::Status parsed;
  if constexpr (std::is_same_v<Request, proto::PushPullRequest>) {
    parsed = rpc::DecodePushPull(*bytes, call->request(), &gradients);
  } else {
    grpc::ByteBuffer request_bytes(*bytes);  // shares the slices
    parsed = rpc::ParseMessage(&request_bytes, call->request());
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

namespace {

PsNode::Options WithStoreOptions(PsNode::Options node, const VariableStore& store) {
  node.store_options = store.options();
  return node;
}

}  // namespace

GrpcPsService::GrpcPsService(VariableStore* store, PsNode::Options node, common::StopSignal* stop,
                             const rpc::RpcSettings& settings)
    : store_(store),
      stop_(stop),
      security_(settings.security),
      node_(store, WithStoreOptions(std::move(node), *store)) {
  const std::string service = proto::ParameterServer::service_full_name();
  BoundRequestSize(&GrpcPsService::CreateVariables, service, "CreateVariables", settings.limits);
  BoundRequestSize(&GrpcPsService::SetMembership, service, "SetMembership", settings.limits);
  BoundRequestSize(&GrpcPsService::Save, service, "Save", settings.limits);
  BoundRequestSize(&GrpcPsService::Restore, service, "Restore", settings.limits);
  BoundRequestSize(&GrpcPsService::Health, service, "Health", settings.limits);
  BoundRequestSize(&GrpcPsService::Shutdown, service, "Shutdown", settings.limits);
  BoundRequestSize(&GrpcPsService::SetRoles, service, "SetRoles", settings.limits);
  TouchChief();
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
  const rpc::Caller caller = rpc::CallerOf(*context, security_);
  if (absl::Status allowed = rpc::RequireChief(caller, "CreateVariables"); !allowed.ok()) {
    return FinishWith(context, [&] { return allowed; });
  }
  TouchChief();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  return StartOn(reactor, [&] { node_.CreateVariables(request, response, FinishOn(reactor)); });
}

grpc::ServerUnaryReactor* GrpcPsService::Pull(grpc::CallbackServerContext* context,
                                              const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response) {
  return StartRawPull<proto::PullRequest>(
      request, response,
      [this, caller = rpc::CallerOf(*context, security_)](auto* call, const VariableStore::Payloads*,
                                                  VariableStore::Done done) -> uint64_t {
        if (absl::Status allowed =
                rpc::RequireChiefOrWorker(caller, call->request()->worker_index(), "Pull");
            !allowed.ok()) {
          done(allowed);
          return 0;
        }
        const auto& names = call->request()->names();
        std::shared_ptr<VariableStore> store = node_.StoreFor(names.empty() ? "" : names[0]);
        call->UseStore(store);
        return store->PullWhenReady(call->request(), call->response(), std::move(done));
      });
}

grpc::ServerUnaryReactor* GrpcPsService::Push(grpc::CallbackServerContext* context,
                                              const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response) {
  // The call's request and answer, alive until it finishes (a replicated
  // push finishes once its backup has it).
  struct Call {
    proto::PushRequest push;
    proto::PushResponse pushed;
  };
  auto call = std::make_shared<Call>();
  rpc::ReceivedGradients gradients;
  absl::Status status = rpc::DecodePush(*request, &call->push, &gradients);
  if (status.ok()) {
    status = rpc::RequireWorker(rpc::CallerOf(*context, security_), call->push.worker_index(), "Push");
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!status.ok()) {
    reactor->Finish(rpc::ToGrpcStatus(status));
    return reactor;
  }
  return StartOn(reactor, [&] {
    node_.Push(&call->push, &gradients.payloads, &call->pushed,
               [reactor, call, response](absl::Status s) {
                 if (s.ok()) *response = rpc::SerializeMessage(call->pushed);
                 reactor->Finish(rpc::ToGrpcStatus(s));
               });
  });
}

grpc::ServerUnaryReactor* GrpcPsService::PushPull(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  return StartRawPull<proto::PushPullRequest>(
      request, response,
      [this, caller = rpc::CallerOf(*context, security_)](auto* call,
                                                  const VariableStore::Payloads* payloads,
                                                  VariableStore::Done done) -> uint64_t {
        if (absl::Status allowed =
                rpc::RequireWorker(caller, call->request()->push().worker_index(), "PushPull");
            !allowed.ok()) {
          done(allowed);
          return 0;
        }
        std::shared_ptr<VariableStore> parked_in;
        const uint64_t ticket = node_.PushPull(call->request(), payloads, call->response(),
                                               std::move(done), &parked_in);
        call->UseStore(std::move(parked_in));
        return ticket;
      });
}

grpc::ServerUnaryReactor* GrpcPsService::PullRows(grpc::CallbackServerContext* context,
                                                  const proto::PullRowsRequest* request,
                                                  proto::PullRowsResponse* response) {
  if (absl::Status allowed =
          rpc::RequireChiefOrWorker(rpc::CallerOf(*context, security_), -1, "PullRows");
      !allowed.ok()) {
    return FinishWith(context, [&] { return allowed; });
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  return StartOn(reactor, [&] { node_.PullRows(request, response, FinishOn(reactor)); });
}

grpc::ServerUnaryReactor* GrpcPsService::PushRows(grpc::CallbackServerContext* context,
                                                  const proto::PushRowsRequest* request,
                                                  proto::PushRowsResponse* response) {
  if (absl::Status allowed =
          rpc::RequireWorker(rpc::CallerOf(*context, security_), request->worker_index(), "PushRows");
      !allowed.ok()) {
    return FinishWith(context, [&] { return allowed; });
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  return StartOn(reactor, [&] { node_.PushRows(request, response, FinishOn(reactor)); });
}

grpc::ServerUnaryReactor* GrpcPsService::SetMembership(grpc::CallbackServerContext* context,
                                                       const proto::MembershipRequest* request,
                                                       proto::MembershipResponse* response) {
  const rpc::Caller caller = rpc::CallerOf(*context, security_);
  if (absl::Status allowed = rpc::RequireChief(caller, "SetMembership"); !allowed.ok()) {
    return FinishWith(context, [&] { return allowed; });
  }
  TouchChief();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  return StartOn(reactor, [&] { node_.SetMembership(request, response, FinishOn(reactor)); });
}

grpc::ServerUnaryReactor* GrpcPsService::SetRoles(grpc::CallbackServerContext* context,
                                                  const proto::RolesRequest* request,
                                                  proto::RolesResponse* response) {
  if (absl::Status allowed = rpc::RequireChief(rpc::CallerOf(*context, security_), "SetRoles");
      !allowed.ok()) {
    return FinishWith(context, [&] { return allowed; });
  }
  TouchChief();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  return StartOn(reactor, [&] { node_.SetRoles(request, response, FinishOn(reactor)); });
}

grpc::ServerUnaryReactor* GrpcPsService::Replicate(grpc::CallbackServerContext* context,
                                                   const proto::ReplicateRequest* request,
                                                   proto::ReplicateResponse* response) {
  if (absl::Status allowed = rpc::RequirePs(rpc::CallerOf(*context, security_), "Replicate");
      !allowed.ok()) {
    return FinishWith(context, [&] { return allowed; });
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // The request lives until the call finishes, after the change is applied
  // (a change waiting for an earlier one is kept meanwhile).
  return StartOn(reactor, [&] {
    node_.Replicate(std::shared_ptr<const proto::ReplicateRequest>(request, [](auto*) {}),
                    FinishOn(reactor));
  });
}

grpc::ServerUnaryReactor* GrpcPsService::Save(grpc::CallbackServerContext* context,
                                              const proto::SaveRequest* request,
                                              proto::SaveResponse* response) {
  if (absl::Status allowed = rpc::RequireChief(rpc::CallerOf(*context, security_), "Save");
      !allowed.ok()) {
    return FinishWith(context, [&] { return allowed; });
  }
  TouchChief();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  node_.Save(request, response,
             [reactor](absl::Status status) { reactor->Finish(rpc::ToGrpcStatus(status)); });
  return reactor;
}

void GrpcPsService::StopBackgroundWork() { node_.StopBackgroundWork(); }

grpc::ServerUnaryReactor* GrpcPsService::Restore(grpc::CallbackServerContext* context,
                                                 const proto::RestoreRequest* request,
                                                 proto::RestoreResponse* response) {
  if (absl::Status allowed = rpc::RequireChief(rpc::CallerOf(*context, security_), "Restore");
      !allowed.ok()) {
    return FinishWith(context, [&] { return allowed; });
  }
  TouchChief();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  node_.Restore(request, response,
                [reactor](absl::Status status) { reactor->Finish(rpc::ToGrpcStatus(status)); });
  return reactor;
}

grpc::ServerUnaryReactor* GrpcPsService::Health(grpc::CallbackServerContext* context,
                                                const proto::HealthRequest* request,
                                                proto::HealthResponse* response) {
  const rpc::Caller caller = rpc::CallerOf(*context, security_);
  if (absl::Status allowed = rpc::RequireChiefOrWorker(caller, -1, "Health"); !allowed.ok()) {
    return FinishWith(context, [&] { return allowed; });
  }
  // Only the chief's word keeps a ps waiting for it (--chief_timeout_s).
  if (request->caller() == "chief" && rpc::RequireChief(caller, "").ok()) TouchChief();
  return FinishWith(context, [&] {
    node_.Health(*request, response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* GrpcPsService::Shutdown(grpc::CallbackServerContext* context,
                                                  const proto::ShutdownRequest* request,
                                                  proto::ShutdownResponse* response) {
  if (absl::Status allowed = rpc::RequireChief(rpc::CallerOf(*context, security_), "Shutdown");
      !allowed.ok()) {
    spdlog::warn("refused a shutdown: {}", allowed.message());
    return FinishWith(context, [&] { return allowed; });
  }
  stop_->Stop(absl::StrCat("shutdown requested: ", request->reason()));
  return FinishWith(context, [] { return absl::OkStatus(); });
}

}  // namespace pst::ps
