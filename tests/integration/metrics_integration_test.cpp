// Black-box tests of graphserve's /metrics with the real Prometheus tools: the counts of a live scrape
// against the requests sent, `promtool check metrics` on that scrape and `promtool check config` on
// deploy/prometheus.yml, the Grafana dashboard's PromQL against the names graphserve exports, and a
// real Prometheus server scraping a running graphserve and answering queries about it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "http_get.h"
#include "infer_helpers.h"
#include "prometheus_text.h"
#include "server_process.h"

namespace graphserve::testing {
namespace {

// The Prometheus tools come from Debian's `prometheus` package, which deploy/install-deps.sh
// installs; a host without it (the CUDA host) skips the tests that need them, saying so.
bool Found(const char* program) { return std::string(program).find("NOTFOUND") == std::string::npos; }
#define SKIP_WITHOUT(program) \
  if (!Found(program)) GTEST_SKIP() << #program " not found (Debian package prometheus): skipped"

using std::chrono::seconds;

constexpr auto kStartTimeout = seconds(240);
const std::string kDashboard = std::string(SOURCE_DIR) + "/deploy/grafana/dashboards/graphserve.json";
const std::string kDatasources =
    std::string(SOURCE_DIR) + "/deploy/grafana/provisioning/datasources/prometheus.yml";
const std::string kPrometheusConfig = std::string(SOURCE_DIR) + "/deploy/prometheus.yml";

std::string ReadText(const std::string& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// Runs `command` through the shell; returns its exit status and its stdout+stderr in `output`.
int RunCommand(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output->append(buffer, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string Scrape(const ServerProcess& server) {
  const HttpResponse response = HttpGet(server.metrics_port(), "/metrics");
  EXPECT_EQ(response.status, 200) << response.headers;
  return response.body;
}

grpc::Status Infer(inference::GRPCInferenceService::Stub* stub,
                   const inference::ModelInferRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(120));
  inference::ModelInferResponse response;
  return stub->ModelInfer(&context, request, &response);
}

// The metric families an expression names: graphserve_* tokens, with a histogram's _bucket, _sum and
// _count series mapped to their family when `types` declares it a histogram.
std::set<std::string> FamiliesIn(const std::string& expr,
                                 const std::map<std::string, std::string>& types) {
  static const std::regex kName("graphserve_[a-z_]+");
  std::set<std::string> families;
  for (auto it = std::sregex_iterator(expr.begin(), expr.end(), kName); it != std::sregex_iterator();
       ++it) {
    std::string name = it->str();
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s(suffix);
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        const std::string base = name.substr(0, name.size() - s.size());
        auto type = types.find(base);
        if (type != types.end() && type->second == "histogram") name = base;
      }
    }
    families.insert(name);
  }
  return families;
}

nlohmann::json Variables(const nlohmann::json& dashboard) {
  const nlohmann::json templating = dashboard.value("templating", nlohmann::json::object());
  return templating.value("list", nlohmann::json::array());
}

struct DashboardQuery {
  std::string panel;
  std::string expr;
};

// Every PromQL expression of the dashboard: panel targets and query variables.
std::vector<DashboardQuery> DashboardQueries(const nlohmann::json& dashboard) {
  std::vector<DashboardQuery> queries;
  for (const auto& panel : dashboard.value("panels", nlohmann::json::array())) {
    for (const auto& target : panel.value("targets", nlohmann::json::array())) {
      if (target.contains("expr")) queries.push_back({panel.value("title", ""), target["expr"]});
    }
  }
  for (const auto& variable : dashboard["templating"].value("list", nlohmann::json::array())) {
    if (variable.value("type", "") != "query") continue;
    const auto& query = variable["query"];
    queries.push_back({"$" + variable.value("name", ""),
                       query.is_object() ? query.value("query", "") : query.get<std::string>()});
  }
  return queries;
}

// What Grafana puts in place of a variable at its saved default: a variable set to All its allValue,
// any other its current value.
std::string DefaultValue(const nlohmann::json& variable) {
  const nlohmann::json current = variable.value("current", nlohmann::json::object());
  nlohmann::json value = current.value("value", nlohmann::json(""));
  if (value.is_array()) value = value.empty() ? nlohmann::json("") : value[0];
  const std::string text = value.get<std::string>();
  return text == "$__all" ? variable.value("allValue", "") : text;
}

// A dashboard expression as Grafana sends it: every variable at its default ($model and $instance at
// All, $job at the compose stack's job) and a fixed rate window.
std::string AsGrafanaSendsIt(std::string expr, const nlohmann::json& dashboard) {
  expr = std::regex_replace(expr, std::regex("\\$__rate_interval"), "1m");
  for (const auto& variable : Variables(dashboard)) {
    const std::regex reference("\\$\\{?" + variable.value("name", "") + "\\}?(?![A-Za-z0-9_])");
    // "$$" in a replacement stands for a literal "$".
    const std::string value = std::regex_replace(DefaultValue(variable), std::regex("\\$"), "$$$$");
    expr = std::regex_replace(expr, reference, value);
  }
  return expr;
}

// ---------------------------------------------------------------------------------------------------
// A live scrape of one server, started once for the suite: the built-in encoder on CPU.

class LiveMetricsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess(GRAPHSERVE_BINARY, {"--device", "cpu"},
                                std::string(TEST_OUTPUT_DIR) + "/live_metrics_server.log");
    ASSERT_TRUE(server_->WaitUntilReady(kStartTimeout)) << server_->Log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->Stop(SIGTERM, seconds(60)), 0) << server_->Log();
    delete server_;
    server_ = nullptr;
  }
  static inline ServerProcess* server_ = nullptr;
};

TEST_F(LiveMetricsTest, CountsMatchTheRequestsSent) {
  auto stub = server_->NewStub();
  const Exposition before(Scrape(*server_));
  auto delta = [&before](const Exposition& after, const std::string& name, const Labels& labels) {
    return after.Sum(name, labels) - before.Sum(name, labels);
  };

  // Lengths across the bucket grid; rows up to 3. Some run alone, some concurrently (and may share a
  // batch).
  std::mt19937 random(11);
  std::vector<inference::ModelInferRequest> requests;
  int64_t rows_sent = 0;
  int64_t elements_sent = 0;
  const std::vector<int64_t> lengths = {3, 16, 17, 40, 100, 200, 5, 9, 33, 64, 130, 7, 12, 20, 31, 48};
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t rows = 1 + static_cast<int64_t>(i % 3);
    requests.push_back(TokenRequest("encoder", RandomTokens(random, rows, lengths[i])));
    rows_sent += rows;
    elements_sent += rows * lengths[i];
  }
  const size_t sequential = 6;
  for (size_t i = 0; i < sequential; ++i) ASSERT_TRUE(Infer(stub.get(), requests[i]).ok());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (size_t i = sequential; i < requests.size(); ++i) {
    threads.emplace_back([&, i] {
      if (!Infer(stub.get(), requests[i]).ok()) ++failures;
    });
  }
  for (auto& thread : threads) thread.join();
  ASSERT_EQ(failures.load(), 0);
  const double sent = static_cast<double>(requests.size());

  // One bad request and one for a model that does not exist.
  inference::ModelInferRequest wrong_type = TokenRequest("encoder", {{1, 2, 3}});
  wrong_type.mutable_inputs(0)->set_datatype("FP32");
  EXPECT_EQ(Infer(stub.get(), wrong_type).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Infer(stub.get(), TokenRequest("no_such_model", {{1, 2, 3}})).error_code(),
            grpc::StatusCode::NOT_FOUND);

  const Exposition after(Scrape(*server_));
  const Labels encoder = {{"model", "encoder"}};
  EXPECT_EQ(delta(after, "graphserve_requests_total", {{"model", "encoder"}, {"code", "success"}}),
            sent);
  EXPECT_EQ(
      delta(after, "graphserve_requests_total", {{"model", "encoder"}, {"code", "invalid_argument"}}),
      1.0);
  EXPECT_EQ(delta(after, "graphserve_requests_total", {{"model", ""}, {"code", "not_found"}}), 1.0);
  EXPECT_EQ(delta(after, "graphserve_requests_total", encoder), sent + 1);
  for (const char* histogram :
       {"graphserve_request_duration_seconds", "graphserve_queue_duration_seconds",
        "graphserve_compute_duration_seconds"}) {
    EXPECT_EQ(delta(after, std::string(histogram) + "_count", encoder), sent) << histogram;
  }
  EXPECT_EQ(after.One("graphserve_requests_in_flight", encoder), 0.0);
  EXPECT_EQ(after.One("graphserve_queue_depth", encoder), 0.0);

  // Batches: every request ran in exactly one, on this CPU server eagerly for want of CUDA.
  const double batches = delta(after, "graphserve_batches_total", encoder);
  EXPECT_GE(batches, 1.0);
  EXPECT_LE(batches, sent);
  EXPECT_EQ(
      delta(after, "graphserve_eager_executions_total", {{"model", "encoder"}, {"reason", "no_cuda"}}),
      batches);
  EXPECT_EQ(after.Sum("graphserve_graph_replays_total") + after.Sum("graphserve_eager_executions_total"),
            after.Sum("graphserve_batches_total"));
  EXPECT_EQ(delta(after, "graphserve_batch_rows_total", encoder), static_cast<double>(rows_sent));
  EXPECT_EQ(delta(after, "graphserve_real_elements_total", encoder), static_cast<double>(elements_sent));
  EXPECT_GE(after.Sum("graphserve_padded_elements_total"), after.Sum("graphserve_real_elements_total"));

  const std::vector<Sample> build = after.Find("graphserve_build_info");
  ASSERT_EQ(build.size(), 1u);
  EXPECT_EQ(build[0].value, 1.0);
  EXPECT_FALSE(build[0].labels.at("version").empty());
  EXPECT_FALSE(build[0].labels.at("cuda").empty());
}

TEST_F(LiveMetricsTest, PromtoolAcceptsALiveScrape) {
  SKIP_WITHOUT(PROMTOOL);
  // After some traffic, so that the error and histogram series are populated too.
  auto stub = server_->NewStub();
  ASSERT_TRUE(Infer(stub.get(), TokenRequest("encoder", {{5, 6, 7, 8}})).ok());
  Infer(stub.get(), TokenRequest("no_such_model", {{1}}));
  const std::string path = std::string(TEST_OUTPUT_DIR) + "/live_scrape.txt";
  std::ofstream(path) << Scrape(*server_);
  std::string output;
  EXPECT_EQ(RunCommand(std::string(PROMTOOL) + " check metrics < " + path, &output), 0) << output;
  EXPECT_EQ(output, "") << "promtool lint findings";
}

TEST_F(LiveMetricsTest, DashboardNamesOnlyMetricsGraphserveExports) {
  const nlohmann::json dashboard = nlohmann::json::parse(ReadText(kDashboard));
  const Exposition live(Scrape(*server_));
  const std::vector<DashboardQuery> queries = DashboardQueries(dashboard);
  ASSERT_GE(queries.size(), 10u);

  std::set<std::string> referenced;
  for (const DashboardQuery& query : queries) {
    const std::set<std::string> families = FamiliesIn(query.expr, live.types());
    // Otherwise the series Prometheus makes itself: a target's up.
    if (families.empty()) {
      EXPECT_TRUE(std::regex_search(query.expr, std::regex("\\bup\\{")))
          << query.panel << " names no metric: " << query.expr;
    }
    for (const std::string& family : families) {
      EXPECT_EQ(live.types().count(family), 1u)
          << "panel '" << query.panel << "' names " << family << ", which graphserve does not export";
      referenced.insert(family);
    }
  }
  // The panels the issue asks for: replay vs eager and the fallback reasons, latency quantiles, queue
  // depth, batch fill, padding waste, per-bucket replays, GPU memory.
  for (const char* family :
       {"graphserve_graph_replays_total", "graphserve_eager_executions_total",
        "graphserve_batches_total", "graphserve_request_duration_seconds", "graphserve_queue_depth",
        "graphserve_batch_rows_total", "graphserve_real_elements_total",
        "graphserve_padded_elements_total", "graphserve_gpu_memory_allocated_bytes"}) {
    EXPECT_EQ(referenced.count(family), 1u) << "no panel shows " << family;
  }
  const std::string text = dashboard.dump();
  for (const char* quantile : {"0.5", "0.95", "0.99"}) {
    EXPECT_NE(text.find(std::string("histogram_quantile(") + quantile +
                        ", sum by (model, le) (rate(graphserve_request_duration_seconds_bucket"),
              std::string::npos)
        << "no p" << quantile << " latency";
  }
  EXPECT_NE(text.find("by (model, reason)"), std::string::npos) << "no fallback reasons panel";
  EXPECT_NE(text.find("by (model, bucket)"), std::string::npos) << "no per-bucket replays panel";

}

// The dashboard is both provisioned (deploy/grafana/provisioning, which Grafana loads as is) and
// imported into other Grafanas (which replace each __inputs placeholder by the datasource picked).
// So every query reads the datasource variable; the variable's saved value is the import placeholder,
// which import replaces and which a provisioned copy, finding no such uid, resolves by its text: the
// provisioned datasource's name.
TEST_F(LiveMetricsTest, DashboardReadsTheDatasourceVariable) {
  const nlohmann::json dashboard = nlohmann::json::parse(ReadText(kDashboard));
  std::smatch name;
  const std::string datasources = ReadText(kDatasources);
  ASSERT_TRUE(std::regex_search(datasources, name, std::regex("-\\s*name:\\s*(\\S+)")));

  nlohmann::json variable;
  for (const auto& v : Variables(dashboard)) {
    if (v.value("type", "") == "datasource") variable = v;
  }
  ASSERT_TRUE(variable.is_object()) << "no datasource variable";
  EXPECT_EQ(variable.value("query", ""), "prometheus");
  const nlohmann::json current = variable.value("current", nlohmann::json::object());
  EXPECT_EQ(current.value("text", ""), name[1].str())
      << "a provisioned copy finds its datasource by this text";
  ASSERT_EQ(dashboard.value("__inputs", nlohmann::json::array()).size(), 1u);
  const nlohmann::json& input = dashboard["__inputs"][0];
  EXPECT_EQ(input.value("type", ""), "datasource");
  EXPECT_EQ(input.value("pluginId", ""), "prometheus");
  const std::string placeholder = "${" + input.value("name", "") + "}";
  EXPECT_EQ(current.value("value", ""), placeholder) << "import would not set the variable";

  // The placeholder nowhere else: a provisioned copy would query a datasource of that uid.
  nlohmann::json rest = dashboard;
  rest.erase("__inputs");
  for (auto& v : rest["templating"]["list"]) {
    if (v.value("type", "") == "datasource") v.erase("current");
  }
  EXPECT_EQ(rest.dump().find("${DS_"), std::string::npos);

  const nlohmann::json reference = {{"type", "prometheus"},
                                    {"uid", "${" + variable.value("name", "") + "}"}};
  std::vector<std::pair<std::string, nlohmann::json>> users;
  for (const auto& panel : dashboard["panels"]) {
    if (panel.value("type", "") == "row") continue;
    users.emplace_back(panel.value("title", ""), panel.value("datasource", nlohmann::json()));
    for (const auto& target : panel.value("targets", nlohmann::json::array())) {
      users.emplace_back(panel.value("title", "") + "/" + target.value("refId", ""),
                         target.value("datasource", nlohmann::json()));
    }
  }
  for (const auto& v : Variables(dashboard)) {
    if (v.value("type", "") == "query") users.emplace_back("$" + v.value("name", ""), v["datasource"]);
  }
  for (const auto& annotation : dashboard["annotations"]["list"]) {
    users.emplace_back(annotation.value("name", ""), annotation.value("datasource", nlohmann::json()));
  }
  for (const auto& [user, datasource] : users) EXPECT_EQ(datasource, reference) << user;

  // Import lists what the dashboard needs; every panel type is among it.
  std::set<std::string> required;
  for (const auto& requirement : dashboard.value("__requires", nlohmann::json::array())) {
    required.insert(requirement.value("type", "") + "/" + requirement.value("id", ""));
  }
  EXPECT_EQ(required.count("datasource/prometheus"), 1u);
  for (const auto& panel : dashboard["panels"]) {
    if (panel.value("type", "") == "row") continue;
    EXPECT_EQ(required.count("panel/" + panel.value("type", "")), 1u) << panel.value("title", "");
  }
}

TEST_F(LiveMetricsTest, PromtoolAcceptsTheDeployedPrometheusConfig) {
  SKIP_WITHOUT(PROMTOOL);
  std::string output;
  EXPECT_EQ(RunCommand(std::string(PROMTOOL) + " check config " + kPrometheusConfig, &output), 0)
      << output;
  // The compose service name and graphserve's default --metrics-address port.
  EXPECT_NE(ReadText(kPrometheusConfig).find("graphserve:8002"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------------
// A real Prometheus scraping a real graphserve.

// A child process with its output in a log; SIGKILLed if still running at destruction.
// Polls `condition` every 250 ms until it holds or `timeout` passes.
template <typename Condition>
bool Eventually(seconds timeout, Condition condition) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < give_up) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return condition();
}

// Prometheus's answer to an instant query: status "success" or "error", and the vector result.
nlohmann::json PromQuery(int port, const std::string& expr) {
  const HttpResponse response = HttpGet(port, "/api/v1/query?query=" + UrlEncode(expr));
  if (response.status == 0) return {{"status", "no answer"}};
  return nlohmann::json::parse(response.body, nullptr, /*allow_exceptions=*/false);
}

// The value of a query whose result is one sample, or nullopt.
std::optional<double> PromValue(int port, const std::string& expr) {
  const nlohmann::json answer = PromQuery(port, expr);
  if (answer.value("status", "") != "success") return std::nullopt;
  const auto& result = answer["data"]["result"];
  if (!result.is_array() || result.size() != 1) return std::nullopt;
  return std::stod(result[0]["value"][1].get<std::string>());
}

TEST(PrometheusServerTest, PrometheusScrapesRequestAndBatchCounts) {
  SKIP_WITHOUT(PROMETHEUS);
  ServerProcess server(GRAPHSERVE_BINARY, {"--device", "cpu"},
                       std::string(TEST_OUTPUT_DIR) + "/prometheus_graphserve.log");
  ASSERT_TRUE(server.WaitUntilReady(kStartTimeout)) << server.Log();

  std::string dir = std::string(TEST_OUTPUT_DIR) + "/prometheus-XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  const std::string config = dir + "/prometheus.yml";
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        << "scrape_configs:\n  - job_name: graphserve\n    static_configs:\n"
                        << "      - targets: ['127.0.0.1:" << server.metrics_port() << "']\n";
  const int port = FreeLoopbackPort();
  ChildProcess prometheus({PROMETHEUS, "--config.file=" + config, "--storage.tsdb.path=" + dir + "/data",
                           "--web.listen-address=127.0.0.1:" + std::to_string(port)},
                          dir + "/prometheus.log");
  ASSERT_TRUE(Eventually(seconds(60), [&] { return HttpGet(port, "/-/ready").status == 200; }))
      << prometheus.Log();
  // Zeros scraped before the traffic, so that rate() sees the increase.
  const std::string success =
      "sum(graphserve_requests_total{job=\"graphserve\",model=\"encoder\",code=\"success\"})";
  ASSERT_TRUE(Eventually(seconds(60), [&] { return PromValue(port, success) == 0.0; }))
      << prometheus.Log();

  auto stub = server.NewStub();
  std::mt19937 random(5);
  constexpr int kRequests = 10;
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(
        Infer(stub.get(), TokenRequest("encoder", RandomTokens(random, 1 + i % 2, 4 + 9 * i))).ok());
  }

  const std::string batches = "sum(graphserve_batches_total{model=\"encoder\"})";
  const std::string replays_and_eager =
      "sum(graphserve_eager_executions_total{model=\"encoder\"}) + "
      "(sum(graphserve_graph_replays_total{model=\"encoder\"}) or vector(0))";
  auto counted = [&] {
    return PromValue(port, success) == double(kRequests) && PromValue(port, batches).value_or(0) > 0;
  };
  EXPECT_TRUE(Eventually(seconds(60), counted)) << "success: " << PromQuery(port, success).dump()
                                                << "\nbatches: " << PromQuery(port, batches).dump();
  // The requests are all answered, so the counts no longer move between these queries.
  const std::optional<double> batch_count = PromValue(port, batches);
  ASSERT_TRUE(batch_count.has_value());
  EXPECT_GE(*batch_count, 1.0);
  EXPECT_LE(*batch_count, double(kRequests));
  EXPECT_EQ(PromValue(port, replays_and_eager), batch_count);
  EXPECT_EQ(
      PromValue(port, "sum(graphserve_eager_executions_total{model=\"encoder\",reason=\"no_cuda\"})"),
      batch_count);
  EXPECT_EQ(PromValue(port, "sum(graphserve_request_duration_seconds_count{model=\"encoder\"})"),
            double(kRequests));

  // Every dashboard query is valid PromQL, and those naming a family with samples here show data.
  const nlohmann::json dashboard = nlohmann::json::parse(ReadText(kDashboard));
  const Exposition live(Scrape(server));
  for (const DashboardQuery& query : DashboardQueries(dashboard)) {
    if (query.panel.rfind("$", 0) == 0) continue;  // a Grafana variable, not PromQL
    const nlohmann::json answer = PromQuery(port, AsGrafanaSendsIt(query.expr, dashboard));
    if (answer.value("status", "") != "success") {
      ADD_FAILURE() << query.panel << ": " << answer.dump();
      continue;
    }
    bool has_samples = false;
    for (const std::string& family : FamiliesIn(query.expr, live.types())) {
      has_samples = has_samples || !live.Find(family).empty() || !live.Find(family + "_count").empty();
    }
    if (has_samples) {
      EXPECT_FALSE(answer["data"]["result"].empty()) << query.panel << ": " << query.expr;
    }
  }

  EXPECT_EQ(prometheus.Stop(SIGTERM, seconds(30)), 0) << prometheus.Log();
  EXPECT_EQ(server.Stop(SIGTERM, seconds(60)), 0) << server.Log();
  // Prometheus's database and log stay behind only when something failed.
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace graphserve::testing
