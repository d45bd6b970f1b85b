// Reading the Prometheus text exposition format (version 0.0.4), as graphserve's /metrics serves it:
// # TYPE lines and sample lines `name{label="value",...} value [timestamp]`, label values with
// their escapes (\\, \", \n), values including +Inf, -Inf and NaN. Enough for graphserve-cli to read
// a scrape; not a validator (HELP text and exemplars are skipped, not checked).
// Value types and free functions; thread-compatible.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace graphserve {

using MetricLabels = std::map<std::string, std::string>;

struct MetricSample {
  std::string name;  // histogram series keep their suffix: NAME_bucket, NAME_sum, NAME_count
  MetricLabels labels;
  double value = 0;
};

struct MetricsExposition {
  std::map<std::string, std::string> types;  // family name → "counter", "gauge", "histogram", ...
  std::vector<MetricSample> samples;

  // The samples named `name` whose labels include every one of `match`.
  std::vector<MetricSample> Find(const std::string& name, const MetricLabels& match = {}) const;
};

// Parses `text`; false with `error` naming the line (1-based) and what is wrong there.
bool ParseMetricsText(std::string_view text, MetricsExposition* exposition, std::string* error);

// One histogram bucket as exported: `count` observations <= `le`.
struct HistogramBucket {
  double le = 0;
  double count = 0;
};

// The NAME_bucket series of histogram `name` that match `match`, sorted by le (+Inf last). False
// with `error` when one has no parseable le or two share an le (the match is not one series).
bool HistogramBuckets(const MetricsExposition& exposition, const std::string& name,
                      const MetricLabels& match, std::vector<HistogramBucket>* buckets,
                      std::string* error);

}  // namespace graphserve
