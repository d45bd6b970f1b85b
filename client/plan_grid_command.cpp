// graphserve-cli plan-grid (see plan_grid_command.h): the server's figures in, the planner's
// comparison out, as a short table or JSON.
#include "plan_grid_command.h"

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graphserve/client/grid_planner.h"
#include "graphserve/client/plan_inputs.h"

namespace graphserve {

namespace {

// Keys in the order written, which reads better than sorted.
using json = nlohmann::ordered_json;

constexpr int kFailure = 1;
constexpr double kMiB = 1024.0 * 1024.0;
// A fit that misses a measured bucket by more than this is reported as poor.
constexpr double kPoorFit = 0.5;
// Batches the server formed holding less than this share of the rows the model gives the proposal's
// are reported: the saturation model then overstates what larger batches gain at the load measured.
constexpr double kUnderfilled = 0.5;

constexpr const char* kAssumptions =
    "saturation: every batch full at the largest batch size of its requests' bucket length (time per "
    "row = cost(b, L) / b); lengths uniform within each histogram bin; rows independent of length";
constexpr const char* kRaggedAssumptions =
    "saturation: requests packed end to end until the next would not fit the token budget or the rows, "
    "in the smallest bucket holding them or the size below filled; alone: each request in the smallest "
    "bucket holding it; lengths uniform within each histogram bin";

const char* Assumptions(const planner::CostFit& fit) {
  return fit.ragged ? kRaggedAssumptions : kAssumptions;
}

// Everything the report shows.
struct Report {
  std::string model;
  ScrapedModel scraped;
  planner::ModelLimits limits;
  planner::Traffic traffic;
  planner::CostFit fit;
  double bytes_per_token = 0;  // 0: unknown (no graph pool)
  int64_t cap_tokens = 0;      // the search's largest bucket
  std::string memory_how;
  planner::Plan today;
  planner::Plan proposal;
  int max_lengths = 0;  // --max-lengths
};

std::string Format(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

std::string Mib(double bytes) { return Format("%.1f MiB", bytes / kMiB); }

// The graph memory a plan is estimated to hold; negative when unknown.
double MemoryBytes(const Report& report, const planner::Plan& plan) {
  if (report.bytes_per_token <= 0) return -1;
  return report.bytes_per_token * static_cast<double>(plan.figures.largest_bucket_tokens);
}

// The memory model and the search's cap, from the graph pool and --memory-budget-mib.
bool ChooseMemoryCap(const PlanGridFlags& flags, Report* report, std::string* error) {
  const planner::GridFigures& today = report->today.figures;
  const std::string largest = planner::ShapeLabel(today.largest_bucket) + " (" +
                              std::to_string(today.largest_bucket_tokens) + " padded tokens)";
  if (report->scraped.graph_pool_bytes > 0 && today.largest_bucket_tokens > 0) {
    report->bytes_per_token = report->scraped.graph_pool_bytes / static_cast<double>(today.largest_bucket_tokens);
    report->memory_how = "graph pool " + Mib(report->scraped.graph_pool_bytes) + " on " + report->scraped.device +
                         " / today's largest bucket " + largest + " = " +
                         Format("%.0f", report->bytes_per_token) +
                         " bytes per padded token; the graphs share one pool, taken to grow with the "
                         "largest bucket";
  } else {
    report->memory_how = "unknown: the server reports no graph pool on " + report->scraped.device +
                         " (no CUDA graphs)";
  }
  if (flags.memory_budget_mib > 0) {
    if (report->bytes_per_token <= 0) {
      *error = "--memory-budget-mib needs the model's graph pool size, which the server reports as 0 on " +
               report->scraped.device + " (no CUDA graphs); leave it out to keep today's largest bucket";
      return false;
    }
    report->cap_tokens = static_cast<int64_t>(flags.memory_budget_mib * kMiB / report->bytes_per_token);
    // A ragged bucket needs to hold one row; a padded one a full request.
    const int64_t least = report->limits.ragged
                              ? report->limits.max_sequence_length
                              : report->limits.max_batch_size * report->limits.max_sequence_length;
    if (report->cap_tokens < least) {
      *error = "--memory-budget-mib " + Format("%g", flags.memory_budget_mib) + " holds a largest bucket of " +
               std::to_string(report->cap_tokens) + " padded tokens; every grid holds max_batch_size x " +
               "max_sequence_length = " + std::to_string(least) + " (" +
               Mib(static_cast<double>(least) * report->bytes_per_token) + " at " +
               Format("%.0f", report->bytes_per_token) + " bytes per padded token)";
      return false;
    }
    report->memory_how += "; budget " + Format("%.1f MiB", flags.memory_budget_mib) + " = " +
                          std::to_string(report->cap_tokens) + " padded tokens";
  } else {
    report->cap_tokens = today.largest_bucket_tokens;
    report->memory_how += "; budget: today's largest bucket, " + largest;
  }
  return true;
}

bool BuildReport(const std::string& address, const ClientOptions& options, const PlanGridFlags& flags,
                 Report* report, std::string* error) {
  report->model = flags.model;
  report->max_lengths = flags.max_lengths;
  InferenceClient client(address, options);
  inference::ModelConfigResponse config;
  const grpc::Status status = client.ModelConfig(flags.model, &config);
  if (!status.ok()) {
    *error = DescribeCallError(status, address);
    return false;
  }
  if (!GridFromConfig(config.config(), &report->limits, &report->today.grid, error)) return false;

  const std::string url = !flags.metrics_url.empty() ? flags.metrics_url : DefaultMetricsUrl(address, options.tls);
  if (url.empty()) {
    *error = "give --metrics-url: a unix: address names no host for /metrics";
    return false;
  }
  std::string text;
  MetricsExposition exposition;
  if (!FetchMetricsText(url, options, &text, error)) return false;
  if (!ParseMetricsText(text, &exposition, error)) {
    *error = url + ": " + *error;
    return false;
  }
  if (!ReadScrapedModel(exposition, flags.model, flags.device, &report->scraped, error) ||
      !planner::TrafficFromHistograms(report->scraped.lengths, report->scraped.rows, report->limits,
                                      &report->traffic, error)) {
    return false;
  }
  const bool ragged = report->limits.ragged;
  if (!(ragged ? planner::FitRaggedCost : planner::FitCost)(report->scraped.measured, &report->fit, error)) {
    *error = "cannot fit the cost model: " + *error;
    return false;
  }
  const planner::CostModel cost(report->scraped.measured, report->fit);
  report->today.figures = (ragged ? planner::EvaluateRagged : planner::Evaluate)(
      report->today.grid, report->limits, report->traffic, cost);
  if (!ChooseMemoryCap(flags, report, error)) return false;
  planner::SearchOptions search;
  search.max_lengths = flags.max_lengths;
  search.max_bucket_tokens = report->cap_tokens;
  search.current = report->today.grid;
  return (ragged ? planner::SearchRaggedGrid : planner::SearchGrid)(report->limits, report->traffic, cost,
                                                                    search, &report->proposal, error);
}

json PlanJson(const Report& report, const planner::Plan& plan) {
  const planner::GridFigures& f = plan.figures;
  const double memory = MemoryBytes(report, plan);
  return {{"batch_sizes", plan.grid.batch_sizes},
          {"sequence_lengths", plan.grid.sequence_lengths},
          {"max_batch_tokens", plan.grid.max_batch_tokens},
          {"graphs", f.graphs},
          {"padding", f.padding},
          {"tokens_per_s", f.tokens_per_s},
          {"graph_memory_bytes", memory >= 0 ? json(memory) : json(nullptr)},
          {"largest_bucket", planner::ShapeLabel(f.largest_bucket)},
          {"largest_bucket_tokens", f.largest_bucket_tokens},
          {"buckets_used", f.used_buckets},
          {"buckets_used_at_fitted_cost", f.fitted_costs},
          {"rows_per_batch", f.rows_per_batch},
          {"lone_request_s", report.fit.ragged ? json(f.lone_request_seconds) : json(nullptr)}};
}

json ReportJson(const Report& report) {
  json bins = json::array();
  for (const planner::LengthBin& bin : report.traffic.lengths) {
    bins.push_back({{"low", bin.low}, {"high", bin.high}, {"requests", bin.requests}});
  }
  return {
      {"model", report.model},
      {"device", report.scraped.device},
      {"devices", report.scraped.devices},
      {"max_batch_size", report.limits.max_batch_size},
      {"max_sequence_length", report.limits.max_sequence_length},
      {"traffic",
       {{"requests", report.traffic.requests()},
        {"mean_rows", report.traffic.mean_rows},
        {"length_bins", bins},
        {"observed_rows_per_batch", report.scraped.observed_rows_per_batch}}},
      {"cost_fit",
       {{"formula", report.fit.ragged ? "seconds = c0 + c1*T + c2*R" : "seconds = c0 + c1*b*L + c2*b*L^2"},
        {"c0", report.fit.c0},
        {"c1", report.fit.c1},
        {"c2", report.fit.c2},
        {"points", report.fit.points},
        {"worst_relative_error", report.fit.worst_relative_error},
        {"worst_bucket", planner::ShapeLabel(report.fit.worst_shape)}}},
      {"memory",
       {{"graph_pool_bytes", report.scraped.graph_pool_bytes},
        {"bytes_per_padded_token", report.bytes_per_token > 0 ? json(report.bytes_per_token) : json(nullptr)},
        {"max_bucket_tokens", report.cap_tokens},
        {"how", report.memory_how}}},
      {"assumptions", Assumptions(report.fit)},
      {"today", PlanJson(report, report.today)},
      {"proposal", PlanJson(report, report.proposal)},
      {"config_fragment", planner::GridConfigText(report.proposal.grid)}};
}

std::string TableRow(const Report& report, const char* name, const planner::Plan& plan) {
  const planner::GridFigures& f = plan.figures;
  const double memory = MemoryBytes(report, plan);
  char row[160];
  std::snprintf(row, sizeof row, "%-9s %7lld %8.3fx %14.0f %13s  %s", name, static_cast<long long>(f.graphs),
                f.padding, f.tokens_per_s, memory >= 0 ? Mib(memory).c_str() : "unknown",
                planner::ShapeLabel(f.largest_bucket).c_str());
  return row;
}

void PrintText(const Report& report) {
  const planner::Traffic& traffic = report.traffic;
  const planner::CostFit& fit = report.fit;
  std::cout << "plan-grid: model '" << report.model << "' on " << report.scraped.device;
  if (report.scraped.devices.size() > 1) std::cout << " (--device picks another)";
  std::cout << "; " << Format("%.0f", traffic.requests()) << " requests, " << Format("%.2f", traffic.mean_rows)
            << " rows each on average, lengths " << traffic.lengths.front().low + 1 << ".."
            << traffic.lengths.back().high << "\n";
  std::cout << "cost: seconds = "
            << (fit.ragged ? "c0 + c1*T + c2*R (T, R: a ragged bucket's tokens and rows)"
                           : "c0 + c1*b*L + c2*b*L^2")
            << " fitted to the " << fit.points << " bucket times the server reports: c0 "
            << Format("%.4g s", fit.c0) << ", c1 " << Format("%.4g s", fit.c1) << ", c2 "
            << Format("%.4g s", fit.c2) << "; worst relative error "
            << Format("%.1f %%", 100 * fit.worst_relative_error) << " ("
            << planner::ShapeLabel(fit.worst_shape) << ")\n";
  if (fit.worst_relative_error > kPoorFit) {
    std::cout << "warning: the fit misses a measured bucket by more than " << Format("%.0f %%", 100 * kPoorFit)
              << "; the proposal's unmeasured buckets are uncertain\n";
  }
  std::cout << "graph memory: " << report.memory_how << "\n";
  std::cout << "model: " << Assumptions(fit) << "\n\n";
  std::cout << "grid       graphs   padding  real tokens/s  graph memory  largest bucket\n";
  std::cout << TableRow(report, "today", report.today) << "\n";
  std::cout << TableRow(report, "proposal", report.proposal) << "\n";
  const double today = report.today.figures.tokens_per_s;
  if (today > 0) {
    std::cout << "change: " << Format("%+.1f %%", 100 * (report.proposal.figures.tokens_per_s / today - 1))
              << " real tokens/s; the proposal runs " << report.proposal.figures.fitted_costs << " of its "
              << report.proposal.figures.used_buckets << " busy buckets at fitted (unmeasured) cost\n";
  }
  if (fit.ragged) {
    std::cout << "alone: a request replays "
              << Format("%.3f ms", 1e3 * report.today.figures.lone_request_seconds)
              << " on average (today) and "
              << Format("%.3f ms", 1e3 * report.proposal.figures.lone_request_seconds) << " (proposal)\n";
  }
  const planner::BucketGrid& now = report.today.grid;
  const planner::BucketGrid& proposed = report.proposal.grid;
  const bool same = now.batch_sizes == proposed.batch_sizes && now.sequence_lengths == proposed.sequence_lengths &&
                    now.max_batch_tokens == proposed.max_batch_tokens;
  const double observed = report.scraped.observed_rows_per_batch;
  const double modelled = report.proposal.figures.rows_per_batch;
  if (observed > 0) {
    std::cout << "batches: the server's held " << Format("%.1f", observed) << " rows on average; the model fills "
              << Format("%.1f", report.today.figures.rows_per_batch) << " (today) and " << Format("%.1f", modelled)
              << " (proposal)\n";
  }
  if (!same && observed > 0 && observed < kUnderfilled * modelled) {
    std::cout << "caution: this traffic filled batches to " << Format("%.0f %%", 100 * observed / modelled)
              << " of what the model assumes for the proposal; below saturation larger batches gain less than "
                 "predicted, or lose. Measure the proposal before adopting it (deploy/bench/e2e_benchmark.py "
                 "--modes a,g --grid '...')\n";
  }
  if (same) {
    // Today's grid stays a candidate whatever --max-lengths says, so that the search never proposes a
    // grid worse than the one served; say so when it is the one over the limit.
    const size_t lengths = now.sequence_lengths.size();
    std::cout << "\ntoday's grid is the best found: keep it"
              << (static_cast<int>(lengths) > report.max_lengths
                      ? " (its " + std::to_string(lengths) + " lengths are more than --max-lengths " +
                            std::to_string(report.max_lengths) + "; no grid within that limit does as well)"
                      : std::string())
              << "\n";
  } else {
    std::cout << "\nproposal (replace the buckets block of the model's config.pbtxt; max_batch_tokens lets "
                 "batches above max_batch_size at short lengths):\n";
  }
  std::cout << planner::GridConfigText(proposed);
}

}  // namespace

int RunPlanGrid(const std::string& address, const ClientOptions& options, const PlanGridFlags& flags) {
  Report report;
  std::string error;
  if (!BuildReport(address, options, flags, &report, &error)) {
    std::cerr << "plan-grid: " << error << "\n";
    return kFailure;
  }
  if (flags.json) {
    std::cout << ReportJson(report).dump(2) << "\n";
  } else {
    PrintText(report);
  }
  return 0;
}

}  // namespace graphserve
