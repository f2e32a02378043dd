#include "common/ps_transport.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/bf16.h"
#include "common/tensor_util.h"

namespace pst::common {
namespace {

void CopyIn(std::span<const std::span<const float>> payloads,
            google::protobuf::RepeatedPtrField<proto::Tensor>* tensors) {
  for (size_t k = 0; k < payloads.size() && k < static_cast<size_t>(tensors->size()); ++k) {
    proto::Tensor& tensor = (*tensors)[k];
    tensor.clear_data();
    AppendAs(payloads[k], tensor.dtype(), tensor.mutable_data());
  }
}

// Moves the answer's payloads into `values`, as the gRPC transport does.
absl::Status CopyOut(std::span<const std::span<float>> values, proto::PullResponse* response) {
  for (size_t k = 0; k < values.size() && k < static_cast<size_t>(response->values_size()); ++k) {
    proto::Tensor* value = response->mutable_values(k);
    const bool half = value->dtype() == proto::DT_BFLOAT16;
    const size_t want = values[k].size() * (half ? sizeof(uint16_t) : sizeof(float));
    if (value->data().size() != want) {
      return absl::DataLossError(absl::StrCat("value ", k, " has ", value->data().size(),
                                              " payload bytes where ", want, " were expected"));
    }
    if (half) {
      DecodeBf16(value->data().data(), values[k]);
    } else {
      UnpackFloats(*value, values[k]);
    }
    value->clear_data();
  }
  return absl::OkStatus();
}

}  // namespace

void PsTransport::PullDense(int ps, const proto::PullRequest* request, const DenseBuffers* buffers,
                            proto::PullResponse* response, Done done) {
  Pull(ps, request, response, [buffers, response, done = std::move(done)](absl::Status status) {
    if (status.ok()) status = CopyOut(buffers->values, response);
    done(std::move(status));
  });
}

void PsTransport::PushPullDense(int ps, const proto::PushPullRequest* request,
                                const DenseBuffers* buffers, proto::PullResponse* response,
                                Done done) {
  auto full = std::make_shared<proto::PushPullRequest>(*request);
  CopyIn(buffers->gradients, full->mutable_push()->mutable_gradients());
  PushPull(ps, full.get(), response,
           [full, buffers, response, done = std::move(done)](absl::Status status) {
             if (status.ok()) status = CopyOut(buffers->values, response);
             done(std::move(status));
           });
}

void PsTransport::PushDense(int ps, const proto::PushRequest* request, const DenseBuffers* buffers,
                            proto::PushResponse* response, Done done) {
  auto full = std::make_shared<proto::PushRequest>(*request);
  CopyIn(buffers->gradients, full->mutable_gradients());
  Push(ps, full.get(), response,
       [full, done = std::move(done)](absl::Status status) { done(std::move(status)); });
}

}  // namespace pst::common
