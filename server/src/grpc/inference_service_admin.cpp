// InferenceService's answers to Triton's RPCs beyond inference: model statistics, log and trace
// settings, and the shared-memory extensions graphserve does not support. Each is answered on the
// calling thread; the work is in model_statistics.h, log_settings.h and trace_settings.h.
#include <memory>
#include <string>
#include <vector>

#include "graphserve/server/observability/log_settings.h"
#include "graphserve/server/observability/model_statistics.h"
#include "graphserve/server/observability/trace_settings.h"
#include "inference_service.h"

namespace graphserve {
namespace {

// Tensors travel in the request and the response; Triton's regions are never read or written.
Status SharedMemoryUnsupported() {
  return Status(StatusCode::kUnimplemented,
                "graphserve does not support shared-memory tensors: send tensor data in the request "
                "(raw_input_contents or contents); outputs come back in raw_output_contents");
}

// Truthfully nothing is registered: the whole list (an empty name) is empty, and a named region is
// not there.
Status RegionStatus(const char* kind, const std::string& name) {
  if (name.empty()) return Status::Ok();
  return NotFound("name: no " + std::string(kind) + " shared-memory region '" + name +
                  "' is registered (graphserve does not support shared-memory tensors)");
}

}  // namespace

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  if (!ready_.load()) {
    return FinishNow(context, ToGrpcStatus(Unavailable("the server is still loading its models")));
  }
  // Held until the answer is filled, so that an unload meanwhile cannot free a recorder.
  const std::vector<std::shared_ptr<LoadedModel>> models = repository_->Serving();
  std::vector<ServedModelStatistics> served;
  for (const std::shared_ptr<LoadedModel>& model : models) {
    served.push_back(ServedModelStatistics{model->scheduler->spec().name, model->version,
                                           &model->scheduler->statistics()});
  }
  return FinishNow(context, ToGrpcStatus(FillModelStatistics(served, *request, response)));
}

grpc::ServerUnaryReactor* InferenceService::LogSettings(grpc::CallbackServerContext* context,
                                                        const inference::LogSettingsRequest* request,
                                                        inference::LogSettingsResponse* response) {
  return FinishNow(context, ToGrpcStatus(UpdateLogSettings(*request, response)));
}

grpc::ServerUnaryReactor* InferenceService::TraceSetting(
    grpc::CallbackServerContext* context, const inference::TraceSettingRequest* request,
    inference::TraceSettingResponse* response) {
  if (!request->model_name().empty()) {
    // Per-model settings are Triton's too; the model must be one that is served.
    if (!ready_.load()) {
      return FinishNow(context, ToGrpcStatus(Unavailable("the server is still loading its models")));
    }
    std::shared_ptr<LoadedModel> model;
    const Status status = repository_->Find(request->model_name(), "", "model_name", "", &model);
    if (!status.ok()) return FinishNow(context, ToGrpcStatus(status));
  }
  return FinishNow(context, ToGrpcStatus(UpdateTraceSettings(*request, response)));
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryStatus(
    grpc::CallbackServerContext* context, const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse*) {
  return FinishNow(context, ToGrpcStatus(RegionStatus("system", request->name())));
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* context, const inference::SystemSharedMemoryRegisterRequest*,
    inference::SystemSharedMemoryRegisterResponse*) {
  return FinishNow(context, ToGrpcStatus(SharedMemoryUnsupported()));
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* context, const inference::SystemSharedMemoryUnregisterRequest*,
    inference::SystemSharedMemoryUnregisterResponse*) {
  return FinishNow(context, ToGrpcStatus(SharedMemoryUnsupported()));
}

grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryStatus(
    grpc::CallbackServerContext* context, const inference::CudaSharedMemoryStatusRequest* request,
    inference::CudaSharedMemoryStatusResponse*) {
  return FinishNow(context, ToGrpcStatus(RegionStatus("CUDA", request->name())));
}

grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryRegister(
    grpc::CallbackServerContext* context, const inference::CudaSharedMemoryRegisterRequest*,
    inference::CudaSharedMemoryRegisterResponse*) {
  return FinishNow(context, ToGrpcStatus(SharedMemoryUnsupported()));
}

grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryUnregister(
    grpc::CallbackServerContext* context, const inference::CudaSharedMemoryUnregisterRequest*,
    inference::CudaSharedMemoryUnregisterResponse*) {
  return FinishNow(context, ToGrpcStatus(SharedMemoryUnsupported()));
}

}  // namespace graphserve
