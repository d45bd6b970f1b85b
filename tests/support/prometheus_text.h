#pragma once
// Reading the Prometheus text exposition format in tests: the families a scrape declares (# TYPE lines)
// and its samples with their labels. Covers what prometheus-cpp's TextSerializer writes (label values
// without escaped quotes), which is all graphserve exports. Value type; thread-compatible.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace graphserve::testing {

using Labels = std::map<std::string, std::string>;

// One sample line: name{labels} value.
struct Sample {
  std::string name;
  Labels labels;
  double value = 0.0;
};

class Exposition {
 public:
  explicit Exposition(const std::string& text) {
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("# TYPE ", 0) == 0) {
        std::istringstream words(line.substr(7));
        std::string name, type;
        words >> name >> type;
        types_[name] = type;
        continue;
      }
      if (line.empty() || line[0] == '#') continue;
      Sample sample;
      const size_t brace = line.find('{');
      const size_t space = line.rfind(' ');
      sample.name = line.substr(0, std::min(brace, space));
      if (brace != std::string::npos) {
        const std::string body = line.substr(brace + 1, line.find('}', brace) - brace - 1);
        size_t at = 0;
        while (at < body.size()) {
          const size_t equals = body.find('=', at);
          const size_t value_end = body.find('"', equals + 2);
          sample.labels[body.substr(at, equals - at)] = body.substr(equals + 2, value_end - equals - 2);
          at = value_end + 2;  // past the closing quote and the comma
        }
      }
      sample.value = std::stod(line.substr(space + 1));
      samples_.push_back(std::move(sample));
    }
  }

  // Family name → "counter", "gauge", "histogram", ...
  const std::map<std::string, std::string>& types() const { return types_; }
  const std::vector<Sample>& samples() const { return samples_; }

  // The samples of `name` whose labels include every one of `match`.
  std::vector<Sample> Find(const std::string& name, const Labels& match = {}) const {
    std::vector<Sample> found;
    for (const Sample& sample : samples_) {
      if (sample.name != name) continue;
      bool all = true;
      for (const auto& [key, value] : match) {
        auto it = sample.labels.find(key);
        all = all && it != sample.labels.end() && it->second == value;
      }
      if (all) found.push_back(sample);
    }
    return found;
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
  std::map<std::string, std::string> types_;
  std::vector<Sample> samples_;
};

}  // namespace graphserve::testing
