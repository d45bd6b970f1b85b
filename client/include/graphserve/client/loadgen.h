// The load generator's torch-free building blocks, apart from the network: sequence-length
// distributions, the open loop's Poisson arrival schedule, exact latency percentiles, the check of an
// answer's shapes against the model's metadata, and the report with its text and JSON forms.
// graphserve-loadgen (client/loadgen_main.cpp) and LoadRunner (load_runner.h) are built on them.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <grpcpp/support/status.h>

#include "grpc_service.pb.h"

namespace graphserve::loadgen {

// Where the tokens per row of each request come from. A value type; Sample() draws from a generator
// the caller owns, so one distribution may be shared by threads that each own a generator.
// Draws are made with explicit mappings from mt19937_64's bits (not std:: distributions, whose output
// the standard leaves open), so a seed gives the same lengths with every standard library.
class LengthDistribution {
 public:
  // The default: the skewed mix below.
  LengthDistribution();

  // The only validating factory. `text` is one of
  //   fixed:N                      every request N tokens
  //   uniform:A-B                  uniform over the integers A..B, both included
  //   file:PATH                    uniform over the values in PATH (so duplicates weigh more): integers
  //                                separated by white space or commas; '#' starts a comment
  //   lognormal:MEDIAN,SIGMA,A-B   round(exp(N(ln MEDIAN, SIGMA²))), clipped (clamped) to [A, B]
  //   skewed                       lognormal:48,0.8,8-512: many short requests, few long
  // Lengths must be at least 1. INVALID_ARGUMENT naming the problem otherwise (NOT_FOUND for a file
  // that cannot be read).
  static grpc::Status Parse(const std::string& text, LengthDistribution* out);

  int64_t Sample(std::mt19937_64& rng) const;

  // Bounds of every value Sample() can return.
  int64_t min() const { return min_; }
  int64_t max() const { return max_; }
  // The canonical spelling, e.g. "uniform:8-128" ("file:PATH (N values)" for a file).
  const std::string& description() const { return description_; }

 private:
  enum class Kind { kFixed, kUniform, kEmpirical, kLogNormal };

  Kind kind_ = Kind::kLogNormal;
  int64_t min_ = 8;
  int64_t max_ = 512;
  double log_median_ = 0;  // ln(median), for kLogNormal
  double sigma_ = 0.8;
  std::vector<int64_t> values_;  // kEmpirical
  std::string description_;
};

// Open-loop arrivals: a Poisson process of `rate_per_s`, i.e. independent exponential gaps of mean
// 1 / rate_per_s, drawn from mt19937_64(seed). Not thread-safe: one thread owns it.
class PoissonArrivals {
 public:
  // rate_per_s must be positive and finite (the caller validates it).
  PoissonArrivals(double rate_per_s, uint64_t seed);

  // Time of the next arrival, from the schedule's start (the first arrival is one gap after it).
  std::chrono::nanoseconds Next();

 private:
  double rate_per_s_;
  std::mt19937_64 rng_;
  double elapsed_s_ = 0;  // summed in double, so that rounding to ns does not accumulate
};

// Latencies of one run's successful requests, with exact percentiles.
// Not thread-safe: one thread owns a recorder, or the owner serialises calls.
class LatencyRecorder {
 public:
  void Record(std::chrono::nanoseconds latency);
  int64_t count() const { return static_cast<int64_t>(samples_ns_.size()); }

  // Nearest-rank percentile, for `percent` in (0, 100]: the smallest recorded value such that at
  // least `percent`% of the values are at or below it, i.e. the ceil(percent/100 × n)-th smallest
  // (so of the values 1..100, p50 = 50, p90 = 90, p99 = 99 and p100 = max = 100). Always one of the
  // recorded values, never interpolated. A percent of 0 or less gives the minimum, above 100 the
  // maximum; nullopt when nothing was recorded.
  std::optional<std::chrono::nanoseconds> Percentile(double percent) const;

  const std::vector<int64_t>& samples_ns() const { return samples_ns_; }

 private:
  std::vector<int64_t> samples_ns_;
};

// What a run's latencies summarise to, in milliseconds. All zero when count is 0 (JSON: null).
struct LatencySummary {
  int64_t count = 0;
  double min_ms = 0;
  double mean_ms = 0;
  double p50_ms = 0;
  double p90_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
};

LatencySummary Summarize(const LatencyRecorder& recorder);

// Error key for an answer that came back OK but whose outputs CheckAnswer rejected; every other key
// of Report::errors is a gRPC status code name ("DEADLINE_EXCEEDED", ...).
inline constexpr const char* kBadAnswer = "BAD_ANSWER";
// Error key for an open-loop arrival not sent because max_in_flight calls were already outstanding.
inline constexpr const char* kNotSent = "NOT_SENT_BACKLOG";

// Checks an answer to a request of `rows` × `length` against the model's metadata: every output the
// metadata declares is present with its datatype and a consistent size, and its shape matches the
// metadata's, where a -1 in the leading dimension is rows and any other -1 is length. NOT_FOUND for
// a missing output, INTERNAL for anything else, with the output named in the message. With
// `wanted` non-empty, only the outputs it names are expected.
grpc::Status CheckAnswer(const inference::ModelMetadataResponse& metadata, int64_t rows,
                         int64_t length, const inference::ModelInferResponse& response,
                         const std::vector<std::string>& wanted = {});

// One run's figures. Only measured requests count: those issued (closed loop) or due (open loop)
// after the warm-up.
struct Report {
  // The run's settings.
  std::string address;
  std::string model;
  std::string mode;         // "closed" or "open"
  int64_t concurrency = 0;  // closed loop: callers
  double rate_rps = 0;      // open loop: offered requests per second
  std::string lengths;      // LengthDistribution::description()
  int64_t rows = 1;
  double warmup_s = 0;

  // What happened. issued = ok + the sum of errors.
  int64_t warmup_requests = 0;  // issued during the warm-up, not counted below
  int64_t issued = 0;
  int64_t ok = 0;
  std::map<std::string, int64_t> errors;          // by status code name, kBadAnswer, kNotSent
  std::map<std::string, std::string> error_examples;  // one message per key, for diagnosis
  // From the first measured request's start (send, or due time in the open loop) to the last measured
  // answer: the window the throughputs are over.
  double elapsed_s = 0;
  double requests_per_s = 0;  // ok / elapsed_s
  int64_t tokens = 0;         // rows × length over the ok requests: real tokens, no padding
  double tokens_per_s = 0;
  LatencySummary latency;     // ok requests only; open loop: from the due time, not the send time
  // Open loop: how late each measured request was sent after its due time (a loadgen that cannot keep
  // up with its rate shows it here, before its lateness is blamed on the server); closed loop: none.
  LatencySummary send_lag;
};

int64_t ErrorCount(const Report& report);

// The report as a JSON object (keys in a fixed order; see loadgen.cpp for the schema), indented by
// `indent` spaces, or on one line when indent is negative.
std::string ReportToJson(const Report& report, int indent = 2);

// The report as a few lines of text for a terminal.
std::string FormatReport(const Report& report);

}  // namespace graphserve::loadgen
