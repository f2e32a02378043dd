// libFuzzer target: the ps's request handling, in process. The first byte
// picks a request type, the rest is its bytes as they would arrive on the
// wire; they go through the same parsing as the gRPC handlers (for Pull and
// PushPull, the raw codec) into a VariableStore holding a dense layer, a
// partition of an embedding table and a hash embedding. Any request must be
// answered with a status, never crash; and a refused push must leave every
// parameter bit for bit as it was (checked after each one).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "rpc/wire_codec.h"
#include "proto/pstrain.pb.h"
#include "ps_server/store/variable_store.h"

namespace {

using pst::ps::VariableStore;

pst::proto::VariableSpec Spec(const std::string& name, std::vector<int64_t> shape) {
  pst::proto::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(pst::proto::DT_FLOAT32);
  for (int64_t d : shape) spec.add_shape(d);
  spec.mutable_initializer()->set_kind(pst::proto::Initializer::NORMAL);
  spec.mutable_initializer()->set_scale(0.1f);
  spec.mutable_initializer()->set_seed(3);
  return spec;
}

VariableStore* Store() {
  static VariableStore* store = [] {
    auto* s = new VariableStore();
    pst::proto::CreateVariablesRequest create;
    *create.add_variables() = Spec("w", {4, 3});
    *create.add_variables() = Spec("b", {3});
    pst::proto::VariableSpec part = Spec("emb/part_1", {5, 2});
    part.set_variable("emb");
    part.add_full_shape(10);
    part.add_full_shape(2);
    part.set_partition(1);
    part.set_num_partitions(2);
    part.set_routing(pst::proto::MOD);
    part.set_row_offset(1);
    part.set_row_stride(2);
    *create.add_variables() = part;
    pst::proto::VariableSpec hash = Spec("hash", {0, 2});
    hash.set_routing(pst::proto::HASH);
    hash.set_variable("hash");
    hash.add_full_shape(0);
    hash.add_full_shape(2);
    hash.set_num_partitions(1);
    *create.add_variables() = hash;
    create.mutable_optimizer()->set_name("adam");
    create.mutable_optimizer()->set_learning_rate(0.01f);
    create.mutable_optimizer()->set_beta1(0.9f);
    create.mutable_optimizer()->set_beta2(0.999f);
    create.mutable_optimizer()->set_epsilon(1e-7f);
    create.mutable_sync()->set_mode(pst::proto::ASYNC);
    absl::StatusOr<int> created = s->Create(create);
    if (!created.ok()) {
      std::fprintf(stderr, "fuzz_ps_request: setup: %s\n", created.status().ToString().c_str());
      std::abort();
    }
    return s;
  }();
  return store;
}

// Every dense value, serialized: equal before and after a refused push.
std::string DenseState() {
  pst::proto::PullResponse response;
  google::protobuf::RepeatedPtrField<std::string> names;
  if (!Store()->Pull(names, &response).ok()) std::abort();
  return response.SerializeAsString();
}

// `bytes` in slices of a size drawn from its length, the way gRPC hands a
// received message over (cut anywhere, payloads included).
grpc::ByteBuffer Pieces(const std::string& bytes) {
  const size_t piece = 1 + bytes.size() % 13;
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.data() + at, std::min(piece, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

absl::Status Decode(const std::string& bytes, pst::proto::PushRequest* request,
                    pst::rpc::ReceivedGradients* gradients) {
  return pst::rpc::DecodePush(Pieces(bytes), request, gradients);
}
absl::Status Decode(const std::string& bytes, pst::proto::PushPullRequest* request,
                    pst::rpc::ReceivedGradients* gradients) {
  return pst::rpc::DecodePushPull(Pieces(bytes), request, gradients);
}
const pst::proto::PushRequest& PushOf(const pst::proto::PushRequest& r) { return r; }
const pst::proto::PushRequest& PushOf(const pst::proto::PushPullRequest& r) { return r.push(); }

// A Push or PushPull request's bytes, decoded in place as the ps's gRPC
// handler does: the decoder must accept exactly what protobuf's parser
// accepts, and a refused push must leave every parameter as it was.
template <typename Request>
void DecodeAndPush(const std::string& bytes) {
  Request request;
  pst::rpc::ReceivedGradients gradients;
  const bool decoded = Decode(bytes, &request, &gradients).ok();
  Request reference;
  if (decoded != reference.ParseFromString(bytes)) std::abort();
  if (!decoded) return;
  const std::string before = DenseState();
  pst::proto::PushResponse response;
  if (!Store()->Push(PushOf(request), &response, &gradients.payloads).ok() &&
      DenseState() != before) {
    std::abort();
  }
}

}  // namespace

// Protobuf logs every string field with invalid UTF-8 it parses; the
// fuzzer makes thousands.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  VariableStore* store = Store();
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0:  // Push, decoded in place as the gRPC handler does
      DecodeAndPush<pst::proto::PushRequest>(bytes);
      break;
    case 1:  // PushPull, likewise
      DecodeAndPush<pst::proto::PushPullRequest>(bytes);
      break;
    case 2: {  // Pull, through the raw codec
      grpc::Slice slice(bytes);
      grpc::ByteBuffer buffer(&slice, 1);
      pst::proto::PullRequest request;
      if (!pst::rpc::ParseMessage(&buffer, &request).ok()) return 0;
      pst::proto::PullResponse response;
      store->Pull(request.names(), &response).IgnoreError();
      break;
    }
    case 3: {  // PullRows
      pst::proto::PullRowsRequest request;
      if (!request.ParseFromString(bytes)) return 0;
      pst::proto::PullRowsResponse response;
      store->PullRows(request, &response).IgnoreError();
      break;
    }
    case 4: {  // PushRows
      pst::proto::PushRowsRequest request;
      if (!request.ParseFromString(bytes)) return 0;
      pst::proto::PushRowsResponse response;
      store->PushRows(request, &response).IgnoreError();
      break;
    }
    case 5: {  // CreateVariables: a conflicting or bad create changes nothing
      pst::proto::CreateVariablesRequest request;
      if (!request.ParseFromString(bytes)) return 0;
      const std::string before = DenseState();
      if (!store->Create(request).ok() && DenseState() != before) std::abort();
      break;
    }
  }
  return 0;
}
