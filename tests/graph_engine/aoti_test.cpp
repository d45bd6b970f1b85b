// AOTInductor packages (platform torch_aoti) on the CPU, through the public, torch-free API: the
// packages make_aoti_test_models.py compiled (a ctest fixture) are served like TorchScript models,
// and a package that disagrees with its config is refused at load, naming both sides.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graphserve/engine/executor.h"
#include "test_batches.h"
#include "token_features.h"

namespace graphserve {
namespace {

using testing::ExpectServesEachItemItsOwnSlice;
using testing::Fp32Values;
using testing::MakeBatch;
using testing::PerTokenSpec;
using testing::PooledSpec;
using testing::RelativeDifference;
using testing::TokenItem;

std::string PackageDir(const std::string& model) {
  return std::string(GRAPHSERVE_AOTI_TEST_MODELS_DIR) + "/" + model;
}

ModelSpec FeaturesSpec(std::vector<TensorSpec> outputs) {
  return testing::TokenFeaturesSpec("features", std::move(outputs), kPlatformAotInductor);
}

std::unique_ptr<Executor> ReadyOnCpu(const ModelSpec& spec, const std::string& model_dir) {
  std::unique_ptr<Executor> executor;
  Status status = testing::CreateOnCpu(spec, model_dir, &executor);
  EXPECT_TRUE(status.ok()) << status.ToString();
  if (!status.ok()) return nullptr;
  status = executor->Warmup();
  EXPECT_TRUE(status.ok()) << status.ToString();
  return status.ok() ? std::move(executor) : nullptr;
}

TEST(AotInductorTest, DictPackageIsMappedByOutputName) {
  // The spec lists the outputs in the opposite order of the package's.
  auto executor = ReadyOnCpu(FeaturesSpec({PooledSpec(), PerTokenSpec()}), PackageDir("features_dict"));
  ASSERT_NE(executor, nullptr);
  ExpectServesEachItemItsOwnSlice(*executor, 1, 0);
}

TEST(AotInductorTest, UnsignedTuplePackageIsMappedInOrder) {
  auto executor =
      ReadyOnCpu(FeaturesSpec({PerTokenSpec(), PooledSpec()}), PackageDir("features_unsigned"));
  ASSERT_NE(executor, nullptr);
  ExpectServesEachItemItsOwnSlice(*executor, 0, 1);
}

// torch.export specialises sizes 0 and 1, so the packages were exported from batch 2 x length 4
// examples: batch 1 and length 1 must still run (a 1x1 bucket).
TEST(AotInductorTest, BatchOneAndLengthOneRun) {
  ModelSpec spec = FeaturesSpec({PerTokenSpec(), PooledSpec()});
  spec.bucket_batch_sizes = {1, 2, 4};
  spec.bucket_lengths = {1, 4, 8};
  auto executor = ReadyOnCpu(spec, PackageDir("features_dict"));
  ASSERT_NE(executor, nullptr);
  const InferenceItem item = TokenItem(1, 1, 21, 1024, 2);
  BatchOutputs outputs;
  const Status status = executor->Execute(MakeBatch({&item}, BucketShape{1, 1}), &outputs);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0][0].shape, (std::vector<int64_t>{1, 1, testing::kFeatures}));
}

void ExpectRefused(const ModelSpec& spec, const std::string& model, const std::vector<std::string>& mentions) {
  std::unique_ptr<Executor> executor;
  const Status status = testing::CreateOnCpu(spec, PackageDir(model), &executor);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("model '" + spec.name + "'"), std::string::npos) << status.ToString();
  for (const std::string& mention : mentions) {
    EXPECT_NE(status.message().find(mention), std::string::npos) << status.ToString();
  }
  EXPECT_EQ(executor, nullptr);
}

TEST(AotInductorTest, ConfigLongerThanTheExportIsRefusedNamingBoth) {
  ModelSpec spec = FeaturesSpec({PerTokenSpec(), PooledSpec()});
  spec.max_sequence_length = 16;
  spec.bucket_lengths = {4, 16};
  ExpectRefused(spec, "features_dict", {"'input_ids'", "[1, 8]", "max_sequence_length 16"});
}

TEST(AotInductorTest, LargerBatchThanTheExportIsRefusedNamingBoth) {
  ModelSpec spec = FeaturesSpec({PerTokenSpec(), PooledSpec()});
  spec.max_batch_size = 8;
  spec.bucket_batch_sizes = {4, 8};
  ExpectRefused(spec, "features_dict", {"(batch)", "[1, 4]", "max_batch_size 8"});
}

// A token budget makes batches of more rows than a request carries: the export must hold them.
TEST(AotInductorTest, GridBatchesBeyondTheExportAreRefusedNamingTheBudget) {
  ModelSpec spec = FeaturesSpec({PerTokenSpec(), PooledSpec()});
  spec.bucket_batch_sizes = {2, 4, 8};
  spec.max_batch_tokens = 32;  // 8 rows at length 4
  ExpectRefused(spec, "features_dict",
                {"(batch)", "[1, 4]", "2 to 8", "max_batch_size 4", "max_batch_tokens 32"});
}

TEST(AotInductorTest, InputDtypeMismatchIsRefusedNamingBoth) {
  ModelSpec spec = FeaturesSpec({PerTokenSpec(), PooledSpec()});
  spec.inputs[1].dtype = DataType::kInt32;
  ExpectRefused(spec, "features_dict", {"'attention_mask'", "int64 in the package", "int32 in the config"});
}

TEST(AotInductorTest, InputNameMismatchIsRefusedNamingBoth) {
  ModelSpec spec = FeaturesSpec({PerTokenSpec(), PooledSpec()});
  spec.inputs[0].name = "token_ids";
  ExpectRefused(spec, "features_dict", {"'input_ids' in the package", "'token_ids' in the config"});
}

TEST(AotInductorTest, PrecisionMismatchIsRefusedNamingBoth) {
  ModelSpec spec = FeaturesSpec({PerTokenSpec(), PooledSpec()});
  spec.precision = Precision::kBf16;
  ExpectRefused(spec, "features_dict", {"weights are fp32", "precision is bf16"});
}

TEST(AotInductorTest, OutputMissingFromThePackageIsRefused) {
  TensorSpec logits{"logits", DataType::kFp32, {testing::kFeatures}, 0.0};
  ExpectRefused(FeaturesSpec({PooledSpec(), logits}), "features_dict",
                {"'logits'", "'per_token', 'pooled'"});
}

TEST(AotInductorTest, UnsignedPackageWithTheWrongOutputCountIsRefused) {
  ExpectRefused(FeaturesSpec({PerTokenSpec()}), "features_unsigned", {"returns 2 outputs", "declares 1"});
}

TEST(AotInductorTest, MissingPackageIsNotFound) {
  std::unique_ptr<Executor> executor;
  const Status status = testing::CreateOnCpu(FeaturesSpec({PerTokenSpec(), PooledSpec()}),
                                             PackageDir("no_such_model"), &executor);
  EXPECT_EQ(status.code(), StatusCode::kNotFound) << status.ToString();
}

TEST(AotInductorTest, GarbagePackageIsInvalidArgument) {
  // POSIX calls, not std::filesystem: see torchscript_test.cpp.
  std::string folder = ::testing::TempDir() + "graph_engine_aoti_garbage_XXXXXX";
  ASSERT_NE(mkdtemp(folder.data()), nullptr);
  std::ofstream(folder + "/model.pt2", std::ios::binary) << "this is not a zip archive";
  std::unique_ptr<Executor> executor;
  const Status status =
      testing::CreateOnCpu(FeaturesSpec({PerTokenSpec(), PooledSpec()}), folder, &executor);
  std::remove((folder + "/model.pt2").c_str());
  rmdir(folder.c_str());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("model 'features'"), std::string::npos) << status.ToString();
  EXPECT_EQ(executor, nullptr);
}

ModelSpec EncoderSpec(const std::string& platform) {
  ModelSpec spec;
  spec.name = "encoder";
  spec.platform = platform;
  spec.max_batch_size = 4;
  spec.max_sequence_length = 32;
  spec.inputs = {TensorSpec{"input_ids", DataType::kInt64, {-1}, 0.0},
                 TensorSpec{"attention_mask", DataType::kInt64, {-1}, 0.0}};
  spec.sequence_mask_input = "attention_mask";
  spec.outputs = {TensorSpec{"last_hidden_state", DataType::kFp32, {-1, 256}, 0.0},
                  TensorSpec{"pooler_output", DataType::kFp32, {256}, 0.0}};
  spec.bucket_batch_sizes = {2, 4};
  spec.bucket_lengths = {16, 32};
  return spec;
}

// export_encoder.py draws the built-in encoder's weights with the same seeded generator in the same
// order: the package must answer as the built-in encoder does, slice by slice, padding included.
TEST(AotInductorTest, ExportedEncoderAnswersAsTheBuiltInEncoder) {
  auto exported = ReadyOnCpu(EncoderSpec(kPlatformAotInductor), PackageDir("encoder_pt2"));
  auto builtin = ReadyOnCpu(EncoderSpec(kPlatformBuiltinEncoder), "");
  ASSERT_NE(exported, nullptr);
  ASSERT_NE(builtin, nullptr);
  const std::vector<InferenceItem> items = {TokenItem(1, 7, 31, 1024, 2), TokenItem(2, 32, 32, 1024, 2),
                                            TokenItem(1, 19, 33, 1024, 2)};
  const Batch batch = MakeBatch({&items[0], &items[1], &items[2]}, BucketShape{4, 32});
  BatchOutputs from_package;
  BatchOutputs from_builtin;
  ASSERT_TRUE(exported->Execute(batch, &from_package).ok());
  ASSERT_TRUE(builtin->Execute(batch, &from_builtin).ok());
  for (size_t k = 0; k < items.size(); ++k) {
    for (size_t output = 0; output < 2; ++output) {
      SCOPED_TRACE("item " + std::to_string(k) + " output " + std::to_string(output));
      EXPECT_EQ(from_package[k][output].shape, from_builtin[k][output].shape);
      EXPECT_LT(RelativeDifference(Fp32Values(from_package[k][output]),
                                   Fp32Values(from_builtin[k][output])),
                1e-4);
    }
  }
}

}  // namespace
}  // namespace graphserve
