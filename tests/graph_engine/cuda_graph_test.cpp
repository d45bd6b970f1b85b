// The CUDA-graph executor, through the public, torch-free API. Every test skips (saying so) when no
// CUDA device is present, as on CI's CPU machines; all of them run on the CUDA host.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "graphserve/engine/executor.h"
#include "test_batches.h"

namespace graphserve {
namespace {

using testing::Fp32Values;
using testing::ImageItem;
using testing::kSmallCnnImage;
using testing::MakeBatch;
using testing::RelativeDifference;
using testing::SmallCnnSpec;
using testing::TokenItem;

constexpr int64_t kHidden = 256;
constexpr int64_t kVocab = 1024;

class CudaGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GetEngineInfo().cuda_device_count == 0) GTEST_SKIP() << "no CUDA device: CUDA-graph tests skipped";
  }
};

ModelSpec EncoderSpec(std::vector<int64_t> batches, std::vector<int64_t> lengths,
                      Precision precision = Precision::kFp32) {
  ModelSpec spec;
  spec.name = "encoder";
  spec.platform = kPlatformBuiltinEncoder;
  spec.max_batch_size = batches.back();
  spec.max_sequence_length = lengths.back();
  spec.inputs = {TensorSpec{"input_ids", DataType::kInt64, {-1}, 0.0},
                 TensorSpec{"attention_mask", DataType::kInt64, {-1}, 0.0}};
  spec.sequence_mask_input = "attention_mask";
  spec.outputs = {TensorSpec{"last_hidden_state", DataType::kFp32, {-1, kHidden}, 0.0},
                  TensorSpec{"pooler_output", DataType::kFp32, {kHidden}, 0.0}};
  spec.bucket_batch_sizes = std::move(batches);
  spec.bucket_lengths = std::move(lengths);
  spec.precision = precision;
  return spec;
}

ModelSpec FeatureModelSpec(const std::string& name) {
  ModelSpec spec;
  spec.name = name;
  spec.platform = kPlatformTorchScript;
  spec.max_batch_size = 4;
  spec.max_sequence_length = 16;
  spec.inputs = {TensorSpec{"input_ids", DataType::kInt64, {-1}, 0.0},
                 TensorSpec{"attention_mask", DataType::kInt64, {-1}, 0.0}};
  spec.sequence_mask_input = "attention_mask";
  spec.outputs = {TensorSpec{"per_token", DataType::kFp32, {-1, 8}, 0.0},
                  TensorSpec{"pooled", DataType::kFp32, {8}, 0.0}};
  spec.bucket_batch_sizes = {2, 4};
  spec.bucket_lengths = {8, 16};
  return spec;
}

std::unique_ptr<Executor> Ready(const ModelSpec& spec, const std::string& device,
                                const std::string& model_dir = "") {
  ExecutorOptions options;
  options.device = device;
  options.model_dir = model_dir;
  std::unique_ptr<Executor> executor;
  Status status = CreateExecutor(spec, options, &executor);
  EXPECT_TRUE(status.ok()) << status.ToString();
  if (!status.ok()) return nullptr;
  status = executor->Warmup();
  EXPECT_TRUE(status.ok()) << status.ToString();
  return status.ok() ? std::move(executor) : nullptr;
}

BatchOutputs ExecuteOk(Executor& executor, const Batch& batch) {
  BatchOutputs outputs;
  Status status = executor.Execute(batch, &outputs);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return outputs;
}

uint64_t EagerCount(const ExecutionCounters& counters, EagerReason reason) {
  return counters.eager_runs[static_cast<int>(reason)];
}

uint64_t ReplayCount(const ExecutionCounters& counters) {
  uint64_t replays = 0;
  for (const auto& [bucket, count] : counters.graph_replays) replays += count;
  return replays;
}

// The executor under test and, for its expected answers, the same spec run eagerly on the GPU.
std::unique_ptr<Executor> EagerTwin(const ModelSpec& spec, const std::string& model_dir = "") {
  ModelSpec eager_spec = spec;
  eager_spec.cuda_graphs_disabled = true;
  return Ready(eager_spec, "cuda:0", model_dir);
}

// Random items whose rows sum to `rows` and whose longest is exactly `length` (the first item's).
std::vector<InferenceItem> RandomItems(int64_t rows, int64_t length, size_t output_count,
                                       std::mt19937& random) {
  std::vector<InferenceItem> items;
  int64_t rows_left = rows;
  while (rows_left > 0) {
    const int64_t item_rows = std::uniform_int_distribution<int64_t>(1, rows_left)(random);
    const int64_t item_length = std::uniform_int_distribution<int64_t>(1, length)(random);
    items.push_back(TokenItem(item_rows, item_length, random(), kVocab, output_count));
    rows_left -= item_rows;
  }
  items[0] = TokenItem(items[0].rows, length, random(), kVocab, output_count);
  return items;
}

Batch BatchOf(const std::vector<InferenceItem>& items, BucketShape shape) {
  std::vector<const InferenceItem*> pointers;
  for (const InferenceItem& item : items) pointers.push_back(&item);
  return MakeBatch(pointers, shape);
}

void ExpectSameOutputs(const BatchOutputs& actual, const BatchOutputs& expected, const std::string& where) {
  ASSERT_EQ(actual.size(), expected.size()) << where;
  for (size_t k = 0; k < expected.size(); ++k) {
    ASSERT_EQ(actual[k].size(), expected[k].size()) << where;
    for (size_t o = 0; o < expected[k].size(); ++o) {
      EXPECT_EQ(actual[k][o].shape, expected[k][o].shape) << where << " item " << k << " output " << o;
      EXPECT_LT(RelativeDifference(Fp32Values(actual[k][o]), Fp32Values(expected[k][o])), 1e-4)
          << where << " item " << k << " output " << o;
    }
  }
}

TEST_F(CudaGraphTest, ReplaysEqualEagerForRandomMixedBatchesInEveryBucket) {
  const ModelSpec spec = EncoderSpec({1, 2, 4, 8}, {16, 32, 64, 128});
  auto graphs = Ready(spec, "cuda:0");
  auto eager = EagerTwin(spec);
  ASSERT_TRUE(graphs && eager);
  for (const BucketInfo& bucket : graphs->Buckets()) {
    EXPECT_TRUE(bucket.graph) << bucket.shape.ToString() << " was not captured";
    EXPECT_GT(bucket.execute_time_us, 0.0);
  }

  std::mt19937 random(2024);
  std::set<BucketShape> buckets_used;
  int batches = 0;
  for (const int64_t batch_size : spec.bucket_batch_sizes) {
    for (const int64_t length : spec.bucket_lengths) {
      for (int repeat = 0; repeat < 3; ++repeat) {
        // Items that together need exactly this bucket: their rows sum to more than the next
        // smaller batch size and the longest is longer than the next smaller length.
        const std::vector<InferenceItem> items = RandomItems(
            batch_size - (repeat == 2 && batch_size > 1 ? 1 : 0), length, spec.outputs.size(), random);
        const Batch batch = BatchOf(items, BucketShape{batch_size, length});
        const BatchOutputs from_graph = ExecuteOk(*graphs, batch);
        ASSERT_EQ(from_graph.size(), items.size());
        ExpectSameOutputs(from_graph, ExecuteOk(*eager, batch), "bucket " + batch.padded_shape.ToString());
        buckets_used.insert(batch.padded_shape);
        ++batches;
      }
    }
  }
  const ExecutionCounters counters = graphs->Counters();
  EXPECT_EQ(ReplayCount(counters), static_cast<uint64_t>(batches));
  EXPECT_EQ(counters.graph_replays.size(), buckets_used.size());
  EXPECT_EQ(counters.batches, static_cast<uint64_t>(batches));
  EXPECT_GE(counters.padded_elements, counters.real_elements);
}

// A token budget makes the grid a staircase: the executor captures its points only, and its static
// buffers hold each output's own largest bucket: 16 pooled rows at length 8 (16x8) and 128 tokens
// of hidden states (8x16 or 16x8), though no single bucket is largest in both.
TEST_F(CudaGraphTest, StaircaseGridCapturesItsPointsAndServesBatchesBeyondMaxBatchSize) {
  ModelSpec spec = EncoderSpec({2, 4, 8, 16}, {8, 16});
  spec.max_batch_size = 4;
  spec.max_batch_tokens = 128;
  auto graphs = Ready(spec, "cuda:0");
  auto eager = EagerTwin(spec);
  ASSERT_TRUE(graphs && eager);
  std::vector<BucketShape> captured;
  for (const BucketInfo& bucket : graphs->Buckets()) {
    EXPECT_TRUE(bucket.graph) << bucket.shape.ToString() << " was not captured";
    captured.push_back(bucket.shape);
  }
  EXPECT_EQ(captured, spec.Buckets());
  EXPECT_EQ(captured.size(), 7u);  // no 16x16

  std::mt19937 random(88);
  int batches = 0;
  for (const BucketShape& shape : spec.Buckets()) {
    const std::vector<InferenceItem> items =
        RandomItems(shape.batch, shape.length, spec.outputs.size(), random);
    const Batch batch = BatchOf(items, shape);
    ExpectSameOutputs(ExecuteOk(*graphs, batch), ExecuteOk(*eager, batch),
                      "bucket " + shape.ToString());
    ++batches;
  }
  // Beyond the budget the batch runs eagerly, as any batch off the grid.
  const std::vector<InferenceItem> items = RandomItems(12, 16, spec.outputs.size(), random);
  ExpectSameOutputs(ExecuteOk(*graphs, BatchOf(items, BucketShape{12, 16})),
                    ExecuteOk(*eager, BatchOf(items, BucketShape{12, 16})), "oversize 12x16");
  const ExecutionCounters counters = graphs->Counters();
  EXPECT_EQ(ReplayCount(counters), static_cast<uint64_t>(batches));
  EXPECT_EQ(EagerCount(counters, EagerReason::kOversize), 1u);
}

// A fixed-shape model's grid is one graph per batch size; replaying each, with spare rows padded,
// gives every item what eager gives it.
TEST_F(CudaGraphTest, FixedShapeCnnCapturesOneGraphPerBatchSizeAndReplaysEqualEager) {
  const ModelSpec spec = SmallCnnSpec();
  const std::string model_dir = std::string(GRAPHSERVE_CUDA_TEST_MODELS_DIR) + "/small_cnn";
  auto graphs = Ready(spec, "cuda:0", model_dir);
  auto eager = EagerTwin(spec, model_dir);
  ASSERT_TRUE(graphs && eager);
  ASSERT_EQ(graphs->Buckets().size(), spec.bucket_batch_sizes.size());
  for (const BucketInfo& bucket : graphs->Buckets()) {
    EXPECT_TRUE(bucket.graph) << spec.BucketLabel(bucket.shape) << " was not captured";
    EXPECT_EQ(bucket.shape.length, kFixedShapeLength);
  }
  EXPECT_EQ(graphs->capture_summary().graphs_captured, static_cast<int>(spec.bucket_batch_sizes.size()));

  uint32_t seed = 300;
  for (const int64_t batch_size : spec.bucket_batch_sizes) {
    // One row short of the bucket where it can be, so that a padded row rides along.
    std::vector<InferenceItem> items = {ImageItem(1, kSmallCnnImage, ++seed, 2)};
    if (batch_size > 2) items.push_back(ImageItem(batch_size - 2, kSmallCnnImage, ++seed, 2));
    const Batch batch = BatchOf(items, BucketShape{batch_size, kFixedShapeLength});
    ExpectSameOutputs(ExecuteOk(*graphs, batch), ExecuteOk(*eager, batch),
                      "bucket " + spec.BucketLabel(batch.padded_shape));
  }
  EXPECT_EQ(ReplayCount(graphs->Counters()), spec.bucket_batch_sizes.size());
}

// Triton's ragged batching: a graph per (rows, total tokens) bucket, captured over fixed buffers and
// verified at capture; random mixes of rows and lengths replay what eager computes, and padding counts
// only each bucket's tail.
TEST_F(CudaGraphTest, RaggedBucketsCaptureAndReplayRandomMixesAsEagerDoes) {
  const ModelSpec spec = testing::RaggedTestSpec();
  const std::string model_dir = std::string(GRAPHSERVE_CUDA_TEST_MODELS_DIR) + "/ragged";
  auto graphs = Ready(spec, "cuda:0", model_dir);
  auto eager = EagerTwin(spec, model_dir);
  ASSERT_TRUE(graphs && eager);
  for (const BucketInfo& bucket : graphs->Buckets()) {
    EXPECT_TRUE(bucket.graph) << spec.BucketLabel(bucket.shape) << " was not captured";
  }
  std::mt19937 random(29);
  uint64_t real_tokens = 0, bucket_tokens = 0;
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<InferenceItem> items;
    int64_t rows = 0, tokens = 0;
    while (true) {
      const int64_t item_rows = std::uniform_int_distribution<int64_t>(1, 2)(random);
      const int64_t length = std::uniform_int_distribution<int64_t>(1, 16)(random);
      if (!items.empty() && spec.IsOversize(rows + item_rows, tokens + item_rows * length)) break;
      InferenceItem item = TokenItem(item_rows, length, random(), 100, 2);
      item.inputs.resize(1);  // input_ids only
      items.push_back(std::move(item));
      rows += item_rows;
      tokens += item_rows * length;
      if (std::uniform_int_distribution<int>(0, 3)(random) == 0) break;  // small buckets too
    }
    const BucketShape shape = spec.BucketFor(rows, tokens);
    ExpectSameOutputs(ExecuteOk(*graphs, BatchOf(items, shape)), ExecuteOk(*eager, BatchOf(items, shape)),
                      "trial " + std::to_string(trial) + " bucket " + shape.ToString());
    real_tokens += static_cast<uint64_t>(tokens);
    bucket_tokens += static_cast<uint64_t>(shape.length);
  }
  EXPECT_EQ(ReplayCount(graphs->Counters()), 30u);
  EXPECT_EQ(graphs->Counters().real_elements, real_tokens);
  EXPECT_EQ(graphs->Counters().padded_elements, bucket_tokens);
}

TEST_F(CudaGraphTest, PipelinedLaunchesEqualEagerWhileTheNextBatchIsAssembled) {
  // Batch i+1 is assembled and launched while batch i is still on the GPU, as the scheduler does:
  // consecutive batches share the static buffers (different buckets view prefixes of them) and
  // alternate between the two staging slots; an oversize batch runs eagerly in between.
  const ModelSpec spec = EncoderSpec({1, 2, 4, 8}, {16, 32, 64, 128});
  auto graphs = Ready(spec, "cuda:0");
  auto eager = EagerTwin(spec);
  ASSERT_TRUE(graphs && eager);
  ASSERT_EQ(graphs->pipeline_depth(), 2);

  std::mt19937 random(7);
  const std::vector<BucketShape> shapes = {{8, 128}, {1, 16}, {4, 64}, {8, 128}, {2, 32},
                                           {12, 40}, {8, 16}, {1, 128}, {4, 128}};
  std::vector<std::vector<InferenceItem>> items;
  std::vector<Batch> batches;
  for (const BucketShape& shape : shapes) {
    items.push_back(RandomItems(shape.batch, shape.length, spec.outputs.size(), random));
  }
  for (size_t b = 0; b < shapes.size(); ++b) batches.push_back(BatchOf(items[b], shapes[b]));

  std::vector<BatchOutputs> from_graph(batches.size());
  std::unique_ptr<LaunchedBatch> previous;
  for (size_t b = 0; b <= batches.size(); ++b) {
    std::unique_ptr<LaunchedBatch> current;
    if (b < batches.size()) {
      Status status = graphs->Launch(batches[b], &current);
      ASSERT_TRUE(status.ok()) << status.ToString();
    }
    if (previous) {
      Status status = graphs->Complete(std::move(previous), &from_graph[b - 1]);
      ASSERT_TRUE(status.ok()) << status.ToString();
    }
    previous = std::move(current);
  }
  for (size_t b = 0; b < batches.size(); ++b) {
    ASSERT_EQ(from_graph[b].size(), items[b].size());
    ExpectSameOutputs(from_graph[b], ExecuteOk(*eager, batches[b]),
                      "batch " + std::to_string(b) + " (" + shapes[b].ToString() + ")");
  }
  const ExecutionCounters counters = graphs->Counters();
  EXPECT_EQ(ReplayCount(counters), batches.size() - 1);
  EXPECT_EQ(EagerCount(counters, EagerReason::kOversize), 1u);
}

TEST_F(CudaGraphTest, StagesOfReplayedAndEagerBatchesAreTimedWithinTheirWallTime) {
  const ModelSpec spec = EncoderSpec({1, 2, 4}, {16, 32});
  auto graphs = Ready(spec, "cuda:0");
  ASSERT_TRUE(graphs);
  std::mt19937 random(11);
  // Two replays, the second launched while the first runs, then an oversize batch that runs
  // eagerly inside Launch.
  const std::vector<BucketShape> shapes = {{4, 32}, {2, 16}, {6, 40}};
  std::vector<std::vector<InferenceItem>> items;
  for (const BucketShape& shape : shapes) {
    items.push_back(RandomItems(shape.batch, shape.length, spec.outputs.size(), random));
  }
  std::vector<Batch> batches;
  std::vector<BatchStageTimes> stages(shapes.size());
  for (size_t b = 0; b < shapes.size(); ++b) {
    batches.push_back(BatchOf(items[b], shapes[b]));
    batches[b].stage_times = &stages[b];
  }
  // From each batch's Launch to the end of its Complete: its stages happen one after the other
  // inside that window (the device's between events on the one stream).
  using SteadyTime = std::chrono::steady_clock::time_point;
  std::vector<SteadyTime> launched(shapes.size()), completed(shapes.size());
  std::vector<std::unique_ptr<LaunchedBatch>> runs(shapes.size());
  BatchOutputs outputs;
  auto launch = [&](size_t b) {
    launched[b] = std::chrono::steady_clock::now();
    ASSERT_TRUE(graphs->Launch(batches[b], &runs[b]).ok());
  };
  auto complete = [&](size_t b) {
    ASSERT_TRUE(graphs->Complete(std::move(runs[b]), &outputs).ok());
    completed[b] = std::chrono::steady_clock::now();
  };
  launch(0);
  launch(1);
  complete(0);
  complete(1);
  launch(2);
  complete(2);
  for (size_t b = 0; b < shapes.size(); ++b) {
    SCOPED_TRACE("batch " + shapes[b].ToString());
    EXPECT_GT(stages[b].input_ns, 0);
    EXPECT_GT(stages[b].infer_ns, 0);
    EXPECT_GT(stages[b].output_ns, 0);
    const int64_t window_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(completed[b] - launched[b]).count();
    EXPECT_LE(stages[b].input_ns + stages[b].infer_ns + stages[b].output_ns, window_ns);
  }
  EXPECT_EQ(ReplayCount(graphs->Counters()), 2u);
}

TEST_F(CudaGraphTest, UnwantedOutputsAreNotCopiedBack) {
  auto executor = Ready(EncoderSpec({1, 2}, {16}), "cuda:0");
  ASSERT_TRUE(executor);
  InferenceItem item = TokenItem(1, 9, 5, kVocab, 2);
  item.outputs_wanted = {false, true};
  const BatchOutputs outputs = ExecuteOk(*executor, MakeBatch({&item}, BucketShape{1, 16}));
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_TRUE(outputs[0][0].bytes.empty());
  EXPECT_EQ(outputs[0][1].shape, (std::vector<int64_t>{1, kHidden}));
}

TEST_F(CudaGraphTest, SharedPoolKeepsTheGridNearTheLargestBucketAlone) {
  const std::vector<int64_t> batches = DefaultBucketBatchSizes(32);
  const std::vector<int64_t> lengths = DefaultBucketLengths(512);
  auto largest_alone = Ready(EncoderSpec({32}, {512}), "cuda:0");
  auto whole_grid = Ready(EncoderSpec(batches, lengths), "cuda:0");
  ASSERT_TRUE(largest_alone && whole_grid);
  const CaptureSummary alone = largest_alone->capture_summary();
  const CaptureSummary grid = whole_grid->capture_summary();
  EXPECT_EQ(grid.graphs_captured, static_cast<int>(batches.size() * lengths.size()));
  ASSERT_GT(alone.graph_pool_bytes, 0u);
  const double ratio = static_cast<double>(grid.graph_pool_bytes) / static_cast<double>(alone.graph_pool_bytes);
  std::cout << "[ figures  ] graph pool: largest bucket alone " << alone.graph_pool_bytes / 1048576.0
            << " MiB, whole grid of " << grid.graphs_captured << " graphs " << grid.graph_pool_bytes / 1048576.0
            << " MiB (ratio " << ratio << "), grid captured in " << grid.capture_time_us / 1e6 << " s\n";
  EXPECT_LT(ratio, 1.3);
}

TEST_F(CudaGraphTest, ReducedPrecisionEncodersCaptureAndVerify) {
  for (Precision precision : {Precision::kFp16, Precision::kBf16}) {
    SCOPED_TRACE(PrecisionName(precision));
    auto executor = Ready(EncoderSpec({1, 4}, {16, 64}, precision), "cuda:0");
    ASSERT_TRUE(executor);
    for (const BucketInfo& bucket : executor->Buckets()) EXPECT_TRUE(bucket.graph) << bucket.shape.ToString();
    const InferenceItem item = TokenItem(3, 40, 11, kVocab, 2);
    const BatchOutputs outputs = ExecuteOk(*executor, MakeBatch({&item}, BucketShape{4, 64}));
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_EQ(outputs[0][0].dtype, DataType::kFp32);
    EXPECT_EQ(outputs[0][0].shape, (std::vector<int64_t>{3, 40, kHidden}));
  }
}

// make_cuda_test_models.py exports the built-in encoder's architecture and weights as a CUDA
// AOTInductor package (batch 1..512, length 1..64): every bucket is captured around the package's
// Inductor kernels and verified against its eager run, and the replays answer as the built-in
// encoder does.
TEST_F(CudaGraphTest, AotInductorPackageCapturesEveryBucketAndMatchesTheBuiltInEncoder) {
  ModelSpec spec = EncoderSpec({1, 2, 8}, {16, 64});
  spec.platform = kPlatformAotInductor;
  auto graphs = Ready(spec, "cuda:0", std::string(GRAPHSERVE_CUDA_TEST_MODELS_DIR) + "/encoder_pt2");
  auto builtin = Ready(EncoderSpec({1, 2, 8}, {16, 64}), "cuda:0");
  ASSERT_TRUE(graphs && builtin);
  for (const BucketInfo& bucket : graphs->Buckets()) {
    EXPECT_TRUE(bucket.graph) << bucket.shape.ToString() << " was not captured";
  }
  std::mt19937 random(14);
  int batches = 0;
  for (const int64_t batch_size : spec.bucket_batch_sizes) {
    for (const int64_t length : spec.bucket_lengths) {
      const std::vector<InferenceItem> items = RandomItems(batch_size, length, spec.outputs.size(), random);
      const Batch batch = BatchOf(items, BucketShape{batch_size, length});
      ExpectSameOutputs(ExecuteOk(*graphs, batch), ExecuteOk(*builtin, batch),
                        "bucket " + batch.padded_shape.ToString());
      ++batches;
    }
  }
  EXPECT_EQ(ReplayCount(graphs->Counters()), static_cast<uint64_t>(batches));
}

TEST_F(CudaGraphTest, CudaPackageServedOnTheCpuIsRefusedNamingBoth) {
  ModelSpec spec = EncoderSpec({1, 2, 8}, {16, 64});
  spec.platform = kPlatformAotInductor;
  ExecutorOptions options;
  options.device = "cpu";
  options.model_dir = std::string(GRAPHSERVE_CUDA_TEST_MODELS_DIR) + "/encoder_pt2";
  std::unique_ptr<Executor> executor;
  const Status status = CreateExecutor(spec, options, &executor);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("compiled for 'cuda'"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("served on cpu"), std::string::npos) << status.ToString();
}

TEST_F(CudaGraphTest, UncapturableModelIsServedEagerlyAsCaptureFailed) {
  auto executor = Ready(FeatureModelSpec("item_model"), "cuda:0",
                        std::string(GRAPHSERVE_CUDA_TEST_MODELS_DIR) + "/item_model");
  ASSERT_TRUE(executor);
  for (const BucketInfo& bucket : executor->Buckets()) {
    EXPECT_FALSE(bucket.graph);
    EXPECT_EQ(bucket.eager_reason, EagerReason::kCaptureFailed) << bucket.shape.ToString();
  }
  EXPECT_EQ(executor->capture_summary().graphs_disabled, 4);
  const InferenceItem item = TokenItem(2, 5, 3, 1000, 2);
  const BatchOutputs outputs = ExecuteOk(*executor, MakeBatch({&item}, BucketShape{2, 8}));
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0][0].shape, (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(EagerCount(executor->Counters(), EagerReason::kCaptureFailed), 1u);
  EXPECT_EQ(ReplayCount(executor->Counters()), 0u);
}

TEST_F(CudaGraphTest, ModelThatDisagreesWithItsReplayIsServedEagerlyAsVerifyFailed) {
  auto executor = Ready(FeatureModelSpec("counting_model"), "cuda:0",
                        std::string(GRAPHSERVE_CUDA_TEST_MODELS_DIR) + "/counting_model");
  ASSERT_TRUE(executor);
  for (const BucketInfo& bucket : executor->Buckets()) {
    EXPECT_FALSE(bucket.graph);
    EXPECT_EQ(bucket.eager_reason, EagerReason::kVerifyFailed) << bucket.shape.ToString();
  }
  const InferenceItem item = TokenItem(1, 7, 3, 1000, 2);
  ExecuteOk(*executor, MakeBatch({&item}, BucketShape{2, 8}));
  EXPECT_EQ(EagerCount(executor->Counters(), EagerReason::kVerifyFailed), 1u);
}

TEST_F(CudaGraphTest, EveryOtherFallbackReasonIsCounted) {
  // oversize: a batch beyond the largest bucket.
  auto graphs = Ready(EncoderSpec({1, 2}, {16, 32}), "cuda:0");
  ASSERT_TRUE(graphs);
  const InferenceItem long_item = TokenItem(1, 40, 1, kVocab, 2);
  BatchOutputs outputs = ExecuteOk(*graphs, MakeBatch({&long_item}, BucketShape{1, 40}));
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0][0].shape, (std::vector<int64_t>{1, 40, kHidden}));
  EXPECT_EQ(EagerCount(graphs->Counters(), EagerReason::kOversize), 1u);

  // disabled: the config turns CUDA graphs off.
  ModelSpec disabled_spec = EncoderSpec({1, 2}, {16, 32});
  disabled_spec.cuda_graphs_disabled = true;
  auto disabled = Ready(disabled_spec, "cuda:0");
  ASSERT_TRUE(disabled);
  const InferenceItem item = TokenItem(1, 10, 2, kVocab, 2);
  ExecuteOk(*disabled, MakeBatch({&item}, BucketShape{1, 16}));
  EXPECT_EQ(EagerCount(disabled->Counters(), EagerReason::kDisabled), 1u);

  // no_cuda: the same model on the CPU.
  auto cpu = Ready(EncoderSpec({1, 2}, {16, 32}), "cpu");
  ASSERT_TRUE(cpu);
  ExecuteOk(*cpu, MakeBatch({&item}, BucketShape{1, 16}));
  EXPECT_EQ(EagerCount(cpu->Counters(), EagerReason::kNoCuda), 1u);
}

// A model that does not mask padding: a batch at a bucket length replays its graph with only its
// rows padded; any other length runs eagerly at its exact shape, counted as exact_length. Both equal
// the same batches run eagerly.
TEST_F(CudaGraphTest, AnUnmaskedModelReplaysItsBucketLengthsAndRunsOtherLengthsExactly) {
  ModelSpec spec = EncoderSpec({1, 2, 4}, {16, 32});
  spec.sequence_mask_input.clear();
  ASSERT_FALSE(spec.masks_padding());
  auto graphs = Ready(spec, "cuda:0");
  auto eager = EagerTwin(spec);
  ASSERT_TRUE(graphs && eager);
  std::mt19937 random(17);
  const std::vector<InferenceItem> on_grid = {TokenItem(1, 16, random(), kVocab, 2),
                                              TokenItem(2, 16, random(), kVocab, 2)};
  const BucketShape grid_shape = spec.BucketFor(3, 16);
  ASSERT_EQ(grid_shape, (BucketShape{4, 16}));
  ExpectSameOutputs(ExecuteOk(*graphs, BatchOf(on_grid, grid_shape)), ExecuteOk(*eager, BatchOf(on_grid, grid_shape)),
                    "length 16");
  EXPECT_EQ(ReplayCount(graphs->Counters()), 1u);

  const std::vector<InferenceItem> off_grid = {TokenItem(2, 11, random(), kVocab, 2)};
  const BucketShape exact = spec.BucketFor(2, 11);
  ASSERT_EQ(exact, (BucketShape{2, 11}));
  ExpectSameOutputs(ExecuteOk(*graphs, BatchOf(off_grid, exact)), ExecuteOk(*eager, BatchOf(off_grid, exact)),
                    "length 11");
  EXPECT_EQ(EagerCount(graphs->Counters(), EagerReason::kExactLength), 1u);
  EXPECT_EQ(ReplayCount(graphs->Counters()), 1u);
}

TEST_F(CudaGraphTest, TwoDevicesEachReplayTheirOwnGridAndAgreeWhileBothRun) {
  if (GetEngineInfo().cuda_device_count < 2) GTEST_SKIP() << "fewer than two CUDA devices: skipped";
  const ModelSpec spec = EncoderSpec({1, 2, 4, 8}, {16, 32, 64, 128});
  auto first = Ready(spec, "cuda:0");
  auto second = Ready(spec, "cuda:1");
  auto eager = EagerTwin(spec);
  ASSERT_TRUE(first && second && eager);
  EXPECT_EQ(second->device(), "cuda:1");
  EXPECT_EQ(second->capture_summary().graphs_captured, 16);
  EXPECT_GT(second->capture_summary().graph_pool_bytes, 0u);

  std::mt19937 random(11);
  std::vector<std::vector<InferenceItem>> items;
  std::vector<Batch> batches;
  std::vector<BucketShape> shapes;  // every bucket, in an order that changes bucket at each batch
  for (size_t b = 0; b < 40; ++b) {
    shapes.push_back(BucketShape{spec.bucket_batch_sizes[b % 4], spec.bucket_lengths[(b / 4) % 4]});
    items.push_back(RandomItems(shapes[b].batch, shapes[b].length, spec.outputs.size(), random));
  }
  for (size_t b = 0; b < items.size(); ++b) batches.push_back(BatchOf(items[b], shapes[b]));
  // Both devices busy at once, each from its own thread, as two instances' workers are.
  std::vector<BatchOutputs> on_first(batches.size()), on_second(batches.size());
  std::thread other([&] {
    for (size_t b = 0; b < batches.size(); ++b) on_second[b] = ExecuteOk(*second, batches[b]);
  });
  for (size_t b = 0; b < batches.size(); ++b) on_first[b] = ExecuteOk(*first, batches[b]);
  other.join();
  for (size_t b = 0; b < batches.size(); ++b) {
    const BatchOutputs expected = ExecuteOk(*eager, batches[b]);
    ExpectSameOutputs(on_first[b], expected, "cuda:0 batch " + std::to_string(b));
    ExpectSameOutputs(on_second[b], expected, "cuda:1 batch " + std::to_string(b));
  }
  EXPECT_EQ(ReplayCount(first->Counters()), batches.size());
  EXPECT_EQ(ReplayCount(second->Counters()), batches.size());
}

}  // namespace
}  // namespace graphserve
