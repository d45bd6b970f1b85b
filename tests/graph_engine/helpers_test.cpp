// The engine's torch-free helpers: status, tensor and model-spec utilities, the copies of output
// slices, and the log sink.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "batch_accounting.h"
#include "engine_log.h"
#include "graphserve/engine/device.h"
#include "graphserve/engine/executor.h"
#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"
#include "graphserve/engine/tensor.h"
#include "row_bound.h"
#include "test_batches.h"

namespace graphserve {
namespace {

TEST(StatusTest, NamesAndToString) {
  EXPECT_STREQ(StatusCodeName(StatusCode::kOk), "ok");
  EXPECT_STREQ(StatusCodeName(StatusCode::kInvalidArgument), "invalid_argument");
  EXPECT_STREQ(StatusCodeName(StatusCode::kResourceExhausted), "resource_exhausted");
  EXPECT_STREQ(StatusCodeName(StatusCode::kUnavailable), "unavailable");
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  EXPECT_EQ(InvalidArgument("input 'x': bad").ToString(), "INVALID_ARGUMENT: input 'x': bad");
  EXPECT_EQ(NotFound("no model.pt").ToString(), "NOT_FOUND: no model.pt");
  EXPECT_TRUE(Status().ok());
  EXPECT_FALSE(Internal("x").ok());
  EXPECT_EQ(Internal("x").code(), StatusCode::kInternal);
}

TEST(TensorTest, DataTypeNamesRoundTrip) {
  const std::vector<std::pair<DataType, size_t>> types = {
      {DataType::kBool, 1},  {DataType::kUint8, 1}, {DataType::kInt8, 1}, {DataType::kInt16, 2},
      {DataType::kInt32, 4}, {DataType::kInt64, 8}, {DataType::kFp16, 2}, {DataType::kBf16, 2},
      {DataType::kFp32, 4},  {DataType::kFp64, 8}};
  for (const auto& [dtype, size] : types) {
    SCOPED_TRACE(DataTypeName(dtype));
    EXPECT_EQ(ElementSize(dtype), size);
    EXPECT_EQ(DataTypeFromName(DataTypeName(dtype)), dtype);
  }
  EXPECT_STREQ(DataTypeName(DataType::kBf16), "BF16");
  EXPECT_STREQ(DataTypeName(DataType::kUint8), "UINT8");
  EXPECT_EQ(DataTypeFromName("BYTES"), std::nullopt);
  EXPECT_EQ(DataTypeFromName("fp32"), std::nullopt);  // KServe names are upper case
  EXPECT_EQ(DataTypeFromName(""), std::nullopt);
}

TEST(TensorTest, ElementCountAndShapeToString) {
  EXPECT_EQ(ElementCount({}), 1);
  EXPECT_EQ(ElementCount({2, 16, 256}), 8192);
  EXPECT_EQ(ElementCount({3, 0}), 0);
  EXPECT_EQ(ShapeToString({2, 16, 256}), "[2, 16, 256]");
  EXPECT_EQ(ShapeToString({}), "[]");
  EXPECT_EQ(ShapeToString({-1}), "[-1]");
}

TEST(ModelSpecTest, VariableDimAndNames) {
  TensorSpec tensor;
  tensor.dims = {-1, 256};
  EXPECT_EQ(tensor.variable_dim(), 0);
  tensor.dims = {4, -1};
  EXPECT_EQ(tensor.variable_dim(), 1);
  tensor.dims = {256};
  EXPECT_EQ(tensor.variable_dim(), -1);
  EXPECT_STREQ(PrecisionName(Precision::kFp32), "fp32");
  EXPECT_STREQ(PrecisionName(Precision::kFp16), "fp16");
  EXPECT_STREQ(PrecisionName(Precision::kBf16), "bf16");
  EXPECT_EQ((BucketShape{8, 128}).ToString(), "8x128");
}

TEST(ModelSpecTest, BucketForPicksSmallestHoldingBucket) {
  ModelSpec spec;
  spec.bucket_batch_sizes = {1, 2, 4, 8};
  spec.bucket_lengths = {16, 32, 48, 64};
  EXPECT_EQ(spec.BucketFor(1, 1), (BucketShape{1, 16}));
  EXPECT_EQ(spec.BucketFor(3, 17), (BucketShape{4, 32}));
  EXPECT_EQ(spec.BucketFor(4, 32), (BucketShape{4, 32}));
  EXPECT_EQ(spec.BucketFor(8, 64), (BucketShape{8, 64}));
  EXPECT_FALSE(spec.IsOversize(8, 64));
  EXPECT_FALSE(spec.IsOversize(5, 33));
}

TEST(ModelSpecTest, BucketForOversizeReturnsTheBatchItself) {
  ModelSpec spec;
  spec.bucket_batch_sizes = {1, 2, 4, 8};
  spec.bucket_lengths = {16, 32, 48, 64};
  EXPECT_EQ(spec.BucketFor(9, 10), (BucketShape{9, 10}));
  EXPECT_TRUE(spec.IsOversize(9, 10));
  EXPECT_EQ(spec.BucketFor(2, 65), (BucketShape{2, 65}));
  EXPECT_TRUE(spec.IsOversize(2, 65));
  EXPECT_EQ(spec.BucketFor(12, 100), (BucketShape{12, 100}));
  EXPECT_TRUE(spec.IsOversize(12, 100));

  ModelSpec no_grid;
  EXPECT_EQ(no_grid.BucketFor(1, 1), (BucketShape{1, 1}));
  EXPECT_TRUE(no_grid.IsOversize(1, 1));
}

// Without a mask input a length is never padded: a bucket length keeps its bucket (rows padded),
// any other length is off the grid at its own shape.
TEST(ModelSpecTest, AModelThatDoesNotMaskIsNeverPaddedInLength) {
  ModelSpec spec;
  spec.inputs = {TensorSpec{"values", DataType::kFp32, {-1}, 0.0}};
  spec.bucket_batch_sizes = {1, 2, 4, 8};
  spec.bucket_lengths = {16, 32, 48, 64};
  EXPECT_FALSE(spec.masks_padding());
  EXPECT_EQ(spec.BucketFor(3, 32), (BucketShape{4, 32}));
  EXPECT_FALSE(spec.IsOversize(3, 32));
  EXPECT_FALSE(spec.IsUnpaddableLength(32));
  EXPECT_EQ(spec.BucketFor(3, 17), (BucketShape{3, 17}));
  EXPECT_TRUE(spec.IsOversize(3, 17));
  EXPECT_TRUE(spec.IsUnpaddableLength(17));
  EXPECT_EQ(spec.BucketFor(1, 65), (BucketShape{1, 65}));  // beyond the grid: oversize either way
  EXPECT_FALSE(spec.IsUnpaddableLength(65));

  spec.sequence_mask_input = "values";
  EXPECT_TRUE(spec.masks_padding());
  EXPECT_EQ(spec.BucketFor(3, 17), (BucketShape{4, 32}));
  EXPECT_FALSE(spec.IsUnpaddableLength(17));
  // A fixed-shape model has no length to pad.
  ModelSpec fixed;
  fixed.inputs = {TensorSpec{"image", DataType::kFp32, {3, 8, 8}, 0.0}};
  EXPECT_TRUE(fixed.masks_padding());
}

// A model with a pooled output [rows, 3] and a per-token one [rows, length, 2].
ModelSpec PooledAndPerTokenSpec() {
  ModelSpec spec;
  spec.outputs.resize(2);
  spec.outputs[0].dims = {3};
  spec.outputs[1].dims = {-1, 2};
  return spec;
}

InferenceItem ItemOf(int64_t rows, int64_t length) {
  InferenceItem item;
  item.rows = rows;
  item.length = length;
  item.outputs_wanted = {true, true};
  return item;
}

// Packs `slices` out of `padded` (one host buffer per output, elements numbered by position) the
// way the CUDA executor does, through `copies`.
std::vector<std::vector<int>> PackThroughCopies(const std::vector<SliceCopy>& copies,
                                                const std::vector<std::vector<int>>& padded,
                                                const std::vector<int64_t>& packed_sizes) {
  std::vector<std::vector<int>> packed(padded.size());
  for (size_t o = 0; o < padded.size(); ++o) packed[o].assign(static_cast<size_t>(packed_sizes[o]), -1);
  for (const SliceCopy& copy : copies) {
    for (int64_t run = 0; run < copy.height; ++run) {
      for (int64_t i = 0; i < copy.width; ++i) {
        packed[copy.output][static_cast<size_t>(copy.packed_offset + run * copy.width + i)] =
            padded[copy.output][static_cast<size_t>(copy.offset + run * copy.pitch + i)];
      }
    }
  }
  return packed;
}

TEST(SliceCopiesTest, OneRowRequestsPooledOutputsAreOneCopy) {
  const ModelSpec spec = PooledAndPerTokenSpec();
  const InferenceItem a = ItemOf(1, 5), b = ItemOf(2, 5), c = ItemOf(1, 8), d = ItemOf(1, 3);
  Batch batch;
  batch.items = {&a, &b, &c, &d};
  batch.padded_shape = BucketShape{8, 8};
  const std::vector<SliceCopy> copies = MergedSliceCopies(PlanOutputSlices(spec, batch), 2);
  std::vector<SliceCopy> pooled, per_token;
  for (const SliceCopy& copy : copies) (copy.output == 0 ? pooled : per_token).push_back(copy);
  // The pooled outputs of all five rows lie back to back: one copy of 5 x 3 elements.
  ASSERT_EQ(pooled.size(), 1u);
  EXPECT_EQ(pooled[0].offset, 0);
  EXPECT_EQ(pooled[0].width * pooled[0].height, 15);
  // Per token: a and b (length 5 of 8) share one strided copy of 3 rows; c fills its row, so it
  // and d's first 3 positions, right after it, are one contiguous run.
  ASSERT_EQ(per_token.size(), 2u);
  EXPECT_EQ(per_token[0].height, 3);
  EXPECT_EQ(per_token[0].width, 10);
  EXPECT_EQ(per_token[0].pitch, 16);
  EXPECT_EQ(per_token[1].offset, 3 * 16);
  EXPECT_EQ(per_token[1].width * per_token[1].height, 16 + 6);
  EXPECT_EQ(per_token[1].packed_offset, 3 * 10);
}

TEST(SliceCopiesTest, MergedCopiesPackWhatEachSliceCopiedAloneWould) {
  const ModelSpec spec = PooledAndPerTokenSpec();
  std::mt19937 random(7);
  for (int round = 0; round < 200; ++round) {
    SCOPED_TRACE(round);
    const BucketShape shape{16, 1 + static_cast<int64_t>(random() % 12)};
    std::vector<InferenceItem> items;
    for (int64_t rows_left = shape.batch; rows_left > 0 && random() % 8 != 0;) {
      const int64_t rows = 1 + static_cast<int64_t>(random() % std::min<int64_t>(rows_left, 3));
      // Few lengths, so that neighbours often share theirs.
      const int64_t length = std::max<int64_t>(1, shape.length - static_cast<int64_t>(random() % 3));
      items.push_back(ItemOf(rows, length));
      items.back().outputs_wanted = {random() % 4 != 0, random() % 4 != 0};
      rows_left -= rows;
    }
    Batch batch;
    for (const InferenceItem& item : items) batch.items.push_back(&item);
    batch.padded_shape = shape;
    const std::vector<OutputSlice> slices = PlanOutputSlices(spec, batch);
    const std::vector<int64_t> offsets = PackedOffsets(slices, 2);

    std::vector<std::vector<int>> padded = {
        std::vector<int>(static_cast<size_t>(shape.batch * 3)),
        std::vector<int>(static_cast<size_t>(shape.batch * shape.length * 2))};
    for (auto& values : padded) {
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int>(i);
    }
    std::vector<int64_t> packed_sizes(2, 0);
    std::vector<std::vector<int>> expected(2);
    for (size_t i = 0; i < slices.size(); ++i) {
      const OutputSlice& slice = slices[i];
      std::vector<int>& packed = expected[slice.output];
      ASSERT_EQ(static_cast<int64_t>(packed.size()), offsets[i]);
      packed.resize(packed.size() + static_cast<size_t>(slice.width * slice.height));
      CopySlice(slice, sizeof(int), reinterpret_cast<const char*>(padded[slice.output].data()),
                reinterpret_cast<char*>(packed.data() + offsets[i]));
      packed_sizes[slice.output] = static_cast<int64_t>(packed.size());
    }
    const std::vector<SliceCopy> copies = MergedSliceCopies(slices, 2);
    EXPECT_LE(copies.size(), slices.size());
    EXPECT_EQ(PackThroughCopies(copies, padded, packed_sizes), expected);
  }
}

// A BERT-like model's default grid: 32 rows a request, 512 tokens, the default token budget.
ModelSpec StaircaseSpec() {
  ModelSpec spec;
  spec.max_batch_size = 32;
  spec.max_sequence_length = 512;
  spec.max_batch_tokens = kDefaultMaxBatchTokens;
  spec.bucket_lengths = DefaultBucketLengths(512);
  spec.bucket_batch_sizes = DefaultBucketBatchSizes(32, kDefaultMaxBatchTokens, spec.bucket_lengths.front());
  return spec;
}

TEST(ModelSpecTest, TokenBudgetMakesAStaircaseOfTheGrid) {
  const ModelSpec spec = StaircaseSpec();
  EXPECT_EQ(spec.bucket_batch_sizes,
            (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512}));
  // Per length the largest batch: max_batch_size at least, and more while it fits 16384 tokens.
  const std::vector<std::pair<int64_t, int64_t>> largest = {
      {8, 512},   {16, 512},  {24, 512},  {32, 512},  {40, 384}, {48, 256}, {56, 256},
      {64, 256},  {80, 192},  {96, 128},  {112, 128}, {128, 128}, {160, 96}, {192, 64},
      {224, 64},  {256, 64},  {320, 48},  {384, 32},  {448, 32},  {512, 32}};
  size_t points = 0;
  for (const auto& [length, batch] : largest) {
    EXPECT_EQ(spec.LargestBatchFor(length), batch) << length;
    EXPECT_TRUE(spec.HasBucket({batch, length})) << length;
    const size_t next = SmallestAtLeast(spec.bucket_batch_sizes, batch) + 1;
    if (next < spec.bucket_batch_sizes.size()) {
      EXPECT_FALSE(spec.HasBucket({spec.bucket_batch_sizes[next], length})) << length;
    }
    points += next;
  }
  EXPECT_EQ(spec.Buckets().size(), points);
  EXPECT_EQ(points, 284u);  // against 200 for batch sizes up to 32 at every length
  EXPECT_EQ(spec.LargestBatchFor(20), 512);  // pads to 24
  EXPECT_EQ(spec.LargestBatchFor(513), 0);   // beyond the grid
  // Ties on batch x length go to the larger batch.
  EXPECT_EQ(spec.LargestBucket(), (BucketShape{512, 32}));
  EXPECT_FALSE(spec.HasBucket({512, 48}));
  EXPECT_FALSE(spec.HasBucket({5, 16}));  // not on the axes
}

TEST(ModelSpecTest, BucketForOnTheStaircasePicksAmongTheLengthsOwnSizes) {
  const ModelSpec spec = StaircaseSpec();
  EXPECT_EQ(spec.BucketFor(100, 10), (BucketShape{128, 16}));
  EXPECT_EQ(spec.BucketFor(300, 30), (BucketShape{384, 32}));
  EXPECT_EQ(spec.BucketFor(300, 40), (BucketShape{384, 40}));
  EXPECT_EQ(spec.BucketFor(400, 40), (BucketShape{400, 40}));  // 512x40 exceeds the budget
  EXPECT_TRUE(spec.IsOversize(400, 40));
  EXPECT_EQ(spec.BucketFor(200, 40), (BucketShape{256, 40}));
  EXPECT_EQ(spec.BucketFor(200, 41), (BucketShape{256, 48}));
  EXPECT_EQ(spec.BucketFor(33, 400), (BucketShape{33, 400}));
  EXPECT_TRUE(spec.IsOversize(33, 400));
  EXPECT_FALSE(spec.IsOversize(513 - 1, 17));
  EXPECT_TRUE(spec.IsOversize(513, 1));
  // A request's rows (at most max_batch_size) fit at every length.
  for (int64_t length : spec.bucket_lengths) {
    EXPECT_EQ(spec.BucketFor(32, length), (BucketShape{32, length}));
  }
  // Without the budget the same axes are a full grid again.
  ModelSpec rectangle = spec;
  rectangle.max_batch_tokens = 0;
  EXPECT_EQ(rectangle.BucketFor(300, 500), (BucketShape{384, 512}));
  EXPECT_EQ(rectangle.Buckets().size(), 360u);
}

TEST(ModelSpecTest, GridPointsNeedNoProductThatOverflows) {
  EXPECT_TRUE(IsGridPoint(64, 16, 32, 1024));
  EXPECT_FALSE(IsGridPoint(65, 16, 32, 1024));
  EXPECT_TRUE(IsGridPoint(32, int64_t{1} << 62, 32, 1024));   // within max_batch_size
  EXPECT_FALSE(IsGridPoint(int64_t{1} << 40, int64_t{1} << 40, 32, int64_t{1} << 62));
  EXPECT_TRUE(IsGridPoint(int64_t{1} << 40, 1000, 32, 0));  // no budget: every pair
}

TEST(ModelSpecTest, NegativeTokenBudgetIsRefused) {
  ModelSpec spec = StaircaseSpec();
  spec.name = "bert";
  spec.inputs = {TensorSpec{"ids", DataType::kInt64, {-1}, 0.0}};
  spec.outputs = {TensorSpec{"hidden", DataType::kFp32, {-1, 8}, 0.0}};
  EXPECT_TRUE(CheckModelSpec(spec).ok()) << CheckModelSpec(spec).ToString();
  spec.max_batch_tokens = -1;
  const Status status = CheckModelSpec(spec);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("max_batch_tokens"), std::string::npos) << status.message();
}

// An image classifier: no -1 anywhere, so a batch-only grid at kFixedShapeLength.
ModelSpec FixedShapeSpec() {
  ModelSpec spec;
  spec.name = "cnn";
  spec.max_batch_size = 4;
  spec.max_sequence_length = kFixedShapeLength;
  spec.inputs = {TensorSpec{"image", DataType::kFp32, {3, 8, 8}, 0.0}};
  spec.outputs = {TensorSpec{"logits", DataType::kFp32, {10}, 0.0}};
  spec.bucket_batch_sizes = {1, 2, 4};
  spec.bucket_lengths = {kFixedShapeLength};
  return spec;
}

TEST(ModelSpecTest, FixedShapeSpecIsABatchOnlyGridLabelledBatchByDash) {
  const ModelSpec spec = FixedShapeSpec();
  EXPECT_TRUE(CheckModelSpec(spec).ok()) << CheckModelSpec(spec).ToString();
  EXPECT_FALSE(spec.has_sequence_length());
  EXPECT_EQ(spec.BucketFor(3, kFixedShapeLength), (BucketShape{4, kFixedShapeLength}));
  EXPECT_TRUE(spec.IsOversize(5, kFixedShapeLength));
  EXPECT_EQ(spec.BucketLabel(BucketShape{4, kFixedShapeLength}), "4x-");
  EXPECT_EQ(PaddedShape(spec.inputs[0], BucketShape{4, kFixedShapeLength}),
            (std::vector<int64_t>{4, 3, 8, 8}));

  ModelSpec sequence = FixedShapeSpec();
  sequence.inputs[0].dims = {3, -1};
  EXPECT_TRUE(sequence.has_sequence_length());
  EXPECT_EQ(sequence.BucketLabel(BucketShape{4, 16}), "4x16");
}

TEST(ModelSpecTest, FixedShapeSpecRefusesOtherLengthsAndVariableOutputs) {
  ModelSpec lengths = FixedShapeSpec();
  lengths.bucket_lengths = {1, 16};
  Status status = CheckModelSpec(lengths);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("model 'cnn' (no input has a -1 dimension)"), std::string::npos)
      << status.message();

  ModelSpec limit = FixedShapeSpec();
  limit.max_sequence_length = 224;
  EXPECT_EQ(CheckModelSpec(limit).code(), StatusCode::kInvalidArgument);

  ModelSpec output = FixedShapeSpec();
  output.outputs[0].dims = {-1, 10};
  status = CheckModelSpec(output);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("output 'logits' has a -1"), std::string::npos) << status.message();
}

TEST(ModelSpecTest, BatchSizeStepsArePowersOfTwoAndOneAndAHalfTimesThem) {
  EXPECT_EQ(BatchSizeSteps(100), (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96}));
  EXPECT_EQ(BatchSizeSteps(1), (std::vector<int64_t>{1}));
  EXPECT_TRUE(BatchSizeSteps(0).empty());
  const std::vector<int64_t> all = BatchSizeSteps(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(all.back(), int64_t{1} << 61);  // ends before a step could overflow
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
}

TEST(ModelSpecTest, DefaultBatchSizesGrowInStepsOfOneAndAHalfEndingAtTheMax) {
  EXPECT_EQ(DefaultBucketBatchSizes(1), (std::vector<int64_t>{1}));
  EXPECT_EQ(DefaultBucketBatchSizes(32), (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32}));
  EXPECT_EQ(DefaultBucketBatchSizes(24), (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 24}));
  EXPECT_EQ(DefaultBucketBatchSizes(20), (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 20}));
  EXPECT_EQ(DefaultBucketBatchSizes(3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(DefaultBucketBatchSizes(0).empty());
  // With a token budget, the same steps beyond max_batch_size while they fit it at the shortest
  // length, up to kDefaultLargestBatch; a model allowed more rows a request keeps its own sizes.
  EXPECT_EQ(DefaultBucketBatchSizes(24, 16384, 16),
            (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512}));
  EXPECT_EQ(DefaultBucketBatchSizes(20, 16384, 16).at(9), 24);  // the steps go on after 20
  EXPECT_EQ(DefaultBucketBatchSizes(8, 1024, 16),
            (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64}));
  EXPECT_EQ(DefaultBucketBatchSizes(32, 16384, 512),
            (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32}));
  EXPECT_EQ(DefaultBucketBatchSizes(1024, 16384, 16).back(), 1024);
  EXPECT_EQ(DefaultBucketBatchSizes(1024, 16384, 16).size(), 20u);
}

TEST(ModelSpecTest, DefaultLengthsAreDenseAtSmallSizesAndEndAtTheMax) {
  EXPECT_EQ(DefaultBucketLengths(512), (std::vector<int64_t>{8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128,
                                                             160, 192, 224, 256, 320, 384, 448, 512}));
  EXPECT_EQ(DefaultBucketLengths(100), (std::vector<int64_t>{8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 100}));
  EXPECT_EQ(DefaultBucketLengths(128),
            (std::vector<int64_t>{8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128}));
  EXPECT_EQ(DefaultBucketLengths(200), (std::vector<int64_t>{8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128,
                                                             160, 192, 200}));
  EXPECT_EQ(DefaultBucketLengths(60), (std::vector<int64_t>{8, 16, 24, 32, 40, 48, 56, 60}));
  EXPECT_EQ(DefaultBucketLengths(40), (std::vector<int64_t>{8, 16, 24, 32, 40}));
  EXPECT_EQ(DefaultBucketLengths(16), (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(DefaultBucketLengths(8), (std::vector<int64_t>{8}));
  EXPECT_EQ(DefaultBucketLengths(5), (std::vector<int64_t>{5}));
  EXPECT_EQ(DefaultBucketLengths(2048).back(), 2048);
  EXPECT_EQ(DefaultBucketLengths(2048).size(), 28u);  // ..., 512, 640, 768, 896, 1024, 1280, ..., 2048
}

TEST(ExecutorTypesTest, EagerReasonNamesAreMetricLabels) {
  EXPECT_STREQ(EagerReasonName(EagerReason::kOversize), "oversize");
  EXPECT_STREQ(EagerReasonName(EagerReason::kCaptureFailed), "capture_failed");
  EXPECT_STREQ(EagerReasonName(EagerReason::kVerifyFailed), "verify_failed");
  EXPECT_STREQ(EagerReasonName(EagerReason::kDisabled), "disabled");
  EXPECT_STREQ(EagerReasonName(EagerReason::kNoCuda), "no_cuda");
  EXPECT_STREQ(EagerReasonName(EagerReason::kExactLength), "exact_length");
}

TEST(DeviceNameTest, ParsesCpuCudaAndCudaN) {
  DeviceName device;
  ASSERT_TRUE(ParseDeviceName("cpu", &device).ok());
  EXPECT_EQ(device.ToString(), "cpu");
  ASSERT_TRUE(ParseDeviceName("cuda", &device).ok());
  EXPECT_EQ(device.ToString(), "cuda:0");
  ASSERT_TRUE(ParseDeviceName("cuda:3", &device).ok());
  EXPECT_TRUE(device.cuda);
  EXPECT_EQ(device.index, 3);
}

TEST(DeviceNameTest, RefusesOtherNamesAndHugeIndexesWithoutThrowing) {
  for (const char* text : {"", "gpu", "cuda:", "cuda:-1", "cuda:+1", "cuda: 1", "cuda:1x", "CUDA:0",
                           "cuda:99999999999", "cuda:2147483648"}) {
    DeviceName device;
    const Status status = ParseDeviceName(text, &device);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(status.message().find(std::string("'") + text + "'"), std::string::npos) << status.message();
  }
}

TEST(EngineLogTest, InstalledSinkReceivesMessagesUntilReset) {
  std::vector<std::pair<LogLevel, std::string>> received;
  SetEngineLogSink([&received](LogLevel level, const std::string& message) {
    received.emplace_back(level, message);
  });
  EngineLog(LogLevel::kWarning, "first");
  EngineLog(LogLevel::kDebug, "second");
  SetEngineLogSink(nullptr);  // back to stderr
  EngineLog(LogLevel::kInfo, "not captured");
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(received[0], std::make_pair(LogLevel::kWarning, std::string("first")));
  EXPECT_EQ(received[1], std::make_pair(LogLevel::kDebug, std::string("second")));
}

// ---- ragged models ---------------------------------------------------------------------------------

// The engine tests' ragged spec with a second batch input, of per-row counts.
ModelSpec RaggedGridSpec() {
  ModelSpec spec = testing::RaggedTestSpec();
  spec.batch_inputs.push_back(BatchInputOf("counts", BatchInputKind::kElementCount, DataType::kInt64));
  return spec;
}

TEST(RaggedSpecTest, BucketsAreRowsByTotalTokensWithARowSpareForTheTail) {
  const ModelSpec spec = RaggedGridSpec();
  ASSERT_TRUE(CheckModelSpec(spec).ok());
  EXPECT_EQ(spec.BucketFor(1, 5), (BucketShape{4, 16}));
  EXPECT_EQ(spec.BucketFor(3, 17), (BucketShape{4, 32}));
  // 4 rows of 16 tokens fill their bucket exactly: no filler row needed.
  EXPECT_EQ(spec.BucketFor(4, 16), (BucketShape{4, 16}));
  // 4 rows that leave a tail need a fifth row for it.
  EXPECT_EQ(spec.BucketFor(4, 15), (BucketShape{8, 16}));
  // max_batch_size (7) rows always have a bucket: the largest row size keeps a row spare.
  EXPECT_EQ(spec.BucketFor(7, 63), (BucketShape{8, 64}));
  EXPECT_EQ(spec.BucketFor(7, 7), (BucketShape{8, 16}));
  EXPECT_FALSE(spec.IsOversize(7, 63));
  EXPECT_FALSE(spec.IsOversize(7, 64));
  // The spare row is the filler's: more real rows than max_batch_size are off the grid even when
  // their tokens fill the bucket exactly.
  EXPECT_TRUE(spec.IsOversize(8, 64));
  EXPECT_EQ(spec.BucketFor(8, 64), (BucketShape{8, 64}));  // its own shape, run eagerly
  EXPECT_TRUE(spec.IsOversize(1, 65));
  EXPECT_EQ(spec.BucketFor(1, 65), (BucketShape{1, 65}));
  EXPECT_EQ(spec.LargestBucket(), (BucketShape{8, 64}));
  EXPECT_EQ(spec.BucketElements(BucketShape{8, 64}), 64);
  EXPECT_EQ(spec.ItemExtent(3, 5), 15);
}

TEST(RaggedSpecTest, TensorsAreFlatAlongTokensAndBatchInputsAlongRows) {
  const ModelSpec spec = RaggedGridSpec();
  const BucketShape bucket{8, 32};
  EXPECT_EQ(PaddedShape(spec.inputs[0], bucket), (std::vector<int64_t>{32}));
  EXPECT_EQ(PaddedShape(spec.batch_inputs[0], bucket), (std::vector<int64_t>{9}));
  EXPECT_EQ(PaddedShape(spec.batch_inputs[1], bucket), (std::vector<int64_t>{8}));
  EXPECT_EQ(PaddedShape(spec.outputs[0], bucket), (std::vector<int64_t>{32, 4}));
  EXPECT_EQ(PaddedShape(spec.outputs[1], bucket), (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(ItemShape(spec.outputs[0], 2, 5), (std::vector<int64_t>{2, 5, 4}));
  const std::vector<TensorSpec> arguments = spec.arguments();
  ASSERT_EQ(arguments.size(), 3u);
  EXPECT_EQ(arguments[2].name, "counts");
}

TEST(RaggedSpecTest, ASpecThatBreaksTheRaggedGeometryIsRefused) {
  ModelSpec spec = RaggedGridSpec();
  spec.inputs[0].ragged = false;
  EXPECT_EQ(CheckModelSpec(spec).code(), StatusCode::kInvalidArgument);
  spec = RaggedGridSpec();
  spec.outputs[0].ragged = false;
  EXPECT_EQ(CheckModelSpec(spec).code(), StatusCode::kInvalidArgument);
  spec = RaggedGridSpec();
  spec.ragged = false;
  spec.inputs[0].ragged = false;
  EXPECT_EQ(CheckModelSpec(spec).code(), StatusCode::kInvalidArgument);  // batch inputs left
  // No spare row beyond max_batch_size: a full batch with a tail would have no bucket.
  spec = RaggedGridSpec();
  spec.max_batch_size = 8;
  const Status no_spare = CheckModelSpec(spec);
  EXPECT_EQ(no_spare.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_spare.message().find("max_batch_size + 1 = 9"), std::string::npos) << no_spare.message();
  spec.bucket_batch_sizes = {4, 9};
  EXPECT_TRUE(CheckModelSpec(spec).ok());
  spec.bucket_batch_sizes.clear();
  EXPECT_EQ(CheckModelSpec(spec).code(), StatusCode::kInvalidArgument);
}

InferenceItem RaggedItem(int64_t rows, int64_t length) {
  InferenceItem item;
  item.rows = rows;
  item.length = length;
  item.inputs.push_back(HostTensor{
      DataType::kInt64, {rows, length}, std::string(static_cast<size_t>(rows * length) * 8, '\0')});
  item.outputs_wanted = {true, true};
  return item;
}

TEST(RaggedSpecTest, RowsGoEndToEndThenOneFillerRowThenEmptyRows) {
  const InferenceItem two_rows = RaggedItem(2, 3);
  const InferenceItem one_row = RaggedItem(1, 5);
  Batch batch;
  batch.items = {&two_rows, &one_row};
  batch.padded_shape = BucketShape{8, 32};
  const std::vector<int64_t> lengths = RaggedRowLengths(batch);
  EXPECT_EQ(lengths, (std::vector<int64_t>{3, 3, 5, 21, 0, 0, 0, 0}));
  EXPECT_EQ(BatchInputValues(BatchInputKind::kElementCount, lengths), lengths);
  EXPECT_EQ(BatchInputValues(BatchInputKind::kAccumulatedElementCount, lengths),
            (std::vector<int64_t>{3, 6, 11, 32, 32, 32, 32, 32}));
  EXPECT_EQ(BatchInputValues(BatchInputKind::kAccumulatedElementCountWithZero, lengths),
            (std::vector<int64_t>{0, 3, 6, 11, 32, 32, 32, 32, 32}));
  batch.padded_shape = BucketShape{3, 11};  // filled exactly: no filler row
  EXPECT_EQ(RaggedRowLengths(batch), (std::vector<int64_t>{3, 3, 5}));
}

TEST(RaggedSpecTest, EachRequestGetsItsOwnTokensOfAScatteredOutputAndItsOwnRowsOfAPooledOne) {
  const ModelSpec spec = RaggedGridSpec();
  const InferenceItem two_rows = RaggedItem(2, 3);
  const InferenceItem one_row = RaggedItem(1, 5);
  Batch batch;
  batch.items = {&two_rows, &one_row};
  batch.padded_shape = BucketShape{8, 32};
  const std::vector<OutputSlice> slices = PlanOutputSlices(spec, batch);
  ASSERT_EQ(slices.size(), 4u);
  // Per token: item 0 owns tokens [0, 6), item 1 tokens [6, 11), each one run of 4 features each.
  EXPECT_EQ(slices[0].shape, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(slices[0].offset, 0);
  EXPECT_EQ(slices[0].width, 24);
  EXPECT_EQ(slices[0].height, 1);
  EXPECT_EQ(slices[2].shape, (std::vector<int64_t>{1, 5, 4}));
  EXPECT_EQ(slices[2].offset, 6 * 4);
  EXPECT_EQ(slices[2].width, 20);
  // Pooled: rows 0-1 and row 2.
  EXPECT_EQ(slices[1].shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(slices[1].offset, 0);
  EXPECT_EQ(slices[3].offset, 2 * 4);
  EXPECT_EQ(slices[3].width, 4);
}

TEST(RaggedSpecTest, PaddingCountsOnlyTheTailTokens) {
  ExecutionCounter counter(/*ragged=*/true);
  const InferenceItem two_rows = RaggedItem(2, 3);
  Batch batch;
  batch.items = {&two_rows};
  batch.padded_shape = BucketShape{8, 16};
  counter.RecordReplay(batch);
  EXPECT_EQ(counter.Snapshot().real_elements, 6u);
  EXPECT_EQ(counter.Snapshot().padded_elements, 16u);
}

// A ragged export's row bound (row_bound.h): read from its signature, and a config admitting longer
// rows than it refused, naming both lengths and the way out.
TEST(RowBoundTest, IsReadFromTheSignature) {
  int64_t bound = -1;
  ASSERT_TRUE(ParseRowBound(R"({"version": 1, "max_row_length": 256})", &bound).ok());
  EXPECT_EQ(bound, 256);
  ASSERT_TRUE(ParseRowBound(R"({"version": 1})", &bound).ok());
  EXPECT_EQ(bound, 0);
  for (const char* bad :
       {R"({"max_row_length": 0})", R"({"max_row_length": -3})", R"({"max_row_length": "256"})",
        R"({"max_row_length": 2.5})", "[256]", "{not json"}) {
    const Status status = ParseRowBound(bad, &bound);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("signature"), std::string::npos) << status.message();
  }
}

TEST(RowBoundTest, ARaggedConfigMayNotAdmitLongerRows) {
  ModelSpec spec;
  spec.ragged = true;
  spec.max_sequence_length = 512;
  const Status refused = CheckRowBound(spec, 256);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("max_sequence_length 512"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("exported for (256)"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("--max-length 512"), std::string::npos) << refused.message();
  EXPECT_TRUE(CheckRowBound(spec, 512).ok());
  EXPECT_TRUE(CheckRowBound(spec, 1024).ok());
  EXPECT_TRUE(CheckRowBound(spec, 0).ok());  // no bound recorded
  spec.ragged = false;                       // a padded model's rows are never cut
  EXPECT_TRUE(CheckRowBound(spec, 256).ok());
}

}  // namespace
}  // namespace graphserve
