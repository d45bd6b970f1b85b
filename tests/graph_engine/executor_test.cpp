// EagerExecutor serving the built-in encoder, through the public, torch-free API only.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "graphserve/engine/executor.h"
#include "test_batches.h"

namespace graphserve {
namespace {

using testing::Fp32Values;
using testing::MakeBatch;
using testing::RelativeDifference;
using testing::TokenItem;

constexpr int64_t kHidden = 256;
constexpr int64_t kVocab = 1024;

// A small grid keeps warm-up cheap: 2 x 2 buckets.
ModelSpec EncoderSpec(Precision precision = Precision::kFp32) {
  ModelSpec spec;
  spec.name = "encoder";
  spec.platform = kPlatformBuiltinEncoder;
  spec.max_batch_size = 4;
  spec.max_sequence_length = 16;
  spec.inputs = {TensorSpec{"input_ids", DataType::kInt64, {-1}, 0.0},
                 TensorSpec{"attention_mask", DataType::kInt64, {-1}, 0.0}};
  spec.sequence_mask_input = "attention_mask";
  spec.outputs = {TensorSpec{"last_hidden_state", DataType::kFp32, {-1, kHidden}, 0.0},
                  TensorSpec{"pooler_output", DataType::kFp32, {kHidden}, 0.0}};
  spec.bucket_batch_sizes = {2, 4};
  spec.bucket_lengths = {8, 16};
  spec.precision = precision;
  return spec;
}

std::unique_ptr<Executor> MakeExecutor(const ModelSpec& spec) {
  std::unique_ptr<Executor> executor;
  const Status status = CreateExecutor(spec, ExecutorOptions{}, &executor);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return executor;
}

// Runs `item` alone, padded to nothing but its own shape.
std::vector<HostTensor> RunAlone(Executor& executor, const InferenceItem& item) {
  BatchOutputs outputs;
  const Status status =
      executor.Execute(MakeBatch({&item}, BucketShape{item.rows, item.length}), &outputs);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return outputs.empty() ? std::vector<HostTensor>{} : outputs[0];
}

TEST(EagerExecutorTest, BatchedItemsGetWhatTheyGetAlone) {
  auto executor = MakeExecutor(EncoderSpec());
  ASSERT_NE(executor, nullptr);
  ASSERT_TRUE(executor->Warmup().ok());
  const std::vector<InferenceItem> items = {
      TokenItem(1, 3, 1, kVocab, 2), TokenItem(2, 7, 2, kVocab, 2), TokenItem(1, 8, 3, kVocab, 2)};
  BatchOutputs batch_outputs;
  const Status status = executor->Execute(
      MakeBatch({&items[0], &items[1], &items[2]}, BucketShape{4, 8}), &batch_outputs);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(batch_outputs.size(), items.size());
  for (size_t k = 0; k < items.size(); ++k) {
    SCOPED_TRACE("item " + std::to_string(k));
    const std::vector<HostTensor> alone = RunAlone(*executor, items[k]);
    ASSERT_EQ(alone.size(), 2u);
    ASSERT_EQ(batch_outputs[k].size(), 2u);
    const HostTensor& hidden = batch_outputs[k][0];
    const HostTensor& pooled = batch_outputs[k][1];
    EXPECT_EQ(hidden.dtype, DataType::kFp32);
    EXPECT_EQ(hidden.shape, (std::vector<int64_t>{items[k].rows, items[k].length, kHidden}));
    EXPECT_EQ(hidden.bytes.size(),
              static_cast<size_t>(items[k].rows * items[k].length * kHidden * 4));
    EXPECT_EQ(pooled.shape, (std::vector<int64_t>{items[k].rows, kHidden}));
    EXPECT_EQ(alone[0].shape, hidden.shape);
    EXPECT_LT(RelativeDifference(Fp32Values(hidden), Fp32Values(alone[0])), 1e-4);
    EXPECT_LT(RelativeDifference(Fp32Values(pooled), Fp32Values(alone[1])), 1e-4);
  }
  // Different items get different outputs: the comparison above is not trivially satisfied.
  EXPECT_GT(RelativeDifference(Fp32Values(batch_outputs[0][1]), Fp32Values(batch_outputs[2][1])),
            1e-2);
}

// With a token budget a formed batch holds more rows than a request may carry (max_batch_size 4
// here): 16 rows at length 8. The executor's buckets are the grid's points, and each request of such
// a batch gets its own rows, as alone.
TEST(EagerExecutorTest, BatchBeyondMaxBatchSizeRunsAndEachRequestGetsItsOwnSlice) {
  ModelSpec spec = EncoderSpec();
  spec.bucket_batch_sizes = {2, 4, 8, 16};
  spec.max_batch_tokens = 128;
  auto executor = MakeExecutor(spec);
  ASSERT_NE(executor, nullptr);
  ASSERT_TRUE(executor->Warmup().ok());
  std::vector<BucketShape> buckets;
  for (const BucketInfo& bucket : executor->Buckets()) buckets.push_back(bucket.shape);
  EXPECT_EQ(buckets, spec.Buckets());
  EXPECT_EQ(std::count(buckets.begin(), buckets.end(), BucketShape{16, 16}), 0);
  EXPECT_EQ(std::count(buckets.begin(), buckets.end(), BucketShape{16, 8}), 1);

  // Six requests of up to 4 rows: 15 rows, padded to 16x8.
  std::vector<InferenceItem> items;
  for (int64_t k = 0; k < 6; ++k) {
    items.push_back(TokenItem(k < 3 ? 4 : 1, 2 + k, static_cast<uint32_t>(20 + k), kVocab, 2));
  }
  std::vector<const InferenceItem*> pointers;
  for (const InferenceItem& item : items) pointers.push_back(&item);
  BatchOutputs batch_outputs;
  const Status status = executor->Execute(MakeBatch(pointers, BucketShape{16, 8}), &batch_outputs);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(batch_outputs.size(), items.size());
  const ExecutionCounters counters = executor->Counters();
  EXPECT_EQ(counters.batches, 1u);
  EXPECT_EQ(counters.real_elements, 4u * (2 + 3 + 4) + 1u * (5 + 6 + 7));
  EXPECT_EQ(counters.padded_elements, 16u * 8u);
  for (size_t k = 0; k < items.size(); ++k) {
    SCOPED_TRACE("item " + std::to_string(k));
    const std::vector<HostTensor> alone = RunAlone(*executor, items[k]);
    ASSERT_EQ(alone.size(), 2u);
    EXPECT_EQ(batch_outputs[k][0].shape,
              (std::vector<int64_t>{items[k].rows, items[k].length, kHidden}));
    EXPECT_EQ(batch_outputs[k][1].shape, (std::vector<int64_t>{items[k].rows, kHidden}));
    EXPECT_LT(RelativeDifference(Fp32Values(batch_outputs[k][0]), Fp32Values(alone[0])), 1e-4);
    EXPECT_LT(RelativeDifference(Fp32Values(batch_outputs[k][1]), Fp32Values(alone[1])), 1e-4);
  }
  EXPECT_GT(RelativeDifference(Fp32Values(batch_outputs[0][1]), Fp32Values(batch_outputs[5][1])),
            1e-2);
}

TEST(EagerExecutorTest, UnwantedOutputIsEmpty) {
  auto executor = MakeExecutor(EncoderSpec());
  ASSERT_NE(executor, nullptr);
  InferenceItem item = TokenItem(2, 5, 4, kVocab, 2);
  item.outputs_wanted = {false, true};
  BatchOutputs outputs;
  ASSERT_TRUE(executor->Execute(MakeBatch({&item}, BucketShape{2, 8}), &outputs).ok());
  ASSERT_EQ(outputs.size(), 1u);
  ASSERT_EQ(outputs[0].size(), 2u);
  EXPECT_EQ(outputs[0][0].element_count(), 0);
  EXPECT_TRUE(outputs[0][0].bytes.empty());
  EXPECT_EQ(outputs[0][1].shape, (std::vector<int64_t>{2, kHidden}));
}

TEST(EagerExecutorTest, EachStageIsTimedWithinTheBatchsWallTime) {
  auto executor = MakeExecutor(EncoderSpec());
  ASSERT_NE(executor, nullptr);
  ASSERT_TRUE(executor->Warmup().ok());
  const InferenceItem a = TokenItem(1, 3, 8, kVocab, 2);
  const InferenceItem b = TokenItem(2, 6, 9, kVocab, 2);
  Batch batch = MakeBatch({&a, &b}, BucketShape{4, 8});
  BatchStageTimes stages;
  batch.stage_times = &stages;
  BatchOutputs outputs;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(executor->Execute(batch, &outputs).ok());
  const int64_t wall_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_GT(stages.input_ns, 0);
  EXPECT_GT(stages.infer_ns, 0);
  EXPECT_GT(stages.output_ns, 0);
  EXPECT_LE(stages.input_ns + stages.infer_ns + stages.output_ns, wall_ns);
}

TEST(EagerExecutorTest, CountersAreExact) {
  auto executor = MakeExecutor(EncoderSpec());
  ASSERT_NE(executor, nullptr);
  ASSERT_TRUE(executor->Warmup().ok());
  EXPECT_EQ(executor->Counters().batches, 0u);  // warm-up is not serving

  const InferenceItem a = TokenItem(1, 3, 5, kVocab, 2);
  const InferenceItem b = TokenItem(2, 6, 6, kVocab, 2);
  const InferenceItem c = TokenItem(3, 10, 7, kVocab, 2);
  BatchOutputs outputs;
  ASSERT_TRUE(executor->Execute(MakeBatch({&a, &b}, BucketShape{4, 8}), &outputs).ok());
  // Oversize: more rows than the largest bucket; on a CPU still counted as no_cuda.
  ASSERT_TRUE(executor->Execute(MakeBatch({&b, &c}, BucketShape{5, 10}), &outputs).ok());
  // A failing batch counts nothing.
  EXPECT_FALSE(executor->Execute(MakeBatch({&c}, BucketShape{2, 16}), &outputs).ok());

  const ExecutionCounters counters = executor->Counters();
  EXPECT_EQ(counters.batches, 2u);
  EXPECT_EQ(counters.eager_runs[static_cast<int>(EagerReason::kNoCuda)], 2u);
  EXPECT_EQ(std::accumulate(counters.eager_runs.begin(), counters.eager_runs.end(), uint64_t{0}),
            2u);
  EXPECT_TRUE(counters.graph_replays.empty());
  EXPECT_EQ(counters.real_elements, uint64_t{1 * 3 + 2 * 6 + 2 * 6 + 3 * 10});
  EXPECT_EQ(counters.padded_elements, uint64_t{4 * 8 + 5 * 10});
}

TEST(EagerExecutorTest, PaddedShapeThatDoesNotHoldTheItemsIsInvalid) {
  auto executor = MakeExecutor(EncoderSpec());
  ASSERT_NE(executor, nullptr);
  const InferenceItem a = TokenItem(2, 8, 8, kVocab, 2);
  const InferenceItem b = TokenItem(1, 12, 9, kVocab, 2);
  BatchOutputs outputs;
  Status status = executor->Execute(MakeBatch({&a, &b}, BucketShape{2, 16}), &outputs);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("model 'encoder' bucket 2x16"), std::string::npos)
      << status.ToString();
  status = executor->Execute(MakeBatch({&a, &b}, BucketShape{4, 8}), &outputs);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(outputs.empty());
}

TEST(EagerExecutorTest, BucketsReportTheGridAndWarmupTimes) {
  auto executor = MakeExecutor(EncoderSpec());
  ASSERT_NE(executor, nullptr);
  EXPECT_EQ(executor->device(), "cpu");
  std::vector<BucketInfo> buckets = executor->Buckets();
  ASSERT_EQ(buckets.size(), 4u);
  EXPECT_EQ(buckets[0].shape, (BucketShape{2, 8}));
  EXPECT_EQ(buckets[1].shape, (BucketShape{2, 16}));
  EXPECT_EQ(buckets[2].shape, (BucketShape{4, 8}));
  EXPECT_EQ(buckets[3].shape, (BucketShape{4, 16}));
  for (const BucketInfo& bucket : buckets) EXPECT_EQ(bucket.execute_time_us, 0.0);

  ASSERT_TRUE(executor->Warmup().ok());
  buckets = executor->Buckets();
  ASSERT_EQ(buckets.size(), 4u);
  for (const BucketInfo& bucket : buckets) {
    SCOPED_TRACE(bucket.shape.ToString());
    EXPECT_FALSE(bucket.graph);
    EXPECT_EQ(bucket.eager_reason, EagerReason::kNoCuda);
    EXPECT_GT(bucket.execute_time_us, 0.0);
  }
}

TEST(EagerExecutorTest, CpuWarmupScalesLargeBucketsFromMeasuredOnes) {
  ModelSpec spec = EncoderSpec();
  spec.max_sequence_length = 256;
  spec.bucket_lengths = {8, 256};  // 4x256 exceeds the CPU's measured-token budget
  auto executor = MakeExecutor(spec);
  ASSERT_NE(executor, nullptr);
  ASSERT_TRUE(executor->Warmup().ok());
  std::map<BucketShape, BucketInfo> buckets;
  for (const BucketInfo& bucket : executor->Buckets()) buckets[bucket.shape] = bucket;
  EXPECT_TRUE(buckets.at({2, 8}).time_measured);
  EXPECT_TRUE(buckets.at({4, 8}).time_measured);
  EXPECT_TRUE(buckets.at({2, 256}).time_measured);  // the smallest batch of a length always runs
  const BucketInfo& scaled = buckets.at({4, 256});
  EXPECT_FALSE(scaled.time_measured);
  EXPECT_DOUBLE_EQ(scaled.execute_time_us, 2.0 * buckets.at({2, 256}).execute_time_us);
}

TEST(EagerExecutorTest, CpuWarmupSamplesTheGridAndInterpolatesTheOthers) {
  ModelSpec spec = EncoderSpec();
  spec.max_sequence_length = 64;
  spec.bucket_batch_sizes = {1, 2, 3, 4};                 // more than the CPU samples at a length
  spec.bucket_lengths = {8, 16, 24, 32, 40, 48, 56, 64};  // and more lengths than it samples
  std::vector<WarmupProgress> reports;
  std::unique_ptr<Executor> executor;
  ExecutorOptions options;
  options.warmup_progress = [&reports](const WarmupProgress& progress) { reports.push_back(progress); };
  ASSERT_TRUE(CreateExecutor(spec, options, &executor).ok());
  ASSERT_TRUE(executor->Warmup().ok());
  std::map<BucketShape, BucketInfo> buckets;
  std::vector<BucketShape> measured;
  for (const BucketInfo& bucket : executor->Buckets()) {
    buckets[bucket.shape] = bucket;
    EXPECT_GT(bucket.execute_time_us, 0.0) << bucket.shape.ToString();
    if (bucket.time_measured) measured.push_back(bucket.shape);
  }
  // Lengths at evenly spaced positions (0, 1, 3, 5, 7 of 8), and at each the batch sizes at positions
  // 0, 1 and 3 of 4.
  std::vector<BucketShape> expected;
  for (int64_t batch : {1, 2, 4}) {
    for (int64_t length : {8, 16, 32, 48, 64}) expected.push_back({batch, length});
  }
  EXPECT_EQ(measured, expected);
  auto time = [&buckets](int64_t batch, int64_t length) {
    return buckets.at({batch, length}).execute_time_us;
  };
  // 3 rows lie halfway between 2 and 4, and 24 halfway between 16 and 32: their times are the means.
  EXPECT_DOUBLE_EQ(time(3, 16), (time(2, 16) + time(4, 16)) / 2);
  EXPECT_DOUBLE_EQ(time(3, 32), (time(2, 32) + time(4, 32)) / 2);
  for (int64_t batch : {1, 2, 3, 4}) {
    EXPECT_DOUBLE_EQ(time(batch, 24), (time(batch, 16) + time(batch, 32)) / 2) << batch;
  }
  // One report per measured bucket, counting up to the number measured.
  ASSERT_EQ(reports.size(), expected.size());
  for (size_t i = 0; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i].stage, WarmupStage::kWarmingUp);
    EXPECT_EQ(reports[i].done, static_cast<int>(i) + 1);
    EXPECT_EQ(reports[i].total, static_cast<int>(reports.size()));
  }
}

TEST(EagerExecutorTest, Bf16EncoderReturnsFp32CloseToFp32) {
  auto fp32 = MakeExecutor(EncoderSpec(Precision::kFp32));
  auto bf16 = MakeExecutor(EncoderSpec(Precision::kBf16));
  ASSERT_NE(fp32, nullptr);
  ASSERT_NE(bf16, nullptr);
  const InferenceItem item = TokenItem(2, 6, 10, kVocab, 2);
  const std::vector<HostTensor> reference = RunAlone(*fp32, item);
  const std::vector<HostTensor> reduced = RunAlone(*bf16, item);
  ASSERT_EQ(reduced.size(), 2u);
  ASSERT_EQ(reference.size(), 2u);
  for (size_t o = 0; o < 2; ++o) {
    EXPECT_EQ(reduced[o].dtype, DataType::kFp32);
    EXPECT_EQ(reduced[o].shape, reference[o].shape);
    const double difference = RelativeDifference(Fp32Values(reduced[o]), Fp32Values(reference[o]));
    EXPECT_LT(difference, 0.1);
    EXPECT_GT(difference, 0.0);  // it really computed in bf16
  }
}

// Runs only where libtorch sees a GPU (the CUDA host); CI has none. CUDA graphs are turned off,
// so that the eager executor itself runs on the GPU (cuda_graph_test covers the graphs).
TEST(EagerExecutorTest, CudaEncoderMatchesCpu) {
  if (GetEngineInfo().cuda_device_count == 0) GTEST_SKIP() << "no CUDA device";
  auto cpu = MakeExecutor(EncoderSpec());
  ASSERT_NE(cpu, nullptr);
  std::unique_ptr<Executor> cuda;
  ExecutorOptions options;
  options.device = "cuda";
  ModelSpec eager_on_cuda = EncoderSpec();
  eager_on_cuda.cuda_graphs_disabled = true;
  const Status created = CreateExecutor(eager_on_cuda, options, &cuda);
  ASSERT_TRUE(created.ok()) << created.ToString();
  EXPECT_EQ(cuda->device(), "cuda:0");
  const Status warmup = cuda->Warmup();
  ASSERT_TRUE(warmup.ok()) << warmup.ToString();
  for (const BucketInfo& bucket : cuda->Buckets()) {
    EXPECT_FALSE(bucket.graph);
    EXPECT_EQ(bucket.eager_reason, EagerReason::kDisabled);
    EXPECT_GT(bucket.execute_time_us, 0.0);
  }

  const InferenceItem a = TokenItem(1, 5, 21, kVocab, 2);
  const InferenceItem b = TokenItem(2, 8, 22, kVocab, 2);
  BatchOutputs on_cuda;
  BatchOutputs on_cpu;
  ASSERT_TRUE(cuda->Execute(MakeBatch({&a, &b}, BucketShape{4, 8}), &on_cuda).ok());
  ASSERT_TRUE(cpu->Execute(MakeBatch({&a, &b}, BucketShape{4, 8}), &on_cpu).ok());
  for (size_t k = 0; k < 2; ++k) {
    for (size_t o = 0; o < 2; ++o) {
      EXPECT_EQ(on_cuda[k][o].shape, on_cpu[k][o].shape);
      EXPECT_LT(RelativeDifference(Fp32Values(on_cuda[k][o]), Fp32Values(on_cpu[k][o])), 1e-3);
    }
  }
  ExecutionCounters counters = cuda->Counters();
  EXPECT_EQ(counters.batches, 1u);
  EXPECT_EQ(counters.eager_runs[static_cast<int>(EagerReason::kDisabled)], 1u);

  // A lone request at its exact, off-grid shape (a model that does not batch) and a batch beyond
  // the grid run eagerly because the config turned graphs off: "disabled", never "oversize".
  const InferenceItem wide = TokenItem(5, 10, 23, kVocab, 2);
  ASSERT_TRUE(cuda->Execute(MakeBatch({&a}, BucketShape{1, 5}), &on_cuda).ok());
  ASSERT_TRUE(cuda->Execute(MakeBatch({&wide}, BucketShape{5, 10}), &on_cuda).ok());
  counters = cuda->Counters();
  EXPECT_EQ(counters.batches, 3u);
  EXPECT_EQ(counters.eager_runs[static_cast<int>(EagerReason::kDisabled)], 3u);
  EXPECT_EQ(counters.eager_runs[static_cast<int>(EagerReason::kOversize)], 0u);
  EXPECT_EQ(counters.padded_elements, 4u * 8u + 1u * 5u + 5u * 10u);
}

TEST(CreateExecutorTest, CudaThatIsNotThereIsUnavailable) {
  std::unique_ptr<Executor> executor;
  ExecutorOptions options;
  const int device_count = GetEngineInfo().cuda_device_count;
  options.device = "cuda:" + std::to_string(device_count);
  Status status = CreateExecutor(EncoderSpec(), options, &executor);
  EXPECT_EQ(status.code(), StatusCode::kUnavailable) << status.ToString();
  EXPECT_EQ(executor, nullptr);
  if (device_count == 0) {
    options.device = "cuda";
    status = CreateExecutor(EncoderSpec(), options, &executor);
    EXPECT_EQ(status.code(), StatusCode::kUnavailable) << status.ToString();
    EXPECT_NE(status.message().find("model 'encoder'"), std::string::npos) << status.ToString();
  }
}

TEST(CreateExecutorTest, RejectsUnknownDevicesPlatformsAndSpecs) {
  std::unique_ptr<Executor> executor;
  ExecutorOptions options;
  options.device = "tpu:0";
  EXPECT_EQ(CreateExecutor(EncoderSpec(), options, &executor).code(), StatusCode::kInvalidArgument);
  options.device = "cuda:x";
  EXPECT_EQ(CreateExecutor(EncoderSpec(), options, &executor).code(), StatusCode::kInvalidArgument);

  ModelSpec spec = EncoderSpec();
  spec.platform = "onnxruntime_onnx";
  Status status = CreateExecutor(spec, ExecutorOptions{}, &executor);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("onnxruntime_onnx"), std::string::npos) << status.ToString();

  spec = EncoderSpec();
  spec.outputs[0].dims = {-1, 128};
  status = CreateExecutor(spec, ExecutorOptions{}, &executor);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("last_hidden_state"), std::string::npos) << status.ToString();

  spec = EncoderSpec();
  spec.inputs[0].dims = {-1, -1};
  EXPECT_EQ(CreateExecutor(spec, ExecutorOptions{}, &executor).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(executor, nullptr);
}

TEST(EngineInfoTest, ReportsTheLinkedLibtorch) {
  const EngineInfo info = GetEngineInfo();
  EXPECT_FALSE(info.libtorch_version.empty());
  EXPECT_NE(info.libtorch_version.find('.'), std::string::npos) << info.libtorch_version;
  EXPECT_GE(info.cuda_device_count, 0);
  if (info.cuda_device_count > 0) {
    EXPECT_FALSE(info.cuda_version.empty());
  }
  std::cout << "libtorch " << info.libtorch_version << ", CUDA '" << info.cuda_version << "', "
            << info.cuda_device_count << " device(s)\n";
}

}  // namespace
}  // namespace graphserve
