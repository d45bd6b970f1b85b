// EagerExecutor serving TorchScript models that make_test_models.py scripted (a ctest fixture),
// through the public, torch-free API only.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "graphserve/engine/executor.h"
#include "test_batches.h"
#include "token_features.h"

namespace graphserve {
namespace {

using testing::ExpectServesEachItemItsOwnSlice;
using testing::Fp32Values;
using testing::ImageItem;
using testing::kFeatures;
using testing::kSmallCnnImage;
using testing::MakeBatch;
using testing::PerTokenSpec;
using testing::PooledSpec;
using testing::RelativeDifference;
using testing::SmallCnnSpec;
using testing::TokenItem;

std::string ModelDir(const std::string& model) {
  return std::string(GRAPHSERVE_TEST_MODELS_DIR) + "/" + model;
}

ModelSpec TokenFeaturesSpec(const std::string& name, std::vector<TensorSpec> outputs) {
  return testing::TokenFeaturesSpec(name, std::move(outputs), kPlatformTorchScript);
}

Status Create(const ModelSpec& spec, const std::string& model_dir,
              std::unique_ptr<Executor>* executor) {
  return testing::CreateOnCpu(spec, model_dir, executor);
}

TEST(TorchScriptTest, TupleModelServesEachItemItsOwnSlice) {
  std::unique_ptr<Executor> executor;
  const Status status = Create(TokenFeaturesSpec("tuple", {PerTokenSpec(), PooledSpec()}),
                               ModelDir("tuple"), &executor);
  ASSERT_TRUE(status.ok()) << status.ToString();
  const Status warmup = executor->Warmup();
  ASSERT_TRUE(warmup.ok()) << warmup.ToString();
  ExpectServesEachItemItsOwnSlice(*executor, 0, 1);
  EXPECT_EQ(executor->Counters().batches, 1u);
  EXPECT_EQ(executor->Counters().real_elements, uint64_t{1 * 3 + 2 * 8 + 1 * 5});
}

TEST(TorchScriptTest, FixedShapeCnnGetsOneBucketPerBatchSize) {
  std::unique_ptr<Executor> executor;
  ASSERT_TRUE(Create(SmallCnnSpec(), ModelDir("small_cnn"), &executor).ok());
  const Status warmup = executor->Warmup();
  ASSERT_TRUE(warmup.ok()) << warmup.ToString();
  std::vector<BucketShape> shapes;
  for (const BucketInfo& bucket : executor->Buckets()) shapes.push_back(bucket.shape);
  EXPECT_EQ(shapes, (std::vector<BucketShape>{
                        {1, kFixedShapeLength}, {2, kFixedShapeLength}, {4, kFixedShapeLength}}));
}

// Items batched into a padded bucket get what each gets alone in a bucket of its own rows.
TEST(TorchScriptTest, FixedShapeCnnServesEachItemWhatItGetsAlone) {
  std::unique_ptr<Executor> executor;
  ASSERT_TRUE(Create(SmallCnnSpec(), ModelDir("small_cnn"), &executor).ok());
  ASSERT_TRUE(executor->Warmup().ok());
  const std::vector<InferenceItem> items = {ImageItem(2, kSmallCnnImage, 21, 2),
                                            ImageItem(1, kSmallCnnImage, 22, 2)};
  BatchOutputs batched;
  const Status status = executor->Execute(
      MakeBatch({&items[0], &items[1]}, BucketShape{4, kFixedShapeLength}), &batched);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(batched.size(), items.size());
  for (size_t k = 0; k < items.size(); ++k) {
    SCOPED_TRACE("item " + std::to_string(k));
    BatchOutputs alone;
    ASSERT_TRUE(executor
                    ->Execute(MakeBatch({&items[k]}, BucketShape{items[k].rows, kFixedShapeLength}),
                              &alone)
                    .ok());
    EXPECT_EQ(batched[k][0].shape, (std::vector<int64_t>{items[k].rows, 10}));
    EXPECT_EQ(batched[k][1].shape, (std::vector<int64_t>{items[k].rows, 4, 4, 4}));
    for (size_t o = 0; o < 2; ++o) {
      EXPECT_EQ(batched[k][o].shape, alone[0][o].shape);
      EXPECT_LT(RelativeDifference(Fp32Values(batched[k][o]), Fp32Values(alone[0][o])), 1e-5);
    }
  }
  // Different images, different answers: the comparison above cannot pass by slicing one row.
  const std::vector<float> first_item_logits = Fp32Values(batched[0][0]);
  EXPECT_GT(RelativeDifference(
                std::vector<float>(first_item_logits.begin(), first_item_logits.begin() + 10),
                Fp32Values(batched[1][0])),
            1e-3);
  EXPECT_EQ(executor->Counters().padded_elements, uint64_t{4 + 2 + 1});
  EXPECT_EQ(executor->Counters().real_elements, uint64_t{3 + 2 + 1});
}

TEST(TorchScriptTest, DictModelIsMappedByOutputName) {
  std::unique_ptr<Executor> executor;
  // The spec lists the outputs in the opposite order of the dict's insertion.
  const Status status = Create(TokenFeaturesSpec("dict", {PooledSpec(), PerTokenSpec()}),
                               ModelDir("dict"), &executor);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_TRUE(executor->Warmup().ok());
  ExpectServesEachItemItsOwnSlice(*executor, 1, 0);
}

TEST(TorchScriptTest, ListModelIsMappedInOrder) {
  std::unique_ptr<Executor> executor;
  const Status status = Create(TokenFeaturesSpec("list", {PerTokenSpec(), PooledSpec()}),
                               ModelDir("list"), &executor);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_TRUE(executor->Warmup().ok());
  ExpectServesEachItemItsOwnSlice(*executor, 0, 1);
}

TEST(TorchScriptTest, DictWithoutADeclaredOutputFailsWarmup) {
  std::unique_ptr<Executor> executor;
  TensorSpec logits{"logits", DataType::kFp32, {kFeatures}, 0.0};
  ASSERT_TRUE(
      Create(TokenFeaturesSpec("dict", {PooledSpec(), logits}), ModelDir("dict"), &executor).ok());
  const Status status = executor->Warmup();
  EXPECT_EQ(status.code(), StatusCode::kInternal);
  EXPECT_NE(status.message().find("'logits'"), std::string::npos) << status.ToString();
}

// Two token items run by `in_order` (inputs in config order) into `expected`, and by `swapped`
// (a config listing the same two inputs the other way round) with their inputs swapped to match.
void ExecuteWithInputsSwapped(Executor* in_order, Executor* swapped, BatchOutputs* expected,
                              BatchOutputs* actual) {
  const std::vector<InferenceItem> items = {TokenItem(1, 3, 31, 1024, 2), TokenItem(2, 8, 32, 1024, 2)};
  std::vector<InferenceItem> reversed = items;
  for (InferenceItem& item : reversed) std::swap(item.inputs[0], item.inputs[1]);
  ASSERT_TRUE(in_order->Execute(MakeBatch({&items[0], &items[1]}, BucketShape{4, 8}), expected).ok());
  const Status status = swapped->Execute(MakeBatch({&reversed[0], &reversed[1]}, BucketShape{4, 8}), actual);
  ASSERT_TRUE(status.ok()) << status.ToString();
}

// Triton's PyTorch backend's naming: INPUT__N is forward's argument N and OUTPUT__N the result's
// element N, whatever the config's order. With both listed in reverse, the answers must be those of
// the same model in config order (reversed inputs would compute (mask * w + b) * ids instead).
TEST(TorchScriptTest, TritonIndexedNamesBindByIndex) {
  const ModelSpec plain = TokenFeaturesSpec("tuple", {PerTokenSpec(), PooledSpec()});
  ModelSpec indexed = plain;
  indexed.name = "indexed";
  indexed.inputs = {plain.inputs[1], plain.inputs[0]};
  indexed.inputs[0].name = "attention_mask__1";
  indexed.inputs[1].name = "input_ids__0";
  indexed.outputs = {plain.outputs[1], plain.outputs[0]};
  indexed.outputs[0].name = "pooled__1";
  indexed.outputs[1].name = "per_token__0";
  std::unique_ptr<Executor> by_order, by_index;
  ASSERT_TRUE(Create(plain, ModelDir("tuple"), &by_order).ok());
  const Status created = Create(indexed, ModelDir("tuple"), &by_index);
  ASSERT_TRUE(created.ok()) << created.ToString();
  ASSERT_TRUE(by_order->Warmup().ok());
  const Status warmup = by_index->Warmup();
  ASSERT_TRUE(warmup.ok()) << warmup.ToString();

  BatchOutputs expected, actual;
  ASSERT_NO_FATAL_FAILURE(ExecuteWithInputsSwapped(by_order.get(), by_index.get(), &expected, &actual));
  for (size_t k = 0; k < expected.size(); ++k) {
    EXPECT_EQ(Fp32Values(actual[k][0]), Fp32Values(expected[k][1])) << "pooled of item " << k;
    EXPECT_EQ(Fp32Values(actual[k][1]), Fp32Values(expected[k][0])) << "per_token of item " << k;
  }
}

// Named as forward() names its arguments, inputs bind by name: a config listing them in another
// order gets the same answers (bound by place, the tensors were silently swapped).
TEST(TorchScriptTest, InputsNamedAsForwardsArgumentsBindByName) {
  const ModelSpec plain = TokenFeaturesSpec("tuple", {PerTokenSpec(), PooledSpec()});
  ASSERT_EQ(plain.inputs[0].name, "input_ids");
  ModelSpec reordered = plain;
  reordered.inputs = {plain.inputs[1], plain.inputs[0]};
  std::unique_ptr<Executor> in_order, by_name;
  ASSERT_TRUE(Create(plain, ModelDir("tuple"), &in_order).ok());
  const Status created = Create(reordered, ModelDir("tuple"), &by_name);
  ASSERT_TRUE(created.ok()) << created.ToString();

  BatchOutputs expected, actual;
  ASSERT_NO_FATAL_FAILURE(ExecuteWithInputsSwapped(in_order.get(), by_name.get(), &expected, &actual));
  for (size_t k = 0; k < expected.size(); ++k) {
    EXPECT_EQ(Fp32Values(actual[k][0]), Fp32Values(expected[k][0])) << "per_token of item " << k;
    EXPECT_EQ(Fp32Values(actual[k][1]), Fp32Values(expected[k][1])) << "pooled of item " << k;
  }
}

TEST(TorchScriptTest, InputsThatDoNotMatchForwardsArgumentsAreRefused) {
  const ModelSpec plain = TokenFeaturesSpec("args", {PerTokenSpec(), PooledSpec()});
  ModelSpec misplaced = plain;  // one of forward's names, in the other's place
  misplaced.inputs[0].name = "mask";
  misplaced.inputs[1].name = "input_ids";
  ModelSpec extra = plain;
  extra.inputs.push_back(plain.inputs[1]);
  extra.inputs.back().name = "token_type_ids";
  ModelSpec missing = plain;
  missing.inputs.pop_back();
  for (const auto& [spec, message] :
       {std::pair{misplaced, "input 'input_ids' is argument 0 of forward(input_ids, attention_mask) but config "
                             "input 1"},
        std::pair{extra, "the config has 3 inputs; forward(input_ids, attention_mask) takes 2"},
        std::pair{missing, "argument 'attention_mask' of forward(input_ids, attention_mask) gets no config "
                           "input"}}) {
    std::unique_ptr<Executor> executor;
    const Status status = Create(spec, ModelDir("tuple"), &executor);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find("model 'args': " + std::string(message)), std::string::npos)
        << status.ToString();
  }
}

TEST(TorchScriptTest, TritonIndicesMustBeDistinctAndCoverEveryArgument) {
  for (const auto& [first, second, message] :
       {std::tuple{"ids__0", "mask__0", "input 'mask__0': index 0 is taken"},
        std::tuple{"ids__0", "mask__2", "input 'mask__2': index 2 leaves a gap"}}) {
    ModelSpec spec = TokenFeaturesSpec("indices", {PerTokenSpec(), PooledSpec()});
    spec.inputs[0].name = first;
    spec.inputs[1].name = second;
    std::unique_ptr<Executor> executor;
    const Status status = Create(spec, ModelDir("tuple"), &executor);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find("model 'indices': " + std::string(message)), std::string::npos)
        << status.ToString();
  }
  // An output may pick any element, but the result must have it.
  ModelSpec spec = TokenFeaturesSpec("indices", {PerTokenSpec(), PooledSpec()});
  spec.outputs[0].name = "per_token__0";
  spec.outputs[1].name = "pooled__5";
  std::unique_ptr<Executor> executor;
  ASSERT_TRUE(Create(spec, ModelDir("tuple"), &executor).ok());
  const Status status = executor->Warmup();
  EXPECT_EQ(status.code(), StatusCode::kInternal);
  EXPECT_NE(status.message().find("output 'pooled__5' names element 5, but forward() returned 2"),
            std::string::npos)
      << status.ToString();
}

TEST(TorchScriptTest, MissingModelFileIsNotFound) {
  std::unique_ptr<Executor> executor;
  const Status status = Create(TokenFeaturesSpec("absent", {PerTokenSpec(), PooledSpec()}),
                               ModelDir("no_such_model"), &executor);
  EXPECT_EQ(status.code(), StatusCode::kNotFound) << status.ToString();
  EXPECT_NE(status.message().find("model 'absent'"), std::string::npos) << status.ToString();
  EXPECT_EQ(executor, nullptr);
}

// Writes `contents` as model.pt into a fresh folder under the test's temporary directory. POSIX
// calls rather than std::filesystem: the PyTorch 2.11 wheel's libtorch.so exports std::filesystem
// symbols of its own, and std::filesystem::remove_all crashed (a call through a null pointer) in a
// binary linked with it.
std::string WriteModelFile(const std::string& contents) {
  std::string folder = ::testing::TempDir() + "graph_engine_test_model_XXXXXX";
  if (mkdtemp(folder.data()) == nullptr) return "";
  std::ofstream(folder + "/model.pt", std::ios::binary) << contents;
  return folder;
}

void RemoveModelFolder(const std::string& folder) {
  std::remove((folder + "/model.pt").c_str());
  rmdir(folder.c_str());
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

void ExpectUnloadable(const std::string& model, const std::string& model_file_contents) {
  const std::string model_dir = WriteModelFile(model_file_contents);
  ASSERT_FALSE(model_dir.empty());
  std::unique_ptr<Executor> executor;
  const Status status =
      Create(TokenFeaturesSpec(model, {PerTokenSpec(), PooledSpec()}), model_dir, &executor);
  RemoveModelFolder(model_dir);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("model '" + model + "'"), std::string::npos) << status.ToString();
  EXPECT_EQ(executor, nullptr);
}

TEST(TorchScriptTest, GarbageModelFileIsInvalidArgument) {
  ExpectUnloadable("garbage", "this is not a TorchScript archive");
}

TEST(TorchScriptTest, TruncatedModelFileIsInvalidArgument) {
  const std::string archive = ReadFile(ModelDir("tuple") + "/model.pt");
  ASSERT_GT(archive.size(), 1000u);
  ExpectUnloadable("truncated", archive.substr(0, archive.size() / 2));
}

// Models that load but whose results do not match the config fail Warmup, naming the model and the
// bucket, before any request reaches them; INTERNAL, since should one reach a request, the model is
// at fault and not the request's values.
void ExpectWarmupFails(const std::string& model, const std::string& mentions) {
  std::unique_ptr<Executor> executor;
  const Status created =
      Create(TokenFeaturesSpec(model, {PerTokenSpec(), PooledSpec()}), ModelDir(model), &executor);
  ASSERT_TRUE(created.ok()) << created.ToString();
  const Status status = executor->Warmup();
  EXPECT_EQ(status.code(), StatusCode::kInternal) << status.ToString();
  EXPECT_NE(status.message().find("model '" + model + "' bucket 2x4"), std::string::npos)
      << status.ToString();
  EXPECT_NE(status.message().find(mentions), std::string::npos) << status.ToString();
}

TEST(TorchScriptTest, WrongOutputShapeFailsWarmup) {
  ExpectWarmupFails("wrong_shape", "'per_token'");
}

TEST(TorchScriptTest, ExtraOutputFailsWarmup) { ExpectWarmupFails("extra_output", "3 outputs"); }

TEST(TorchScriptTest, NonTensorResultFailsWarmup) { ExpectWarmupFails("int_result", "Int"); }

// ---- the ragged model (Triton's ragged batching) ----------------------------------------------------

InferenceItem RaggedItem(int64_t rows, int64_t length, uint32_t seed) {
  InferenceItem item = TokenItem(rows, length, seed, 100, 2);
  item.inputs.resize(1);  // input_ids only
  return item;
}

// make_test_models.py's `ragged`, computed for one request on its own: per row, a running sum of its
// ids times (k + 1), and its mean.
void ExpectedRaggedOutputs(const InferenceItem& item, std::vector<float>* per_token,
                           std::vector<float>* pooled) {
  std::vector<int64_t> ids(static_cast<size_t>(item.rows * item.length));
  std::memcpy(ids.data(), item.inputs[0].bytes.data(), ids.size() * sizeof(int64_t));
  per_token->clear();
  pooled->assign(static_cast<size_t>(item.rows) * 4, 0.0f);
  for (int64_t row = 0; row < item.rows; ++row) {
    double running = 0;
    for (int64_t position = 0; position < item.length; ++position) {
      running += static_cast<double>(ids[static_cast<size_t>(row * item.length + position)]);
      for (int k = 0; k < 4; ++k) {
        per_token->push_back(static_cast<float>(running * (k + 1)));
        (*pooled)[static_cast<size_t>(row * 4 + k)] += static_cast<float>(running * (k + 1) / item.length);
      }
    }
  }
}

std::unique_ptr<Executor> WarmRaggedExecutor() {
  std::unique_ptr<Executor> executor;
  const Status created = Create(testing::RaggedTestSpec(), ModelDir("ragged"), &executor);
  EXPECT_TRUE(created.ok()) << created.ToString();
  if (!created.ok()) return nullptr;
  const Status warmup = executor->Warmup();
  EXPECT_TRUE(warmup.ok()) << warmup.ToString();
  return executor;
}

void ExpectRaggedAnswers(const std::vector<InferenceItem>& items, const BatchOutputs& outputs) {
  ASSERT_EQ(outputs.size(), items.size());
  for (size_t k = 0; k < items.size(); ++k) {
    std::vector<float> per_token, pooled;
    ExpectedRaggedOutputs(items[k], &per_token, &pooled);
    EXPECT_EQ(outputs[k][0].shape, (std::vector<int64_t>{items[k].rows, items[k].length, 4})) << "item " << k;
    EXPECT_EQ(outputs[k][1].shape, (std::vector<int64_t>{items[k].rows, 4})) << "item " << k;
    EXPECT_LE(RelativeDifference(Fp32Values(outputs[k][0]), per_token), 1e-6) << "item " << k;
    EXPECT_LE(RelativeDifference(Fp32Values(outputs[k][1]), pooled), 1e-6) << "item " << k;
  }
}

TEST(TorchScriptRaggedTest, ARequestWithSeveralRowsAndATailOfEmptyRowsGetsItsSoloAnswer) {
  std::unique_ptr<Executor> executor = WarmRaggedExecutor();
  ASSERT_NE(executor, nullptr);
  // 2×3 + 1×5 = 11 tokens in a 32-token bucket of 8 rows: a 21-token filler row, 4 empty rows.
  const std::vector<InferenceItem> items = {RaggedItem(2, 3, 1), RaggedItem(1, 5, 2)};
  BatchOutputs outputs;
  const Status status = executor->Execute(MakeBatch({&items[0], &items[1]}, BucketShape{8, 32}), &outputs);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ExpectRaggedAnswers(items, outputs);
  EXPECT_EQ(executor->Counters().real_elements, 11u);
  EXPECT_EQ(executor->Counters().padded_elements, 32u);  // the tail is the padding
}

TEST(TorchScriptRaggedTest, RandomMixesGetWhatEachRequestGetsAlone) {
  std::unique_ptr<Executor> executor = WarmRaggedExecutor();
  ASSERT_NE(executor, nullptr);
  const ModelSpec spec = testing::RaggedTestSpec();
  std::mt19937 random(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<InferenceItem> items;
    int64_t rows = 0, tokens = 0;
    while (true) {
      const int64_t item_rows = std::uniform_int_distribution<int64_t>(1, 3)(random);
      const int64_t length = std::uniform_int_distribution<int64_t>(1, 16)(random);
      if (spec.IsOversize(rows + item_rows, tokens + item_rows * length)) break;
      items.push_back(RaggedItem(item_rows, length, static_cast<uint32_t>(trial * 100 + items.size())));
      rows += item_rows;
      tokens += item_rows * length;
    }
    ASSERT_FALSE(items.empty());
    std::vector<const InferenceItem*> pointers;
    for (const InferenceItem& item : items) pointers.push_back(&item);
    BatchOutputs batched;
    const Status status = executor->Execute(MakeBatch(pointers, spec.BucketFor(rows, tokens)), &batched);
    ASSERT_TRUE(status.ok()) << status.ToString();
    ExpectRaggedAnswers(items, batched);
    for (size_t k = 0; k < items.size(); ++k) {
      BatchOutputs alone;
      const BucketShape own = spec.BucketFor(items[k].rows, items[k].rows * items[k].length);
      ASSERT_TRUE(executor->Execute(MakeBatch({&items[k]}, own), &alone).ok());
      EXPECT_EQ(alone[0][0].bytes, batched[k][0].bytes) << "trial " << trial << " item " << k;
      EXPECT_EQ(alone[0][1].bytes, batched[k][1].bytes) << "trial " << trial << " item " << k;
    }
  }
}

TEST(TorchScriptRaggedTest, ALoneRequestOfMaxBatchSizeRowsWithATailRunsInTheLargestBucket) {
  std::unique_ptr<Executor> executor = WarmRaggedExecutor();
  ASSERT_NE(executor, nullptr);
  const ModelSpec spec = testing::RaggedTestSpec();
  // 7 rows (max_batch_size) of 5 tokens: 35 of the 64-token bucket's tokens, the 29-token tail in
  // the spare eighth row, which touches none of the 7.
  const std::vector<InferenceItem> items = {RaggedItem(spec.max_batch_size, 5, 3)};
  const BucketShape bucket = spec.BucketFor(spec.max_batch_size, spec.max_batch_size * 5);
  ASSERT_EQ(bucket, (BucketShape{8, 64}));
  ASSERT_TRUE(spec.HasBucket(bucket));
  BatchOutputs outputs;
  const Status status = executor->Execute(MakeBatch({&items[0]}, bucket), &outputs);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ExpectRaggedAnswers(items, outputs);
  EXPECT_EQ(executor->Counters().real_elements, 35u);
  EXPECT_EQ(executor->Counters().padded_elements, 64u);
}

TEST(TorchScriptRaggedTest, ABucketWithoutARowForTheTailIsRefused) {
  std::unique_ptr<Executor> executor = WarmRaggedExecutor();
  ASSERT_NE(executor, nullptr);
  const std::vector<InferenceItem> items = {RaggedItem(4, 3, 1)};
  BatchOutputs outputs;
  // 4 rows of 12 tokens in a 4-row, 16-token bucket: the 4-token tail has no row of its own.
  const Status status = executor->Execute(MakeBatch({&items[0]}, BucketShape{4, 16}), &outputs);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("filler row"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace graphserve
