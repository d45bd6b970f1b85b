// InferenceService's answers to Triton's RPCs beyond inference: model statistics, log and trace
// settings, and the shared-memory extensions. Each is answered on the calling thread; the work is in
// model_statistics.h, log_settings.h, trace_settings.h and shared_memory_registry.h.
#include <memory>
#include <string>
#include <vector>

#include "graphserve/server/observability/log_settings.h"
#include "graphserve/server/observability/model_statistics.h"
#include "graphserve/server/observability/trace_settings.h"
#include "inference_service.h"

namespace graphserve {
grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  if (auto* refused = Refused<GroupOfGrpcMethod("ModelStatistics")>(context)) return refused;
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
  if (auto* refused = Refused<GroupOfGrpcMethod("LogSettings")>(context)) return refused;
  return FinishNow(context, ToGrpcStatus(UpdateLogSettings(*request, response)));
}

grpc::ServerUnaryReactor* InferenceService::TraceSetting(
    grpc::CallbackServerContext* context, const inference::TraceSettingRequest* request,
    inference::TraceSettingResponse* response) {
  if (auto* refused = Refused<GroupOfGrpcMethod("TraceSetting")>(context)) return refused;
  if (!request->model_name().empty()) {
    // Per-model settings are Triton's too; the model must be one that is served.
    if (!ready_.load()) {
      return FinishNow(context, ToGrpcStatus(Unavailable("the server is still loading its models")));
    }
    std::shared_ptr<LoadedModel> model;
    const Status status = repository_->Find(request->model_name(), "", "model_name", "", &model);
    if (!status.ok()) return FinishNow(context, ToGrpcStatus(status));
  }
  if (tracing_.settings == nullptr) {
    return FinishNow(context,
                     ToGrpcStatus(Status(StatusCode::kUnimplemented, "this server traces no requests")));
  }
  return FinishNow(context, ToGrpcStatus(tracing_.settings->Update(*request, response)));
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryStatus(
    grpc::CallbackServerContext* context, const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse* response) {
  if (auto* refused = Refused<GroupOfGrpcMethod("SystemSharedMemoryStatus")>(context)) return refused;
  std::vector<SharedMemoryRegionStatus> regions;
  const Status status = shared_memory_->GetStatus(request->name(), &regions);
  for (const SharedMemoryRegionStatus& region : regions) {
    inference::SystemSharedMemoryStatusResponse::RegionStatus& entry = (*response->mutable_regions())[region.name];
    entry.set_name(region.name);
    entry.set_key(region.key);
    entry.set_offset(region.offset);
    entry.set_byte_size(region.byte_size);
  }
  return FinishNow(context, ToGrpcStatus(status));
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* context, const inference::SystemSharedMemoryRegisterRequest* request,
    inference::SystemSharedMemoryRegisterResponse*) {
  if (auto* refused = Refused<GroupOfGrpcMethod("SystemSharedMemoryRegister")>(context)) return refused;
  return FinishNow(context, ToGrpcStatus(shared_memory_->Register(request->name(), request->key(),
                                                                  request->offset(), request->byte_size())));
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* context, const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse*) {
  if (auto* refused = Refused<GroupOfGrpcMethod("SystemSharedMemoryUnregister")>(context)) return refused;
  shared_memory_->Unregister(request->name());
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryStatus(
    grpc::CallbackServerContext* context, const inference::CudaSharedMemoryStatusRequest* request,
    inference::CudaSharedMemoryStatusResponse* response) {
  if (auto* refused = Refused<GroupOfGrpcMethod("CudaSharedMemoryStatus")>(context)) return refused;
  std::vector<SharedMemoryRegionStatus> regions;
  const Status status = shared_memory_->GetStatus(request->name(), &regions, SharedMemoryKind::kCuda);
  for (const SharedMemoryRegionStatus& region : regions) {
    inference::CudaSharedMemoryStatusResponse::RegionStatus& entry =
        (*response->mutable_regions())[region.name];
    entry.set_name(region.name);
    entry.set_device_id(static_cast<uint64_t>(region.device_id));
    entry.set_byte_size(region.byte_size);
  }
  return FinishNow(context, ToGrpcStatus(status));
}

grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryRegister(
    grpc::CallbackServerContext* context, const inference::CudaSharedMemoryRegisterRequest* request,
    inference::CudaSharedMemoryRegisterResponse*) {
  if (auto* refused = Refused<GroupOfGrpcMethod("CudaSharedMemoryRegister")>(context)) return refused;
  return FinishNow(context,
                   ToGrpcStatus(shared_memory_->RegisterCuda(request->name(), request->raw_handle(),
                                                             request->device_id(), request->byte_size())));
}

grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryUnregister(
    grpc::CallbackServerContext* context, const inference::CudaSharedMemoryUnregisterRequest* request,
    inference::CudaSharedMemoryUnregisterResponse*) {
  if (auto* refused = Refused<GroupOfGrpcMethod("CudaSharedMemoryUnregister")>(context)) return refused;
  shared_memory_->Unregister(request->name(), SharedMemoryKind::kCuda);
  return FinishNow(context, grpc::Status::OK);
}

}  // namespace graphserve
