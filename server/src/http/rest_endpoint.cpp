#include "rest_endpoint.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <optional>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "common/descriptor_budget.h"
#include "graphserve/server/http/http_server.h"
#include "graphserve/server/http/rest_codec.h"
#include "graphserve/server/observability/metrics.h"
#include "graphserve/server/security/api_groups.h"
#include "graphserve/server/security/auth.h"
#include "grpc/answer_handover.h"
#include "grpc_service.grpc.pb.h"
#include "security/grpc_security.h"

namespace graphserve {
namespace {

using Stub = inference::GRPCInferenceService::Stub;

HttpResponse Json(std::string body) {
  HttpResponse response;
  response.body = std::move(body);
  return response;
}

HttpResponse Error(int http_status, const std::string& message) {
  HttpResponse response;
  response.status = http_status;
  response.body = ErrorBody(message);
  return response;
}

HttpResponse Error(const Status& status) { return Error(HttpStatusFor(status.code()), status.message()); }

// A success with nothing to say: 200 and no body.
HttpResponse NoBody() {
  HttpResponse response;
  response.content_type.clear();
  return response;
}

// Health answers carry no body: 200 when true, 400 otherwise (as Triton).
HttpResponse Health(bool healthy) {
  HttpResponse response;
  response.status = healthy ? 200 : 400;
  response.content_type.clear();
  return response;
}

// One gRPC call made for an HTTP request; deletes itself once answered.
template <typename Request, typename Response>
struct Rpc {
  // Shared with the HTTP server's watcher, which cancels the call when its client leaves
  // (HttpReply::OnClientGone) and may do so as the call ends.
  std::shared_ptr<grpc::ClientContext> context = std::make_shared<grpc::ClientContext>();
  Request request;
  Response response;
  HttpReply reply;
  std::function<HttpResponse(const Response&)> encode;
  const std::atomic<bool>* drain_expired;
  // An infer call's: its answer's way from the service (AnswerHandover), and what counts that
  // answer as not delivered when the call ends without it after the service handed it over.
  std::string handover_id;
  std::shared_ptr<AnswerHandover> handover;
  std::function<void()> answer_lost;

  Rpc(HttpReply http_reply, const std::atomic<bool>* expired)
      : reply(std::move(http_reply)), drain_expired(expired) {}

  void Done(const grpc::Status& status) {
    if (handover != nullptr) {
      if (!status.ok() && handover->GivenUp()) answer_lost();
      AnswerHandovers::Instance().Forget(handover_id);
    }
    HttpResponse answer;
    if (status.ok()) {
      answer = encode(response);
    } else if (drain_expired->load() && (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                                         status.error_code() == grpc::StatusCode::CANCELLED)) {
      // gRPC's own words here would be the in-process transport's ("Transport closed").
      answer = Error(503, "the server is shutting down and its drain timeout (--drain-timeout-s) passed "
                          "before this request was answered");
    } else {
      answer = Error(HttpStatusFor(static_cast<StatusCode>(status.error_code())), status.error_message());
    }
    // The context holds a reference to the in-process channel: it goes before the answer, so that
    // once every answer is out the endpoint holds the last one and drops it on the controlling
    // thread. Dropped here last, on gRPC's callback thread after the gRPC server had gone, it shut
    // down the callback queue this very thread serves (an assertion as the process exited).
    HttpReply owed = std::move(reply);
    delete this;
    owed.Send(std::move(answer));
  }
};

// Path segments become proto3 string fields, which must be UTF-8: a "%FF" in a model name made
// protobuf fail the call with a 500 and an empty message. nlohmann's strict dump checks it.
bool IsUtf8(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

// "/v2/models/m/versions/3/infer" → {"v2", "models", "m", "versions", "3", "infer"}.
std::vector<std::string_view> PathSegments(std::string_view path) {
  std::vector<std::string_view> segments;
  size_t start = 0;
  while (start < path.size()) {
    const size_t slash = path.find('/', start);
    const size_t end = slash == std::string_view::npos ? path.size() : slash;
    if (end > start) segments.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  return segments;
}

// Strict: a header value that is not a plain byte count is refused rather than read as 0.
std::optional<size_t> ParseByteCount(const std::string& text) {
  if (text.empty() || text.size() > 15 || text.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return static_cast<size_t>(std::stoull(text));
}

}  // namespace

// The routes: each checks the method, builds the gRPC request, and says how to answer its response.
struct RestApi {
  std::unique_ptr<Stub> stub;
  ServerMetrics* metrics;
  const GrpcApiGate* grpc_gate = nullptr;
  size_t max_request_bytes = 0;
  int64_t infer_deadline_us = 0;  // RestEndpointOptions::infer_deadline_us
  std::atomic<bool> stopping{false};
  // Set once a drain gave up waiting (RestEndpoint::Drain): the calls still open are then cancelled.
  std::atomic<bool> drain_expired{false};

  // `deadline_us`: the call's deadline from now (0: none), which the gRPC service sees as a gRPC
  // client's: admission refuses at once what cannot meet it, and the queue drops what outlives it.
  // `answer_lost` (infer calls): counts the answer as not delivered when the call ends without it
  // after the service handed it over (AnswerHandover).
  template <typename Request, typename Response, typename Invoke>
  void Call(HttpReply reply, Request request, Invoke invoke,
            std::function<HttpResponse(const Response&)> encode, int64_t deadline_us = 0,
            std::function<void()> answer_lost = nullptr) {
    auto* rpc = new Rpc<Request, Response>(std::move(reply), &drain_expired);
    rpc->request = std::move(request);
    rpc->encode = std::move(encode);
    if (answer_lost) {
      std::tie(rpc->handover_id, rpc->handover) = AnswerHandovers::Instance().Open();
      rpc->answer_lost = std::move(answer_lost);
      rpc->context->AddMetadata(AnswerHandovers::kMetadataKey, rpc->handover_id);
    }
    if (deadline_us > 0) {
      rpc->context->set_deadline(std::chrono::system_clock::now() + std::chrono::microseconds(deadline_us));
    }
    if (grpc_gate != nullptr) grpc_gate->MarkInProcess(rpc->context.get());
    // A client gone before its answer: gRPC cancels the call as it would a gRPC client's, so that
    // its request leaves the queue (or its batch) and counts as cancelled, not as a success.
    // Registered before the call starts: once it has, `rpc` may be gone at any moment.
    rpc->reply.OnClientGone([context = std::weak_ptr<grpc::ClientContext>(rpc->context)] {
      if (const std::shared_ptr<grpc::ClientContext> alive = context.lock()) alive->TryCancel();
    });
    invoke(stub->async(), rpc->context.get(), &rpc->request, &rpc->response,
           [rpc](grpc::Status status) { rpc->Done(status); });
  }

  void Handle(const HttpRequest& http, HttpReply reply) {
    if (stopping.load()) {
      reply.Send(Error(503, "the server is shutting down"));
      return;
    }
    if (!IsUtf8(http.path)) {
      reply.Send(Error(400, "path: not valid UTF-8 once its %-escapes are decoded"));
      return;
    }
    const std::vector<std::string_view> path = PathSegments(http.path);
    if (path.empty() || path[0] != "v2") {
      reply.Send(Error(404, "unknown path '" + http.path + "': graphserve serves the KServe v2 API under /v2"));
      return;
    }
    // A route missing from api_groups.h's table is never served: none escapes its group's gate.
    if (!GroupOfHttpPath(http.path)) {
      reply.Send(Error(404, "unknown path '" + http.path + "'"));
      return;
    }
    const std::string method = http.method == "HEAD" ? "GET" : http.method;
    // /v2 and /v2/health/...
    if (path.size() == 1) return Get(method, http, std::move(reply), &RestApi::ServerMetadata);
    if (path[1] == "health" && path.size() == 3 && (path[2] == "live" || path[2] == "ready")) {
      const bool live = path[2] == "live";
      return Get(method, http, std::move(reply), live ? &RestApi::ServerLive : &RestApi::ServerReady);
    }
    if (path[1] == "trace" && path.size() == 3 && path[2] == "setting") {
      return TraceSetting(method, http, "", std::move(reply));
    }
    if (path[1] == "models" && path.size() == 5 && path[3] == "trace" && path[4] == "setting") {
      return TraceSetting(method, http, std::string(path[2]), std::move(reply));
    }
    if (path[1] == "models" && path.size() == 3 && path[2] == "stats") {
      return Get(method, http, std::move(reply), &RestApi::Statistics);
    }
    if (path[1] == "models" && path.size() >= 3) return ModelRoute(method, http, path, std::move(reply));
    if (path[1] == "repository") return RepositoryRoute(method, http, path, std::move(reply));
    if (path[1] == "logging" && path.size() == 2) return LogSettings(method, http, std::move(reply));
    if (path[1] == "systemsharedmemory" || path[1] == "cudasharedmemory") {
      return SharedMemoryRoute(method, http, path, std::move(reply));
    }
    reply.Send(Error(404, "unknown path '" + http.path + "'"));
  }

  // The model a /v2/models/NAME[/versions/N][/ACTION] path names, and its action ("" for metadata).
  struct ModelPath {
    std::string name;
    std::string version;
    std::string action;
  };

  static std::optional<ModelPath> ParseModelPath(const std::vector<std::string_view>& path) {
    ModelPath model{std::string(path[2]), "", ""};
    size_t next = 3;
    if (path.size() > next + 1 && path[next] == "versions") {
      model.version = std::string(path[next + 1]);
      next += 2;
    }
    if (path.size() == next + 1) model.action = std::string(path[next]);
    if (path.size() > next + 1) return std::nullopt;
    return model;
  }

  using Route = void (RestApi::*)(const HttpRequest&, const ModelPath&, HttpReply);

  // The gRPC request of a per-model route, naming the path's model and version.
  template <typename Request>
  static Request ModelRequest(const ModelPath& model) {
    Request request;
    request.set_name(model.name);
    request.set_version(model.version);
    return request;
  }

  void ModelRoute(const std::string& method, const HttpRequest& http, const std::vector<std::string_view>& path,
                  HttpReply reply) {
    const std::optional<ModelPath> model = ParseModelPath(path);
    struct Action {
      const char* name;
      const char* method;
      Route route;
    };
    static const Action kActions[] = {
        {"", "GET", &RestApi::ModelMetadata},   {"ready", "GET", &RestApi::ModelReady},
        {"config", "GET", &RestApi::ModelConfig}, {"stats", "GET", &RestApi::ModelStatistics},
        {"infer", "POST", &RestApi::Infer},
    };
    if (model) {
      for (const Action& action : kActions) {
        if (model->action != action.name) continue;
        if (method != action.method) return MethodNotAllowed(action.method, std::move(reply));
        return (this->*action.route)(http, *model, std::move(reply));
      }
    }
    reply.Send(Error(404, "unknown path '" + http.path + "'"));
  }

  void RepositoryRoute(const std::string& method, const HttpRequest& http,
                       const std::vector<std::string_view>& path, HttpReply reply) {
    const bool index = path.size() == 3 && path[2] == "index";
    const bool load = path.size() == 5 && path[2] == "models" && (path[4] == "load" || path[4] == "unload");
    if (!index && !load) return reply.Send(Error(404, "unknown path '" + http.path + "'"));
    if (method != "POST") return MethodNotAllowed("POST", std::move(reply));
    if (index) return RepositoryIndex(http, std::move(reply));
    RepositoryLoad(http, std::string(path[3]), path[4] == "load", std::move(reply));
  }

  static void MethodNotAllowed(const char* allowed, HttpReply reply) {
    HttpResponse response = Error(405, std::string("this path takes ") + allowed);
    response.headers = {{"Allow", allowed}};
    reply.Send(std::move(response));
  }

  void Get(const std::string& method, const HttpRequest& http, HttpReply reply,
           void (RestApi::*route)(const HttpRequest&, HttpReply)) {
    if (method != "GET") return MethodNotAllowed("GET", std::move(reply));
    (this->*route)(http, std::move(reply));
  }

  // ------------------------------------------------------------------------------------------------
  // Server-wide routes.

  void ServerLive(const HttpRequest&, HttpReply reply) {
    Call<inference::ServerLiveRequest, inference::ServerLiveResponse>(
        std::move(reply), {}, [](auto* async, auto... args) { async->ServerLive(args...); },
        [](const inference::ServerLiveResponse& response) { return Health(response.live()); });
  }

  void ServerReady(const HttpRequest&, HttpReply reply) {
    Call<inference::ServerReadyRequest, inference::ServerReadyResponse>(
        std::move(reply), {}, [](auto* async, auto... args) { async->ServerReady(args...); },
        [](const inference::ServerReadyResponse& response) { return Health(response.ready()); });
  }

  void ServerMetadata(const HttpRequest&, HttpReply reply) {
    Call<inference::ServerMetadataRequest, inference::ServerMetadataResponse>(
        std::move(reply), {}, [](auto* async, auto... args) { async->ServerMetadata(args...); },
        [](const inference::ServerMetadataResponse& response) { return Json(ProtoToRestJson(response)); });
  }

  void Statistics(const HttpRequest& http, HttpReply reply) { ModelStatistics(http, ModelPath{}, std::move(reply)); }

  // ------------------------------------------------------------------------------------------------
  // Per-model routes.

  void ModelMetadata(const HttpRequest&, const ModelPath& model, HttpReply reply) {
    auto request = ModelRequest<inference::ModelMetadataRequest>(model);
    Call<inference::ModelMetadataRequest, inference::ModelMetadataResponse>(
        std::move(reply), std::move(request), [](auto* async, auto... args) { async->ModelMetadata(args...); },
        [](const inference::ModelMetadataResponse& response) { return Json(ProtoToRestJson(response)); });
  }

  void ModelReady(const HttpRequest&, const ModelPath& model, HttpReply reply) {
    auto request = ModelRequest<inference::ModelReadyRequest>(model);
    // Not ready is 400 with a body saying so, as Triton answers it (the server's health has none).
    const std::string not_ready = ErrorBody("model '" + model.name + "'" +
                                            (model.version.empty() ? "" : " version " + model.version) +
                                            " is not ready");
    Call<inference::ModelReadyRequest, inference::ModelReadyResponse>(
        std::move(reply), std::move(request), [](auto* async, auto... args) { async->ModelReady(args...); },
        [not_ready](const inference::ModelReadyResponse& response) {
          HttpResponse answer = Health(response.ready());
          if (!response.ready()) {
            answer.content_type = "application/json";
            answer.body = not_ready;
          }
          return answer;
        });
  }

  void ModelConfig(const HttpRequest&, const ModelPath& model, HttpReply reply) {
    auto request = ModelRequest<inference::ModelConfigRequest>(model);
    // Triton answers the config itself, not wrapped in the gRPC response's `config` field.
    Call<inference::ModelConfigRequest, inference::ModelConfigResponse>(
        std::move(reply), std::move(request), [](auto* async, auto... args) { async->ModelConfig(args...); },
        [](const inference::ModelConfigResponse& response) { return Json(ProtoToRestJson(response.config())); });
  }

  void ModelStatistics(const HttpRequest&, const ModelPath& model, HttpReply reply) {
    auto request = ModelRequest<inference::ModelStatisticsRequest>(model);
    Call<inference::ModelStatisticsRequest, inference::ModelStatisticsResponse>(
        std::move(reply), std::move(request), [](auto* async, auto... args) { async->ModelStatistics(args...); },
        [](const inference::ModelStatisticsResponse& response) { return Json(ProtoToRestJson(response)); });
  }

  void Infer(const HttpRequest& http, const ModelPath& model, HttpReply reply) {
    // Counted as gRPC counts the refusals it makes, so that /metrics sees every infer request.
    const auto refuse = [&](const Status& status, int http_status) {
      ModelRequestMetrics* model_metrics = metrics->ForModel(model.name);
      if (model_metrics != nullptr) {
        model_metrics->Refused(status.code());
      } else {
        metrics->CountUnroutedRequest(status.code());
      }
      reply.Send(Error(http_status, status.message()));
    };
    inference::ModelInferRequest request;
    RestOutputFormat format;
    std::optional<size_t> json_length;
    Status status = HeaderLength(http, &json_length);
    if (status.ok()) status = ParseRestInferRequest(http.body, json_length, model.name, model.version, &request, &format);
    if (!status.ok()) return refuse(status, HttpStatusFor(status.code()));
    // Beyond the gRPC service's limit, gRPC's own refusal came back as a 429 ("retry") quoting its
    // internals. JSON is larger than the tensors it holds, so a body within the REST limit can be.
    if (request.ByteSizeLong() > max_request_bytes) {
      return refuse(ResourceExhausted("body: its tensors come to " + std::to_string(request.ByteSizeLong()) +
                                      " bytes; requests are taken up to " + std::to_string(max_request_bytes) +
                                      " (the models' largest, or --max-request-bytes)"),
                    413);
    }
    const int64_t deadline_us = RestInferDeadlineUs(request, infer_deadline_us);
    Call<inference::ModelInferRequest, inference::ModelInferResponse>(
        std::move(reply), std::move(request), [](auto* async, auto... args) { async->ModelInfer(args...); },
        [format, metrics = metrics, model_name = model.name](const inference::ModelInferResponse& response) {
          RestInferBody encoded = EncodeRestInferResponse(response, format);
          HttpResponse answer = Json(std::move(encoded.body));
          if (encoded.json_length) {
            answer.content_type = "application/octet-stream";
            answer.headers = {{"Inference-Header-Content-Length", std::to_string(*encoded.json_length)}};
          }
          // gRPC leaves counting this success to REST (InferPath::CountedByRest): it is one only once
          // the client has it.
          ModelRequestMetrics* model_metrics = metrics->ForModel(model_name);
          if (model_metrics != nullptr) {
            answer.on_finished = [model_metrics](bool delivered) {
              model_metrics->AnswerWritten(delivered, "http");
            };
          }
          return answer;
        },
        deadline_us,
        [metrics = metrics, model_name = model.name] {
          if (ModelRequestMetrics* model_metrics = metrics->ForModel(model_name)) {
            model_metrics->AnswerWritten(false, "http");
          }
        });
  }

  static Status HeaderLength(const HttpRequest& http, std::optional<size_t>* json_length) {
    const std::string* header = http.Header("Inference-Header-Content-Length");
    if (header == nullptr) return Status::Ok();
    *json_length = ParseByteCount(*header);
    if (!*json_length) return InvalidArgument("Inference-Header-Content-Length: '" + *header + "' is not a byte count");
    return Status::Ok();
  }

  void LogSettings(const std::string& method, const HttpRequest& http, HttpReply reply) {
    if (method != "GET" && method != "POST") return MethodNotAllowed("GET, POST", std::move(reply));
    inference::LogSettingsRequest request;
    const Status status = ParseLogSettingsRequest(method == "POST" ? http.body : "", &request);
    if (!status.ok()) return reply.Send(Error(status));
    Call<inference::LogSettingsRequest, inference::LogSettingsResponse>(
        std::move(reply), std::move(request), [](auto* async, auto... args) { async->LogSettings(args...); },
        [](const inference::LogSettingsResponse& response) { return Json(LogSettingsJson(response)); });
  }

  // Triton's trace settings, server-wide or for one model: read and answered as the gRPC binding does
  // (trace_settings.h).
  void TraceSetting(const std::string& method, const HttpRequest& http, const std::string& model, HttpReply reply) {
    if (method != "GET" && method != "POST") return MethodNotAllowed("GET, POST", std::move(reply));
    inference::TraceSettingRequest request;
    const Status status = ParseTraceSettingRequest(method == "POST" ? http.body : "", &request);
    if (!status.ok()) return reply.Send(Error(status));
    request.set_model_name(model);
    Call<inference::TraceSettingRequest, inference::TraceSettingResponse>(
        std::move(reply), std::move(request), [](auto* async, auto... args) { async->TraceSetting(args...); },
        [](const inference::TraceSettingResponse& response) { return Json(TraceSettingJson(response)); });
  }

  // ------------------------------------------------------------------------------------------------
  // Repository routes.

  void RepositoryIndex(const HttpRequest& http, HttpReply reply) {
    inference::RepositoryIndexRequest request;
    const Status status = ParseRepositoryIndexRequest(http.body, &request);
    if (!status.ok()) return reply.Send(Error(status));
    Call<inference::RepositoryIndexRequest, inference::RepositoryIndexResponse>(
        std::move(reply), std::move(request), [](auto* async, auto... args) { async->RepositoryIndex(args...); },
        [](const inference::RepositoryIndexResponse& response) { return Json(RepositoryIndexJson(response)); });
  }

  void RepositoryLoad(const HttpRequest& http, const std::string& name, bool load, HttpReply reply) {
    if (load) {
      return RepositoryChange<inference::RepositoryModelLoadRequest, inference::RepositoryModelLoadResponse>(
          http, name, [](auto* async, auto... args) { async->RepositoryModelLoad(args...); }, std::move(reply));
    }
    RepositoryChange<inference::RepositoryModelUnloadRequest, inference::RepositoryModelUnloadResponse>(
        http, name, [](auto* async, auto... args) { async->RepositoryModelUnload(args...); }, std::move(reply));
  }

  // A load or unload: the body's parameters go to gRPC, which refuses those it does not support;
  // success answers 200 with no body.
  template <typename Request, typename Response, typename Invoke>
  void RepositoryChange(const HttpRequest& http, const std::string& name, Invoke invoke, HttpReply reply) {
    Request request;
    request.set_model_name(name);
    const Status status = ParseRepositoryParameters(http.body, request.mutable_parameters());
    if (!status.ok()) return reply.Send(Error(status));
    Call<Request, Response>(std::move(reply), std::move(request), invoke, [](const Response&) { return NoBody(); });
  }

  // ------------------------------------------------------------------------------------------------
  // Triton's shared-memory extension: /v2/{system,cuda}sharedmemory[/region/NAME]/ACTION, where
  // status is a GET and register (which needs a region) and unregister are POSTs.

  void SharedMemoryRoute(const std::string& method, const HttpRequest& http,
                         const std::vector<std::string_view>& path, HttpReply reply) {
    std::string region;
    std::string_view action;
    if (path.size() == 3) {
      action = path[2];
    } else if (path.size() == 5 && path[2] == "region") {
      region = std::string(path[3]);
      action = path[4];
    }
    if (action != "status" && action != "unregister" && (action != "register" || region.empty())) {
      return reply.Send(Error(404, "unknown path '" + http.path + "'"));
    }
    const char* allowed = action == "status" ? "GET" : "POST";
    if (method != allowed) return MethodNotAllowed(allowed, std::move(reply));
    if (path[1] == "cudasharedmemory") return CudaSharedMemory(http, region, action, std::move(reply));
    SystemSharedMemory(http, region, action, std::move(reply));
  }

  // A shared-memory call naming region `region` (empty: every region), answered with no body unless
  // `encode` says otherwise.
  template <typename Response, typename Request, typename Invoke>
  void RegionCall(HttpReply reply, Request request, const std::string& region, Invoke invoke,
                  std::function<HttpResponse(const Response&)> encode = [](const Response&) { return NoBody(); }) {
    request.set_name(region);
    Call<Request, Response>(std::move(reply), std::move(request), invoke, std::move(encode));
  }

  void SystemSharedMemory(const HttpRequest& http, const std::string& region, std::string_view action,
                          HttpReply reply) {
    if (action == "status") {
      return RegionCall<inference::SystemSharedMemoryStatusResponse>(
          std::move(reply), inference::SystemSharedMemoryStatusRequest(), region,
          [](auto* async, auto... args) { async->SystemSharedMemoryStatus(args...); },
          [](const inference::SystemSharedMemoryStatusResponse& response) {
            return Json(SystemSharedMemoryStatusJson(response));
          });
    }
    if (action == "register") {
      inference::SystemSharedMemoryRegisterRequest request;
      const Status status = ParseSystemSharedMemoryRegister(http.body, &request);
      if (!status.ok()) return reply.Send(Error(status));
      return RegionCall<inference::SystemSharedMemoryRegisterResponse>(
          std::move(reply), std::move(request), region,
          [](auto* async, auto... args) { async->SystemSharedMemoryRegister(args...); });
    }
    RegionCall<inference::SystemSharedMemoryUnregisterResponse>(
        std::move(reply), inference::SystemSharedMemoryUnregisterRequest(), region,
        [](auto* async, auto... args) { async->SystemSharedMemoryUnregister(args...); });
  }

  void CudaSharedMemory(const HttpRequest& http, const std::string& region, std::string_view action,
                        HttpReply reply) {
    if (action == "status") {
      return RegionCall<inference::CudaSharedMemoryStatusResponse>(
          std::move(reply), inference::CudaSharedMemoryStatusRequest(), region,
          [](auto* async, auto... args) { async->CudaSharedMemoryStatus(args...); },
          [](const inference::CudaSharedMemoryStatusResponse& response) {
            return Json(CudaSharedMemoryStatusJson(response));
          });
    }
    if (action == "register") {
      inference::CudaSharedMemoryRegisterRequest request;
      const Status status = ParseCudaSharedMemoryRegister(http.body, &request);
      if (!status.ok()) return reply.Send(Error(status));
      return RegionCall<inference::CudaSharedMemoryRegisterResponse>(
          std::move(reply), std::move(request), region,
          [](auto* async, auto... args) { async->CudaSharedMemoryRegister(args...); });
    }
    RegionCall<inference::CudaSharedMemoryUnregisterResponse>(
        std::move(reply), inference::CudaSharedMemoryUnregisterRequest(), region,
        [](auto* async, auto... args) { async->CudaSharedMemoryUnregister(args...); });
  }
};

Status RestEndpoint::Start(const RestEndpointOptions& options, std::shared_ptr<grpc::Channel> service,
                           ServerMetrics* metrics, std::unique_ptr<RestEndpoint>* endpoint) {
  auto api = std::make_unique<RestApi>();
  api->stub = inference::GRPCInferenceService::NewStub(std::move(service));
  api->metrics = metrics;
  api->grpc_gate = options.grpc_gate;
  api->max_request_bytes = options.max_request_bytes;
  api->infer_deadline_us = options.infer_deadline_us;
  HttpServerOptions http;
  http.address = options.address;
  http.flag = "--http-address";
  http.thread_count = options.thread_count;
  http.max_body_bytes = options.max_body_bytes;
  http.bounds = options.bounds;
  if (metrics != nullptr) {
    http.on_buffered_bytes = [metrics](int64_t delta) { metrics->AddHttpBufferedBytes(delta); };
    http.on_closed = [metrics](HttpClosure why) { metrics->CountHttpClosure(HttpClosureName(why)); };
  }
  const int open_file_limit = OpenFileLimit();
  const int wanted_connections = http.max_connections;
  http.max_connections = RestConnectionCap(open_file_limit, wanted_connections);
  if (http.max_connections < wanted_connections) {
    // The cap per address shrinks with the cap, or one client could again take every slot.
    unsigned& per_client = http.bounds.max_connections_per_client;
    per_client = std::min<unsigned>(
        per_client, std::max<unsigned>(1, static_cast<unsigned>(uint64_t{per_client} * http.max_connections /
                                                                static_cast<unsigned>(wanted_connections))));
    spdlog::info(
        "REST: at most {} connections at once under the open-file limit of {} (ulimit -n), {} per client "
        "address; gRPC and /metrics keep the other descriptors",
        http.max_connections, open_file_limit, per_client);
  }
  http.content_codings = true;
  http.tls = options.tls;
  http.auth = options.auth;
  if (options.auth != nullptr && !options.auth->options().protect_health) {
    http.needs_token = [](const std::string& path) { return !TokenAuthenticator::IsHealthHttpPath(path); };
  }
  if (options.gate != nullptr && !options.gate->open()) {
    const ApiGate* gate = options.gate;
    http.screen = [gate](const HttpRequest& request) -> std::optional<HttpRefusal> {
      const std::optional<ApiGroup> group = GroupOfHttpPath(request.path);
      if (!group) return std::nullopt;  // no route: the router answers 404
      const ApiGate::Verdict verdict =
          gate->Admit(*group, [&request](const std::string& name) -> std::optional<std::string_view> {
            const std::string* value = request.Header(name);
            if (value == nullptr) return std::nullopt;
            return *value;
          });
      if (verdict == ApiGate::Verdict::kAdmitted) return std::nullopt;
      return HttpRefusal{403, gate->RefusalMessage(*group, verdict)};  // 403 for both, as Triton's
    };
  }
  std::unique_ptr<HttpServer> server;
  RestApi* routes = api.get();
  const Status status = HttpServer::Start(
      http, [routes](const HttpRequest& request, HttpReply reply) { routes->Handle(request, std::move(reply)); },
      &server);
  if (!status.ok()) return status;
  endpoint->reset(new RestEndpoint(std::move(api), std::move(server)));
  return Status::Ok();
}

RestEndpoint::RestEndpoint(std::unique_ptr<RestApi> api, std::unique_ptr<HttpServer> server)
    : api_(std::move(api)), server_(std::move(server)) {}

// server_ first: it waits for the answers owed, which go through api_.
RestEndpoint::~RestEndpoint() { server_.reset(); }

int RestEndpoint::port() const { return server_->port(); }

void RestEndpoint::StopAccepting() {
  api_->stopping.store(true);
  server_->StopAccepting();
}

bool RestEndpoint::Drain(std::chrono::steady_clock::time_point deadline) {
  if (server_->WaitForReplies(deadline)) return true;
  api_->drain_expired.store(true);
  return false;
}

}  // namespace graphserve
