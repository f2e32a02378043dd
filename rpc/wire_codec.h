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
//  - Decoding a Push or PushPull request (on the ps) copies no payload: the
//    gradients are read where they arrived, in gRPC's receive slices.
//
// Pure functions; thread-safe.
#ifndef PST_RPC_WIRE_CODEC_H_
#define PST_RPC_WIRE_CODEC_H_

#include <grpcpp/support/byte_buffer.h>

#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "common/payload_pins.h"
#include "google/protobuf/message.h"
#include "proto/pstrain.pb.h"

namespace pst::rpc {

// `request` with push.gradients(k).data replaced by payloads[k] (the
// tensors' own data must be empty). The payloads are referenced, not
// copied: each slice pointing into them is counted in `pins` until gRPC
// releases it, and the floats must stay unchanged until then.
// REQUIRES: payloads.size() == gradients_size().
grpc::ByteBuffer EncodePushPull(const proto::PushPullRequest& request,
                                std::span<const std::span<const float>> payloads,
                                common::PayloadPins* pins);
grpc::ByteBuffer EncodePush(const proto::PushRequest& request,
                            std::span<const std::span<const float>> payloads, common::PayloadPins* pins);

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

// A PushRequest or PushPullRequest as it arrived, with its gradients'
// payloads left in gRPC's receive slices instead of copied into the
// message: payloads[k] lists the pieces of gradient k's data (the tensor's
// own data() is empty). The pieces point into `slices`, which this object
// holds; they stay valid as long as it lives.
struct ReceivedGradients {
  std::vector<grpc::Slice> slices;
  std::vector<std::vector<std::string_view>> payloads;
};

// Parse `buffer` as the message, protobuf's merge rules included (the
// encoders above send `push` twice), without copying any gradient payload.
// Errors: InvalidArgument naming the message type for bytes that are not
// the message.
absl::Status DecodePushPull(const grpc::ByteBuffer& buffer, proto::PushPullRequest* request,
                            ReceivedGradients* gradients);
absl::Status DecodePush(const grpc::ByteBuffer& buffer, proto::PushRequest* request,
                        ReceivedGradients* gradients);

// Any message, serialized as usual (for the small ones).
grpc::ByteBuffer SerializeMessage(const google::protobuf::Message& message);

// Parses any message, as gRPC's generated code does. Errors:
// InvalidArgument naming the message type.
absl::Status ParseMessage(grpc::ByteBuffer* buffer, google::protobuf::Message* message);

}  // namespace pst::rpc

#endif  // PST_RPC_WIRE_CODEC_H_
