#pragma once
// Reading the Prometheus text exposition format in tests, with the reader graphserve-cli uses
// (graphserve/client/metrics_text.h; link graphserve::grid_planner): the families a scrape declares
// (# TYPE lines) and its samples with their labels. A malformed line fails the calling test. Value
// type; thread-compatible.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "graphserve/client/metrics_text.h"

namespace graphserve::testing {

using Labels = MetricLabels;
// One sample line: name{labels} value.
using Sample = MetricSample;

class Exposition {
 public:
  explicit Exposition(const std::string& text) {
    std::string error;
    EXPECT_TRUE(ParseMetricsText(text, &exposition_, &error)) << error;
  }

  // Family name → "counter", "gauge", "histogram", ...
  const std::map<std::string, std::string>& types() const { return exposition_.types; }
  const std::vector<Sample>& samples() const { return exposition_.samples; }

  // The samples of `name` whose labels include every one of `match`.
  std::vector<Sample> Find(const std::string& name, const Labels& match = {}) const {
    return exposition_.Find(name, match);
  }
  double Sum(const std::string& name, const Labels& match = {}) const {
    double sum = 0.0;
    for (const Sample& sample : Find(name, match)) sum += sample.value;
    return sum;
  }
  // The value of the one series that matches; fails the calling test when there is not exactly one.
  double One(const std::string& name, const Labels& match) const {
    const std::vector<Sample> found = Find(name, match);
    EXPECT_EQ(found.size(), 1u) << name;
    return found.size() == 1 ? found[0].value : -1.0;
  }

 private:
  MetricsExposition exposition_;
};

}  // namespace graphserve::testing
