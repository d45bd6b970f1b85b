// The engine's entry points: CreateExecutor, GetEngineInfo, EagerReasonName.
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <cctype>
#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "builtin_encoder.h"
#ifdef GRAPHSERVE_WITH_CUDA
#include "cuda_graph_executor.h"
#endif
#include "eager_executor.h"
#include "graphserve/engine/executor.h"
#include "torch_errors.h"
#include "torchscript_model.h"

namespace graphserve {
namespace {

// Short enough for std::stoi; no host has 10000 GPUs.
bool IsDeviceIndex(const std::string& text) {
  if (text.empty() || text.size() > 4) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// "cpu", "cuda" (device 0) or "cuda:N"; UNAVAILABLE for a CUDA device this process cannot use.
Status ParseDevice(const std::string& name, c10::Device* device) {
  if (name == "cpu") {
    *device = c10::Device(c10::kCPU);
    return Status::Ok();
  }
  int index = 0;
  const std::string cuda_prefix = "cuda:";
  if (name.compare(0, cuda_prefix.size(), cuda_prefix) == 0 &&
      IsDeviceIndex(name.substr(cuda_prefix.size()))) {
    index = std::stoi(name.substr(cuda_prefix.size()));
  } else if (name != "cuda") {
    return InvalidArgument("unknown device '" + name + "' (expected cpu, cuda or cuda:N)");
  }
  if (!torch::cuda::is_available()) {
    return Unavailable("device '" + name +
                       "' asked for, but CUDA is not available (libtorch built without CUDA, or no "
                       "GPU visible)");
  }
  const int device_count = static_cast<int>(torch::cuda::device_count());
  if (index >= device_count) {
    return Unavailable("device '" + name + "' asked for, but only " + std::to_string(device_count) +
                       " CUDA device(s) are visible");
  }
  *device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  return Status::Ok();
}

Status CheckTensorSpecs(const std::string& model, const char* role,
                        const std::vector<TensorSpec>& tensors) {
  if (tensors.empty()) return InvalidArgument("model '" + model + "' declares no " + role + "s");
  for (const TensorSpec& tensor : tensors) {
    int variable_dims = 0;
    bool sizes_positive = true;
    for (int64_t dim : tensor.dims) {
      if (dim == -1) {
        ++variable_dims;
      } else if (dim < 1) {
        sizes_positive = false;
      }
    }
    if (variable_dims > 1 || !sizes_positive) {
      return InvalidArgument("model '" + model + "': " + role + " '" + tensor.name + "' has dims " +
                             ShapeToString(tensor.dims) +
                             "; expected positive sizes and at most one -1");
    }
  }
  return Status::Ok();
}

// What every platform needs of a spec; the platform checks the rest.
Status CheckModelSpec(const ModelSpec& spec) {
  Status status = CheckTensorSpecs(spec.name, "input", spec.inputs);
  if (!status.ok()) return status;
  status = CheckTensorSpecs(spec.name, "output", spec.outputs);
  if (!status.ok()) return status;
  for (const std::vector<int64_t>* grid : {&spec.bucket_batch_sizes, &spec.bucket_lengths}) {
    for (int64_t size : *grid) {
      if (size < 1) {
        return InvalidArgument("model '" + spec.name + "': bucket sizes must be positive, got " +
                               std::to_string(size));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

const char* EagerReasonName(EagerReason reason) {
  switch (reason) {
    case EagerReason::kOversize: return "oversize";
    case EagerReason::kCaptureFailed: return "capture_failed";
    case EagerReason::kVerifyFailed: return "verify_failed";
    case EagerReason::kDisabled: return "disabled";
    case EagerReason::kNoCuda: return "no_cuda";
  }
  return "disabled";
}

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
      status = LoadTorchScriptModel(spec, options.model_dir, device, &model);
    } else {
      status = InvalidArgument("model '" + spec.name + "': unknown platform '" + spec.platform +
                               "' (expected " + kPlatformTorchScript + " or " +
                               kPlatformBuiltinEncoder + ")");
    }
    if (!status.ok()) return status;
#ifdef GRAPHSERVE_WITH_CUDA
    // A model marked non-capturable in its config runs eagerly (counted as "disabled").
    if (device.is_cuda() && !spec.cuda_graphs_disabled) {
      *executor = std::make_unique<CudaGraphExecutor>(spec, std::move(model), device);
      return Status::Ok();
    }
#endif
    *executor = std::make_unique<EagerExecutor>(spec, std::move(model), device);
    return Status::Ok();
  } catch (const std::exception& error) {
    return Internal("model '" + spec.name + "': creating the executor on " + options.device +
                    " failed: " + ExceptionMessage(error));
  }
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
