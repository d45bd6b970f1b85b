// Black-box tests of graphserve's /metrics with the real Prometheus tools: the counts of a live scrape
// against the requests sent, `promtool check metrics` on that scrape and `promtool check config` on
// deploy/prometheus.yml, the Grafana dashboard's PromQL against the names graphserve exports, and a
// real Prometheus server scraping a running graphserve, evaluating deploy/prometheus-alerts.yml and
// answering every query of the dashboard about it.
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
const std::string kAlerts = std::string(SOURCE_DIR) + "/deploy/prometheus-alerts.yml";

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

// The dashboard's template variables.
nlohmann::json Variables(const nlohmann::json& dashboard) {
  const nlohmann::json templating = dashboard.value("templating", nlohmann::json::object());
  return templating.value("list", nlohmann::json::array());
}

struct DashboardQuery {
  enum Kind { kPanel, kVariable, kAnnotation };
  Kind kind;
  std::string name;         // "PANEL TITLE/REFID", "$VARIABLE" or the annotation's name
  std::string expr;         // PromQL; label_values(SELECTOR, LABEL) for a variable
  std::string description;  // the panel's
};

// Every query of the dashboard: panel targets, query variables and annotations.
std::vector<DashboardQuery> DashboardQueries(const nlohmann::json& dashboard) {
  std::vector<DashboardQuery> queries;
  for (const auto& panel : dashboard.value("panels", nlohmann::json::array())) {
    for (const auto& target : panel.value("targets", nlohmann::json::array())) {
      if (!target.contains("expr")) continue;
      queries.push_back({DashboardQuery::kPanel,
                         panel.value("title", "") + "/" + target.value("refId", ""), target["expr"],
                         panel.value("description", "")});
    }
  }
  for (const auto& variable : Variables(dashboard)) {
    if (variable.value("type", "") != "query") continue;
    const auto& query = variable["query"];
    queries.push_back({DashboardQuery::kVariable, "$" + variable.value("name", ""),
                       query.is_object() ? query.value("query", "") : query.get<std::string>(), ""});
  }
  const nlohmann::json annotations = dashboard.value("annotations", nlohmann::json::object());
  for (const auto& annotation : annotations.value("list", nlohmann::json::array())) {
    // A top-level expr is how the file writes it; Grafana moves it into target when it saves.
    const std::string expr = annotation.contains("expr")
                                 ? annotation.value("expr", "")
                                 : annotation.value("target", nlohmann::json::object()).value("expr", "");
    if (expr.empty()) continue;
    queries.push_back({DashboardQuery::kAnnotation, annotation.value("name", ""), expr, ""});
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

  // A success is counted once its answer is written, which its client may see first.
  const Labels success = {{"model", "encoder"}, {"code", "success"}};
  EXPECT_TRUE(Eventually(seconds(10), [&] {
    return delta(Exposition(Scrape(*server_)), "graphserve_requests_total", success) == sent;
  }));
  const Exposition after(Scrape(*server_));
  const Labels encoder = {{"model", "encoder"}};
  EXPECT_EQ(delta(after, "graphserve_requests_total", success), sent);
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
  // Every call that reached the model carried a 120 s deadline, the bad one included: each arrived
  // with nearly all of it left (a little more, even: gRPC rounds the timeout it sends up).
  const double with_deadline = delta(after, "graphserve_request_deadline_left_seconds_count", encoder);
  EXPECT_EQ(with_deadline, sent + 1);
  const double mean_left_s = delta(after, "graphserve_request_deadline_left_seconds_sum", encoder) / with_deadline;
  EXPECT_GT(mean_left_s, 100.0);
  EXPECT_LE(mean_left_s, 125.0);

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
  RunCommand(std::string(PROMTOOL) + " check metrics < " + path, &output);
  // Triton's nv_* names break Prometheus' naming conventions (no _total, "_us", "_count"), and must:
  // dashboards written for Triton use them. Every other line is a finding.
  std::istringstream findings(output);
  std::string line, graphserve_findings;
  while (std::getline(findings, line)) {
    if (line.rfind("nv_inference_", 0) != 0) graphserve_findings += line + "\n";
  }
  EXPECT_NE(output.find("nv_inference_count"), std::string::npos) << "promtool saw no nv_ family:\n" << output;
  EXPECT_EQ(graphserve_findings, "") << "promtool lint findings";
}

TEST_F(LiveMetricsTest, DashboardNamesOnlyMetricsGraphserveExports) {
  const nlohmann::json dashboard = nlohmann::json::parse(ReadText(kDashboard));
  const Exposition live(Scrape(*server_));
  const std::vector<DashboardQuery> queries = DashboardQueries(dashboard);
  ASSERT_GE(queries.size(), 10u);

  std::set<std::string> referenced;
  for (const DashboardQuery& query : queries) {
    const std::set<std::string> families = FamiliesIn(query.expr, live.types());
    // Otherwise the series Prometheus makes itself: a target's up, the alert rules' ALERTS.
    if (families.empty()) {
      EXPECT_TRUE(std::regex_search(query.expr, std::regex("\\b(up|ALERTS)\\{")))
          << query.name << " names no metric: " << query.expr;
    }
    for (const std::string& family : families) {
      EXPECT_EQ(live.types().count(family), 1u)
          << "'" << query.name << "' names " << family << ", which graphserve does not export";
      referenced.insert(family);
    }
  }
  // The panels the issues ask for: replay vs eager and the fallback reasons, latency quantiles, queue
  // depth, batch fill, real tokens and padding waste, per-bucket replays, GPU memory, build info,
  // graph capture time and pool memory.
  for (const char* family :
       {"graphserve_graph_replays_total", "graphserve_eager_executions_total",
        "graphserve_batches_total", "graphserve_request_duration_seconds", "graphserve_queue_depth",
        "graphserve_batch_rows_total", "graphserve_real_elements_total",
        "graphserve_padded_elements_total", "graphserve_gpu_memory_allocated_bytes",
        "graphserve_gpu_memory_reserved_bytes", "graphserve_build_info",
        "graphserve_graph_capture_seconds", "graphserve_graph_pool_bytes"}) {
    EXPECT_EQ(referenced.count(family), 1u) << "no panel shows " << family;
  }
  const std::set<std::string> gpu_memory = {"graphserve_gpu_memory_allocated_bytes",
                                            "graphserve_gpu_memory_reserved_bytes"};
  for (const auto& panel : dashboard["panels"]) {
    std::set<std::string> families;
    for (const auto& target : panel.value("targets", nlohmann::json::array())) {
      const std::set<std::string> named = FamiliesIn(target.value("expr", ""), live.types());
      families.insert(named.begin(), named.end());
    }
    // Values set once per model load read best as numbers than as flat lines.
    for (const char* constant : {"graphserve_build_info", "graphserve_graph_capture_seconds",
                                 "graphserve_graph_pool_bytes"}) {
      if (families.count(constant) > 0) {
        EXPECT_EQ(panel.value("type", ""), "stat") << panel.value("title", "") << " shows " << constant;
      }
    }
    // GPU memory is per device, shared by the models there: no per-model series beside it.
    bool shows_gpu_memory = false;
    for (const std::string& family : families) shows_gpu_memory |= gpu_memory.count(family) > 0;
    if (shows_gpu_memory) {
      for (const std::string& family : families) {
        EXPECT_EQ(gpu_memory.count(family), 1u) << panel.value("title", "") << " mixes in " << family;
      }
    }
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
    if (v.value("type", "") != "query") continue;
    users.emplace_back("$" + v.value("name", ""), v.value("datasource", nlohmann::json()));
  }
  const nlohmann::json annotations = dashboard.value("annotations", nlohmann::json::object());
  for (const auto& annotation : annotations.value("list", nlohmann::json::array())) {
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

// A Prometheus HTTP API answer (`target` is the path and query string): status "success" or "error",
// and data.
nlohmann::json PromApi(int port, const std::string& target) {
  const HttpResponse response = HttpGet(port, target);
  if (response.status == 0) return {{"status", "no answer"}};
  nlohmann::json answer = nlohmann::json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  return answer.is_object() ? answer : nlohmann::json{{"status", "not JSON: " + response.body}};
}

// Prometheus's answer to an instant query: status "success" or "error", and the vector result.
nlohmann::json PromQuery(int port, const std::string& expr) {
  return PromApi(port, "/api/v1/query?query=" + UrlEncode(expr));
}

// The data of a successful answer (a query's result, a label's values); empty when it failed.
nlohmann::json Data(const nlohmann::json& answer) {
  if (answer.value("status", "") != "success") return nlohmann::json::array();
  const nlohmann::json& data = answer["data"];
  return data.is_object() && data.contains("result") ? data["result"] : data;
}

// The values a query variable lists: label_values(SELECTOR, LABEL) asked as Grafana asks it, through
// the label values endpoint.
nlohmann::json LabelValues(int port, const std::string& query) {
  std::smatch match;
  if (!std::regex_match(query, match, std::regex(R"(label_values\((.+),\s*(\w+)\))"))) {
    return {{"status", "not label_values(SELECTOR, LABEL)"}};
  }
  return PromApi(port, "/api/v1/label/" + match[2].str() + "/values?match%5B%5D=" +
                           UrlEncode(match[1].str()));
}

// The value of a query whose result is one sample, or nullopt.
std::optional<double> PromValue(int port, const std::string& expr) {
  const nlohmann::json result = Data(PromQuery(port, expr));
  if (result.size() != 1) return std::nullopt;
  return std::stod(result[0]["value"][1].get<std::string>());
}

// Whether a query result holds a series with all of `labels`.
bool HasSeries(const nlohmann::json& result, const Labels& labels) {
  for (const auto& series : result) {
    bool all = true;
    const nlohmann::json metric = series.value("metric", nlohmann::json::object());
    for (const auto& [name, value] : labels) all = all && metric.value(name, "") == value;
    if (all) return true;
  }
  return false;
}

// A real Prometheus scraping, every second, a real graphserve (job graphserve, as deploy/prometheus.yml
// names it) and a second target where nothing listens: a replica that is down. It evaluates
// deploy/prometheus-alerts.yml. Started once for the suite; each test sends its own traffic.
class PrometheusServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!Found(PROMETHEUS)) return;
    server_ = new ServerProcess(GRAPHSERVE_BINARY, {"--device", "cpu"},
                                std::string(TEST_OUTPUT_DIR) + "/prometheus_graphserve.log");
    ASSERT_TRUE(server_->WaitUntilReady(kStartTimeout)) << server_->Log();

    dir_ = std::string(TEST_OUTPUT_DIR) + "/prometheus-XXXXXX";
    ASSERT_NE(mkdtemp(dir_.data()), nullptr);
    down_target_ = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
    const std::string config = dir_ + "/prometheus.yml";
    std::ofstream(config) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                          << "rule_files: ['" << kAlerts << "']\n"
                          << "scrape_configs:\n  - job_name: graphserve\n    static_configs:\n"
                          << "      - targets: ['127.0.0.1:" << server_->metrics_port() << "', '"
                          << down_target_ << "']\n";
    port_ = FreeLoopbackPort();
    prometheus_ = new ChildProcess({PROMETHEUS, "--config.file=" + config,
                                    "--storage.tsdb.path=" + dir_ + "/data",
                                    "--web.listen-address=127.0.0.1:" + std::to_string(port_)},
                                   dir_ + "/prometheus.log");
    ASSERT_TRUE(Eventually(seconds(60), [] { return HttpGet(port_, "/-/ready").status == 200; }))
        << prometheus_->Log();
    // Zeros scraped before any traffic, so that rate() sees the increase.
    ASSERT_TRUE(Eventually(seconds(60), [] { return PromValue(port_, kSuccess) == 0.0; }))
        << prometheus_->Log();
    ready_ = true;
  }
  static void TearDownTestSuite() {
    if (prometheus_ != nullptr) {
      EXPECT_EQ(prometheus_->Stop(SIGTERM, seconds(30)), 0) << prometheus_->Log();
    }
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(SIGTERM, seconds(60)), 0) << server_->Log();
    }
    delete prometheus_;
    delete server_;
    prometheus_ = nullptr;
    server_ = nullptr;
    // Prometheus's database and log stay behind only when something failed.
    if (!dir_.empty() && !::testing::UnitTest::GetInstance()->Failed()) {
      std::filesystem::remove_all(dir_);
    }
  }
  void SetUp() override {
    SKIP_WITHOUT(PROMETHEUS);
    ASSERT_TRUE(ready_) << "the suite's graphserve or Prometheus did not start";
  }

  // Sends `count` requests of 1-2 rows and growing lengths to the built-in encoder.
  static void SendRequests(int count) {
    auto stub = server_->NewStub();
    std::mt19937 random(5);
    for (int i = 0; i < count; ++i) {
      ASSERT_TRUE(
          Infer(stub.get(), TokenRequest("encoder", RandomTokens(random, 1 + i % 2, 4 + 9 * i))).ok());
    }
  }

  static inline const std::string kSuccess =
      "sum(graphserve_requests_total{job=\"graphserve\",model=\"encoder\",code=\"success\"})";
  static inline ServerProcess* server_ = nullptr;
  static inline ChildProcess* prometheus_ = nullptr;
  static inline int port_ = 0;
  static inline std::string dir_;
  static inline std::string down_target_;
  static inline bool ready_ = false;
};

TEST_F(PrometheusServerTest, PrometheusScrapesRequestAndBatchCounts) {
  const std::string durations = "sum(graphserve_request_duration_seconds_count{model=\"encoder\"})";
  const std::string batches = "sum(graphserve_batches_total{model=\"encoder\"})";
  const double success_before = PromValue(port_, kSuccess).value_or(-1);
  const double durations_before = PromValue(port_, durations).value_or(-1);
  const double batches_before = PromValue(port_, batches).value_or(-1);
  constexpr int kRequests = 10;
  SendRequests(kRequests);

  const std::string replays_and_eager =
      "sum(graphserve_eager_executions_total{model=\"encoder\"}) + "
      "(sum(graphserve_graph_replays_total{model=\"encoder\"}) or vector(0))";
  auto counted = [&] {
    return PromValue(port_, kSuccess) == success_before + kRequests &&
           PromValue(port_, batches).value_or(0) > batches_before;
  };
  EXPECT_TRUE(Eventually(seconds(60), counted)) << "success: " << PromQuery(port_, kSuccess).dump()
                                                << "\nbatches: " << PromQuery(port_, batches).dump();
  // The requests are all answered, so the counts no longer move between these queries.
  const std::optional<double> batch_count = PromValue(port_, batches);
  ASSERT_TRUE(batch_count.has_value());
  EXPECT_GE(*batch_count - batches_before, 1.0);
  EXPECT_LE(*batch_count - batches_before, double(kRequests));
  EXPECT_EQ(PromValue(port_, replays_and_eager), batch_count);
  EXPECT_EQ(
      PromValue(port_, "sum(graphserve_eager_executions_total{model=\"encoder\",reason=\"no_cuda\"})"),
      batch_count);
  EXPECT_EQ(PromValue(port_, durations), durations_before + kRequests);
}

// The GPU-only queries: a CPU server exports no graph buckets and no CUDA device memory. Their panels'
// descriptions say "GPU only"; every other query must show data here.
const std::set<std::string> kGpuOnlyQueries = {
    "Graph replays by bucket/A",
    "GPU memory per device/A",
    "GPU memory per device/B",
};

TEST_F(PrometheusServerTest, EveryDashboardQueryReturnsData) {
  // Traffic for the panels, and a call for a model that does not exist: counted with model="".
  const std::string unrouted =
      "sum(graphserve_requests_total{job=\"graphserve\",model=\"\",code=\"not_found\"})";
  const double unrouted_before = PromValue(port_, unrouted).value_or(0);
  const double success_before = PromValue(port_, kSuccess).value_or(-1);
  constexpr int kRequests = 4;
  SendRequests(kRequests);
  auto stub = server_->NewStub();
  ASSERT_EQ(Infer(stub.get(), TokenRequest("no_such_model", {{1, 2, 3}})).error_code(),
            grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(Eventually(seconds(60), [&] {
    return PromValue(port_, kSuccess) == success_before + kRequests &&
           PromValue(port_, unrouted) == unrouted_before + 1;
  })) << PromQuery(port_, unrouted).dump();

  // Each query with the variables at their defaults, as Grafana sends it when the dashboard opens.
  // A series appearing takes a second scrape to have a rate, hence the wait for data.
  const nlohmann::json dashboard = nlohmann::json::parse(ReadText(kDashboard));
  std::set<std::string> gpu_only_seen;
  bool unrouted_shown = false;
  for (const DashboardQuery& query : DashboardQueries(dashboard)) {
    const std::string expr = AsGrafanaSendsIt(query.expr, dashboard);
    if (query.kind == DashboardQuery::kVariable) {
      nlohmann::json answer;
      EXPECT_TRUE(Eventually(seconds(30), [&] {
        answer = LabelValues(port_, expr);
        return !Data(answer).empty();
      })) << query.name << " lists nothing: " << expr << "\n" << answer.dump();
      continue;
    }
    if (query.kind != DashboardQuery::kPanel) continue;  // the alert annotation: its own test
    const bool gpu_only = kGpuOnlyQueries.count(query.name) > 0;
    EXPECT_EQ(gpu_only, query.description.find("GPU only") != std::string::npos)
        << query.name << ": in kGpuOnlyQueries exactly when its panel's description says GPU only";
    if (gpu_only) {
      gpu_only_seen.insert(query.name);
      const nlohmann::json answer = PromQuery(port_, expr);
      EXPECT_EQ(answer.value("status", ""), "success") << query.name << ": " << answer.dump();
      EXPECT_TRUE(Data(answer).empty()) << query.name << " has data on a CPU server: not GPU only";
      continue;
    }
    nlohmann::json answer;
    EXPECT_TRUE(Eventually(seconds(30), [&] {
      answer = PromQuery(port_, expr);
      return !Data(answer).empty();
    })) << query.name << " shows no data: " << expr << "\n" << answer.dump();
    unrouted_shown = unrouted_shown || HasSeries(Data(answer), {{"code", "not_found"}});
  }
  EXPECT_EQ(gpu_only_seen, kGpuOnlyQueries) << "a GPU-only query listed here is not in the dashboard";
  EXPECT_TRUE(unrouted_shown) << "no panel shows the call for an unknown model (model=\"\")";
}

TEST_F(PrometheusServerTest, AlertAnnotationShowsTheDeployedAlerts) {
  // Prometheus loaded every rule of deploy/prometheus-alerts.yml.
  std::set<std::string> in_file;
  const std::string alerts = ReadText(kAlerts);
  const std::regex kAlert("- alert: (\\w+)");
  for (auto it = std::sregex_iterator(alerts.begin(), alerts.end(), kAlert);
       it != std::sregex_iterator(); ++it) {
    in_file.insert((*it)[1].str());
  }
  ASSERT_FALSE(in_file.empty());
  std::set<std::string> loaded;
  const nlohmann::json rules = Data(PromApi(port_, "/api/v1/rules"));
  ASSERT_TRUE(rules.is_object()) << PromApi(port_, "/api/v1/rules").dump();
  for (const auto& group : rules.value("groups", nlohmann::json::array())) {
    for (const auto& rule : group.value("rules", nlohmann::json::array())) {
      loaded.insert(rule.value("name", ""));
      EXPECT_NE(rule.value("health", ""), "err") << rule.dump();
    }
  }
  EXPECT_EQ(loaded, in_file);

  const nlohmann::json dashboard = nlohmann::json::parse(ReadText(kDashboard));
  int annotations = 0;
  for (const DashboardQuery& query : DashboardQueries(dashboard)) {
    if (query.kind != DashboardQuery::kAnnotation) continue;
    ++annotations;
    const std::string expr = AsGrafanaSendsIt(query.expr, dashboard);
    const nlohmann::json answer = PromQuery(port_, expr);
    EXPECT_EQ(answer.value("status", ""), "success") << query.name << ": " << answer.dump();
    // It takes in every rule of the file...
    std::smatch names;
    ASSERT_TRUE(std::regex_search(expr, names, std::regex("alertname=~\"([^\"]+)\"")))
        << query.name << " selects alerts by no alertname regex: " << expr;
    for (const std::string& alert : in_file) {
      EXPECT_TRUE(std::regex_match(alert, std::regex(names[1].str())))
          << query.name << " leaves out " << alert;
    }
    // ...and finds a real one: the target where nothing listens raises GraphserveDown, pending for its
    // `for:` minute and then firing; asked for pending alerts too, the query finds it.
    const std::string raised = std::regex_replace(expr, std::regex("alertstate=\"firing\""),
                                                  "alertstate=~\"firing|pending\"");
    ASSERT_NE(raised, expr) << query.name << " does not select firing alerts";
    nlohmann::json found;
    EXPECT_TRUE(Eventually(seconds(60), [&] {
      found = Data(PromQuery(port_, raised));
      return HasSeries(found, {{"alertname", "GraphserveDown"}, {"instance", down_target_}});
    })) << raised << "\n" << found.dump();
  }
  EXPECT_GE(annotations, 1) << "no alert annotation";
}

}  // namespace
}  // namespace graphserve::testing
