// graphserve-loadgen, as a user runs it, against the real graphserve on the CPU serving the test model
// repository: closed and open loop, the --json report read back and checked, and the exit statuses.
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "server_process.h"
#include "tool_run.h"

namespace graphserve::testing {
namespace {

using json = nlohmann::json;

constexpr auto kStartTimeout = std::chrono::seconds(240);

// One server for the suite: its warm-up is the slow part.
class LoadgenIntegrationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess(GRAPHSERVE_BINARY,
                                {"--model-repository", MODEL_REPOSITORY, "--device", TestDevice()},
                                std::string(TEST_OUTPUT_DIR) + "/loadgen_server.log");
    ASSERT_TRUE(server_->WaitUntilReady(kStartTimeout)) << server_->Log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->Stop(SIGTERM, std::chrono::seconds(60)), 0) << server_->Log();
    delete server_;
    server_ = nullptr;
  }

  // Runs graphserve-loadgen with `args` against the server, its report going to `json_name`.
  static ToolRun Run(const std::string& args, const std::string& json_name) {
    return RunToolWithJsonReport(
        std::string(GRAPHSERVE_LOADGEN) + " --address " + server_->address() + " " + args,
        std::string(TEST_OUTPUT_DIR) + "/" + json_name);
  }

  static inline ServerProcess* server_ = nullptr;
};

// What holds for every report: counts add up and percentiles are ordered.
void ExpectConsistent(const json& report) {
  ASSERT_TRUE(report.is_object()) << report;
  EXPECT_EQ(report["ok"].get<int64_t>() + report["error_count"].get<int64_t>(),
            report["issued"].get<int64_t>())
      << report.dump(2);
  const json& latency = report["latency_ms"];
  EXPECT_EQ(latency["count"], report["ok"]);
  if (latency["count"].get<int64_t>() == 0) return;
  EXPECT_LE(latency["min"].get<double>(), latency["p50"].get<double>());
  EXPECT_LE(latency["p50"].get<double>(), latency["p90"].get<double>());
  EXPECT_LE(latency["p90"].get<double>(), latency["p99"].get<double>());
  EXPECT_LE(latency["p99"].get<double>(), latency["max"].get<double>());
  EXPECT_GT(latency["min"].get<double>(), 0);
}

TEST_F(LoadgenIntegrationTest, ClosedLoopOfEightCallersGetsEveryAnswerRight) {
  const ToolRun run = Run(
      "--model encoder --concurrency 8 --requests 200 --rows 2 --lengths uniform:8-64 "
      "--warmup-s 0.5",
      "loadgen_closed.json");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const json& report = run.report;
  ExpectConsistent(report);
  EXPECT_EQ(report["mode"], "closed");
  EXPECT_EQ(report["concurrency"], 8);
  EXPECT_EQ(report["model"], "encoder");
  // Every answer arrived and passed the shape check (last_hidden_state [2, length, 256],
  // pooler_output [2, 256]).
  EXPECT_EQ(report["issued"], 200);
  EXPECT_EQ(report["ok"], 200);
  EXPECT_EQ(report["error_count"], 0) << report["error_examples"];
  EXPECT_GT(report["warmup_requests"].get<int64_t>(), 0);
  EXPECT_GT(report["requests_per_s"].get<double>(), 0);
  EXPECT_GT(report["tokens_per_s"].get<double>(), 0);
  const int64_t tokens = report["tokens"];
  EXPECT_GE(tokens, 200 * 2 * 8);
  EXPECT_LE(tokens, 200 * 2 * 64);
  // The text report is printed too.
  EXPECT_NE(run.output.find("200 issued, 200 ok, 0 errors"), std::string::npos) << run.output;
}

// The same closed loop over the REST binding: every answer, converted back, passes the same checks,
// and the server's refusals come back with their codes.
TEST_F(LoadgenIntegrationTest, RestBindingCarriesTheSameLoadAndErrors) {
  const std::string http = "127.0.0.1:" + std::to_string(server_->http_port());
  const ToolRun run = Run("--http-address " + http +
                              " --model encoder --concurrency 8 --requests 100 --rows 2 "
                              "--lengths uniform:8-64 --warmup-s 0.5 --threads 2 --outputs pooler_output",
                          "loadgen_rest.json");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  ExpectConsistent(run.report);
  EXPECT_EQ(run.report["address"], "http://" + http);
  EXPECT_EQ(run.report["ok"], 100);
  EXPECT_EQ(run.report["error_count"], 0) << run.report["error_examples"];

  const ToolRun rejected = Run("--http-address " + http +
                                   " --model tiny_traced --concurrency 2 --requests 10 --lengths fixed:65 --warmup-s 0",
                               "loadgen_rest_rejected.json");
  EXPECT_EQ(rejected.exit_code, 1) << rejected.output;
  EXPECT_EQ(rejected.report["errors"]["INVALID_ARGUMENT"], 10) << rejected.report.dump(2);
  EXPECT_NE(rejected.report["error_examples"]["INVALID_ARGUMENT"].get<std::string>().find("max_sequence_length"),
            std::string::npos);
}

TEST_F(LoadgenIntegrationTest, OpenLoopForTwoSecondsAtAModestRate) {
  const ToolRun run = Run(
      "--model tiny_traced --rate 40 --duration-s 2 --lengths lognormal:24,0.8,8-64 "
      "--warmup-s 0.5 --seed 3",
      "loadgen_open.json");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const json& report = run.report;
  ExpectConsistent(report);
  EXPECT_EQ(report["mode"], "open");
  EXPECT_EQ(report["rate_rps"], 40.0);
  // 80 arrivals expected in 2 s, standard deviation about 9.
  const int64_t issued = report["issued"];
  EXPECT_GT(issued, 40);
  EXPECT_LT(issued, 130);
  EXPECT_EQ(report["ok"], issued);
  EXPECT_EQ(report["error_count"], 0) << report["error_examples"];
  EXPECT_GT(report["elapsed_s"].get<double>(), 1.5);
  EXPECT_LT(report["elapsed_s"].get<double>(), 3.5);
  EXPECT_GT(report["requests_per_s"].get<double>(), 15);
  EXPECT_LT(report["requests_per_s"].get<double>(), 70);
  EXPECT_GT(report["tokens_per_s"].get<double>(), 0);
}

TEST_F(LoadgenIntegrationTest, RejectedRequestsAreCountedByCode) {
  // The fixture's models take at most 64 tokens.
  const ToolRun run = Run(
      "--model tiny_traced --concurrency 2 --requests 20 --lengths fixed:65 --warmup-s 0",
      "loadgen_rejected.json");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  const json& report = run.report;
  ExpectConsistent(report);
  EXPECT_EQ(report["issued"], 20);
  EXPECT_EQ(report["ok"], 0);
  EXPECT_EQ(report["errors"]["INVALID_ARGUMENT"], 20) << report.dump(2);
  EXPECT_NE(report["error_examples"]["INVALID_ARGUMENT"].get<std::string>().find(
                "max_sequence_length"),
            std::string::npos)
      << report.dump(2);
  EXPECT_TRUE(report["latency_ms"]["p50"].is_null());
}

TEST_F(LoadgenIntegrationTest, UnknownModelCannotRun) {
  const ToolRun run = Run("--model no_such_model --requests 5", "loadgen_unknown.json");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("NOT_FOUND"), std::string::npos) << run.output;
  EXPECT_TRUE(run.report.is_null()) << "no report for a run that did not happen";
}

// An unwritable --json path is named before the run, not found after it (the whole run was lost).
TEST_F(LoadgenIntegrationTest, AnUnwritableReportPathCannotRun) {
  const ToolRun run = RunTool(std::string(GRAPHSERVE_LOADGEN) + " --address " + server_->address() +
                              " --model encoder --requests 5 --json " + TEST_OUTPUT_DIR + "/no_such_folder/r.json");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--json: cannot write"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("requests "), std::string::npos) << "no run: " << run.output;
}

}  // namespace
}  // namespace graphserve::testing
