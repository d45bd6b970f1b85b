#include "graphserve/server/grpc/compressed_message.h"

#include <google/protobuf/io/zero_copy_stream.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include <string>

#include "graphserve/server/http/content_coding.h"

namespace graphserve {
namespace {

// The message's slices as protobuf reads them, without copying: Next hands out each slice in turn.
class SliceStream final : public google::protobuf::io::ZeroCopyInputStream {
 public:
  explicit SliceStream(grpc_byte_buffer* buffer) { grpc_byte_buffer_reader_init(&reader_, buffer); }
  ~SliceStream() override { grpc_byte_buffer_reader_destroy(&reader_); }
  SliceStream(const SliceStream&) = delete;
  SliceStream& operator=(const SliceStream&) = delete;

  bool Next(const void** data, int* size) override {
    if (backed_up_ > 0) {  // the end of the last slice again
      *data = GRPC_SLICE_END_PTR(*slice_) - backed_up_;
      *size = backed_up_;
      count_ += backed_up_;
      backed_up_ = 0;
      return true;
    }
    while (grpc_byte_buffer_reader_peek(&reader_, &slice_) != 0) {
      if (GRPC_SLICE_LENGTH(*slice_) == 0) continue;
      *data = GRPC_SLICE_START_PTR(*slice_);
      *size = static_cast<int>(GRPC_SLICE_LENGTH(*slice_));
      count_ += *size;
      return true;
    }
    return false;
  }
  void BackUp(int count) override {
    backed_up_ = count;
    count_ -= count;
  }
  bool Skip(int count) override {
    const void* data = nullptr;
    int size = 0;
    while (count > 0 && Next(&data, &size)) {
      if (size > count) BackUp(size - count);
      count -= std::min(size, count);
    }
    return count == 0;
  }
  int64_t ByteCount() const override { return count_; }

 private:
  grpc_byte_buffer_reader reader_{};
  grpc_slice* slice_ = nullptr;
  int backed_up_ = 0;
  int64_t count_ = 0;
};

// ProtoBufferReader is how grpc::ByteBuffer lends its C buffer to a reader; its algorithm is there.
class CBufferOf final : public grpc::ProtoBufferReader {
 public:
  explicit CBufferOf(grpc::ByteBuffer* buffer) : ProtoBufferReader(buffer) {}
  grpc_byte_buffer* get() { return status().ok() ? reader()->buffer_in : nullptr; }
};

}  // namespace

Status InflateGrpcMessage(grpc_byte_buffer* buffer, size_t max_bytes, std::string* plain) {
  if (buffer == nullptr) return InvalidArgument("the request carries no message");
  SliceStream stream(buffer);
  const void* data = nullptr;
  int size = 0;
  const grpc_compression_algorithm algorithm = buffer->data.raw.compression;
  if (algorithm == GRPC_COMPRESS_NONE) {
    while (stream.Next(&data, &size)) plain->append(static_cast<const char*>(data), size);
    return Status::Ok();
  }
  if (algorithm != GRPC_COMPRESS_GZIP && algorithm != GRPC_COMPRESS_DEFLATE) {
    return InvalidArgument("grpc-encoding: graphserve inflates gzip and deflate only");
  }
  const ContentCoding coding =
      algorithm == GRPC_COMPRESS_GZIP ? ContentCoding::kGzip : ContentCoding::kDeflate;
  const std::string name = ContentCodingName(coding);
  BodyInflater inflater(coding, max_bytes);
  BodyInflater::Result result = BodyInflater::Result::kMore;
  while (result == BodyInflater::Result::kMore && stream.Next(&data, &size)) {
    result = inflater.Add(std::string_view(static_cast<const char*>(data), size), plain);
  }
  if (result == BodyInflater::Result::kTooLarge) {
    return ResourceExhausted("the request inflates (grpc-encoding " + name + ") to more than the " +
                             std::to_string(max_bytes) +
                             " bytes requests are taken up to (the models' largest, or --max-request-bytes)");
  }
  if (!inflater.Complete()) return InvalidArgument("the request is not one complete " + name + " stream");
  return Status::Ok();
}

Status ParseGrpcMessage(grpc_byte_buffer* buffer, size_t max_bytes, google::protobuf::MessageLite* message) {
  if (buffer != nullptr && buffer->data.raw.compression == GRPC_COMPRESS_NONE) {
    SliceStream stream(buffer);  // parsed where it lies, not copied first
    if (message->ParseFromZeroCopyStream(&stream)) return Status::Ok();
    return InvalidArgument("the request is not a valid " + message->GetTypeName() + " message");
  }
  // Inflated whole, then parsed: parsing while inflating would let a field's declared length (a
  // bomb's 1 GiB of raw_input_contents) reserve its memory before the bound is reached.
  std::string plain;
  const Status status = InflateGrpcMessage(buffer, max_bytes, &plain);
  if (!status.ok()) return status;
  if (message->ParseFromString(plain)) return Status::Ok();
  return InvalidArgument("the request is not a valid " + message->GetTypeName() + " message once inflated");
}

Status ParseGrpcMessage(grpc::ByteBuffer* buffer, size_t max_bytes, google::protobuf::MessageLite* message) {
  Status status;
  {
    CBufferOf c_buffer(buffer);
    status = ParseGrpcMessage(c_buffer.get(), max_bytes, message);
  }
  buffer->Clear();
  return status;
}

void SerializeGrpcMessage(const google::protobuf::MessageLite& message, grpc::ByteBuffer* buffer) {
  bool own_buffer = false;
  grpc::GenericSerialize<grpc::ProtoBufferWriter, google::protobuf::MessageLite>(message, buffer,
                                                                                 &own_buffer);
}

}  // namespace graphserve
