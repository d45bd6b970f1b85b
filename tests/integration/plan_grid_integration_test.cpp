// graphserve-cli plan-grid as a user runs it: the built-in encoder served on the CPU, requests of
// mixed lengths sent, then today's grid against the proposal read from the server's config and
// /metrics, as text and as JSON, and the proposal's buckets fragment parsed as config.pbtxt.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include <google/protobuf/text_format.h>
#include <nlohmann/json.hpp>

#include "infer_helpers.h"
#include "model_config.pb.h"
#include "shared_server_test.h"
#include "tool_run.h"

namespace graphserve::testing {
namespace {

using json = nlohmann::json;

struct PlanGridSuite {
  static constexpr const char* kLogName = "plan_grid_server.log";
  static std::vector<std::string> Flags() { return {"--device", "cpu"}; }
};

class PlanGridTest : public SharedServerTest<PlanGridSuite> {
 protected:
  static void SetUpTestSuite() {
    SharedServerTest<PlanGridSuite>::SetUpTestSuite();
    if (server_ == nullptr) return;
    // Traffic: 40 requests of 1-3 rows and 1-64 tokens, and a few long ones.
    std::vector<inference::ModelInferRequest> requests = MixedLengthRequests("encoder", 40, 17);
    std::mt19937 random(5);
    for (int64_t length : {150, 300, 500}) requests.push_back(TokenRequest("encoder", RandomTokens(random, 1, length)));
    auto stub = server_->NewStub();
    for (const inference::ModelInferRequest& request : requests) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      inference::ModelInferResponse response;
      const grpc::Status status = stub->ModelInfer(&context, request, &response);
      ASSERT_TRUE(status.ok()) << status.error_message();
    }
  }

  static ToolRun PlanGrid(const std::string& arguments) {
    return RunTool(std::string(GRAPHSERVE_CLI) + " plan-grid --address " + server_->address() +
                   " --metrics-url http://127.0.0.1:" + std::to_string(server_->metrics_port()) + "/metrics " +
                   arguments);
  }
};

// The `buckets { ... }` fragment of `text` parsed as graphserve's BucketGrid; max_batch_tokens, a
// field this schema may not know yet, is let through and read from the text.
void ExpectParseableFragment(const std::string& text, int64_t* max_batch_tokens) {
  constexpr size_t npos = std::string::npos;
  const size_t start = text.find("buckets {");
  ASSERT_NE(start, npos) << text;
  const size_t end = text.find('}', start);
  ASSERT_NE(end, npos) << text;
  const std::string body = text.substr(start + 9, end - start - 9);
  google::protobuf::TextFormat::Parser parser;
  parser.AllowUnknownField(true);
  inference::BucketGrid grid;
  ASSERT_TRUE(parser.ParseFromString(body, &grid)) << body;
  ASSERT_GT(grid.batch_sizes_size(), 0) << body;
  ASSERT_GT(grid.sequence_lengths_size(), 0) << body;
  EXPECT_EQ(grid.sequence_lengths(grid.sequence_lengths_size() - 1), 512) << body;  // max_sequence_length
  std::smatch tokens;
  *max_batch_tokens = std::regex_search(body, tokens, std::regex(R"(max_batch_tokens: (\d+))"))
                          ? std::stoll(tokens[1].str())
                          : 0;
}

TEST_F(PlanGridTest, TableNamesBothGridsWithFiguresAndAFragment) {
  const ToolRun run = PlanGrid("--model encoder");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::cout << run.output;  // the report, for whoever reads the test log
  // graphs, padding, real tokens/s, graph memory (unknown on the CPU), largest bucket.
  const std::regex row(R"((today|proposal)\s+(\d+)\s+([\d.]+)x\s+(\d+)\s+unknown\s+(\d+)x(\d+))");
  std::vector<std::string> names;
  for (std::sregex_iterator it(run.output.begin(), run.output.end(), row), end; it != end; ++it) {
    names.push_back((*it)[1]);
    EXPECT_GT(std::stoll((*it)[2]), 0) << it->str();
    EXPECT_GE(std::stod((*it)[3]), 1.0) << it->str();
    EXPECT_GT(std::stod((*it)[4]), 0) << it->str();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"today", "proposal"})) << run.output;
  EXPECT_NE(run.output.find("worst relative error"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("no graph pool on cpu"), std::string::npos) << run.output;
  int64_t max_batch_tokens = 0;
  ExpectParseableFragment(run.output, &max_batch_tokens);
  // The default budget is today's largest bucket (32 x 512 for the built-in encoder).
  EXPECT_LE(max_batch_tokens, 32 * 512) << run.output;
  // The requests came one at a time, so every batch held one request's 1-3 rows, far below the
  // full batches the model assumes: a changed grid comes with the caution to measure it first.
  EXPECT_NE(run.output.find("batches: the server's held"), std::string::npos) << run.output;
  const bool keeps_today = run.output.find("today's grid is the best found") != std::string::npos;
  EXPECT_EQ(run.output.find("caution: this traffic filled batches") != std::string::npos, !keeps_today) << run.output;
}

// One length pads this mixed traffic far more than today's 20 do: today's grid is kept, over the
// limit, and the report says so rather than ignoring --max-lengths silently.
TEST_F(PlanGridTest, TodaysGridKeptOverMaxLengthsSaysSo) {
  const ToolRun run = PlanGrid("--model encoder --max-lengths 1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("today's grid is the best found: keep it (its 20 lengths are more than "
                            "--max-lengths 1; no grid within that limit does as well)"),
            std::string::npos)
      << run.output;
}

TEST_F(PlanGridTest, JsonHasBothGridsTheFitAndTheFragment) {
  const ToolRun run = PlanGrid("--model encoder --max-lengths 4 --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const json report = json::parse(run.output, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(report.is_object()) << run.output;
  EXPECT_EQ(report["model"], "encoder");
  EXPECT_EQ(report["device"], "cpu");
  EXPECT_EQ(report["traffic"]["requests"].get<double>(), 43);
  // One request a batch (they came one at a time), of 1 to 3 rows.
  const double observed = report["traffic"]["observed_rows_per_batch"].get<double>();
  EXPECT_GE(observed, 1.0);
  EXPECT_LE(observed, 3.0);
  EXPECT_GT(report["today"]["rows_per_batch"].get<double>(), observed);
  EXPECT_GE(report["cost_fit"]["points"].get<int>(), 3);
  EXPECT_GE(report["cost_fit"]["worst_relative_error"].get<double>(), 0);
  for (const char* grid : {"today", "proposal"}) {
    const json& plan = report[grid];
    EXPECT_GT(plan["tokens_per_s"].get<double>(), 0) << grid;
    EXPECT_GE(plan["padding"].get<double>(), 1.0) << grid;
    EXPECT_GT(plan["graphs"].get<int64_t>(), 0) << grid;
    EXPECT_TRUE(plan["graph_memory_bytes"].is_null()) << grid;
    EXPECT_LE(plan["largest_bucket_tokens"].get<int64_t>(), 32 * 512) << grid;
  }
  // Today's grid is the built-in encoder's default: the token-budget staircase of 20 lengths.
  EXPECT_EQ(report["today"]["graphs"], 284);
  EXPECT_EQ(report["today"]["max_batch_tokens"], 16384);
  // At most --max-lengths lengths, unless the proposal is to keep today's grid (the search keeps it
  // as a candidate, so that it never proposes a grid worse under its own model).
  if (report["proposal"]["sequence_lengths"] != report["today"]["sequence_lengths"]) {
    EXPECT_LE(report["proposal"]["sequence_lengths"].size(), 4u) << report.dump(2);
  }
  const auto sizes = report["proposal"]["batch_sizes"].get<std::vector<int64_t>>();
  EXPECT_NE(std::find(sizes.begin(), sizes.end(), 32), sizes.end()) << report.dump(2);  // max_batch_size
  int64_t max_batch_tokens = 0;
  ExpectParseableFragment(report["config_fragment"].get<std::string>(), &max_batch_tokens);
  EXPECT_EQ(max_batch_tokens, report["proposal"]["max_batch_tokens"].get<int64_t>());
}

TEST_F(PlanGridTest, MistakesAreNamed) {
  ToolRun run = PlanGrid("--model nonexistent");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("NOT_FOUND"), std::string::npos) << run.output;
  // No graph pool on the CPU: a memory budget cannot be turned into tokens.
  run = PlanGrid("--model encoder --memory-budget-mib 100");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("graph pool"), std::string::npos) << run.output;
  run = RunTool(std::string(GRAPHSERVE_CLI) + " plan-grid --model encoder --address " + server_->address() +
                " --metrics-url http://127.0.0.1:1/metrics");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("cannot read http://127.0.0.1:1/metrics"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace graphserve::testing
