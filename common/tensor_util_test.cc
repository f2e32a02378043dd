#include "common/tensor_util.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "common/bf16.h"

namespace pst::common {
namespace {

Shape MakeShape(std::vector<int64_t> dims) { return Shape(dims.begin(), dims.end()); }

TEST(TensorUtilTest, PackUnpack_RoundTripsValues) {
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, 7.0f};
  proto::Tensor tensor;
  PackFloats(values, MakeShape({2, 3}), &tensor);
  EXPECT_EQ(tensor.dtype(), proto::DT_FLOAT32);
  EXPECT_EQ(tensor.data().size(), 24u);
  ASSERT_TRUE(CheckTensorMatches(tensor, MakeShape({2, 3}), "t").ok());
  std::vector<float> out(6);
  UnpackFloats(tensor, out);
  EXPECT_EQ(out, values);
}

TEST(TensorUtilTest, CheckTensorMatches_Mismatches_AreInvalidArgumentNamingTheProblem) {
  proto::Tensor tensor;
  PackFloats(std::vector<float>(6), MakeShape({2, 3}), &tensor);
  absl::Status shape = CheckTensorMatches(tensor, MakeShape({3, 2}), "gradient for 'w'");
  EXPECT_EQ(shape.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(shape.message()), "gradient for 'w': shape [2, 3], expected [3, 2]");

  proto::Tensor short_payload = tensor;
  short_payload.mutable_data()->resize(20);
  EXPECT_EQ(std::string(CheckTensorMatches(short_payload, MakeShape({2, 3}), "g").message()),
            "g: payload is 20 bytes, expected 24 for shape [2, 3]");

  proto::Tensor bad_dtype = tensor;
  bad_dtype.set_dtype(proto::DT_INVALID);
  EXPECT_EQ(CheckTensorMatches(bad_dtype, MakeShape({2, 3}), "g").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TensorUtilTest, NumElements_RejectsNegativeAndOverflow) {
  EXPECT_EQ(*NumElements(MakeShape({2, 3, 4})), 24);
  EXPECT_EQ(*NumElements(MakeShape({})), 1);
  EXPECT_EQ(NumElements(MakeShape({2, -1})).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NumElements(MakeShape({int64_t{1} << 40, int64_t{1} << 40})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NumElements(MakeShape({100}), 99).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorUtilTest, ValidateVariableSpec_ChecksNameDtypeAndShape) {
  proto::VariableSpec spec;
  spec.set_name("w");
  spec.set_dtype(proto::DT_FLOAT32);
  spec.add_shape(4);
  EXPECT_TRUE(ValidateVariableSpec(spec, 100).ok());
  EXPECT_FALSE(ValidateVariableSpec(spec, 3).ok());
  proto::VariableSpec zero_dim = spec;
  zero_dim.add_shape(0);
  EXPECT_FALSE(ValidateVariableSpec(zero_dim, 100).ok());
  proto::VariableSpec no_name = spec;
  no_name.clear_name();
  EXPECT_FALSE(ValidateVariableSpec(no_name, 100).ok());
  proto::VariableSpec scalar = spec;
  scalar.clear_shape();
  EXPECT_FALSE(ValidateVariableSpec(scalar, 100).ok());
  proto::VariableSpec bad_dtype = spec;
  bad_dtype.set_dtype(proto::DT_INVALID);
  EXPECT_FALSE(ValidateVariableSpec(bad_dtype, 100).ok());
}

TEST(TensorUtilTest, ForEachFloatBlock_VisitsEveryFloatOnceInOrder) {
  for (int64_t n : {int64_t{0}, int64_t{1}, kFloatBlock - 1, kFloatBlock, 2 * kFloatBlock + 3}) {
    std::vector<float> values(n);
    for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i) * 0.5f;
    const std::string payload(reinterpret_cast<const char*>(values.data()), n * sizeof(float));
    std::vector<float> seen;
    int64_t expected_offset = 0;
    ForEachFloatBlock(payload, [&](int64_t offset, std::span<const float> block) {
      EXPECT_EQ(offset, expected_offset);
      EXPECT_LE(static_cast<int64_t>(block.size()), kFloatBlock);
      EXPECT_FALSE(block.empty());
      seen.insert(seen.end(), block.begin(), block.end());
      expected_offset += static_cast<int64_t>(block.size());
    });
    EXPECT_EQ(seen, values) << n << " floats";
  }
}

TEST(TensorUtilTest, AddPayload_AddsEveryFloat) {
  std::vector<float> values(kFloatBlock + 3);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i);
  const std::string payload(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  std::vector<float> sum(values.size(), 1.0f);
  AddPayload(payload, sum);
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(sum[i], 1.0f + values[i]) << i;
}

TEST(TensorUtilTest, AllFinite_FindsNanAndInfAnywhere) {
  std::vector<float> values(3 * kFloatBlock + 5, 1.5f);
  auto payload = [&] {
    return std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  };
  EXPECT_TRUE(AllFinite(payload()));
  EXPECT_TRUE(AllFinite(""));
  for (size_t at : {size_t{0}, size_t{kFloatBlock}, values.size() - 1}) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      values[at] = bad;
      EXPECT_FALSE(AllFinite(payload())) << bad << " at " << at;
      values[at] = 1.5f;
    }
  }
  values[7] = std::numeric_limits<float>::max();
  values[8] = std::numeric_limits<float>::denorm_min();
  EXPECT_TRUE(AllFinite(payload()));
}

// `bytes` cut into pieces at the given lengths (the last takes the rest),
// the way gRPC's receive slices cut a payload anywhere, mid-float included.
std::vector<std::string_view> Cut(std::string_view bytes, std::vector<size_t> lengths) {
  std::vector<std::string_view> parts;
  for (size_t len : lengths) {
    len = std::min(len, bytes.size());
    parts.push_back(bytes.substr(0, len));
    bytes.remove_prefix(len);
  }
  parts.push_back(bytes);
  return parts;
}

TEST(TensorUtilTest, PayloadParts_CutAnywhere_ReadLikeTheWholePayload) {
  std::vector<float> values(2 * kFloatBlock + 7);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.75f * static_cast<float>(i) - 3.0f;
  const std::string whole(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  const std::vector<std::vector<size_t>> cuts = {
      {}, {1}, {3, 0, 5}, {4 * kFloatBlock - 1}, {4 * kFloatBlock + 2, 1, 1, 1}, {7, 13, 4093}};
  for (const std::vector<size_t>& lengths : cuts) {
    const std::vector<std::string_view> parts = Cut(whole, lengths);
    ASSERT_EQ(PayloadBytes(parts), whole.size());
    std::vector<float> seen;
    ForEachFloatBlock(parts, [&](int64_t offset, std::span<const float> block) {
      EXPECT_EQ(offset, static_cast<int64_t>(seen.size()));
      seen.insert(seen.end(), block.begin(), block.end());
    });
    EXPECT_EQ(seen, values) << lengths.size() << " cuts";
    std::vector<float> copied(values.size());
    CopyPayload(parts, copied);
    EXPECT_EQ(copied, values);
    std::vector<float> sum(values.size(), 2.0f);
    AddPayload(parts, sum);
    for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(sum[i], 2.0f + values[i]) << i;
    EXPECT_TRUE(AllFinite(parts));
  }
  // A NaN whose bytes straddle two pieces is still found.
  values[kFloatBlock + 1] = std::numeric_limits<float>::quiet_NaN();
  const std::string bad(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  EXPECT_FALSE(AllFinite(Cut(bad, {4 * (kFloatBlock + 1) + 2})));
}

TEST(TensorUtilTest, AllFinite_PiecesOfAFewBytes_FindEveryBadFloat) {
  // Pieces of 1 to 3 bytes put floats together from up to four of them.
  std::vector<float> values(37, -0.5f);
  for (const std::vector<size_t>& lengths :
       std::vector<std::vector<size_t>>{{1, 1, 1, 1, 1, 1}, {3, 2, 1, 3, 2, 1, 7}, {5, 0, 6, 2}}) {
    for (size_t at = 0; at < values.size(); ++at) {
      values[at] = -std::numeric_limits<float>::infinity();
      const std::string bytes(reinterpret_cast<const char*>(values.data()), values.size() * 4);
      values[at] = -0.5f;
      EXPECT_FALSE(AllFinite(Cut(bytes, lengths))) << "Inf at " << at;
    }
    const std::string good(reinterpret_cast<const char*>(values.data()), values.size() * 4);
    EXPECT_TRUE(AllFinite(Cut(good, lengths)));
  }
}

TEST(PayloadBufferPoolTest, TakeReusesAFittingBuffer_KeepsAtMostTheLimit) {
  constexpr size_t kMiB = 1 << 20;
  PayloadBufferPool pool(3 * kMiB);
  std::string a;
  pool.Take(kMiB, &a);  // nothing pooled yet
  EXPECT_EQ(pool.allocated(), 1);
  a.assign(kMiB, 'x');
  const char* memory = a.data();
  const size_t capacity = a.capacity();
  pool.Give(std::make_unique<std::string>(std::move(a)));
  EXPECT_EQ(pool.pooled_bytes(), capacity);

  // Too small a need for this buffer (it would waste over half), then one
  // that fits: that one gets the buffer, empty.
  std::string small, fits = "old";
  pool.Take(kMiB / 4, &small);
  EXPECT_EQ(pool.reused(), 0);
  pool.Take(kMiB - 100, &fits);
  EXPECT_EQ(pool.reused(), 1);
  EXPECT_EQ(fits.data(), memory);
  EXPECT_TRUE(fits.empty());
  EXPECT_EQ(pool.pooled_bytes(), 0u) << "a 3-byte string is not worth keeping";

  // Buffers past the limit, and tiny ones, are freed instead of kept.
  for (int i = 0; i < 5; ++i) {
    auto buffer = std::make_unique<std::string>();
    buffer->reserve(kMiB);
    pool.Give(std::move(buffer));
  }
  EXPECT_LE(pool.pooled_bytes(), 3 * kMiB);
  EXPECT_GE(pool.pooled_bytes(), 2 * kMiB);
  const size_t before = pool.pooled_bytes();
  pool.Give(std::make_unique<std::string>("tiny"));
  EXPECT_EQ(pool.pooled_bytes(), before);
}

// A bf16 payload cut anywhere (inside a value too) reads as its floats,
// and a bad value is found in pieces of a byte.
TEST(TensorUtilTest, Bf16Payload_CutAnywhere_ReadsAsItsFloats) {
  std::vector<float> values(2 * kFloatBlock + 7);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.75f * static_cast<float>(i) - 3.0f;
  std::string whole(values.size() * 2, '\0');
  EncodeBf16(values, whole.data());
  std::vector<float> rounded(values.size());
  DecodeBf16(whole.data(), rounded);
  for (const std::vector<size_t>& lengths :
       std::vector<std::vector<size_t>>{{}, {1}, {3, 0, 5}, {2 * kFloatBlock + 1}, {7, 13, 4093}}) {
    const std::vector<std::string_view> parts = Cut(whole, lengths);
    std::vector<float> seen;
    ForEachFloatBlock(parts, proto::DT_BFLOAT16, [&](int64_t offset, std::span<const float> b) {
      EXPECT_EQ(offset, static_cast<int64_t>(seen.size()));
      seen.insert(seen.end(), b.begin(), b.end());
    });
    EXPECT_EQ(seen, rounded) << lengths.size() << " cuts";
    std::vector<float> copied(values.size());
    CopyPayload(parts, proto::DT_BFLOAT16, copied);
    EXPECT_EQ(copied, rounded);
    std::vector<float> sum(values.size(), 2.0f);
    AddPayload(parts, proto::DT_BFLOAT16, sum);
    for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(sum[i], 2.0f + rounded[i]) << i;
    EXPECT_TRUE(AllFinite(parts, proto::DT_BFLOAT16));
  }
  std::vector<float> few(37, -0.5f);
  for (size_t at = 0; at < few.size(); ++at) {
    few[at] =
        at % 2 ? std::numeric_limits<float>::quiet_NaN() : -std::numeric_limits<float>::infinity();
    std::string bytes(few.size() * 2, '\0');
    EncodeBf16(few, bytes.data());
    few[at] = -0.5f;
    EXPECT_FALSE(AllFinite(Cut(bytes, {1, 1, 1, 3, 2, 1, 5}), proto::DT_BFLOAT16)) << at;
  }
  std::string good(few.size() * 2, '\0');
  EncodeBf16(few, good.data());
  EXPECT_TRUE(AllFinite(Cut(good, {1, 1, 1, 3, 2, 1, 5}), proto::DT_BFLOAT16));
}

TEST(TensorUtilTest, CheckTensorMatches_Bf16_HalfTheBytes_OnlyForPayloadsOutside) {
  proto::Tensor header;
  header.set_dtype(proto::DT_BFLOAT16);
  header.add_shape(2);
  header.add_shape(3);
  Shape shape;
  shape.Add(2);
  shape.Add(3);
  EXPECT_TRUE(CheckTensorMatches(header, 12, shape, "g").ok());
  EXPECT_EQ(CheckTensorMatches(header, 24, shape, "g").code(), absl::StatusCode::kInvalidArgument);
  // A tensor carrying its own data (rows, initial values) is float32 only.
  header.set_data(std::string(12, '\0'));
  const absl::Status whole = CheckTensorMatches(header, shape, "g");
  EXPECT_NE(whole.message().find("expected DT_FLOAT32"), std::string::npos) << whole;
}

TEST(TensorUtilTest, CheckTensorMatches_PayloadOutside_ChecksItsSize) {
  proto::Tensor header;
  header.set_dtype(proto::DT_FLOAT32);
  header.add_shape(2);
  header.add_shape(3);
  Shape shape;
  shape.Add(2);
  shape.Add(3);
  EXPECT_TRUE(CheckTensorMatches(header, 24, shape, "g").ok());
  const absl::Status status = CheckTensorMatches(header, 20, shape, "g");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("payload is 20 bytes, expected 24"), std::string::npos) << status;
}

}  // namespace
}  // namespace pst::common
