// gRPC messages as gRPC hands them over with its own decompression off: plain ones parsed as they
// are, gzip and deflate ones inflated within the request limit (one byte past it is refused, however
// much more they hold), broken ones refused by name.
#include "graphserve/server/grpc/compressed_message.h"

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graphserve/server/http/content_coding.h"
#include "grpc_service.pb.h"

namespace graphserve {
namespace {

inference::ModelInferRequest Request(size_t raw_bytes, char fill) {
  inference::ModelInferRequest request;
  request.set_model_name("tiny");
  request.set_id("r1");
  request.add_inputs()->set_name("input_ids");
  request.add_raw_input_contents(std::string(raw_bytes, fill));
  return request;
}

// `bytes` as gRPC would hand them over: cut into slices of `slice` bytes, marked with `algorithm`.
class Message {
 public:
  Message(const std::string& bytes, grpc_compression_algorithm algorithm, size_t slice) {
    std::vector<grpc_slice> slices;
    for (size_t at = 0; at < bytes.size(); at += slice) {
      slices.push_back(grpc_slice_from_copied_buffer(bytes.data() + at, std::min(slice, bytes.size() - at)));
    }
    buffer_ = grpc_raw_compressed_byte_buffer_create(slices.data(), slices.size(), algorithm);
    for (grpc_slice& piece : slices) grpc_slice_unref(piece);
  }
  ~Message() { grpc_byte_buffer_destroy(buffer_); }
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;

  grpc_byte_buffer* get() const { return buffer_; }

 private:
  grpc_byte_buffer* buffer_;
};

class CompressedMessageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { grpc_init(); }
  static void TearDownTestSuite() { grpc_shutdown(); }
};

TEST_F(CompressedMessageTest, PlainMessagesParseAsTheyAre) {
  const inference::ModelInferRequest sent = Request(100000, 'x');
  for (size_t slice : {size_t{7}, size_t{4096}, size_t{1} << 20}) {
    Message message(sent.SerializeAsString(), GRPC_COMPRESS_NONE, slice);
    inference::ModelInferRequest received;
    ASSERT_TRUE(ParseGrpcMessage(message.get(), 1000, &received).ok()) << "slice " << slice;
    EXPECT_EQ(received.SerializeAsString(), sent.SerializeAsString());
  }
}

TEST_F(CompressedMessageTest, GzipAndDeflateMessagesAreInflated) {
  const inference::ModelInferRequest sent = Request(300000, 'y');
  const std::string plain = sent.SerializeAsString();
  const std::pair<grpc_compression_algorithm, ContentCoding> algorithms[] = {
      {GRPC_COMPRESS_GZIP, ContentCoding::kGzip}, {GRPC_COMPRESS_DEFLATE, ContentCoding::kDeflate}};
  for (const auto& [algorithm, coding] : algorithms) {
    for (size_t slice : {size_t{3}, size_t{1} << 20}) {
      Message message(CompressBody(plain, coding), algorithm, slice);
      inference::ModelInferRequest received;
      const Status status = ParseGrpcMessage(message.get(), plain.size(), &received);
      ASSERT_TRUE(status.ok()) << ContentCodingName(coding) << ": " << status.message();
      EXPECT_EQ(received.SerializeAsString(), plain);
    }
  }
}

TEST_F(CompressedMessageTest, AMessageInflatingPastTheLimitIsRefusedNamingIt) {
  const std::string plain = Request(1 << 20, '\0').SerializeAsString();
  // Exactly the limit is taken, one byte less is not.
  Message at_limit(CompressBody(plain, ContentCoding::kGzip), GRPC_COMPRESS_GZIP, 1 << 16);
  inference::ModelInferRequest received;
  EXPECT_TRUE(ParseGrpcMessage(at_limit.get(), plain.size(), &received).ok());
  for (const auto& [algorithm, coding] : {std::pair{GRPC_COMPRESS_GZIP, ContentCoding::kGzip},
                                          std::pair{GRPC_COMPRESS_DEFLATE, ContentCoding::kDeflate}}) {
    Message bomb(CompressBody(plain, coding), algorithm, 1 << 16);
    const Status status = ParseGrpcMessage(bomb.get(), plain.size() - 1, &received);
    EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
    EXPECT_NE(status.message().find("inflates (grpc-encoding " + std::string(ContentCodingName(coding)) +
                                    ") to more than the " + std::to_string(plain.size() - 1) + " bytes"),
              std::string::npos)
        << status.message();
  }
}

TEST_F(CompressedMessageTest, BrokenStreamsAndMessagesAreInvalidArguments) {
  const std::string plain = Request(5000, 'z').SerializeAsString();
  const std::string gzip = CompressBody(plain, ContentCoding::kGzip);
  inference::ModelInferRequest received;

  Message truncated(gzip.substr(0, gzip.size() - 10), GRPC_COMPRESS_GZIP, 1000);
  Status status = ParseGrpcMessage(truncated.get(), 1 << 20, &received);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "the request is not one complete gzip stream");

  Message trailing(gzip + "more", GRPC_COMPRESS_GZIP, 1000);
  EXPECT_EQ(ParseGrpcMessage(trailing.get(), 1 << 20, &received).code(), StatusCode::kInvalidArgument);

  // Marked deflate, sent as gzip: not a zlib stream.
  Message mislabelled(gzip, GRPC_COMPRESS_DEFLATE, 1000);
  status = ParseGrpcMessage(mislabelled.get(), 1 << 20, &received);
  EXPECT_EQ(status.message(), "the request is not one complete deflate stream");

  // A whole gzip stream of bytes that are no ModelInferRequest (a field of wire type 7).
  Message garbage(CompressBody(std::string(64, '\xff'), ContentCoding::kGzip), GRPC_COMPRESS_GZIP, 1000);
  status = ParseGrpcMessage(garbage.get(), 1 << 20, &received);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "the request is not a valid inference.ModelInferRequest message once inflated");

  Message plain_garbage(std::string(64, '\xff'), GRPC_COMPRESS_NONE, 1000);
  status = ParseGrpcMessage(plain_garbage.get(), 1 << 20, &received);
  EXPECT_EQ(status.message(), "the request is not a valid inference.ModelInferRequest message");
}

TEST_F(CompressedMessageTest, AnAnswerSerializedRawParsesBack) {
  inference::ModelInferResponse sent;
  sent.set_model_name("tiny");
  sent.add_raw_output_contents(std::string(70000, 'a'));
  grpc::ByteBuffer buffer;
  SerializeGrpcMessage(sent, &buffer);
  inference::ModelInferResponse received;
  ASSERT_TRUE(ParseGrpcMessage(&buffer, 1 << 20, &received).ok());
  EXPECT_EQ(received.SerializeAsString(), sent.SerializeAsString());
  EXPECT_FALSE(buffer.Valid());  // parsing empties the buffer
}

}  // namespace
}  // namespace graphserve
