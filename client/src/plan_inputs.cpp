// plan-grid's reading of a server: config, scrape and the HTTP(S) fetch (see plan_inputs.h).
#include "graphserve/client/plan_inputs.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/unknown_field_set.h>

namespace graphserve {

namespace {

// BucketGrid.max_batch_tokens: its field number in graphserve's config schema.
constexpr int kMaxBatchTokensField = 3;

int64_t MaxBatchTokens(const inference::BucketGrid& buckets) {
  const google::protobuf::Reflection* reflection = buckets.GetReflection();
  const google::protobuf::FieldDescriptor* field =
      buckets.GetDescriptor()->FindFieldByNumber(kMaxBatchTokensField);
  if (field != nullptr && !field->is_repeated()) {
    switch (field->cpp_type()) {
      case google::protobuf::FieldDescriptor::CPPTYPE_INT64: return reflection->GetInt64(buckets, field);
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT64:
        return static_cast<int64_t>(reflection->GetUInt64(buckets, field));
      case google::protobuf::FieldDescriptor::CPPTYPE_INT32: return reflection->GetInt32(buckets, field);
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT32: return reflection->GetUInt32(buckets, field);
      default: return 0;
    }
  }
  // A server newer than this client: the field arrives unknown.
  const google::protobuf::UnknownFieldSet& unknown = reflection->GetUnknownFields(buckets);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField& entry = unknown.field(i);
    if (entry.number() == kMaxBatchTokensField &&
        entry.type() == google::protobuf::UnknownField::TYPE_VARINT) {
      return static_cast<int64_t>(entry.varint());
    }
  }
  return 0;
}

// "32x128" → {32, 128}; false for a fixed-shape label ("8x-") or anything else.
bool ParseBucketLabel(const std::string& label, planner::Shape* shape) {
  const size_t x = label.find('x');
  if (x == std::string::npos || x == 0 || x + 1 >= label.size()) return false;
  char* end = nullptr;
  shape->batch = std::strtoll(label.c_str(), &end, 10);
  if (end != label.c_str() + x) return false;
  shape->length = std::strtoll(label.c_str() + x + 1, &end, 10);
  return end == label.c_str() + label.size() && shape->batch > 0 && shape->length > 0;
}

// A sample's label, empty when it has none.
std::string Label(const MetricSample& sample, const std::string& name) {
  const auto found = sample.labels.find(name);
  return found != sample.labels.end() ? found->second : "";
}

size_t AppendBody(char* data, size_t size, size_t count, void* body) {
  static_cast<std::string*>(body)->append(data, size * count);
  return size * count;
}

struct CurlBlob {
  explicit CurlBlob(const std::string& pem)
      : blob{const_cast<char*>(pem.data()), pem.size(), CURL_BLOB_COPY} {}
  curl_blob blob;
};

}  // namespace

std::string DefaultMetricsUrl(const std::string& grpc_address, bool tls) {
  if (grpc_address.rfind("unix:", 0) == 0) return "";
  const size_t colon = grpc_address.rfind(':');
  const std::string host = grpc_address.substr(0, colon);
  return std::string(tls ? "https://" : "http://") + host + ":" + std::to_string(kDefaultMetricsPort) +
         "/metrics";
}

bool FetchMetricsText(const std::string& url, const ClientOptions& options, std::string* body,
                      std::string* error) {
  static std::once_flag initialized;
  std::call_once(initialized, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  const std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> easy(curl_easy_init(), &curl_easy_cleanup);
  if (!easy) {
    *error = "cannot start an HTTP client (libcurl)";
    return false;
  }
  curl_slist* headers = nullptr;
  if (!options.token.empty()) {
    headers = curl_slist_append(headers, ("authorization: Bearer " + options.token).c_str());
  }
  const std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> header_list(headers, &curl_slist_free_all);
  body->clear();
  CURL* handle = easy.get();
  curl_easy_setopt(handle, CURLOPT_URL, url.c_str());
  curl_easy_setopt(handle, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, &AppendBody);
  curl_easy_setopt(handle, CURLOPT_WRITEDATA, body);
  curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(handle, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<int64_t>(options.timeout_ms, 0)));
  curl_easy_setopt(handle, CURLOPT_PROTOCOLS_STR, "http,https");
  CurlBlob roots(options.tls_root_pem), cert(options.tls_cert_pem), key(options.tls_key_pem);
  if (!options.tls_root_pem.empty()) curl_easy_setopt(handle, CURLOPT_CAINFO_BLOB, &roots.blob);
  if (!options.tls_cert_pem.empty()) {
    curl_easy_setopt(handle, CURLOPT_SSLCERT_BLOB, &cert.blob);
    curl_easy_setopt(handle, CURLOPT_SSLCERTTYPE, "PEM");
    curl_easy_setopt(handle, CURLOPT_SSLKEY_BLOB, &key.blob);
    curl_easy_setopt(handle, CURLOPT_SSLKEYTYPE, "PEM");
  }
  char curl_error[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(handle, CURLOPT_ERRORBUFFER, curl_error);
  const CURLcode code = curl_easy_perform(handle);
  if (code != CURLE_OK) {
    *error = "cannot read " + url + ": " + (curl_error[0] != '\0' ? curl_error : curl_easy_strerror(code)) +
             " (--metrics-url sets where graphserve's /metrics is)";
    return false;
  }
  long status = 0;
  curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status);
  if (status == 401) {
    *error = url + " answered 401: the server wants a token on /metrics (--metrics-auth); give it with "
                   "--auth-token-file or GRAPHSERVE_AUTH_TOKEN";
    return false;
  }
  if (status != 200) {
    *error = url + " answered HTTP " + std::to_string(status);
    return false;
  }
  return true;
}

namespace {

// One of graphserve's settings as the config answer carries it (docs/configuration.md's parameters
// keys); nullopt when absent.
std::optional<std::string> Parameter(const inference::ModelConfig& config, const char* key) {
  const auto found = config.parameters().find(key);
  if (found == config.parameters().end()) return std::nullopt;
  return found->second.string_value();
}

// "1,2,4" -> {1, 2, 4}: integers of at least 1.
bool ParseIntegers(const std::string& text, std::vector<int64_t>* values) {
  values->clear();
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string entry = text.substr(start, comma - start);
    char* end = nullptr;
    const long long value = std::strtoll(entry.c_str(), &end, 10);
    if (entry.empty() || *end != '\0' || value < 1) return false;
    values->push_back(value);
    start = comma + 1;
  }
  return true;
}

// The grid from the parameters a server answers with since its config answer follows Triton's schema.
bool GridFromParameters(const inference::ModelConfig& config, planner::ModelLimits* limits,
                        planner::BucketGrid* grid, std::string* error) {
  const std::optional<std::string> limit = Parameter(config, "max_sequence_length");
  const std::optional<std::string> lengths = Parameter(config, "bucket_sequence_lengths");
  if (!limit || !lengths) {
    *error = "model '" + config.name() +
             "' has no variable dimension: its grid is batch sizes only, with no lengths to plan";
    return false;
  }
  std::vector<int64_t> limit_value, budget;
  const std::optional<std::string> tokens = Parameter(config, "max_batch_tokens");
  const bool readable = ParseIntegers(*limit, &limit_value) && limit_value.size() == 1 &&
                        ParseIntegers(Parameter(config, "bucket_batch_sizes").value_or(""), &grid->batch_sizes) &&
                        ParseIntegers(*lengths, &grid->sequence_lengths) &&
                        (!tokens || (ParseIntegers(*tokens, &budget) && budget.size() == 1));
  if (!readable) {
    *error = "model '" + config.name() + "': its config's grid parameters are not lists of integers";
    return false;
  }
  limits->max_sequence_length = limit_value[0];
  grid->max_batch_tokens = tokens ? budget[0] : 0;
  return true;
}

}  // namespace

bool GridFromConfig(const inference::ModelConfig& config, planner::ModelLimits* limits,
                    planner::BucketGrid* grid, std::string* error) {
  limits->max_batch_size = std::max<int64_t>(config.max_batch_size(), 1);
  // Its buckets are rows × total tokens: the same lists, read the same way, planned otherwise.
  limits->ragged = std::any_of(config.input().begin(), config.input().end(),
                               [](const inference::ModelInput& input) { return input.allow_ragged_batch(); });
  if (Parameter(config, "bucket_batch_sizes")) {
    if (!GridFromParameters(config, limits, grid, error)) return false;
    std::sort(grid->batch_sizes.begin(), grid->batch_sizes.end());
    std::sort(grid->sequence_lengths.begin(), grid->sequence_lengths.end());
    return true;
  }
  // An older server: graphserve's own fields.
  if (config.max_sequence_length() <= 0 || config.buckets().sequence_lengths_size() == 0) {
    *error = "model '" + config.name() +
             "' has no variable dimension: its grid is batch sizes only, with no lengths to plan";
    return false;
  }
  limits->max_sequence_length = config.max_sequence_length();
  grid->batch_sizes.assign(config.buckets().batch_sizes().begin(), config.buckets().batch_sizes().end());
  grid->sequence_lengths.assign(config.buckets().sequence_lengths().begin(),
                                config.buckets().sequence_lengths().end());
  std::sort(grid->batch_sizes.begin(), grid->batch_sizes.end());
  std::sort(grid->sequence_lengths.begin(), grid->sequence_lengths.end());
  grid->max_batch_tokens = MaxBatchTokens(config.buckets());
  return true;
}

bool ReadScrapedModel(const MetricsExposition& exposition, const std::string& model,
                      const std::string& device, ScrapedModel* scraped, std::string* error) {
  ScrapedModel result;
  const std::vector<MetricSample> times =
      exposition.Find("graphserve_bucket_execution_seconds", {{"model", model}});
  std::set<std::string> devices;
  for (const MetricSample& sample : times) devices.insert(Label(sample, "device"));
  result.devices.assign(devices.begin(), devices.end());
  if (result.devices.empty()) {
    *error = "the metrics name no bucket times (graphserve_bucket_execution_seconds) for model '" + model +
             "': is it loaded and warmed up, and is the metrics URL this server's?";
    return false;
  }
  if (!device.empty()) {
    if (devices.count(device) == 0) {
      *error = "model '" + model + "' has no bucket times on device '" + device + "'";
      return false;
    }
    result.device = device;
  } else {
    const auto cuda = std::find_if(result.devices.begin(), result.devices.end(),
                                   [](const std::string& name) { return name.rfind("cuda", 0) == 0; });
    result.device = cuda != result.devices.end() ? *cuda : result.devices.front();
  }
  for (const MetricSample& sample : times) {
    planner::Shape shape;
    if (Label(sample, "device") != result.device || !ParseBucketLabel(Label(sample, "bucket"), &shape)) {
      continue;
    }
    result.measured.push_back({shape, sample.value});
  }
  for (const MetricSample& sample :
       exposition.Find("graphserve_graph_pool_bytes", {{"model", model}, {"device", result.device}})) {
    result.graph_pool_bytes += sample.value;
  }
  double batch_rows = 0, batches = 0;
  for (const MetricSample& sample : exposition.Find("graphserve_batch_rows_total", {{"model", model}})) {
    batch_rows += sample.value;
  }
  for (const MetricSample& sample : exposition.Find("graphserve_batches_total", {{"model", model}})) {
    batches += sample.value;
  }
  result.observed_rows_per_batch = batches > 0 ? batch_rows / batches : 0;
  if (!HistogramBuckets(exposition, "graphserve_request_length", {{"model", model}}, &result.lengths, error) ||
      !HistogramBuckets(exposition, "graphserve_request_rows", {{"model", model}}, &result.rows, error)) {
    return false;
  }
  *scraped = std::move(result);
  return true;
}

}  // namespace graphserve
