// The zero-copy encodings are plain protobuf: the standard parser reads
// them as the messages they stand for, and the direct decoder places
// payloads where they belong or says why it cannot.
#include "common/wire_codec.h"

#include <grpc/grpc.h>
#include <grpcpp/support/slice.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/tensor_util.h"

namespace pst::common {
namespace {

class WireCodecTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { grpc_init(); }
  static void TearDownTestSuite() { grpc_shutdown(); }

  static Shape MakeShape(std::vector<int64_t> dims) { return Shape(dims.begin(), dims.end()); }

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
      PackFloats(payloads[k], MakeShape({static_cast<int64_t>(payloads[k].size())}),
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
      PackFloats(payloads_[k], full.push().gradients(k).shape(),
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
  PayloadPins pins;
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
    PackFloats(payloads_[k], full.gradients(k).shape(), full.mutable_gradients(k));
  }
  PayloadPins pins;
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
  PayloadBufferPool& pool = PayloadBufferPool::Default();
  const size_t bytes = 256 << 10;
  const std::vector<float> values(bytes / sizeof(float), 0.5f);
  proto::PullResponse first;
  first.add_names("w");
  first.add_versions(1);
  proto::Tensor* value = first.add_values();
  pool.Take(bytes, value->mutable_data());
  PackFloats(values, Shape(), value);
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

TEST_F(WireCodecTest, DecodePushPull_LeavesPayloadsInTheReceiveSlices) {
  proto::PushPullRequest request;
  *request.mutable_push() = Push(payloads_);
  const proto::PushPullRequest full = FullPushPull();
  // As the worker sends it (push written twice), and as protobuf itself
  // serializes it, each cut into slices of several sizes.
  PayloadPins pins;
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
    PackFloats(payloads_[k], full.gradients(k).shape(), full.mutable_gradients(k));
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
}  // namespace pst::common
