// The engine's libtorch entry points: CreateExecutor, GetEngineInfo, GetDeviceMemory, DeviceFault.
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "aoti_model.h"
#include "builtin_encoder.h"
#ifdef GRAPHSERVE_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include "cuda_graph_executor.h"
#endif
#include "device_fault.h"
#include "eager_executor.h"
#include "graphserve/engine/device.h"
#include "graphserve/engine/executor.h"
#include "torch_errors.h"
#include "torchscript_model.h"

namespace graphserve {
namespace {

// Where the model file of `platform` lies: options.model_filename, else the platform's own name.
std::string ModelPath(const ExecutorOptions& options, const char* platform_filename) {
  return options.model_dir + "/" +
         (options.model_filename.empty() ? platform_filename : options.model_filename);
}

// A parsed device name this process can use; UNAVAILABLE for a CUDA device it cannot.
Status ParseDevice(const std::string& name, c10::Device* device) {
  DeviceName parsed;
  Status status = ParseDeviceName(name, &parsed);
  if (!status.ok()) return status;
  if (!parsed.cuda) {
    *device = c10::Device(c10::kCPU);
    return Status::Ok();
  }
  if (!torch::cuda::is_available()) {
    return Unavailable("device '" + name +
                       "' asked for, but CUDA is not available (libtorch built without CUDA, or no "
                       "GPU visible)");
  }
  const int device_count = static_cast<int>(torch::cuda::device_count());
  if (parsed.index >= device_count) {
    return Unavailable("device '" + name + "' asked for, but only " + std::to_string(device_count) +
                       " CUDA device(s) are visible");
  }
  *device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(parsed.index));
  return Status::Ok();
}

}  // namespace

Status CreateExecutor(const ModelSpec& spec, const ExecutorOptions& options,
                      std::unique_ptr<Executor>* executor) {
  try {
    c10::Device device(c10::kCPU);
    Status status = ParseDevice(options.device, &device);
    if (!status.ok()) {
      return Status(status.code(), "model '" + spec.name + "': " + status.message());
    }
    status = CheckModelSpec(spec);
    if (!status.ok()) return status;

    std::unique_ptr<Model> model;
    if (spec.platform == kPlatformBuiltinEncoder) {
      status = CreateBuiltinEncoderModel(spec, device, &model);
    } else if (spec.platform == kPlatformTorchScript) {
      status = LoadTorchScriptModel(spec, ModelPath(options, kTorchScriptFileName), device, &model);
    } else if (spec.platform == kPlatformAotInductor) {
      status = LoadAotInductorModel(spec, ModelPath(options, kAotInductorFileName), device, &model);
    } else {
      status = InvalidArgument("model '" + spec.name + "': unknown platform '" + spec.platform +
                               "' (expected " + kPlatformAotInductor + ", " + kPlatformTorchScript +
                               " or " + kPlatformBuiltinEncoder + ")");
    }
    if (!status.ok()) return status;
#ifdef GRAPHSERVE_WITH_CUDA
    // A model marked non-capturable in its config runs eagerly (counted as "disabled").
    if (device.is_cuda() && !spec.cuda_graphs_disabled) {
      *executor = std::make_unique<CudaGraphExecutor>(spec, std::move(model), device);
      (*executor)->set_warmup_progress(options.warmup_progress);
      return Status::Ok();
    }
#endif
    *executor = std::make_unique<EagerExecutor>(spec, std::move(model), device);
    (*executor)->set_warmup_progress(options.warmup_progress);
    return Status::Ok();
  } catch (const std::exception& error) {
    return Internal("model '" + spec.name + "': creating the executor on " + options.device +
                    " failed: " + ExceptionMessage(error));
  }
}

namespace {

std::mutex device_fault_mutex;
std::string device_fault;  // guarded by device_fault_mutex; the first fault only

}  // namespace

void NoteFailureOn(const c10::Device& device) {
#ifdef GRAPHSERVE_WITH_CUDA
  if (!device.is_cuda()) return;
  cudaError_t error = cudaSuccess;
  {
    c10::cuda::CUDAGuard guard(device);
    // An asynchronous kernel fault is sticky: every later call on the context returns it again.
    error = cudaDeviceSynchronize();
  }
  if (error == cudaSuccess) return;
  std::lock_guard<std::mutex> lock(device_fault_mutex);
  if (device_fault.empty()) {
    device_fault = device.str() + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")";
  }
#else
  (void)device;
#endif
}

std::string DeviceFault() {
  std::lock_guard<std::mutex> lock(device_fault_mutex);
  return device_fault;
}

DeviceMemory GetDeviceMemory(const std::string& device) {
#ifdef GRAPHSERVE_WITH_CUDA
  c10::Device parsed(c10::kCPU);
  try {
    if (ParseDevice(device, &parsed).ok() && parsed.is_cuda()) return CudaDeviceMemory(parsed);
  } catch (const std::exception&) {
    // Memory figures are for metrics; a failing query reports zeros rather than throwing.
  }
#endif
  (void)device;
  return DeviceMemory{};
}

EngineInfo GetEngineInfo() {
  EngineInfo info;
  info.libtorch_version = TORCH_VERSION;
  try {
    const at::CUDAHooksInterface& cuda = at::detail::getCUDAHooks();
    // Without libtorch_cuda the hooks are a stub whose version query throws.
    if (cuda.hasCUDART()) {
      const long version = cuda.versionCUDART();  // e.g. 12040 for 12.4
      info.cuda_version =
          std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
    }
    info.cuda_device_count = static_cast<int>(torch::cuda::device_count());
  } catch (const std::exception&) {
    // A broken CUDA install reports as no CUDA rather than failing the server's start-up log.
    info.cuda_version.clear();
    info.cuda_device_count = 0;
  }
  return info;
}

}  // namespace graphserve
