// ModelStatisticsRecorder's accumulation and the ModelStatistics answer filled from it: counts and
// durations add up per request and per batch size, and a request naming an unknown model or version
// is NOT_FOUND naming the field.
#include "graphserve/server/observability/model_statistics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace graphserve {
namespace {

RequestTiming Timing(int64_t queue_us, int64_t input_ns, int64_t infer_ns, int64_t output_ns) {
  RequestTiming timing;
  timing.queue_us = queue_us;
  timing.stages = BatchStageTimes{input_ns, infer_ns, output_ns};
  return timing;
}

TEST(ModelStatisticsRecorderTest, RequestsAddUpPerOutcomeAndSuccessfulOnesPerStage) {
  ModelStatisticsRecorder recorder;
  recorder.RecordSuccess(/*rows=*/2, /*request_ns=*/50'000, Timing(10, 1000, 20'000, 300));
  recorder.RecordSuccess(/*rows=*/3, /*request_ns=*/70'000, Timing(30, 2000, 25'000, 500));
  recorder.RecordFailure(/*request_ns=*/9000);

  const ModelStatisticsSnapshot totals = recorder.Snapshot();
  EXPECT_EQ(totals.inference_count, 5u);
  EXPECT_EQ(totals.success.count, 2u);
  EXPECT_EQ(totals.success.ns, 120'000u);
  EXPECT_EQ(totals.fail.count, 1u);
  EXPECT_EQ(totals.fail.ns, 9000u);
  EXPECT_EQ(totals.queue.count, 2u);
  EXPECT_EQ(totals.queue.ns, 40'000u);  // microseconds to nanoseconds
  EXPECT_EQ(totals.compute_input.ns, 3000u);
  EXPECT_EQ(totals.compute_infer.ns, 45'000u);
  EXPECT_EQ(totals.compute_output.count, 2u);
  EXPECT_EQ(totals.compute_output.ns, 800u);
  // Executions are the scheduler's to record.
  EXPECT_EQ(totals.execution_count, 0u);
  EXPECT_EQ(totals.last_inference_ms, 0u);
}

TEST(ModelStatisticsRecorderTest, BatchesAddUpPerSizeAndTheLatestFinishStays) {
  ModelStatisticsRecorder recorder;
  recorder.RecordExecution(4, BatchStageTimes{10, 200, 3}, 1'700'000'000'500);
  recorder.RecordExecution(1, BatchStageTimes{5, 100, 1}, 1'700'000'000'900);
  recorder.RecordExecution(4, BatchStageTimes{20, 400, 6}, 1'700'000'000'700);  // finished earlier

  const ModelStatisticsSnapshot totals = recorder.Snapshot();
  EXPECT_EQ(totals.execution_count, 3u);
  EXPECT_EQ(totals.last_inference_ms, 1'700'000'000'900u);
  ASSERT_EQ(totals.batches_by_size.size(), 2u);
  const BatchSizeTotals& four = totals.batches_by_size.at(4);
  EXPECT_EQ(four.compute_input.count, 2u);
  EXPECT_EQ(four.compute_input.ns, 30u);
  EXPECT_EQ(four.compute_infer.ns, 600u);
  EXPECT_EQ(four.compute_output.ns, 9u);
  EXPECT_EQ(totals.batches_by_size.at(1).compute_infer.count, 1u);
}

TEST(ModelStatisticsRecorderTest, ConcurrentRecordsAreNeitherLostNorTorn) {
  ModelStatisticsRecorder recorder;
  constexpr int kThreads = 8;
  constexpr int kPerThread = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        recorder.RecordSuccess(1, 10, Timing(1, 1, 1, 1));
        recorder.RecordExecution(1 + i % 2, BatchStageTimes{1, 1, 1}, 1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const ModelStatisticsSnapshot totals = recorder.Snapshot();
  EXPECT_EQ(totals.inference_count, static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_EQ(totals.success.ns, static_cast<uint64_t>(10 * kThreads * kPerThread));
  EXPECT_EQ(totals.execution_count, static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_EQ(totals.batches_by_size.at(2).compute_infer.count,
            static_cast<uint64_t>(kThreads * kPerThread / 2));
}

class FillModelStatisticsTest : public ::testing::Test {
 protected:
  FillModelStatisticsTest() {
    encoder_.RecordSuccess(2, 80'000, Timing(5, 100, 60'000, 200));
    encoder_.RecordExecution(2, BatchStageTimes{100, 60'000, 200}, 1'700'000'000'123);
    served_ = {{"encoder", "1", &encoder_}, {"tiny", "1", &tiny_}};
  }

  Status Fill(const std::string& name, const std::string& version,
              inference::ModelStatisticsResponse* response) {
    inference::ModelStatisticsRequest request;
    request.set_name(name);
    request.set_version(version);
    return FillModelStatistics(served_, request, response);
  }

  ModelStatisticsRecorder encoder_;
  ModelStatisticsRecorder tiny_;
  std::vector<ServedModelStatistics> served_;
};

TEST_F(FillModelStatisticsTest, OneModelInTritonsFormat) {
  inference::ModelStatisticsResponse response;
  ASSERT_TRUE(Fill("encoder", "", &response).ok());
  ASSERT_EQ(response.model_stats_size(), 1);
  const inference::ModelStatistics& stats = response.model_stats(0);
  EXPECT_EQ(stats.name(), "encoder");
  EXPECT_EQ(stats.version(), "1");
  EXPECT_EQ(stats.last_inference(), 1'700'000'000'123u);
  EXPECT_EQ(stats.inference_count(), 2u);
  EXPECT_EQ(stats.execution_count(), 1u);
  const inference::InferStatistics& infer = stats.inference_stats();
  EXPECT_EQ(infer.success().count(), 1u);
  EXPECT_EQ(infer.success().ns(), 80'000u);
  EXPECT_EQ(infer.fail().count(), 0u);
  EXPECT_EQ(infer.queue().ns(), 5000u);
  EXPECT_EQ(infer.compute_input().ns(), 100u);
  EXPECT_EQ(infer.compute_infer().ns(), 60'000u);
  EXPECT_EQ(infer.compute_output().count(), 1u);
  EXPECT_EQ(infer.compute_output().ns(), 200u);
  ASSERT_EQ(stats.batch_stats_size(), 1);
  EXPECT_EQ(stats.batch_stats(0).batch_size(), 2u);
  EXPECT_EQ(stats.batch_stats(0).compute_infer().count(), 1u);
  EXPECT_EQ(stats.batch_stats(0).compute_infer().ns(), 60'000u);
}

TEST_F(FillModelStatisticsTest, AnEmptyNameSelectsEveryModelAndAVersionFilters) {
  inference::ModelStatisticsResponse every;
  ASSERT_TRUE(Fill("", "", &every).ok());
  ASSERT_EQ(every.model_stats_size(), 2);
  EXPECT_EQ(every.model_stats(0).name(), "encoder");
  EXPECT_EQ(every.model_stats(1).name(), "tiny");
  EXPECT_EQ(every.model_stats(1).inference_count(), 0u);
  EXPECT_EQ(every.model_stats(1).inference_stats().success().count(), 0u);

  inference::ModelStatisticsResponse version_one;
  ASSERT_TRUE(Fill("tiny", "1", &version_one).ok());
  ASSERT_EQ(version_one.model_stats_size(), 1);
  EXPECT_EQ(version_one.model_stats(0).name(), "tiny");
  // A version is a number, as in Triton: "01" is version 1.
  inference::ModelStatisticsResponse padded;
  ASSERT_TRUE(Fill("tiny", "01", &padded).ok());
  EXPECT_EQ(padded.model_stats_size(), 1);
}

// As Triton: a version that is no number is the client's mistake (400 over REST), not a version
// that is missing (404).
TEST_F(FillModelStatisticsTest, AVersionThatIsNoNumberIsInvalidNamingTheField) {
  for (const char* version : {"latest", "-1", "1.0", " 1", "99999999999999999999"}) {
    inference::ModelStatisticsResponse response;
    const Status status = Fill("encoder", version, &response);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << version;
    EXPECT_EQ(status.message(), "version: '" + std::string(version) +
                                    "' is not a model version (an integer of at least 0)");
    EXPECT_EQ(response.model_stats_size(), 0);
  }
}

TEST_F(FillModelStatisticsTest, UnknownModelOrVersionIsNotFoundNamingTheField) {
  inference::ModelStatisticsResponse response;
  Status status = Fill("nope", "", &response);
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "name: unknown model 'nope'");

  status = Fill("encoder", "2", &response);
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "version: model 'encoder' has no version '2' (served: '1')");

  status = Fill("", "7", &response);
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_NE(status.message().find("version: "), std::string::npos);
  EXPECT_EQ(response.model_stats_size(), 0);
}

}  // namespace
}  // namespace graphserve
