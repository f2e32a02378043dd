#include "rpc/wire_codec.h"

#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/bf16.h"
#include "common/tensor_util.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"

namespace pst::rpc {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;

// Field numbers (proto/pstrain.proto).
constexpr int kPushPullPush = 1;   // PushPullRequest.push
constexpr int kPushGradients = 5;  // PushRequest.gradients
constexpr int kPullNames = 1;      // PullResponse.names
constexpr int kPullValues = 2;     // PullResponse.values
constexpr int kPullVersions = 3;   // PullResponse.versions
constexpr int kTensorDtype = 1;    // Tensor.dtype
constexpr int kTensorShape = 2;    // Tensor.shape
constexpr int kTensorData = 3;     // Tensor.data

// The decoders below must refuse exactly what protobuf's own parser
// (MessageLite::ParseFromString, protobuf 3.21's ParseContext) refuses.
// CodedInputStream and WireFormatLite are laxer: they read tags and
// lengths of up to 10 bytes (dropping the bits past 32), and their group
// skipping does not count the messages the decoders enter (with PushLimit)
// towards the recursion limit. So tags, lengths and skipped fields are read
// with the functions here, which hold to ParseContext's rules.

// The most bytes ParseContext reads for a tag or a length.
constexpr int kMaxTagOrLengthBytes = 5;

// CodedInputStream::ReadTag, but a tag of more than 5 bytes reads as 0 (a
// malformed tag: ConsumedEntireMessage() stays false), as protobuf's own
// parser refuses it; ReadTag would drop the extra bits and go on.
uint32_t ReadTagStrict(CodedInputStream* in) {
  const int before = in->CurrentPosition();
  const uint32_t tag = in->ReadTag();
  return in->CurrentPosition() - before > kMaxTagOrLengthBytes ? 0 : tag;
}

// A length-delimited field's length, as ParseContext's ReadSize reads it:
// false for more than 5 bytes or for a length past INT_MAX - kSlopBytes
// (2^31 and up included), where ReadVarint32 would drop the high bits.
bool ReadLengthStrict(CodedInputStream* in, uint32_t* length) {
  const int before = in->CurrentPosition();
  uint64_t value = 0;
  if (!in->ReadVarint64(&value) || in->CurrentPosition() - before > kMaxTagOrLengthBytes ||
      value >
          static_cast<uint64_t>(INT_MAX - google::protobuf::internal::ParseContext::kSlopBytes)) {
    return false;
  }
  *length = static_cast<uint32_t>(value);
  return true;
}

// Copies the next `bytes` bytes of `in` to `out`.
bool CopyRaw(CodedInputStream* in, uint32_t bytes, CodedOutputStream* out) {
  while (bytes > 0) {
    const void* data;
    int size;
    if (!in->GetDirectBufferPointer(&data, &size) || size <= 0) return false;
    const uint32_t take = std::min(bytes, static_cast<uint32_t>(size));
    out->WriteRaw(data, static_cast<int>(take));
    if (!in->Skip(static_cast<int>(take))) return false;
    bytes -= take;
  }
  return true;
}

// Skips the field whose `tag` was just read, as ParseContext parses a field
// it does not know (UnknownFieldParse), refusing what it refuses: field
// number 0; wire type 4 (an end of group where none is open, which ends
// the message where no message may end), 6 and 7; a tag or length of more
// than 5 bytes, a length of 2^31 or more; a group opened when `depth` (the
// groups and messages that may still open, 100 at the top level, one less
// inside each message) is 0, or not ended by its own field's end tag. With
// `out`, the field is copied there, its varints written afresh (the same
// values, in canonical form).
bool SkipFieldStrict(CodedInputStream* in, uint32_t tag, int depth, CodedOutputStream* out) {
  if (WireFormatLite::GetTagFieldNumber(tag) == 0) return false;
  switch (WireFormatLite::GetTagWireType(tag)) {
    case WireFormatLite::WIRETYPE_VARINT: {
      uint64_t value = 0;
      if (!in->ReadVarint64(&value)) return false;
      if (out != nullptr) {
        out->WriteVarint32(tag);
        out->WriteVarint64(value);
      }
      return true;
    }
    case WireFormatLite::WIRETYPE_FIXED64: {
      uint64_t value = 0;
      if (!in->ReadLittleEndian64(&value)) return false;
      if (out != nullptr) {
        out->WriteVarint32(tag);
        out->WriteLittleEndian64(value);
      }
      return true;
    }
    case WireFormatLite::WIRETYPE_FIXED32: {
      uint32_t value = 0;
      if (!in->ReadLittleEndian32(&value)) return false;
      if (out != nullptr) {
        out->WriteVarint32(tag);
        out->WriteLittleEndian32(value);
      }
      return true;
    }
    case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
      uint32_t length = 0;
      if (!ReadLengthStrict(in, &length)) return false;
      if (out == nullptr) return in->Skip(static_cast<int>(length));
      out->WriteVarint32(tag);
      out->WriteVarint32(length);
      return CopyRaw(in, length, out);
    }
    case WireFormatLite::WIRETYPE_START_GROUP: {
      if (depth <= 0) return false;
      if (out != nullptr) out->WriteVarint32(tag);
      const uint32_t end = WireFormatLite::MakeTag(WireFormatLite::GetTagFieldNumber(tag),
                                                   WireFormatLite::WIRETYPE_END_GROUP);
      while (true) {
        // 0 for a tag of 0 or of more than 5 bytes, and at the end of the
        // input or of a limit: all refused, as no group ends there.
        const uint32_t inner = ReadTagStrict(in);
        if (inner == 0 ||
            WireFormatLite::GetTagWireType(inner) == WireFormatLite::WIRETYPE_END_GROUP) {
          if (inner != end) return false;
          if (out != nullptr) out->WriteVarint32(inner);
          return true;
        }
        if (!SkipFieldStrict(in, inner, depth - 1, out)) return false;
      }
    }
    default:  // END_GROUP outside a group, and wire types 6 and 7
      return false;
  }
}

void PutVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

size_t VarintSize(uint64_t value) {
  size_t size = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++size;
  }
  return size;
}

void PutLengthTag(int field, std::string* out) {
  PutVarint(WireFormatLite::MakeTag(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED), out);
}

void ReleasePin(void* pins) { static_cast<common::PayloadPins*>(pins)->Release(); }
void DeleteString(void* s) { delete static_cast<std::string*>(s); }
// An answer's payload, sent: its buffer goes back to the pool it came from.
void ReturnPayload(void* s) {
  common::PayloadBufferPool::Default().Give(std::unique_ptr<std::string>(static_cast<std::string*>(s)));
}

// A tensor to write: its header (the tensor without data, serialized) and
// its payload, referenced by `slice`.
struct TensorPart {
  std::string header;
  size_t payload_bytes = 0;
  grpc::Slice slice;
};

// Bytes of a Tensor message: header, then field 3 when there is a payload
// (proto3 leaves an empty bytes field out).
size_t TensorBytes(const TensorPart& t) {
  if (t.payload_bytes == 0) return t.header.size();
  return t.header.size() +
         VarintSize(
             WireFormatLite::MakeTag(kTensorData, WireFormatLite::WIRETYPE_LENGTH_DELIMITED)) +
         VarintSize(t.payload_bytes) + t.payload_bytes;
}

size_t EntryBytes(int field, const TensorPart& t) {
  const size_t body = TensorBytes(t);
  return VarintSize(WireFormatLite::MakeTag(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED)) +
         VarintSize(body) + body;
}

// Gathers small bytes and zero-copy slices into a byte buffer.
class Builder {
 public:
  std::string* small() { return &small_; }
  void Slice(grpc::Slice slice) {
    Flush();
    slices_.push_back(std::move(slice));
  }
  grpc::ByteBuffer Finish() {
    Flush();
    return grpc::ByteBuffer(slices_.data(), slices_.size());
  }

 private:
  void Flush() {
    if (small_.empty()) return;
    slices_.emplace_back(small_.data(), small_.size());  // copies
    small_.clear();
  }
  std::string small_;
  std::vector<grpc::Slice> slices_;
};

// Writes each tensor of `parts` as an occurrence of repeated field `field`.
void PutTensors(int field, std::vector<TensorPart>& parts, Builder* out) {
  for (TensorPart& t : parts) {
    PutLengthTag(field, out->small());
    PutVarint(TensorBytes(t), out->small());
    out->small()->append(t.header);
    if (t.payload_bytes == 0) continue;
    PutLengthTag(kTensorData, out->small());
    PutVarint(t.payload_bytes, out->small());
    out->Slice(std::move(t.slice));
  }
}

std::vector<TensorPart> GradientParts(
    const google::protobuf::RepeatedPtrField<proto::Tensor>& grads,
    std::span<const std::span<const float>> payloads, common::PayloadPins* pins) {
  std::vector<TensorPart> parts(grads.size());
  for (int k = 0; k < grads.size(); ++k) {
    proto::Tensor header = grads[k];
    header.clear_data();
    parts[k].header = header.SerializeAsString();
    if (grads[k].dtype() == proto::DT_BFLOAT16 && !payloads[k].empty()) {
      // Converted into a buffer of its own, which the slice owns: the
      // caller's floats are free again at once.
      auto* half = new std::string();
      common::AppendAs(payloads[k], proto::DT_BFLOAT16, half);
      parts[k].payload_bytes = half->size();
      parts[k].slice = grpc::Slice(half->data(), half->size(), DeleteString, half);
      continue;
    }
    parts[k].payload_bytes = payloads[k].size_bytes();
    if (parts[k].payload_bytes > 0) {
      // The caller keeps the floats alive and unchanged until gRPC releases
      // the slice.
      pins->Add();
      parts[k].slice = grpc::Slice(const_cast<float*>(payloads[k].data()), parts[k].payload_bytes,
                                   ReleasePin, pins);
    }
  }
  return parts;
}

// Tensor fields from `in` up to its current limit. With `into`, the payload
// is read straight into it and must be exactly its size.
absl::Status ReadTensor(CodedInputStream* in, int depth, proto::Tensor* tensor,
                        std::span<float>* into, int index) {
  bool have_data = false;
  while (true) {
    const uint32_t tag = ReadTagStrict(in);
    if (tag == 0) {
      // The end of the message (or of a limit), or a malformed tag.
      if (!in->ConsumedEntireMessage()) return absl::DataLossError("malformed tensor");
      break;
    }
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto wire = WireFormatLite::GetTagWireType(tag);
    if (field == kTensorDtype && wire == WireFormatLite::WIRETYPE_VARINT) {
      uint32_t dtype = 0;
      if (!in->ReadVarint32(&dtype)) return absl::DataLossError("truncated tensor dtype");
      tensor->set_dtype(static_cast<proto::DType>(dtype));
    } else if (field == kTensorShape && wire == WireFormatLite::WIRETYPE_VARINT) {
      uint64_t dim = 0;
      if (!in->ReadVarint64(&dim)) return absl::DataLossError("truncated tensor shape");
      tensor->add_shape(static_cast<int64_t>(dim));
    } else if (field == kTensorShape && wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::ReadPackedPrimitive<int64_t, WireFormatLite::TYPE_INT64>(
              in, tensor->mutable_shape())) {
        return absl::DataLossError("truncated tensor shape");
      }
    } else if (field == kTensorData && wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t bytes = 0;
      if (!ReadLengthStrict(in, &bytes)) return absl::DataLossError("truncated tensor data");
      if (into == nullptr) {
        if (!in->ReadString(tensor->mutable_data(), static_cast<int>(bytes))) {
          return absl::DataLossError("truncated tensor data");
        }
        continue;
      }
      // The dtype comes before the data (field order, as every encoder
      // here and protobuf's serializer write it).
      const bool half = tensor->dtype() == proto::DT_BFLOAT16;
      const size_t want = into->size() * (half ? sizeof(uint16_t) : sizeof(float));
      if (bytes != want) {
        return absl::DataLossError(absl::StrCat(
            "value ", index, " has ", bytes, " payload bytes where ", want, " were expected (",
            into->size(), " elements in ", proto::DType_Name(tensor->dtype()), ")"));
      }
      if (half) {
        // Converted chunk by chunk, through a buffer that stays in cache.
        char chunk[16 << 10];
        for (size_t done = 0; done < into->size();) {
          const size_t n = std::min(into->size() - done, sizeof(chunk) / sizeof(uint16_t));
          if (!in->ReadRaw(chunk, static_cast<int>(n * sizeof(uint16_t)))) {
            return absl::DataLossError("truncated tensor data");
          }
          common::DecodeBf16(chunk, into->subspan(done, n));
          done += n;
        }
      } else if (!in->ReadRaw(into->data(), static_cast<int>(bytes))) {
        return absl::DataLossError("truncated tensor data");
      }
      have_data = true;
    } else if (!SkipFieldStrict(in, tag, depth, nullptr)) {
      return absl::DataLossError("malformed tensor");
    }
  }
  if (in->BytesUntilLimit() != 0) return absl::DataLossError("malformed tensor");
  if (into != nullptr && !have_data && !into->empty()) {
    return absl::DataLossError(absl::StrCat("value ", index, " has no payload where ",
                                            into->size_bytes(), " bytes were expected"));
  }
  return absl::OkStatus();
}

// gRPC's receive slices as a protobuf input stream, handing out the slices'
// own memory.
class SliceInput final : public google::protobuf::io::ZeroCopyInputStream {
 public:
  explicit SliceInput(const std::vector<grpc::Slice>& slices) : slices_(slices) {}

  bool Next(const void** data, int* size) override {
    if (backup_ > 0) {
      const grpc::Slice& last = slices_[index_ - 1];
      *data = last.begin() + (last.size() - backup_);
      *size = backup_;
      position_ += backup_;
      backup_ = 0;
      return true;
    }
    while (index_ < slices_.size() && slices_[index_].size() == 0) ++index_;
    if (index_ == slices_.size()) return false;
    const grpc::Slice& slice = slices_[index_++];
    *data = slice.begin();
    *size = static_cast<int>(slice.size());
    position_ += slice.size();
    return true;
  }
  void BackUp(int count) override {
    backup_ = count;
    position_ -= count;
  }
  bool Skip(int count) override {
    const void* data;
    int size;
    while (count > 0) {
      if (!Next(&data, &size)) return false;
      if (size > count) {
        BackUp(size - count);
        return true;
      }
      count -= size;
    }
    return true;
  }
  int64_t ByteCount() const override { return position_; }

 private:
  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  int backup_ = 0;
  int64_t position_ = 0;
};

// Reads a length-delimited field's length and limits `in` to it.
bool EnterLengthDelimited(CodedInputStream* in, CodedInputStream::Limit* limit) {
  uint32_t bytes = 0;
  if (!ReadLengthStrict(in, &bytes)) return false;
  // PushLimit would quietly keep an enclosing limit that ends sooner.
  const int left = in->BytesUntilLimit();
  if (left >= 0 && bytes > static_cast<uint32_t>(left)) return false;
  *limit = in->PushLimit(static_cast<int>(bytes));
  return true;
}

// One Tensor: every field but data is copied to `header`; data's pieces
// are collected in `payload` (a later occurrence replaces an earlier one,
// as protobuf's parser does for a bytes field). `depth` as for
// SkipFieldStrict.
bool ReadTensorInPlace(CodedInputStream* in, int depth, std::string* header,
                       std::vector<std::string_view>* payload) {
  StringOutputStream header_stream(header);
  CodedOutputStream out(&header_stream);
  while (true) {
    const uint32_t tag = ReadTagStrict(in);
    if (tag == 0) {
      // The end of the message (or of a limit), or a malformed tag.
      if (!in->ConsumedEntireMessage()) return false;
      break;
    }
    if (WireFormatLite::GetTagFieldNumber(tag) == kTensorData &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t bytes = 0;
      if (!ReadLengthStrict(in, &bytes)) return false;
      payload->clear();
      while (bytes > 0) {
        const void* data;
        int size;
        if (!in->GetDirectBufferPointer(&data, &size) || size <= 0) return false;
        const uint32_t take = std::min(bytes, static_cast<uint32_t>(size));
        payload->emplace_back(static_cast<const char*>(data), take);
        if (!in->Skip(static_cast<int>(take))) return false;
        bytes -= take;
      }
    } else if (!SkipFieldStrict(in, tag, depth, &out)) {
      return false;
    }
  }
  return in->BytesUntilLimit() == 0;
}

// The fields of one PushRequest occurrence: gradients go to `headers` and
// `payloads`, every other field is copied to `rest`. `depth` as for
// SkipFieldStrict.
bool ReadPushInPlace(CodedInputStream* in, int depth, CodedOutputStream* rest,
                     std::vector<std::string>* headers,
                     std::vector<std::vector<std::string_view>>* payloads) {
  while (true) {
    const uint32_t tag = ReadTagStrict(in);
    if (tag == 0) {
      // The end of the message (or of a limit), or a malformed tag.
      if (!in->ConsumedEntireMessage()) return false;
      break;
    }
    if (WireFormatLite::GetTagFieldNumber(tag) == kPushGradients &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      CodedInputStream::Limit limit;
      if (!EnterLengthDelimited(in, &limit)) return false;
      if (!ReadTensorInPlace(in, depth - 1, &headers->emplace_back(), &payloads->emplace_back())) {
        return false;
      }
      in->PopLimit(limit);
    } else if (!SkipFieldStrict(in, tag, depth, rest)) {
      return false;
    }
  }
  return true;
}

// Builds `push` from its non-gradient fields and the gradient headers.
bool AssemblePush(const std::string& rest, const std::vector<std::string>& headers,
                  proto::PushRequest* push) {
  if (!push->MergeFromString(rest)) return false;
  for (const std::string& header : headers) {
    proto::Tensor* gradient = push->add_gradients();
    if (!gradient->ParseFromString(header)) return false;
  }
  return true;
}

// The parts of a Push or PushPull request as DecodeInPlace splits them.
struct SplitRequest {
  std::string top_rest;              // top-level fields but `push` (PushPull only)
  std::string push_rest;             // the PushRequest's fields but gradients
  std::vector<std::string> headers;  // each gradient without its data
};

// Splits a PushPullRequest (`push_field` > 0: the PushRequest is that field
// of the top-level message) or a PushRequest (`push_field` 0), leaving the
// payloads' pieces in `gradients`. False for bytes that are not the message.
bool DecodeInPlace(const grpc::ByteBuffer& buffer, int push_field, SplitRequest* split,
                   ReceivedGradients* gradients) {
  gradients->slices.clear();
  gradients->payloads.clear();
  if (!buffer.Dump(&gradients->slices).ok()) return false;
  size_t length = 0;
  for (const grpc::Slice& slice : gradients->slices) length += slice.size();
  if (length > static_cast<size_t>(INT_MAX)) return false;
  SliceInput input(gradients->slices);
  CodedInputStream in(&input);
  in.SetTotalBytesLimit(INT_MAX);
  const int depth = CodedInputStream::GetDefaultRecursionLimit();  // ParseFromString's
  {
    StringOutputStream top_stream(&split->top_rest), push_stream(&split->push_rest);
    CodedOutputStream top_out(&top_stream), push_out(&push_stream);
    if (push_field == 0) {
      if (!ReadPushInPlace(&in, depth, &push_out, &split->headers, &gradients->payloads)) {
        return false;
      }
    } else {
      while (true) {
        const uint32_t tag = ReadTagStrict(&in);
        if (tag == 0) {
          // The end of the message (or of a limit), or a malformed tag.
          if (!in.ConsumedEntireMessage()) return false;
          break;
        }
        if (WireFormatLite::GetTagFieldNumber(tag) == push_field &&
            WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
          CodedInputStream::Limit limit;
          if (!EnterLengthDelimited(&in, &limit) ||
              !ReadPushInPlace(&in, depth - 1, &push_out, &split->headers, &gradients->payloads) ||
              in.BytesUntilLimit() != 0) {
            return false;
          }
          in.PopLimit(limit);
        } else if (!SkipFieldStrict(&in, tag, depth, &top_out)) {
          return false;
        }
      }
    }
  }  // the output streams flush into the strings here
  return static_cast<size_t>(in.CurrentPosition()) == length;
}

absl::Status NotA(const google::protobuf::Message& message) {
  return absl::InvalidArgumentError(
      absl::StrCat("the request is not a valid ", message.GetTypeName()));
}

}  // namespace

absl::Status DecodePushPull(const grpc::ByteBuffer& buffer, proto::PushPullRequest* request,
                            ReceivedGradients* gradients) {
  SplitRequest split;
  // ParseFromString clears the message first, so `push` is taken after it.
  if (!DecodeInPlace(buffer, kPushPullPush, &split, gradients) ||
      !request->ParseFromString(split.top_rest) ||
      !AssemblePush(split.push_rest, split.headers, request->mutable_push())) {
    return NotA(*request);
  }
  return absl::OkStatus();
}

absl::Status DecodePush(const grpc::ByteBuffer& buffer, proto::PushRequest* request,
                        ReceivedGradients* gradients) {
  SplitRequest split;
  request->Clear();
  if (!DecodeInPlace(buffer, 0, &split, gradients) ||
      !AssemblePush(split.push_rest, split.headers, request)) {
    return NotA(*request);
  }
  return absl::OkStatus();
}

grpc::ByteBuffer EncodePushPull(const proto::PushPullRequest& request,
                                std::span<const std::span<const float>> payloads,
                                common::PayloadPins* pins) {
  proto::PushPullRequest rest = request;
  rest.mutable_push()->clear_gradients();
  std::vector<TensorPart> parts = GradientParts(request.push().gradients(), payloads, pins);
  Builder out;
  rest.AppendToString(out.small());
  // A second occurrence of `push` holding only the gradients: parsers merge
  // it into the first.
  size_t inner = 0;
  for (const TensorPart& t : parts) inner += EntryBytes(kPushGradients, t);
  PutLengthTag(kPushPullPush, out.small());
  PutVarint(inner, out.small());
  PutTensors(kPushGradients, parts, &out);
  return out.Finish();
}

grpc::ByteBuffer EncodePush(const proto::PushRequest& request,
                            std::span<const std::span<const float>> payloads, common::PayloadPins* pins) {
  proto::PushRequest rest = request;
  rest.clear_gradients();
  std::vector<TensorPart> parts = GradientParts(request.gradients(), payloads, pins);
  Builder out;
  rest.AppendToString(out.small());
  PutTensors(kPushGradients, parts, &out);
  return out.Finish();
}

grpc::ByteBuffer EncodePullResponse(proto::PullResponse* response) {
  std::vector<TensorPart> parts(response->values_size());
  for (int k = 0; k < response->values_size(); ++k) {
    proto::Tensor* value = response->mutable_values(k);
    auto* payload = new std::string(std::move(*value->mutable_data()));
    value->clear_data();
    parts[k].header = value->SerializeAsString();
    parts[k].payload_bytes = payload->size();
    if (payload->empty()) {
      delete payload;
      continue;
    }
    parts[k].slice = grpc::Slice(payload->data(), payload->size(), ReturnPayload, payload);
  }
  proto::PullResponse rest;
  *rest.mutable_names() = response->names();
  *rest.mutable_versions() = response->versions();
  Builder out;
  rest.AppendToString(out.small());
  PutTensors(kPullValues, parts, &out);
  return out.Finish();
}

absl::Status DecodePullResponse(grpc::ByteBuffer* buffer, std::span<const std::span<float>> into,
                                proto::PullResponse* response) {
  response->Clear();
  const size_t length = buffer->Length();
  grpc::ProtoBufferReader reader(buffer);
  if (!reader.status().ok()) return absl::DataLossError("unreadable PullResponse");
  CodedInputStream in(&reader);
  in.SetTotalBytesLimit(INT_MAX);
  const int depth = CodedInputStream::GetDefaultRecursionLimit();
  while (true) {
    const uint32_t tag = ReadTagStrict(&in);
    if (tag == 0) {
      // The end of the message (or of a limit), or a malformed tag.
      if (!in.ConsumedEntireMessage()) return absl::DataLossError("malformed PullResponse");
      break;
    }
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto wire = WireFormatLite::GetTagWireType(tag);
    if (field == kPullNames && wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::ReadString(&in, response->add_names())) {
        return absl::DataLossError("malformed PullResponse: truncated name");
      }
    } else if (field == kPullValues && wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t bytes = 0;
      if (!ReadLengthStrict(&in, &bytes)) return absl::DataLossError("malformed PullResponse");
      const CodedInputStream::Limit limit = in.PushLimit(static_cast<int>(bytes));
      const int index = response->values_size();
      std::span<float> target;
      const bool direct = index < static_cast<int>(into.size());
      if (direct) target = into[index];
      absl::Status read =
          ReadTensor(&in, depth - 1, response->add_values(), direct ? &target : nullptr, index);
      if (!read.ok()) {
        return absl::DataLossError(absl::StrCat("malformed PullResponse: ", read.message()));
      }
      in.PopLimit(limit);
    } else if (field == kPullVersions && wire == WireFormatLite::WIRETYPE_VARINT) {
      uint64_t version = 0;
      if (!in.ReadVarint64(&version)) return absl::DataLossError("malformed PullResponse");
      response->add_versions(static_cast<int64_t>(version));
    } else if (field == kPullVersions && wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::ReadPackedPrimitive<int64_t, WireFormatLite::TYPE_INT64>(
              &in, response->mutable_versions())) {
        return absl::DataLossError("malformed PullResponse: truncated versions");
      }
    } else if (!SkipFieldStrict(&in, tag, depth, nullptr)) {
      return absl::DataLossError("malformed PullResponse");
    }
  }
  if (static_cast<size_t>(in.CurrentPosition()) != length) {
    return absl::DataLossError(absl::StrCat("malformed PullResponse: stopped at byte ",
                                            in.CurrentPosition(), " of ", length));
  }
  return absl::OkStatus();
}

grpc::ByteBuffer SerializeMessage(const google::protobuf::Message& message) {
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

absl::Status ParseMessage(grpc::ByteBuffer* buffer, google::protobuf::Message* message) {
  grpc::ProtoBufferReader reader(buffer);
  if (!reader.status().ok() || !message->ParseFromZeroCopyStream(&reader)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request is not a valid ", message->GetTypeName()));
  }
  return absl::OkStatus();
}

}  // namespace pst::rpc
