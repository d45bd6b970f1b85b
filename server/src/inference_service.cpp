#include "graphserve/server/inference_service.h"

#include <spdlog/spdlog.h>

#include <memory>

#include "graphserve/server/request_codec.h"
#include "infer_path.h"
#include "stream_infer_reactor.h"

namespace graphserve {
namespace {

constexpr const char* kServerName = "graphserve";

// One ModelInfer call in flight. Lives until gRPC reports the RPC done; the scheduler's completion
// callback finishes it from a worker thread, so no RPC thread waits for inference.
class InferReactor final : public grpc::ServerUnaryReactor, public InferenceReceiver {
 public:
  explicit InferReactor(PreparedInference prepared) : prepared_(std::move(prepared)) {}

  const PreparedInference& prepared() const { return prepared_; }

  void Answered(const Status& outcome) override { Finish(ToGrpcStatus(outcome)); }
  void OnCancel() override { prepared_.Cancel(); }
  void OnDone() override { delete this; }

 private:
  const PreparedInference prepared_;
};

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context, const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

}  // namespace

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* context,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  response->set_live(true);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* context,
                                                        const inference::ServerReadyRequest*,
                                                        inference::ServerReadyResponse* response) {
  response->set_ready(ready_.load());
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* context,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  // Before readiness the repository is still being filled and must not be read.
  if (!ready_.load()) {
    response->set_ready(false);
    return FinishNow(context, grpc::Status::OK);
  }
  if (repository_->Find(request->name()) == nullptr) {
    return FinishNow(context, ToGrpcStatus(NotFound("name: unknown model '" + request->name() + "'")));
  }
  response->set_ready(true);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(grpc::CallbackServerContext* context,
                                                           const inference::ServerMetadataRequest*,
                                                           inference::ServerMetadataResponse* response) {
  response->set_name(kServerName);
  response->set_version(GRAPHSERVE_VERSION);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(grpc::CallbackServerContext* context,
                                                          const inference::ModelMetadataRequest* request,
                                                          inference::ModelMetadataResponse* response) {
  if (!ready_.load()) {
    return FinishNow(context, ToGrpcStatus(Unavailable("the server is still loading its models")));
  }
  const LoadedModel* model = repository_->Find(request->name());
  if (model == nullptr) {
    return FinishNow(context, ToGrpcStatus(NotFound("name: unknown model '" + request->name() + "'")));
  }
  FillModelMetadata(model->scheduler->spec(), response);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  const InferPath path(repository_, clock_, metrics_, &ready_);
  PreparedInference prepared;
  // The request belongs to this RPC until it finishes; decoding moves its raw buffers out instead of
  // copying them, hence the const_cast.
  const Status status =
      path.Prepare(*context, const_cast<inference::ModelInferRequest*>(request), &prepared);
  if (!status.ok()) return FinishNow(context, ToGrpcStatus(status));
  auto* reactor = new InferReactor(std::move(prepared));
  path.Start(reactor->prepared(), *request, response, reactor);
  return reactor;
}

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
InferenceService::ModelStreamInfer(grpc::CallbackServerContext* context) {
  return new StreamInferReactor(context, InferPath(repository_, clock_, metrics_, &ready_));
}

}  // namespace graphserve
