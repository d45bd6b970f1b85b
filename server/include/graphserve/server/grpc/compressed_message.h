#pragma once
// Requests that arrive with gRPC's per-message compression (gzip, deflate: what Triton's clients send
// with compression_algorithm=), inflated by graphserve within the request limit. gRPC 1.51's own
// decompression checks the *compressed* size against the receive limit and then inflates the whole
// message without bound (a 4 MiB message of zeros becomes 4 GiB), so the server turns it off
// (GRPC_ARG_ENABLE_PER_MESSAGE_DECOMPRESSION) and every RPC parses its request here: gRPC hands over
// the bytes as they came, marked with their algorithm, and they are inflated piece by piece, never
// past the limit and one byte more.
// Stateless functions: thread-safe.
#include <grpc/byte_buffer.h>
#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <string>

#include <google/protobuf/message_lite.h>
#include "graphserve/engine/status.h"

namespace graphserve {

// Parses `buffer` (a whole gRPC message, as it came off the wire) into `message`, and empties the
// buffer. A compressed message is inflated first, to at most `max_bytes`: past that it is
// RESOURCE_EXHAUSTED naming the limit, and the rest is never inflated. INVALID_ARGUMENT for bytes
// that are not one whole stream of their algorithm, for an algorithm graphserve does not inflate,
// and for a message that does not parse as `message`'s type.
Status ParseGrpcMessage(grpc::ByteBuffer* buffer, size_t max_bytes, google::protobuf::MessageLite* message);

// The same for the C form of the buffer that gRPC's method handlers receive; `buffer` stays the
// caller's.
Status ParseGrpcMessage(grpc_byte_buffer* buffer, size_t max_bytes, google::protobuf::MessageLite* message);

// The plain bytes of `buffer` (compressed, or not), into *plain, with ParseGrpcMessage's bound and
// refusals short of parsing; `buffer` stays the caller's.
Status InflateGrpcMessage(grpc_byte_buffer* buffer, size_t max_bytes, std::string* plain);

// `message` serialized into `buffer`, for the RPCs that write raw buffers (gRPC compresses them on
// the way out as it would a typed answer).
void SerializeGrpcMessage(const google::protobuf::MessageLite& message, grpc::ByteBuffer* buffer);

}  // namespace graphserve
