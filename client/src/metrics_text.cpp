// A minimal reader of the Prometheus text format (see metrics_text.h).
#include "graphserve/client/metrics_text.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

namespace graphserve {

namespace {

bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
bool IsNameChar(char c) { return IsNameStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

void SkipBlanks(std::string_view line, size_t* at) {
  while (*at < line.size() && (line[*at] == ' ' || line[*at] == '\t')) ++*at;
}

// A metric or label name at *at; empty when none starts there.
std::string ReadName(std::string_view line, size_t* at) {
  const size_t start = *at;
  if (*at < line.size() && IsNameStart(line[*at])) {
    while (*at < line.size() && IsNameChar(line[*at])) ++*at;
  }
  return std::string(line.substr(start, *at - start));
}

// A float as the format writes it (Go's ParseFloat: decimals, exponents, +Inf, -Inf, NaN); false for
// anything else, including text after the number.
bool ParseValue(std::string_view text, double* value) {
  if (text.empty()) return false;
  const std::string copy(text);
  char* end = nullptr;
  *value = std::strtod(copy.c_str(), &end);
  return end == copy.c_str() + copy.size();
}

// `{name="value",...}` from *at (just past the brace) to past the closing brace.
bool ReadLabels(std::string_view line, size_t* at, MetricLabels* labels, std::string* why) {
  while (true) {
    SkipBlanks(line, at);
    if (*at < line.size() && line[*at] == '}') {
      ++*at;
      return true;
    }
    const std::string name = ReadName(line, at);
    if (name.empty()) {
      *why = "expected a label name or '}'";
      return false;
    }
    SkipBlanks(line, at);
    const bool equals = *at < line.size() && line[*at] == '=';
    if (equals) ++*at;
    SkipBlanks(line, at);
    if (!equals || *at >= line.size() || line[*at] != '"') {
      *why = "expected =\"...\" after label " + name;
      return false;
    }
    ++*at;
    std::string value;
    bool closed = false;
    while (*at < line.size()) {
      const char c = line[(*at)++];
      if (c == '"') {
        closed = true;
        break;
      }
      if (c != '\\') {
        value += c;
        continue;
      }
      if (*at >= line.size()) break;
      const char escaped = line[(*at)++];
      if (escaped == 'n') {
        value += '\n';
      } else if (escaped == '\\' || escaped == '"') {
        value += escaped;
      } else {
        *why = std::string("unknown escape \\") + escaped + " in label " + name;
        return false;
      }
    }
    if (!closed) {
      *why = "unterminated value of label " + name;
      return false;
    }
    if (!labels->emplace(name, std::move(value)).second) {
      *why = "label " + name + " twice";
      return false;
    }
    SkipBlanks(line, at);
    if (*at < line.size() && line[*at] == ',') ++*at;
  }
}

bool ParseSample(std::string_view line, MetricSample* sample, std::string* why) {
  size_t at = 0;
  sample->name = ReadName(line, &at);
  if (sample->name.empty()) {
    *why = "expected a metric name";
    return false;
  }
  SkipBlanks(line, &at);
  if (at < line.size() && line[at] == '{') {
    ++at;
    if (!ReadLabels(line, &at, &sample->labels, why)) return false;
  }
  SkipBlanks(line, &at);
  const size_t value_start = at;
  while (at < line.size() && line[at] != ' ' && line[at] != '\t') ++at;
  if (!ParseValue(line.substr(value_start, at - value_start), &sample->value)) {
    *why = "expected a value after " + sample->name;
    return false;
  }
  SkipBlanks(line, &at);
  // An optional timestamp (integer milliseconds), ignored.
  const size_t stamp_start = at;
  while (at < line.size() && line[at] != ' ' && line[at] != '\t') ++at;
  double stamp = 0;
  if (at > stamp_start && !ParseValue(line.substr(stamp_start, at - stamp_start), &stamp)) {
    *why = "unexpected text after the value of " + sample->name;
    return false;
  }
  SkipBlanks(line, &at);
  if (at != line.size()) {
    *why = "unexpected text after the timestamp of " + sample->name;
    return false;
  }
  return true;
}

}  // namespace

std::vector<MetricSample> MetricsExposition::Find(const std::string& name,
                                                  const MetricLabels& match) const {
  std::vector<MetricSample> found;
  for (const MetricSample& sample : samples) {
    if (sample.name != name) continue;
    const bool all = std::all_of(match.begin(), match.end(), [&](const auto& wanted) {
      const auto label = sample.labels.find(wanted.first);
      return label != sample.labels.end() && label->second == wanted.second;
    });
    if (all) found.push_back(sample);
  }
  return found;
}

bool ParseMetricsText(std::string_view text, MetricsExposition* exposition, std::string* error) {
  MetricsExposition result;
  size_t line_number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t at = 0;
    SkipBlanks(line, &at);
    line.remove_prefix(at);
    if (line.empty()) continue;
    if (line[0] == '#') {
      // "# TYPE name type"; other comments, HELP included, are skipped.
      constexpr std::string_view kType = "# TYPE ";
      if (line.substr(0, kType.size()) == kType) {
        size_t word = kType.size();
        const std::string name = ReadName(line, &word);
        SkipBlanks(line, &word);
        if (!name.empty()) result.types[name] = std::string(line.substr(word));
      }
      continue;
    }
    MetricSample sample;
    std::string why;
    if (!ParseSample(line, &sample, &why)) {
      *error = "line " + std::to_string(line_number) + ": " + why;
      return false;
    }
    result.samples.push_back(std::move(sample));
  }
  *exposition = std::move(result);
  return true;
}

bool HistogramBuckets(const MetricsExposition& exposition, const std::string& name,
                      const MetricLabels& match, std::vector<HistogramBucket>* buckets,
                      std::string* error) {
  std::vector<HistogramBucket> result;
  for (const MetricSample& sample : exposition.Find(name + "_bucket", match)) {
    const auto le = sample.labels.find("le");
    HistogramBucket bucket;
    bucket.count = sample.value;
    if (le == sample.labels.end() || !ParseValue(le->second, &bucket.le) || std::isnan(bucket.le)) {
      *error = name + "_bucket: a series without a numeric le";
      return false;
    }
    result.push_back(bucket);
  }
  std::sort(result.begin(), result.end(),
            [](const HistogramBucket& a, const HistogramBucket& b) { return a.le < b.le; });
  for (size_t i = 1; i < result.size(); ++i) {
    if (result[i].le == result[i - 1].le) {
      *error = name + "_bucket: two series with le=\"" + std::to_string(result[i].le) +
               "\" (the labels given do not pick one histogram)";
      return false;
    }
  }
  *buckets = std::move(result);
  return true;
}

}  // namespace graphserve
