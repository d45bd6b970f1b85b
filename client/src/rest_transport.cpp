#include "rest_transport.h"

#include <curl/curl.h>
#include <strings.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "graphserve/rest_json.h"

namespace graphserve::loadgen {
namespace {

using nlohmann::json;

}  // namespace

std::string RestInferBody(const inference::ModelInferRequest& request, size_t* json_length,
                          int64_t timeout_us) {
  json header = json::object();
  if (!request.id().empty()) header["id"] = request.id();
  json parameters = json::object();
  for (const auto& [name, value] : request.parameters()) {
    parameters[name] = rest_json::InferParameterJson(value);
  }
  if (timeout_us > 0) parameters["timeout"] = timeout_us;
  json inputs = json::array();
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& input = request.inputs(i);
    const size_t size = i < request.raw_input_contents_size() ? request.raw_input_contents(i).size() : 0;
    inputs.push_back({{"name", input.name()},
                      {"datatype", input.datatype()},
                      {"shape", input.shape()},
                      {"parameters", {{"binary_data_size", size}}}});
  }
  header["inputs"] = std::move(inputs);
  if (request.outputs_size() == 0) {
    parameters["binary_data_output"] = true;
  } else {
    json outputs = json::array();
    for (const auto& output : request.outputs()) {
      outputs.push_back({{"name", output.name()}, {"parameters", {{"binary_data", true}}}});
    }
    header["outputs"] = std::move(outputs);
  }
  if (!parameters.empty()) header["parameters"] = std::move(parameters);
  std::string body = header.dump();
  *json_length = body.size();
  for (const std::string& raw : request.raw_input_contents()) body += raw;
  return body;
}

grpc::Status ParseRestInferAnswer(long status, const std::string& body, std::optional<size_t> json_length,
                                  inference::ModelInferResponse* response) {
  const size_t header_size = std::min(json_length.value_or(body.size()), body.size());
  const json header = json::parse(body.substr(0, header_size), nullptr, /*allow_exceptions=*/false);
  if (status != 200) {
    const std::string message = header.is_object() && header.contains("error") && header["error"].is_string()
                                    ? header["error"].get<std::string>()
                                    : "HTTP " + std::to_string(status) + ": " + body.substr(0, 200);
    return grpc::Status(rest_json::CodeForHttpStatus(static_cast<int>(status)), message);
  }
  if (!header.is_object() || !header.contains("outputs") || !header["outputs"].is_array()) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "the answer is not a KServe v2 infer response");
  }
  response->set_model_name(header.value("model_name", ""));
  response->set_model_version(header.value("model_version", ""));
  response->set_id(header.value("id", ""));
  size_t offset = header_size;
  for (const json& output : header["outputs"]) {
    auto* tensor = response->add_outputs();
    tensor->set_name(output.value("name", ""));
    tensor->set_datatype(output.value("datatype", ""));
    for (const json& dim : output.value("shape", json::array())) tensor->add_shape(dim.get<int64_t>());
    const json parameters = output.value("parameters", json::object());
    if (!parameters.contains("binary_data_size")) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "output '" + tensor->name() + "' did not come as binary data");
    }
    const size_t size = parameters["binary_data_size"].get<size_t>();
    if (offset + size > body.size()) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "the answer's binary data is shorter than its header says");
    }
    response->add_raw_output_contents(body.substr(offset, size));
    offset += size;
  }
  return grpc::Status::OK;
}

// One libcurl multi handle and the thread that drives it; calls are handed over through a queue,
// since a multi handle may only be used from one thread.
class RestTransport::Loop {
 public:
  Loop(const std::string& base_url, int64_t timeout_ms, const Done& done)
      : base_url_(base_url), timeout_ms_(timeout_ms), done_(done), multi_(curl_multi_init()) {
    // Keep every connection of a high-concurrency run open (libcurl's default cache is smaller).
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, 4096L);
    thread_ = std::thread([this] { Run(); });
  }

  ~Loop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    curl_multi_wakeup(multi_);
    thread_.join();
    curl_multi_cleanup(multi_);
  }

  void Send(void* tag, const std::string& path, std::shared_ptr<const std::string> body, size_t json_length) {
    auto transfer = std::make_unique<Transfer>();
    transfer->tag = tag;
    transfer->url = base_url_ + path;
    transfer->body = std::move(body);
    transfer->json_length = json_length;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.push_back(std::move(transfer));
    }
    curl_multi_wakeup(multi_);
  }

 private:
  struct Transfer {
    void* tag = nullptr;
    std::string url;
    std::shared_ptr<const std::string> body;
    size_t json_length = 0;
    curl_slist* headers = nullptr;
    Answer answer;
  };

  static size_t Write(char* data, size_t size, size_t count, void* transfer) {
    static_cast<Transfer*>(transfer)->answer.body.append(data, size * count);
    return size * count;
  }

  static size_t Header(char* data, size_t size, size_t count, void* opaque) {
    static constexpr char kJsonLength[] = "Inference-Header-Content-Length:";
    static constexpr char kBodyLength[] = "Content-Length:";
    auto* transfer = static_cast<Transfer*>(opaque);
    const size_t length = size * count;
    const auto value = [&](size_t name_size) {
      return std::stoull(std::string(data + name_size - 1, length - (name_size - 1)));
    };
    if (length > sizeof(kJsonLength) && strncasecmp(data, kJsonLength, sizeof(kJsonLength) - 1) == 0) {
      transfer->answer.json_length = value(sizeof(kJsonLength));
    } else if (length > sizeof(kBodyLength) && strncasecmp(data, kBodyLength, sizeof(kBodyLength) - 1) == 0) {
      transfer->answer.body.reserve(value(sizeof(kBodyLength)));  // large answers arrive in one buffer
    }
    return length;
  }

  void Start(std::unique_ptr<Transfer> owned) {
    Transfer* transfer = owned.release();  // deleted in Finish
    CURL* easy = curl_easy_init();
    transfer->headers = curl_slist_append(nullptr, "Content-Type: application/octet-stream");
    transfer->headers = curl_slist_append(
        transfer->headers, ("Inference-Header-Content-Length: " + std::to_string(transfer->json_length)).c_str());
    transfer->headers = curl_slist_append(transfer->headers, "Expect:");  // no 100-continue round trip
    curl_easy_setopt(easy, CURLOPT_URL, transfer->url.c_str());
    curl_easy_setopt(easy, CURLOPT_POST, 1L);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, transfer->body->data());
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(transfer->body->size()));
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, transfer->headers);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &Write);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, transfer);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &Header);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, transfer);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_ms_));
    curl_easy_setopt(easy, CURLOPT_PRIVATE, transfer);
    curl_multi_add_handle(multi_, easy);
    ++active_;
  }

  void Finish(CURL* easy, CURLcode result) {
    Transfer* transfer = nullptr;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, reinterpret_cast<char**>(&transfer));
    if (result == CURLE_OK) {
      curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &transfer->answer.http_status);
    } else {
      transfer->answer.transport_error = curl_easy_strerror(result);
      transfer->answer.timed_out = result == CURLE_OPERATION_TIMEDOUT;
    }
    curl_multi_remove_handle(multi_, easy);
    curl_easy_cleanup(easy);
    curl_slist_free_all(transfer->headers);
    --active_;
    std::unique_ptr<Transfer> owned(transfer);
    done_(owned->tag, std::move(owned->answer));
  }

  void Run() {
    while (true) {
      std::vector<std::unique_ptr<Transfer>> starting;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        starting.swap(pending_);
        if (stopping_ && starting.empty() && active_ == 0) return;
      }
      for (auto& transfer : starting) Start(std::move(transfer));
      int running = 0;
      curl_multi_perform(multi_, &running);
      int left = 0;
      while (CURLMsg* message = curl_multi_info_read(multi_, &left)) {
        if (message->msg == CURLMSG_DONE) Finish(message->easy_handle, message->data.result);
      }
      curl_multi_poll(multi_, nullptr, 0, 100, nullptr);
    }
  }

  const std::string base_url_;
  const int64_t timeout_ms_;
  const Done& done_;
  CURLM* const multi_;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Transfer>> pending_;  // guarded by mutex_
  bool stopping_ = false;                           // guarded by mutex_
  int64_t active_ = 0;                              // the loop thread's own
};

RestTransport::RestTransport(std::string base_url, int64_t timeout_ms, int64_t threads, Done done)
    : done_(std::move(done)) {
  static std::once_flag curl_initialized;
  std::call_once(curl_initialized, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  for (int64_t i = 0; i < std::max<int64_t>(threads, 1); ++i) {
    loops_.push_back(std::make_unique<Loop>(base_url, timeout_ms, done_));
  }
}

RestTransport::~RestTransport() { loops_.clear(); }

void RestTransport::Send(void* tag, const std::string& path, std::shared_ptr<const std::string> body,
                         size_t json_length) {
  loops_[next_loop_++ % loops_.size()]->Send(tag, path, std::move(body), json_length);
}

}  // namespace graphserve::loadgen
