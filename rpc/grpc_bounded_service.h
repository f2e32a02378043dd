// Per-method request size limits for gRPC callback services.
//
// gRPC 1.51 limits the size of received messages per server only
// (GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH): servers apply no per-method service
// config, and a server interceptor sees a request only after it was parsed
// and cannot refuse it. So a service derived from BoundedService<Base>
// replaces the handlers of its control methods (BoundRequestSize) with one
// that looks at the received bytes' length before parsing them: a request
// over the control limit (ServerLimits::max_control_message_bytes, read at
// each call) is dropped unparsed and answered RESOURCE_EXHAUSTED naming the
// limit, and the service's method never runs. The bytes were received
// already (up to the server's kMaxMessageBytes): the limit saves the parse,
// the copy into a message and the method's work, not the receive.
#ifndef PST_RPC_GRPC_BOUNDED_SERVICE_H_
#define PST_RPC_GRPC_BOUNDED_SERVICE_H_

#include <grpc/byte_buffer.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/server_callback_handlers.h>

#include <functional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rpc/grpc_channel.h"
#include "google/protobuf/descriptor.h"

namespace pst::rpc {

namespace internal {

// The refusal the handler running on this thread answers instead of calling
// the service (set and cleared around one synchronous RunHandler).
inline thread_local const grpc::Status* pending_refusal = nullptr;

// A unary callback handler that refuses requests over the control limit
// before parsing them, and otherwise is gRPC's CallbackUnaryHandler.
// Thread-safe (gRPC calls it from any thread).
template <class Request, class Response>
class BoundedUnaryHandler final : public grpc::internal::MethodHandler {
 public:
  using GetReactor = std::function<grpc::ServerUnaryReactor*(grpc::CallbackServerContext*,
                                                             const Request*, Response*)>;

  // `limit`: the largest request it takes (0: kMaxMessageBytes only).
  BoundedUnaryHandler(std::string method, size_t limit, GetReactor get_reactor)
      : method_(std::move(method)),
        limit_(limit),
        inner_([get_reactor = std::move(get_reactor)](
                   grpc::CallbackServerContext* context, const Request* request,
                   Response* response) -> grpc::ServerUnaryReactor* {
          if (const grpc::Status* refusal = pending_refusal; refusal != nullptr) {
            pending_refusal = nullptr;
            grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
            reactor->Finish(*refusal);
            return reactor;
          }
          return get_reactor(context, request, response);
        }) {}

  void RunHandler(const HandlerParameter& param) override {
    if (param.status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
      inner_.RunHandler(param);
      return;
    }
    // Refused by Deserialize: gRPC's handler would answer any failed
    // request UNIMPLEMENTED, so it is told the request is fine and its
    // reactor getter (above) answers the refusal instead.
    const grpc::Status refusal = param.status;
    pending_refusal = &refusal;
    inner_.RunHandler(HandlerParameter(param.call, param.server_context, param.request,
                                       grpc::Status::OK, param.internal_data,
                                       param.call_requester));
    pending_refusal = nullptr;
  }

  void* Deserialize(grpc_call* call, grpc_byte_buffer* request, grpc::Status* status,
                    void** handler_data) override {
    const size_t limit = limit_;
    const size_t bytes = request == nullptr ? 0 : grpc_byte_buffer_length(request);
    if (limit == 0 || bytes <= limit) {
      return inner_.Deserialize(call, request, status, handler_data);
    }
    grpc_byte_buffer_destroy(request);
    // No payload: gRPC's handler only allocates the (empty) messages.
    void* empty = inner_.Deserialize(call, nullptr, status, handler_data);
    *status = grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat(method_, ": a request of ", bytes, " bytes is over this server's limit of ",
                     limit, " bytes for control calls (--grpc_max_control_message_mb)"));
    return empty;
  }

 private:
  const std::string method_;
  const size_t limit_;
  grpc::internal::CallbackUnaryHandler<Request, Response> inner_;
};

}  // namespace internal

// A generated callback service (`Base`, e.g. proto::Coordinator::
// CallbackService) whose derived class bounds the requests of its control
// methods: in its constructor, BoundRequestSize(&Derived::Method, ...,
// limits) for each, with the server's ServerLimits.
// Methods not bounded take messages up to the server's kMaxMessageBytes.
template <class Base>
class BoundedService : public Base {
 protected:
  // Serves `method` through internal::BoundedUnaryHandler. `Derived` is the
  // class calling (this must be a Derived); `method` is a unary callback
  // method of Base's service, by its generated name.
  template <class Derived, class Request, class Response>
  void BoundRequestSize(grpc::ServerUnaryReactor* (Derived::*method)(grpc::CallbackServerContext*,
                                                                     const Request*, Response*),
                        const std::string& service_name, const std::string& method_name,
                        const ServerLimits& limits) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service_name);
    const google::protobuf::MethodDescriptor* descriptor =
        service == nullptr ? nullptr : service->FindMethodByName(method_name);
    GPR_ASSERT(descriptor != nullptr);
    Derived* self = static_cast<Derived*>(this);
    this->MarkMethodCallback(descriptor->index(),
                             new internal::BoundedUnaryHandler<Request, Response>(
                                 absl::StrCat("/", service_name, "/", method_name),
                                 limits.max_control_message_bytes, [self, method](grpc::CallbackServerContext* context,
                                                const Request* request, Response* response) {
                                   return (self->*method)(context, request, response);
                                 }));
  }
};

}  // namespace pst::rpc

#endif  // PST_RPC_GRPC_BOUNDED_SERVICE_H_
