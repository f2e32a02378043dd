// Zero-copy encoding of the dense data plane's messages.
//
// The bytes are ordinary protobuf wire format: any protobuf parser reads
// them as the message they stand for. What differs is where float payloads
// (Tensor.data) live on the way:
//
//  - Encoding sends each payload as its own gRPC slice pointing at the
//    caller's memory (a gradient) or owning the string the store filled (a
//    pulled value), instead of copying it into a serialized buffer. The
//    message around them is serialized as usual; the payload-carrying
//    tensors are written after it as a second occurrence of their field,
//    which protobuf's merge rules append to the first.
//  - Decoding a PullResponse copies each value's payload once, from gRPC's
//    receive slices straight into the float buffer it is meant for, instead
//    of into a string and then into the buffer.
//
// Pure functions; thread-safe.
#ifndef PST_COMMON_WIRE_CODEC_H_
#define PST_COMMON_WIRE_CODEC_H_

#include <grpcpp/support/byte_buffer.h>

#include <span>

#include "absl/status/status.h"
#include "google/protobuf/message.h"
#include "proto/pstrain.pb.h"

namespace pst::common {

// `request` with push.gradients(k).data replaced by payloads[k] (the
// tensors' own data must be empty). The payloads are referenced, not
// copied: they must stay unchanged until the call that sends the buffer
// has completed. REQUIRES: payloads.size() == gradients_size().
grpc::ByteBuffer EncodePushPull(const proto::PushPullRequest& request,
                                std::span<const std::span<const float>> payloads);
grpc::ByteBuffer EncodePush(const proto::PushRequest& request,
                            std::span<const std::span<const float>> payloads);

// `response`, whose values' data strings are moved into the buffer's slices
// (left empty in `response`).
grpc::ByteBuffer EncodePullResponse(proto::PullResponse* response);

// Parses a PullResponse, writing value k's payload into into[k] and leaving
// its data empty. Values past into.size() keep their data.
// Errors: DataLoss for bytes that are not a PullResponse, or for a value k
// < into.size() whose payload is not exactly into[k].size() floats (naming
// both sizes).
absl::Status DecodePullResponse(grpc::ByteBuffer* buffer, std::span<const std::span<float>> into,
                                proto::PullResponse* response);

// Any message, serialized as usual (for the small ones).
grpc::ByteBuffer SerializeMessage(const google::protobuf::Message& message);

// Parses any message, as gRPC's generated code does. Errors:
// InvalidArgument naming the message type.
absl::Status ParseMessage(grpc::ByteBuffer* buffer, google::protobuf::Message* message);

}  // namespace pst::common

#endif  // PST_COMMON_WIRE_CODEC_H_
