// A fixed-shape model served by the real graphserve binary: make_fixed_shape_repository.py's
// ResNet-18 on [3, 224, 224] images, with a batch-only grid, on the CPU. Each answer, batched with
// other requests or alone, must equal the model run alone (the fixture's reference logits).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "async_calls.h"
#include "http_get.h"
#include "infer_helpers.h"
#include "prometheus_text.h"
#include "server_process.h"

namespace graphserve::testing {
namespace {

constexpr auto kStartTimeout = std::chrono::seconds(240);
constexpr auto kCallTimeout = std::chrono::seconds(300);
constexpr int64_t kImageElements = 3 * 224 * 224;
constexpr int64_t kClasses = 1000;
// fp32 on the CPU: oneDNN picks convolution kernels by batch size, so rows batched together may
// differ from batch 1 in the last bits; a wrong row or a padding leak differs by the logits' scale.
constexpr double kTolerance = 1e-4;

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

const std::vector<float>& Images() {
  static const std::vector<float> images = ReadFloats(std::string(FIXED_SHAPE_DIR) + "/reference/images.f32");
  return images;
}

const std::vector<float>& ReferenceLogits() {
  static const std::vector<float> logits = ReadFloats(std::string(FIXED_SHAPE_DIR) + "/reference/logits.f32");
  return logits;
}

int64_t ImageCount() { return static_cast<int64_t>(Images().size()) / kImageElements; }

// One request holding the reference images `indexes` as its rows, FP32 [rows, 3, 224, 224], raw.
inference::ModelInferRequest ImageRequest(const std::vector<int64_t>& indexes,
                                          const std::vector<int64_t>& image_dims = {3, 224, 224}) {
  inference::ModelInferRequest request;
  request.set_model_name("resnet18");
  auto* input = request.add_inputs();
  input->set_name("image");
  input->set_datatype("FP32");
  input->add_shape(static_cast<int64_t>(indexes.size()));
  for (int64_t dim : image_dims) input->add_shape(dim);
  std::string bytes;
  for (int64_t index : indexes) {
    const float* image = Images().data() + index * kImageElements;
    bytes.append(reinterpret_cast<const char*>(image), kImageElements * sizeof(float));
  }
  request.add_raw_input_contents(std::move(bytes));
  return request;
}

// Every row of `response` is its image's reference logits.
void ExpectReferenceLogits(const inference::ModelInferResponse& response,
                           const std::vector<int64_t>& indexes) {
  const FloatOutput logits = GetFloatOutput(response, "logits");
  ASSERT_TRUE(logits.found);
  ASSERT_EQ(logits.shape, (std::vector<int64_t>{static_cast<int64_t>(indexes.size()), kClasses}));
  for (size_t row = 0; row < indexes.size(); ++row) {
    const auto begin = logits.values.begin() + static_cast<int64_t>(row) * kClasses;
    const auto expected = ReferenceLogits().begin() + indexes[row] * kClasses;
    EXPECT_LT(MaxRelativeDifference(std::vector<float>(begin, begin + kClasses),
                                    std::vector<float>(expected, expected + kClasses)),
              kTolerance)
        << "row " << row << " (image " << indexes[row] << ")";
  }
}

class FixedShapeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess(
        GRAPHSERVE_BINARY,
        // debug: each bucket's line, which TheGridIsOneBucketPerBatchSizeLabelledBatchByDash reads
        {"--device", "cpu", "--model-repository", std::string(FIXED_SHAPE_DIR) + "/repository", "--log-level",
         "debug"},
        std::string(TEST_OUTPUT_DIR) + "/fixed_shape_server.log");
    ASSERT_TRUE(server_->WaitUntilReady(kStartTimeout)) << server_->Log();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    ASSERT_EQ(ImageCount(), 6);
    ASSERT_EQ(ReferenceLogits().size(), static_cast<size_t>(ImageCount() * kClasses));
  }

  static double Scrape(const std::string& name) {
    const Exposition scrape(HttpGet(server_->metrics_port(), "/metrics").body);
    return scrape.Sum(name, {{"model", "resnet18"}});
  }

  static inline ServerProcess* server_ = nullptr;
};

TEST_F(FixedShapeTest, TheGridIsOneBucketPerBatchSizeLabelledBatchByDash) {
  const std::string log = server_->Log();
  for (const char* bucket : {" 1x-(eager ", " 2x-(eager ", " 4x-(eager "}) {
    EXPECT_NE(log.find(bucket), std::string::npos) << bucket << " not in:\n" << log;
  }
  EXPECT_EQ(log.find("x1("), std::string::npos) << log;
  EXPECT_NE(log.find("max_sequence_length - (fixed shape)"), std::string::npos) << log;
}

TEST_F(FixedShapeTest, MetadataShowsTheFixedDims) {
  inference::ModelMetadataRequest request;
  request.set_name("resnet18");
  inference::ModelMetadataResponse metadata;
  grpc::ClientContext context;
  ASSERT_TRUE(server_->NewStub()->ModelMetadata(&context, request, &metadata).ok());
  ASSERT_EQ(metadata.inputs_size(), 1);
  EXPECT_EQ(std::vector<int64_t>(metadata.inputs(0).shape().begin(), metadata.inputs(0).shape().end()),
            (std::vector<int64_t>{-1, 3, 224, 224}));
}

TEST_F(FixedShapeTest, EachImageAloneGetsTheModelsLogits) {
  auto stub = server_->NewStub();
  for (int64_t index = 0; index < ImageCount(); ++index) {
    inference::ModelInferResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
    const grpc::Status status = stub->ModelInfer(&context, ImageRequest({index}), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ExpectReferenceLogits(response, {index});
  }
}

// Sent all at once, so that the batcher may put them together and pad the spare rows; whatever it
// decides, every row must be its image's answer alone.
TEST_F(FixedShapeTest, ConcurrentRequestsGetWhatEachImageGetsAlone) {
  const std::vector<std::vector<int64_t>> requests = {{0}, {1, 2}, {3}, {4, 5, 0}, {2}, {5}, {1}};
  int64_t rows = 0;
  for (const auto& indexes : requests) rows += static_cast<int64_t>(indexes.size());
  const double real_before = Scrape("graphserve_real_elements_total");
  const double padded_before = Scrape("graphserve_padded_elements_total");

  AsyncCaller caller(server_->address());
  for (size_t i = 0; i < requests.size(); ++i) caller.Start(ImageRequest(requests[i]), i, kCallTimeout);
  for (size_t answered = 0; answered < requests.size(); ++answered) {
    std::unique_ptr<AsyncCall> call = caller.Next();
    ASSERT_NE(call, nullptr);
    ASSERT_TRUE(call->status.ok()) << call->status.error_message();
    SCOPED_TRACE("request " + std::to_string(call->index));
    ExpectReferenceLogits(call->response, requests[call->index]);
  }
  // One real element per row; padding adds only whole rows up to a bucket's batch size.
  EXPECT_EQ(Scrape("graphserve_real_elements_total") - real_before, static_cast<double>(rows));
  EXPECT_GE(Scrape("graphserve_padded_elements_total") - padded_before, static_cast<double>(rows));
}

TEST_F(FixedShapeTest, OtherDimsAreInvalidArgumentNamingTheInputAndDims) {
  auto stub = server_->NewStub();
  inference::ModelInferRequest request = ImageRequest({0});
  request.mutable_inputs(0)->set_shape(3, 112);
  request.mutable_inputs(0)->add_shape(2);
  inference::ModelInferResponse response;
  grpc::ClientContext context;
  const grpc::Status status = stub->ModelInfer(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("inputs[0] 'image': shape [1, 3, 224, 112, 2]"),
            std::string::npos)
      << status.error_message();

  inference::ModelInferRequest wrong_size = ImageRequest({0});
  wrong_size.mutable_inputs(0)->set_shape(3, 112);
  wrong_size.mutable_raw_input_contents(0)->resize(3 * 224 * 112 * sizeof(float));
  grpc::ClientContext context2;
  const grpc::Status refused = stub->ModelInfer(&context2, wrong_size, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("shape [1, 3, 224, 112], expected [batch, 3, 224, 224]"),
            std::string::npos)
      << refused.error_message();
}

}  // namespace
}  // namespace graphserve::testing
