// Length distributions, Poisson arrivals, nearest-rank percentiles, answer checks and reports.
#include "graphserve/client/loadgen.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "graphserve/client/client.h"

namespace graphserve::loadgen {

namespace {

// Keys in the order written, which reads better than sorted.
using json = nlohmann::ordered_json;

constexpr double kPi = 3.14159265358979323846;

grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

// A whole string as a decimal integer; false for empty text, junk or overflow.
bool ParseInt(const std::string& text, int64_t* value) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long parsed = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size()) return false;
  *value = parsed;
  return true;
}

bool ParseDouble(const std::string& text, double* value) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const double parsed = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size() || !std::isfinite(parsed)) return false;
  *value = parsed;
  return true;
}

// "A-B" with 1 <= A <= B.
grpc::Status ParseRange(const std::string& text, const std::string& what, int64_t* min,
                        int64_t* max) {
  const size_t dash = text.find('-');
  if (dash == std::string::npos || !ParseInt(text.substr(0, dash), min) ||
      !ParseInt(text.substr(dash + 1), max) || *min < 1 || *max < *min) {
    return Invalid(what + ": expected a range A-B of lengths with 1 <= A <= B, got '" + text + "'");
  }
  return grpc::Status::OK;
}

std::string FormatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

// A double in [0, 1) from the top 53 bits: every value equally likely, the same on every platform.
double UnitInterval(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1p-53; }

// Uniform over [0, range) without modulo bias: draws below 2^64 mod range are rejected.
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t range) {
  const uint64_t threshold = (0 - range) % range;
  while (true) {
    const uint64_t bits = rng();
    if (bits >= threshold) return bits % range;
  }
}

// A standard normal draw by Box-Muller; 1 - U keeps the logarithm's argument in (0, 1].
double StandardNormal(std::mt19937_64& rng) {
  const double u1 = 1.0 - UnitInterval(rng);
  const double u2 = UnitInterval(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
}

grpc::Status ReadLengthFile(const std::string& path, std::vector<int64_t>* values) {
  std::ifstream file(path);
  if (!file) return grpc::Status(grpc::StatusCode::NOT_FOUND, "cannot read length file '" + path + "'");
  std::string line;
  int line_number = 0;
  while (std::getline(file, line)) {
    ++line_number;
    line = line.substr(0, line.find('#'));
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream words(line);
    std::string word;
    while (words >> word) {
      int64_t value = 0;
      if (!ParseInt(word, &value) || value < 1) {
        return Invalid("length file '" + path + "' line " + std::to_string(line_number) + ": '" +
                       word + "' is not a length of at least 1");
      }
      values->push_back(value);
    }
  }
  if (values->empty()) return Invalid("length file '" + path + "' holds no lengths");
  return grpc::Status::OK;
}

double ToMs(int64_t ns) { return static_cast<double>(ns) / 1e6; }

// Index into n sorted values of the nearest-rank percentile: rank ceil(percent/100 × n), 1-based.
// percent × n is formed before dividing so that integer percents of integer counts stay exact; the
// tolerance keeps a product that rounded a hair above an integer from moving up one rank.
size_t NearestRankIndex(double percent, size_t n) {
  const double exact = percent * static_cast<double>(n) / 100.0;
  double rank = std::ceil(exact - 1e-9);
  rank = std::min(std::max(rank, 1.0), static_cast<double>(n));
  return static_cast<size_t>(rank) - 1;
}

json OrNull(bool present, double value) { return present ? json(value) : json(nullptr); }

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace

// ---- LengthDistribution ---------------------------------------------------------------------------

LengthDistribution::LengthDistribution()
    : log_median_(std::log(48.0)), description_("skewed (lognormal:48,0.8,8-512)") {}

grpc::Status LengthDistribution::Parse(const std::string& text, LengthDistribution* out) {
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  const std::string argument = colon == std::string::npos ? "" : text.substr(colon + 1);
  LengthDistribution parsed;
  if (text == "skewed") {
    // The default-constructed distribution is the skewed mix.
  } else if (kind == "fixed") {
    int64_t length = 0;
    if (!ParseInt(argument, &length) || length < 1) {
      return Invalid("fixed:N needs a length N of at least 1, got '" + text + "'");
    }
    parsed.kind_ = Kind::kFixed;
    parsed.min_ = parsed.max_ = length;
    parsed.description_ = "fixed:" + std::to_string(length);
  } else if (kind == "uniform") {
    grpc::Status status = ParseRange(argument, "uniform:A-B", &parsed.min_, &parsed.max_);
    if (!status.ok()) return status;
    parsed.kind_ = Kind::kUniform;
    parsed.description_ = "uniform:" + argument;
  } else if (kind == "file") {
    if (argument.empty()) return Invalid("file:PATH needs a path");
    grpc::Status status = ReadLengthFile(argument, &parsed.values_);
    if (!status.ok()) return status;
    parsed.kind_ = Kind::kEmpirical;
    const auto [min, max] = std::minmax_element(parsed.values_.begin(), parsed.values_.end());
    parsed.min_ = *min;
    parsed.max_ = *max;
    parsed.description_ =
        "file:" + argument + " (" + std::to_string(parsed.values_.size()) + " values)";
  } else if (kind == "lognormal") {
    // MEDIAN,SIGMA,A-B
    const size_t first = argument.find(',');
    const size_t second = first == std::string::npos ? first : argument.find(',', first + 1);
    double median = 0;
    double sigma = 0;
    if (second == std::string::npos || !ParseDouble(argument.substr(0, first), &median) ||
        !ParseDouble(argument.substr(first + 1, second - first - 1), &sigma) || median <= 0 ||
        sigma < 0) {
      return Invalid("lognormal:MEDIAN,SIGMA,A-B needs MEDIAN > 0 and SIGMA >= 0, got '" + text +
                     "'");
    }
    grpc::Status status =
        ParseRange(argument.substr(second + 1), "lognormal:MEDIAN,SIGMA,A-B", &parsed.min_,
                   &parsed.max_);
    if (!status.ok()) return status;
    parsed.kind_ = Kind::kLogNormal;
    parsed.log_median_ = std::log(median);
    parsed.sigma_ = sigma;
    parsed.description_ = "lognormal:" + FormatNumber(median) + "," + FormatNumber(sigma) + "," +
                          std::to_string(parsed.min_) + "-" + std::to_string(parsed.max_);
  } else {
    return Invalid("unknown length distribution '" + text +
                   "'; expected fixed:N, uniform:A-B, file:PATH, lognormal:MEDIAN,SIGMA,A-B or "
                   "skewed");
  }
  *out = std::move(parsed);
  return grpc::Status::OK;
}

int64_t LengthDistribution::Sample(std::mt19937_64& rng) const {
  switch (kind_) {
    case Kind::kFixed:
      return min_;
    case Kind::kUniform:
      return min_ + static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(max_ - min_) + 1));
    case Kind::kEmpirical:
      return values_[UniformBelow(rng, values_.size())];
    case Kind::kLogNormal: {
      // Clamped in double first: exp() of a large draw may exceed what llround can hold.
      const double length = std::exp(log_median_ + sigma_ * StandardNormal(rng));
      return std::llround(
          std::min(std::max(length, static_cast<double>(min_)), static_cast<double>(max_)));
    }
  }
  return min_;
}

// ---- PoissonArrivals ------------------------------------------------------------------------------

PoissonArrivals::PoissonArrivals(double rate_per_s, uint64_t seed)
    : rate_per_s_(rate_per_s), rng_(seed) {}

std::chrono::nanoseconds PoissonArrivals::Next() {
  // Inverse transform: -ln(1 - U) / rate is exponential with mean 1 / rate; 1 - U lies in (0, 1].
  elapsed_s_ += -std::log(1.0 - UnitInterval(rng_)) / rate_per_s_;
  return std::chrono::nanoseconds(static_cast<int64_t>(elapsed_s_ * 1e9));
}

// ---- LatencyRecorder ------------------------------------------------------------------------------

void LatencyRecorder::Record(std::chrono::nanoseconds latency) {
  samples_ns_.push_back(latency.count());
}

std::optional<std::chrono::nanoseconds> LatencyRecorder::Percentile(double percent) const {
  if (samples_ns_.empty()) return std::nullopt;
  std::vector<int64_t> values = samples_ns_;
  const auto nth = values.begin() + static_cast<ptrdiff_t>(NearestRankIndex(percent, values.size()));
  std::nth_element(values.begin(), nth, values.end());
  return std::chrono::nanoseconds(*nth);
}

LatencySummary Summarize(const LatencyRecorder& recorder) {
  LatencySummary summary;
  if (recorder.count() == 0) return summary;
  std::vector<int64_t> sorted = recorder.samples_ns();
  std::sort(sorted.begin(), sorted.end());
  const auto at = [&sorted](double percent) {
    return ToMs(sorted[NearestRankIndex(percent, sorted.size())]);
  };
  double sum_ms = 0;
  for (int64_t ns : sorted) sum_ms += ToMs(ns);
  summary.count = static_cast<int64_t>(sorted.size());
  summary.min_ms = ToMs(sorted.front());
  summary.mean_ms = sum_ms / static_cast<double>(sorted.size());
  summary.p50_ms = at(50);
  summary.p90_ms = at(90);
  summary.p99_ms = at(99);
  summary.max_ms = ToMs(sorted.back());
  return summary;
}

// ---- CheckAnswer ----------------------------------------------------------------------------------

grpc::Status CheckAnswer(const inference::ModelMetadataResponse& metadata, int64_t rows,
                         int64_t length, const inference::ModelInferResponse& response,
                         const std::vector<std::string>& wanted) {
  for (const auto& declared : metadata.outputs()) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), declared.name()) == wanted.end()) {
      continue;
    }
    OutputView output;
    grpc::Status status = FindOutput(response, declared.name(), &output);
    if (!status.ok()) return status;
    const std::string where = "output '" + declared.name() + "'";
    if (!declared.datatype().empty() && output.datatype != declared.datatype()) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          where + " is " + std::string(output.datatype) + ", the metadata says " +
                              declared.datatype());
    }
    std::vector<int64_t> expected;
    for (int i = 0; i < declared.shape_size(); ++i) {
      const int64_t dim = declared.shape(i);
      expected.push_back(dim != -1 ? dim : i == 0 ? rows : length);
    }
    if (output.shape != expected) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          where + " has shape " + ShapeString(output.shape) + ", expected " +
                              ShapeString(expected) + " for " + std::to_string(rows) + " x " +
                              std::to_string(length));
    }
  }
  return grpc::Status::OK;
}

// ---- Report ---------------------------------------------------------------------------------------

int64_t ErrorCount(const Report& report) {
  int64_t count = 0;
  for (const auto& [code, n] : report.errors) count += n;
  return count;
}

std::string ReportToJson(const Report& report, int indent) {
  const bool closed = report.mode == "closed";
  const bool timed = report.latency.count > 0;
  json errors = json::object();
  for (const auto& [code, n] : report.errors) errors[code] = n;
  json examples = json::object();
  for (const auto& [code, message] : report.error_examples) examples[code] = message;
  const json document = {
      {"address", report.address},
      {"model", report.model},
      {"mode", report.mode},
      {"concurrency", closed ? json(report.concurrency) : json(nullptr)},
      {"rate_rps", closed ? json(nullptr) : json(report.rate_rps)},
      {"lengths", report.lengths},
      {"rows", report.rows},
      {"warmup_s", report.warmup_s},
      {"warmup_requests", report.warmup_requests},
      {"issued", report.issued},
      {"ok", report.ok},
      {"error_count", ErrorCount(report)},
      {"errors", errors},
      {"error_examples", examples},
      {"elapsed_s", report.elapsed_s},
      {"requests_per_s", report.requests_per_s},
      {"tokens", report.tokens},
      {"tokens_per_s", report.tokens_per_s},
      {"latency_ms",
       {{"count", report.latency.count},
        {"min", OrNull(timed, report.latency.min_ms)},
        {"mean", OrNull(timed, report.latency.mean_ms)},
        {"p50", OrNull(timed, report.latency.p50_ms)},
        {"p90", OrNull(timed, report.latency.p90_ms)},
        {"p99", OrNull(timed, report.latency.p99_ms)},
        {"max", OrNull(timed, report.latency.max_ms)}}},
      {"send_lag_ms", report.send_lag.count == 0
                          ? json(nullptr)
                          : json{{"p50", report.send_lag.p50_ms},
                                 {"p99", report.send_lag.p99_ms},
                                 {"max", report.send_lag.max_ms}}},
  };
  return document.dump(indent);
}

std::string FormatReport(const Report& report) {
  char line[512];
  std::string text;
  const std::string load = report.mode == "closed"
                               ? "closed loop, " + std::to_string(report.concurrency) + " callers"
                               : "open loop, " + FormatNumber(report.rate_rps) + " requests/s offered";
  text += "model " + report.model + " at " + report.address + ": " + load + ", lengths " +
          report.lengths + ", " + std::to_string(report.rows) +
          (report.rows == 1 ? " row" : " rows") + " per request\n";
  std::snprintf(line, sizeof line,
                "requests   %lld issued, %lld ok, %lld errors (%lld warm-up requests in %g s not "
                "counted)\n",
                static_cast<long long>(report.issued), static_cast<long long>(report.ok),
                static_cast<long long>(ErrorCount(report)),
                static_cast<long long>(report.warmup_requests), report.warmup_s);
  text += line;
  std::snprintf(line, sizeof line, "throughput %.1f requests/s, %.0f tokens/s over %.2f s\n",
                report.requests_per_s, report.tokens_per_s, report.elapsed_s);
  text += line;
  if (report.latency.count > 0) {
    std::snprintf(line, sizeof line,
                  "latency ms p50 %.2f  p90 %.2f  p99 %.2f  max %.2f  (min %.2f, mean %.2f)\n",
                  report.latency.p50_ms, report.latency.p90_ms, report.latency.p99_ms,
                  report.latency.max_ms, report.latency.min_ms, report.latency.mean_ms);
    text += line;
  } else {
    text += "latency    no successful request\n";
  }
  if (report.send_lag.count > 0) {
    std::snprintf(line, sizeof line, "sent late  ms p50 %.3f  p99 %.3f  max %.3f  (after each due time)\n",
                  report.send_lag.p50_ms, report.send_lag.p99_ms, report.send_lag.max_ms);
    text += line;
  }
  for (const auto& [code, n] : report.errors) {
    text += "error      " + code + " x" + std::to_string(n);
    const auto example = report.error_examples.find(code);
    if (example != report.error_examples.end()) text += ": " + example->second;
    text += "\n";
  }
  return text;
}

}  // namespace graphserve::loadgen
