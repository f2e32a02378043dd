// The zero-copy encodings are plain protobuf: the standard parser reads
// them as the messages they stand for, and the direct decoder places
// payloads where they belong or says why it cannot.
#include "rpc/wire_codec.h"

#include <grpc/grpc.h>
#include <grpcpp/support/slice.h>
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "common/bf16.h"
#include "common/tensor_util.h"

namespace pst::rpc {
namespace {

class WireCodecTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { grpc_init(); }
  static void TearDownTestSuite() { grpc_shutdown(); }

  static common::Shape MakeShape(std::vector<int64_t> dims) { return common::Shape(dims.begin(), dims.end()); }

  // Two gradients (one empty) with headers only, and their payloads.
  static proto::PushRequest Push(const std::vector<std::vector<float>>& payloads) {
    proto::PushRequest push;
    push.set_worker_index(3);
    push.set_incarnation(77);
    push.set_step(12);
    push.set_part(2);
    push.set_position(400);
    for (size_t k = 0; k < payloads.size(); ++k) {
      push.add_names("v" + std::to_string(k));
      proto::Tensor* t = push.add_gradients();
      t->set_dtype(proto::DT_FLOAT32);
      t->add_shape(static_cast<int64_t>(payloads[k].size()));
    }
    return push;
  }

  static std::vector<std::span<const float>> Spans(const std::vector<std::vector<float>>& v) {
    return {v.begin(), v.end()};
  }

  // A response of two values of `sizes`, payloads filled in.
  static proto::PullResponse Response(const std::vector<std::vector<float>>& payloads) {
    proto::PullResponse response;
    for (size_t k = 0; k < payloads.size(); ++k) {
      response.add_names("v" + std::to_string(k));
      common::PackFloats(payloads[k], MakeShape({static_cast<int64_t>(payloads[k].size())}),
                 response.add_values());
      response.add_versions(100 + static_cast<int64_t>(k));
    }
    return response;
  }

  // The PushPullRequest of Push(payloads_) with the payloads in its tensors.
  proto::PushPullRequest FullPushPull() const {
    proto::PushPullRequest full;
    *full.mutable_push() = Push(payloads_);
    for (size_t k = 0; k < payloads_.size(); ++k) {
      common::PackFloats(payloads_[k], full.push().gradients(k).shape(),
                 full.mutable_push()->mutable_gradients(k));
    }
    return full;
  }

  const std::vector<std::vector<float>> payloads_ = {{1.5f, -2.0f, 3.25f}, {}, {7.0f}};
};

TEST_F(WireCodecTest, EncodePushPull_ParsesAsTheFullRequest) {
  proto::PushPullRequest request;
  *request.mutable_push() = Push(payloads_);
  const proto::PushPullRequest full = FullPushPull();
  common::PayloadPins pins;
  {
    grpc::ByteBuffer bytes = EncodePushPull(request, Spans(payloads_), &pins);
    EXPECT_EQ(pins.held(), 2) << "a slice per non-empty payload, until gRPC lets go";
    proto::PushPullRequest parsed;
    ASSERT_TRUE(ParseMessage(&bytes, &parsed).ok());
    EXPECT_EQ(parsed.SerializeAsString(), full.SerializeAsString());
  }
  EXPECT_EQ(pins.held(), 0);
  pins.WaitAllReleased();
}

TEST_F(WireCodecTest, EncodePush_ParsesAsTheFullRequest) {
  const proto::PushRequest request = Push(payloads_);
  proto::PushRequest full = request;
  for (size_t k = 0; k < payloads_.size(); ++k) {
    common::PackFloats(payloads_[k], full.gradients(k).shape(), full.mutable_gradients(k));
  }
  common::PayloadPins pins;
  grpc::ByteBuffer bytes = EncodePush(request, Spans(payloads_), &pins);
  proto::PushRequest parsed;
  ASSERT_TRUE(ParseMessage(&bytes, &parsed).ok());
  EXPECT_EQ(parsed.SerializeAsString(), full.SerializeAsString());
}

TEST_F(WireCodecTest, PullResponse_RoundTripsIntoTheCallersBuffers) {
  const proto::PullResponse original = Response(payloads_);
  for (bool zero_copy : {true, false}) {
    proto::PullResponse sent = original;
    grpc::ByteBuffer bytes = zero_copy ? EncodePullResponse(&sent) : SerializeMessage(sent);
    if (zero_copy) {
      EXPECT_TRUE(sent.values(0).data().empty()) << "payloads were moved";
    }
    std::vector<std::vector<float>> out = {std::vector<float>(3), {}, std::vector<float>(1)};
    const std::vector<std::span<float>> into(out.begin(), out.end());
    proto::PullResponse got;
    absl::Status status = DecodePullResponse(&bytes, into, &got);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(out, payloads_);
    ASSERT_EQ(got.values_size(), 3);
    for (int k = 0; k < 3; ++k) {
      EXPECT_TRUE(got.values(k).data().empty());
      EXPECT_EQ(got.values(k).dtype(), proto::DT_FLOAT32);
      EXPECT_EQ(got.values(k).shape(0), static_cast<int64_t>(payloads_[k].size()));
      EXPECT_EQ(got.names(k), original.names(k));
      EXPECT_EQ(got.versions(k), original.versions(k));
    }
  }
}

TEST_F(WireCodecTest, DecodePullResponse_ValuesPastTheBuffersKeepTheirData) {
  proto::PullResponse sent = Response(payloads_);
  grpc::ByteBuffer bytes = EncodePullResponse(&sent);
  std::vector<float> first(3);
  const std::vector<std::span<float>> into = {first};
  proto::PullResponse got;
  ASSERT_TRUE(DecodePullResponse(&bytes, into, &got).ok());
  EXPECT_EQ(first, payloads_[0]);
  EXPECT_TRUE(got.values(0).data().empty());
  EXPECT_EQ(got.values(2).data().size(), sizeof(float));
}

// An answer's payload buffer returns to the pool when gRPC lets go of it,
// and the next answer of that size is filled in the same memory.
TEST_F(WireCodecTest, EncodePullResponse_SentPayloadBuffer_IsReusedForTheNextAnswer) {
  common::PayloadBufferPool& pool = common::PayloadBufferPool::Default();
  const size_t bytes = 256 << 10;
  const std::vector<float> values(bytes / sizeof(float), 0.5f);
  proto::PullResponse first;
  first.add_names("w");
  first.add_versions(1);
  proto::Tensor* value = first.add_values();
  pool.Take(bytes, value->mutable_data());
  common::PackFloats(values, common::Shape(), value);
  const char* memory = value->data().data();
  const int64_t reused_before = pool.reused();
  {
    grpc::ByteBuffer sent = EncodePullResponse(&first);
    std::vector<float> out(values.size());
    const std::vector<std::span<float>> into = {out};
    proto::PullResponse got;
    ASSERT_TRUE(DecodePullResponse(&sent, into, &got).ok());
    EXPECT_EQ(out, values);
  }  // gRPC's last reference to the payload goes here
  std::string next;
  pool.Take(bytes, &next);
  EXPECT_EQ(pool.reused(), reused_before + 1);
  EXPECT_EQ(next.data(), memory) << "the sent answer's buffer was not reused";
  EXPECT_TRUE(next.empty());
  EXPECT_GE(next.capacity(), bytes);
}

TEST_F(WireCodecTest, DecodePullResponse_WrongSizeOrMissingPayload_IsDataLossNamingTheSizes) {
  proto::PullResponse sent = Response(payloads_);
  grpc::ByteBuffer bytes = EncodePullResponse(&sent);
  std::vector<float> small(2), none, one(1);
  std::vector<std::span<float>> into = {small, none, one};
  proto::PullResponse got;
  absl::Status status = DecodePullResponse(&bytes, into, &got);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(status.message()).find("12 payload bytes where 8"), std::string::npos)
      << status;

  proto::PullResponse again = Response(payloads_);
  grpc::ByteBuffer bytes2 = EncodePullResponse(&again);
  std::vector<float> right(3), wants_two(2);
  into = {right, wants_two};  // value 1 has no payload at all
  status = DecodePullResponse(&bytes2, into, &got);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(status.message()).find("no payload"), std::string::npos) << status;
}

TEST_F(WireCodecTest, TruncatedOrGarbageBytes_AreErrorsNotCrashes) {
  const std::string whole = Response(payloads_).SerializeAsString();
  const size_t first_payload =
      whole.find(std::string(reinterpret_cast<const char*>(payloads_[0].data()), 12));
  ASSERT_NE(first_payload, std::string::npos);
  int failed = 0;
  for (size_t cut = 1; cut < whole.size(); ++cut) {
    grpc::Slice slice(whole.data(), cut);
    grpc::ByteBuffer bytes(&slice, 1);
    std::vector<float> a(3), b, c(1);
    const std::vector<std::span<float>> into = {a, b, c};
    proto::PullResponse got;
    const absl::Status status = DecodePullResponse(&bytes, into, &got);
    // A cut between fields is a valid, shorter message; one inside a field
    // must fail, with DataLoss.
    if (cut > first_payload && cut < first_payload + 12) {
      EXPECT_FALSE(status.ok()) << "cut at " << cut << " inside the first payload";
    }
    if (!status.ok()) {
      EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << cut;
      ++failed;
    }
  }
  EXPECT_GT(failed, static_cast<int>(whole.size()) / 2);
  const std::string garbage = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x0f";
  grpc::Slice slice(garbage.data(), garbage.size());
  grpc::ByteBuffer bytes(&slice, 1);
  proto::PullResponse got;
  EXPECT_EQ(DecodePullResponse(&bytes, {}, &got).code(), absl::StatusCode::kDataLoss);
  grpc::ByteBuffer bytes2(&slice, 1);
  proto::PushPullRequest request;
  EXPECT_EQ(ParseMessage(&bytes2, &request).code(), absl::StatusCode::kInvalidArgument);
}

// `bytes` as a byte buffer of `piece`-byte slices, as gRPC may hand a
// received message over.
grpc::ByteBuffer InPieces(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.data() + at, std::min(piece, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Joined(const std::vector<std::string_view>& parts) {
  std::string joined;
  for (std::string_view part : parts) joined.append(part);
  return joined;
}

// Whether every piece lies inside one of `slices` (read in place, not
// copied).
bool InsideSlices(const std::vector<std::string_view>& parts,
                  const std::vector<grpc::Slice>& slices) {
  for (std::string_view part : parts) {
    const auto* p = reinterpret_cast<const uint8_t*>(part.data());
    bool inside = false;
    for (const grpc::Slice& s : slices) {
      inside = inside || (p >= s.begin() && p + part.size() <= s.end());
    }
    if (!inside) return false;
  }
  return true;
}

std::string Bf16Bytes(const std::vector<float>& values) {
  std::string out(values.size() * 2, '\0');
  common::EncodeBf16(values, out.data());
  return out;
}

// A gradient whose header says DT_BFLOAT16 is sent converted, from a buffer
// of the codec's own (the caller's floats are not pinned), and parses as the
// request with the bf16 bytes in its data.
TEST_F(WireCodecTest, EncodePush_Bf16Gradient_SentConverted_NotPinned) {
  proto::PushRequest request = Push(payloads_);
  request.mutable_gradients(0)->set_dtype(proto::DT_BFLOAT16);
  proto::PushRequest full = request;
  full.mutable_gradients(0)->set_data(Bf16Bytes(payloads_[0]));
  for (size_t k = 1; k < payloads_.size(); ++k) {
    common::PackFloats(payloads_[k], full.gradients(k).shape(), full.mutable_gradients(k));
  }
  common::PayloadPins pins;
  grpc::ByteBuffer bytes = EncodePush(request, Spans(payloads_), &pins);
  EXPECT_EQ(pins.held(), 1) << "only the float32 payload is sent from the caller's memory";
  proto::PushRequest parsed;
  ASSERT_TRUE(ParseMessage(&bytes, &parsed).ok());
  EXPECT_EQ(parsed.SerializeAsString(), full.SerializeAsString());
}

// Values in bf16 are decoded into the caller's float buffers, exactly, from
// any cut of the receive slices, through the decoder's chunks (a value of
// more than one chunk, of an odd count).
TEST_F(WireCodecTest, DecodePullResponse_Bf16Values_DecodedIntoTheFloatBuffers) {
  std::vector<float> big(3 * 8192 + 7), small = {0.1f, -3e38f, 1e-40f};
  for (size_t i = 0; i < big.size(); ++i) big[i] = 0.37f * static_cast<float>(i) - 1000.0f;
  proto::PullResponse response;
  for (const auto* v : {&big, &small}) {
    response.add_names("v");
    proto::Tensor* t = response.add_values();
    t->set_dtype(proto::DT_BFLOAT16);
    t->add_shape(static_cast<int64_t>(v->size()));
    t->set_data(Bf16Bytes(*v));
    response.add_versions(4);
  }
  for (size_t piece : {size_t{7}, size_t{4096}, size_t{1} << 20}) {
    grpc::ByteBuffer bytes = InPieces(response.SerializeAsString(), piece);
    std::vector<float> out_big(big.size()), out_small(small.size());
    const std::vector<std::span<float>> into = {out_big, out_small};
    proto::PullResponse got;
    const absl::Status status = DecodePullResponse(&bytes, into, &got);
    ASSERT_TRUE(status.ok()) << status;
    for (size_t i = 0; i < big.size(); ++i) {
      ASSERT_EQ(out_big[i], common::Bf16ToFloat(common::FloatToBf16(big[i]))) << piece << " " << i;
    }
    for (size_t i = 0; i < small.size(); ++i) {
      EXPECT_EQ(out_small[i], common::Bf16ToFloat(common::FloatToBf16(small[i])));
    }
    EXPECT_EQ(got.values(0).dtype(), proto::DT_BFLOAT16);
    EXPECT_TRUE(got.values(0).data().empty());
  }
  // A float32-sized buffer for a bf16 value: the sizes are named.
  grpc::ByteBuffer bytes = InPieces(response.SerializeAsString(), 1 << 20);
  std::vector<float> wrong(big.size() / 2);
  const std::vector<std::span<float>> into = {wrong};
  proto::PullResponse got;
  const absl::Status status = DecodePullResponse(&bytes, into, &got);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("in DT_BFLOAT16"), std::string::npos) << status;
}

TEST_F(WireCodecTest, DecodePushPull_LeavesPayloadsInTheReceiveSlices) {
  proto::PushPullRequest request;
  *request.mutable_push() = Push(payloads_);
  const proto::PushPullRequest full = FullPushPull();
  // As the worker sends it (push written twice), and as protobuf itself
  // serializes it, each cut into slices of several sizes.
  common::PayloadPins pins;
  grpc::ByteBuffer encoded = EncodePushPull(request, Spans(payloads_), &pins);
  std::vector<grpc::Slice> encoded_slices;
  ASSERT_TRUE(encoded.Dump(&encoded_slices).ok());
  std::string worker_bytes;
  for (const grpc::Slice& s : encoded_slices) {
    worker_bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  for (const std::string& bytes : {worker_bytes, full.SerializeAsString()}) {
    for (size_t piece : {size_t{1}, size_t{3}, size_t{5}, size_t{4096}}) {
      proto::PushPullRequest got;
      ReceivedGradients gradients;
      const absl::Status status = DecodePushPull(InPieces(bytes, piece), &got, &gradients);
      ASSERT_TRUE(status.ok()) << status << " (slices of " << piece << ")";
      ASSERT_EQ(gradients.payloads.size(), payloads_.size());
      proto::PushPullRequest rebuilt = got;
      for (size_t k = 0; k < payloads_.size(); ++k) {
        EXPECT_TRUE(got.push().gradients(k).data().empty());
        EXPECT_TRUE(InsideSlices(gradients.payloads[k], gradients.slices));
        *rebuilt.mutable_push()->mutable_gradients(k)->mutable_data() =
            Joined(gradients.payloads[k]);
      }
      EXPECT_EQ(rebuilt.SerializeAsString(), full.SerializeAsString()) << piece;
    }
  }
}

TEST_F(WireCodecTest, DecodePush_MatchesTheStandardParser) {
  proto::PushRequest full = Push(payloads_);
  for (size_t k = 0; k < payloads_.size(); ++k) {
    common::PackFloats(payloads_[k], full.gradients(k).shape(), full.mutable_gradients(k));
  }
  const std::string bytes = full.SerializeAsString();
  proto::PushRequest got;
  ReceivedGradients gradients;
  ASSERT_TRUE(DecodePush(InPieces(bytes, 7), &got, &gradients).ok());
  for (size_t k = 0; k < payloads_.size(); ++k) {
    *got.mutable_gradients(k)->mutable_data() = Joined(gradients.payloads[k]);
  }
  EXPECT_EQ(got.SerializeAsString(), bytes);
}

// Raw wire bytes, written out.
std::string Bytes(std::initializer_list<int> bytes) {
  std::string out;
  for (int b : bytes) out.push_back(static_cast<char>(b));
  return out;
}

std::string Varint(uint64_t value) {
  std::string out;
  for (; value >= 0x80; value >>= 7) out.push_back(static_cast<char>(value | 0x80));
  out.push_back(static_cast<char>(value));
  return out;
}

// Field `number` (length-delimited) holding `body`.
std::string Field(int number, const std::string& body) {
  return Varint(static_cast<uint64_t>(number) << 3 | 2) + Varint(body.size()) + body;
}

absl::Status Decode(const grpc::ByteBuffer& bytes, proto::PushRequest* request,
                    ReceivedGradients* gradients) {
  return DecodePush(bytes, request, gradients);
}
absl::Status Decode(const grpc::ByteBuffer& bytes, proto::PushPullRequest* request,
                    ReceivedGradients* gradients) {
  return DecodePushPull(bytes, request, gradients);
}
proto::PushRequest* PushOf(proto::PushRequest* r) { return r; }
proto::PushRequest* PushOf(proto::PushPullRequest* r) { return r->mutable_push(); }

// Decodes `bytes` as a `Request` (in slices of several sizes), expecting
// the decoder to accept them exactly when protobuf's parser does and then
// to give the same message; returns protobuf's verdict.
template <typename Request>
bool ExpectVerdictOfProtobuf(const std::string& bytes) {
  Request reference;
  const bool parses = reference.ParseFromString(bytes);
  for (size_t piece : {size_t{1}, size_t{3}, size_t{7}, size_t{4096}}) {
    Request got;
    ReceivedGradients gradients;
    const absl::Status status = Decode(InPieces(bytes, piece), &got, &gradients);
    EXPECT_EQ(status.ok(), parses)
        << got.GetTypeName() << " in slices of " << piece << ": decoder says " << status;
    if (!status.ok() || !parses) continue;
    for (size_t k = 0; k < gradients.payloads.size(); ++k) {
      *PushOf(&got)->mutable_gradients(static_cast<int>(k))->mutable_data() =
          Joined(gradients.payloads[k]);
    }
    EXPECT_EQ(got.SerializeAsString(), reference.SerializeAsString()) << piece;
  }
  return parses;
}

// A gradient tensor's fields (dtype, shape [1], payload 1.0f).
const std::string kTensor = Bytes({0x08, 0x01, 0x12, 0x01, 0x01, 0x1a, 0x04, 0, 0, 0x80, 0x3f});

// `fragment` placed after the other fields of a Push request, of a
// gradient in it, of a PushPull request, of its push, and of a gradient in
// that push; each is decoded as ExpectVerdictOfProtobuf does. Returns
// protobuf's five verdicts.
std::vector<bool> VerdictsInEveryPlace(const std::string& fragment) {
  const std::string push_fields = Bytes({0x08, 0x03}) + Field(4, "v0");  // worker 3, names
  const std::string gradient = Field(5, kTensor + fragment);
  return {
      ExpectVerdictOfProtobuf<proto::PushRequest>(push_fields + fragment),
      ExpectVerdictOfProtobuf<proto::PushRequest>(push_fields + gradient),
      ExpectVerdictOfProtobuf<proto::PushPullRequest>(Field(1, push_fields) + fragment),
      ExpectVerdictOfProtobuf<proto::PushPullRequest>(Field(1, push_fields + fragment)),
      ExpectVerdictOfProtobuf<proto::PushPullRequest>(Field(1, push_fields + gradient)),
  };
}

const std::vector<bool> kRefusedEverywhere(5, false);

// fuzz_ps_request's finding (ps_request-crash-59ae9871, less its first
// byte, which picked Push): field 4 as a group (wire type 3) holding a tag
// of 6 bytes. Protobuf reads tags of at most 5 bytes; the decoder used to
// skip groups with CodedInputStream::ReadTag, which takes 10.
TEST_F(WireCodecTest, DecodePush_FuzzFinding_GroupHoldingASixByteTag_IsRefusedAsByProtobuf) {
  const std::string bytes =
      Bytes({0x30, 0x30, 0x30, 0xea, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30,
             0xef, 0x30, 0xc8, 0x30, 0x30, 0x30, 0x30, 0x30, 0x00, 0x23, 0xd0, 0xef,
             0xcf, 0xcf, 0xb9, 0x30, 0x30, 0x24, 0x30, 0x30, 0x30, 0x30});
  EXPECT_FALSE(ExpectVerdictOfProtobuf<proto::PushRequest>(bytes));
  EXPECT_FALSE(ExpectVerdictOfProtobuf<proto::PushPullRequest>(bytes));
}

TEST_F(WireCodecTest, DecodePushAndPushPull_TagOfSixBytes_IsRefusedAsByProtobuf) {
  // Field 1 (varint) in a tag of 6 bytes, in a group and on its own.
  const std::string long_tag = Bytes({0x88, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01});
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x23}) + long_tag + Bytes({0x24})), kRefusedEverywhere);
  EXPECT_EQ(VerdictsInEveryPlace(long_tag), kRefusedEverywhere);
  // 5 bytes is still a tag, its bits past 32 dropped (field 1 varint here).
  const std::string five = Bytes({0x88, 0x80, 0x80, 0x80, 0x70, 0x01});
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x23}) + five + Bytes({0x24})), std::vector<bool>(5, true));
}

TEST_F(WireCodecTest, DecodePushAndPushPull_FieldNumberZero_IsRefusedAsByProtobuf) {
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x23, 0x00, 0x24})), kRefusedEverywhere);  // tag 0
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x23, 0x02, 0x00, 0x24})), kRefusedEverywhere);
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x23, 0x05, 1, 2, 3, 4, 0x24})), kRefusedEverywhere);
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x23, 0x03, 0x04, 0x24})), kRefusedEverywhere);
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x03, 0x04})), kRefusedEverywhere);
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x02, 0x00})), kRefusedEverywhere);
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x01, 1, 2, 3, 4, 5, 6, 7, 8})), kRefusedEverywhere);
  // Tag 0 in a tag of 5 bytes (field 2^29 wraps to 0).
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x23, 0x80, 0x80, 0x80, 0x80, 0x10, 0x24})),
            kRefusedEverywhere);
}

TEST_F(WireCodecTest, DecodePushAndPushPull_GroupEndedByAnotherField_IsRefusedAsByProtobuf) {
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x23, 0x2c})), kRefusedEverywhere);  // ends field 5
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x23, 0x08, 0x01, 0x0c})), kRefusedEverywhere);
  // Nested groups closed in the wrong order.
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x23, 0x2b, 0x24, 0x2c})), kRefusedEverywhere);
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x23, 0x2b, 0x2c, 0x24})), std::vector<bool>(5, true));
}

TEST_F(WireCodecTest, DecodePushAndPushPull_GroupNeverClosed_IsRefusedAsByProtobuf) {
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x23})), kRefusedEverywhere);
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x23, 0x08, 0x01})), kRefusedEverywhere);
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x23, 0x2b, 0x2c})), kRefusedEverywhere);
  // A message (or a gradient) ending inside a group is refused even when
  // the group's end follows the message's.
  const std::string push = Bytes({0x08, 0x03, 0x23});
  EXPECT_FALSE(ExpectVerdictOfProtobuf<proto::PushPullRequest>(Field(1, push) + Bytes({0x24})));
  EXPECT_FALSE(ExpectVerdictOfProtobuf<proto::PushRequest>(Field(5, kTensor + Bytes({0x23})) +
                                                           Bytes({0x24})));
}

TEST_F(WireCodecTest, DecodePushAndPushPull_StrayGroupEnd_IsRefusedAsByProtobuf) {
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x24})), kRefusedEverywhere);
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x0c})), kRefusedEverywhere);
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x04})), kRefusedEverywhere);
  EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x23, 0x24, 0x24})), kRefusedEverywhere);
}

TEST_F(WireCodecTest, DecodePushAndPushPull_WireTypesSixAndSeven_AreRefusedAsByProtobuf) {
  for (int wire : {6, 7}) {
    SCOPED_TRACE(wire);
    EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x20 | wire, 0})), kRefusedEverywhere);
    EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x50 | wire, 0})), kRefusedEverywhere);
    EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x23, 0x08 | wire, 0, 0x24})), kRefusedEverywhere);
  }
}

// Protobuf reads a length of at most 5 bytes, under 2^31, where
// CodedInputStream::ReadVarint32 reads 10 bytes and drops the bits past 32:
// the old decoder read 2 in each length below.
TEST_F(WireCodecTest, DecodePushAndPushPull_LengthOfSixBytesOrPast2GB_IsRefusedAsByProtobuf) {
  const struct {
    std::string length;
    bool valid;
  } lengths[] = {
      {Bytes({0x82, 0x80, 0x80, 0x80, 0x00}), true},         // 2 in 5 bytes
      {Bytes({0x82, 0x80, 0x80, 0x80, 0x80, 0x00}), false},  // 2 in 6 bytes
      {Bytes({0x82, 0x80, 0x80, 0x80, 0x10}), false},        // 2^32 + 2
  };
  for (const auto& [length, valid] : lengths) {
    SCOPED_TRACE(valid);
    // An unknown field 10, on its own and in a group.
    EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x52}) + length + "ab"), std::vector<bool>(5, valid));
    EXPECT_EQ(VerdictsInEveryPlace(Bytes({0x23, 0x52}) + length + Bytes({'a', 'b', 0x24})),
              std::vector<bool>(5, valid));
    // Field 4 (names); a gradient's shape (packed) and data; the gradient.
    EXPECT_EQ(ExpectVerdictOfProtobuf<proto::PushRequest>(Bytes({0x22}) + length + "ab"), valid);
    const std::string shape = Bytes({0x08, 0x01, 0x12}) + length + Bytes({0x01, 0x02});
    EXPECT_EQ(ExpectVerdictOfProtobuf<proto::PushRequest>(Field(5, shape)), valid);
    const std::string data = Bytes({0x08, 0x01, 0x1a}) + length + "ab";
    EXPECT_EQ(ExpectVerdictOfProtobuf<proto::PushRequest>(Field(5, data)), valid);
    EXPECT_EQ(
        ExpectVerdictOfProtobuf<proto::PushRequest>(Bytes({0x2a}) + length + Bytes({0x08, 0x01})),
        valid);
    // PushPull's push.
    EXPECT_EQ(ExpectVerdictOfProtobuf<proto::PushPullRequest>(Bytes({0x0a}) + length +
                                                              Bytes({0x08, 0x03})),
              valid);
  }
}

// Protobuf opens at most 100 groups and messages within each other (its
// default recursion limit): a PushPull's push is one, a gradient another.
TEST_F(WireCodecTest, DecodePushAndPushPull_NestedGroups_RefusedPastProtobufsDepthLimit) {
  std::vector<std::vector<bool>> verdicts;
  for (int depth = 97; depth <= 101; ++depth) {
    SCOPED_TRACE(depth);
    verdicts.push_back(
        VerdictsInEveryPlace(std::string(depth, '\x23') + std::string(depth, '\x24')));
  }
  // Push | its gradient | PushPull | its push | a gradient in its push.
  EXPECT_EQ(verdicts[0], std::vector<bool>(5, true));                            // 97
  EXPECT_EQ(verdicts[1], std::vector<bool>(5, true));                            // 98
  EXPECT_EQ(verdicts[2], std::vector<bool>({true, true, true, true, false}));    // 99
  EXPECT_EQ(verdicts[3], std::vector<bool>({true, false, true, false, false}));  // 100
  EXPECT_EQ(verdicts[4], kRefusedEverywhere);                                    // 101
}

// The response decoder skips the fields it does not read as the push
// decoders do: what protobuf refuses, it refuses too.
TEST_F(WireCodecTest, DecodePullResponse_SkippedFields_RefusedAsByProtobuf) {
  const std::string fragments[] = {
      Bytes({0x23, 0x88, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01, 0x24}),  // 6-byte tag
      Bytes({0x23, 0x52, 0x82, 0x80, 0x80, 0x80, 0x80, 0x00, 'a', 'b', 0x24}),
      Bytes({0x23, 0x2c}),
      Bytes({0x23, 0x02, 0x00, 0x24}),
      Bytes({0x26, 0x00}),
      std::string(100, '\x23') + std::string(100, '\x24'),  // 99 inside a value
      Bytes({0x23, 0x08, 0x01, 0x24}),                      // a valid group
  };
  int accepted = 0;
  for (const std::string& fragment : fragments) {
    for (const std::string& bytes : {Field(1, "v0") + fragment, Field(2, kTensor + fragment)}) {
      proto::PullResponse reference;
      const bool parses = reference.ParseFromString(bytes);
      grpc::ByteBuffer buffer = InPieces(bytes, 3);
      proto::PullResponse got;
      EXPECT_EQ(DecodePullResponse(&buffer, {}, &got).ok(), parses)
          << testing::PrintToString(bytes);
      accepted += parses;
    }
  }
  EXPECT_EQ(accepted, 3);  // the valid group twice, 100 groups at the top level
}

TEST_F(WireCodecTest, DecodePushPull_TruncatedOrGarbage_IsInvalidArgument) {
  const proto::PushPullRequest full = FullPushPull();
  const std::string whole = full.SerializeAsString();
  int agreed = 0;
  for (size_t cut = 0; cut < whole.size(); ++cut) {
    // Wherever the cut, the decoder agrees with protobuf's parser on
    // whether these are the message's bytes.
    const std::string bytes = whole.substr(0, cut);
    proto::PushPullRequest reference;
    const bool parses = reference.ParseFromString(bytes);
    proto::PushPullRequest got;
    ReceivedGradients gradients;
    const absl::Status status = DecodePushPull(InPieces(bytes, 3), &got, &gradients);
    EXPECT_EQ(status.ok(), parses) << "cut at " << cut;
    if (!status.ok()) {
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(status.message().find("PushPullRequest"), std::string::npos) << status;
    }
    agreed += status.ok() == parses;
  }
  EXPECT_EQ(agreed, static_cast<int>(whole.size()));
  const std::string garbage = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x0f";
  proto::PushPullRequest got;
  ReceivedGradients gradients;
  EXPECT_EQ(DecodePushPull(InPieces(garbage, 4), &got, &gradients).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pst::rpc
