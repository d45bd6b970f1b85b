#include "graphserve/server/grpc/cuda_driver.h"

#include <dlfcn.h>

#include <spdlog/spdlog.h>

#include <cstring>

namespace graphserve {
namespace {

// The driver API's types, as cuda.h declares them: the calls below keep these signatures under the
// exported names bound here (cuda.h maps the plain names of several to these _v2 ones), so they are
// declared here rather than taken from a header the build would need.
using CuResult = int;  // CUresult; CUDA_SUCCESS is 0
using CuDevice = int;
using CuContext = void*;
using CuDevicePointer = unsigned long long;  // NOLINT(runtime/int): CUdeviceptr on 64-bit hosts
using CuStream = void*;                      // null: the legacy default stream
struct CuIpcMemHandle {
  char reserved[CudaDriver::kIpcHandleBytes];
};
constexpr CuResult kCudaSuccess = 0;
constexpr unsigned kIpcLazyEnablePeerAccess = 0x1;  // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS

template <typename Function>
bool Bind(void* library, const char* name, Function** function, std::string* missing) {
  *function = reinterpret_cast<Function*>(dlsym(library, name));
  if (*function == nullptr) *missing = name;
  return *function != nullptr;
}

}  // namespace

struct CudaDriver::Api {
  void* library = nullptr;
  CuResult (*init)(unsigned) = nullptr;
  CuResult (*error_name)(CuResult, const char**) = nullptr;
  CuResult (*error_string)(CuResult, const char**) = nullptr;
  CuResult (*device_count)(int*) = nullptr;
  CuResult (*device_get)(CuDevice*, int) = nullptr;
  CuResult (*primary_retain)(CuContext*, CuDevice) = nullptr;
  CuResult (*primary_release)(CuDevice) = nullptr;
  CuResult (*set_current)(CuContext) = nullptr;
  CuResult (*ipc_open)(CuDevicePointer*, CuIpcMemHandle, unsigned) = nullptr;
  CuResult (*ipc_close)(CuDevicePointer) = nullptr;
  CuResult (*address_range)(CuDevicePointer*, size_t*, CuDevicePointer) = nullptr;
  CuResult (*copy_to_host)(void*, CuDevicePointer, size_t) = nullptr;
  CuResult (*copy_to_device)(CuDevicePointer, const void*, size_t) = nullptr;
  CuResult (*stream_synchronize)(CuStream) = nullptr;

  ~Api() {
    // The driver stays initialised for the process: there is no cuInit's counterpart to call.
    if (library != nullptr) dlclose(library);
  }
};

CudaDriver::CudaDriver() : api_(std::make_unique<Api>()) {}
CudaDriver::~CudaDriver() = default;

std::shared_ptr<CudaDriver> CudaDriver::Open(const std::string& library, std::string* why) {
  std::shared_ptr<CudaDriver> driver(new CudaDriver());
  Api& api = *driver->api_;
  api.library = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api.library == nullptr) {
    const char* error = dlerror();
    *why = "cannot open " + library + ": " + (error != nullptr ? error : "unknown error");
    return nullptr;
  }
  std::string missing;
  void* lib = api.library;
  if (!Bind(lib, "cuInit", &api.init, &missing) || !Bind(lib, "cuGetErrorName", &api.error_name, &missing) ||
      !Bind(lib, "cuGetErrorString", &api.error_string, &missing) ||
      !Bind(lib, "cuDeviceGetCount", &api.device_count, &missing) ||
      !Bind(lib, "cuDeviceGet", &api.device_get, &missing) ||
      !Bind(lib, "cuDevicePrimaryCtxRetain", &api.primary_retain, &missing) ||
      !Bind(lib, "cuDevicePrimaryCtxRelease_v2", &api.primary_release, &missing) ||
      !Bind(lib, "cuCtxSetCurrent", &api.set_current, &missing) ||
      !Bind(lib, "cuIpcOpenMemHandle_v2", &api.ipc_open, &missing) ||
      !Bind(lib, "cuIpcCloseMemHandle", &api.ipc_close, &missing) ||
      !Bind(lib, "cuMemGetAddressRange_v2", &api.address_range, &missing) ||
      !Bind(lib, "cuMemcpyDtoH_v2", &api.copy_to_host, &missing) ||
      !Bind(lib, "cuMemcpyHtoD_v2", &api.copy_to_device, &missing) ||
      !Bind(lib, "cuStreamSynchronize", &api.stream_synchronize, &missing)) {
    *why = library + " has no " + missing;
    return nullptr;
  }
  if (const CuResult result = api.init(0); result != kCudaSuccess) {
    *why = "cuInit failed: " + driver->ErrorText(result);
    return nullptr;
  }
  if (const CuResult result = api.device_count(&driver->device_count_); result != kCudaSuccess) {
    *why = "cuDeviceGetCount failed: " + driver->ErrorText(result);
    return nullptr;
  }
  return driver;
}

std::string CudaDriver::ErrorText(int result) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api_->error_name(result, &name) != kCudaSuccess || name == nullptr) name = "unknown CUDA error";
  if (api_->error_string(result, &text) != kCudaSuccess || text == nullptr) text = "";
  return std::string(name) + (*text != '\0' ? std::string(": ") + text : "") + " (" + std::to_string(result) +
         ")";
}

int CudaDriver::MakeCurrent(void* context) const { return api_->set_current(context); }

Status CudaDriver::OpenIpcHandle(const std::string& handle, int64_t device_id, uint64_t byte_size,
                                 std::unique_ptr<CudaIpcMemory>* memory) {
  if (handle.size() != kIpcHandleBytes) {
    return InvalidArgument("raw_handle: " + std::to_string(handle.size()) +
                           " bytes; a cudaIpcMemHandle_t is " + std::to_string(kIpcHandleBytes));
  }
  if (device_id < 0 || device_id >= device_count_) {
    return InvalidArgument("device_id: " + std::to_string(device_id) +
                           " is no CUDA device of this server (it has " + std::to_string(device_count_) +
                           ", numbered from 0)");
  }
  const Api& api = *api_;
  CuDevice device = 0;
  CuContext context = nullptr;
  CuResult result = api.device_get(&device, static_cast<int>(device_id));
  if (result == kCudaSuccess) result = api.primary_retain(&context, device);
  if (result != kCudaSuccess) {
    spdlog::warn("CUDA shared memory: device {} has no usable context: {}", device_id, ErrorText(result));
    return Unavailable("device_id: CUDA device " + std::to_string(device_id) + " cannot be used now");
  }
  CuIpcMemHandle ipc{};
  std::memcpy(ipc.reserved, handle.data(), kIpcHandleBytes);
  CuDevicePointer pointer = 0;
  result = api.set_current(context);
  if (result == kCudaSuccess) result = api.ipc_open(&pointer, ipc, kIpcLazyEnablePeerAccess);
  if (result != kCudaSuccess) {
    api.primary_release(device);
    return InvalidArgument("raw_handle: the CUDA driver cannot open it on device " +
                           std::to_string(device_id) + " (" + ErrorText(result) +
                           "); it must be a cudaIpcMemHandle_t of another process's live allocation");
  }
  // From here the memory closes itself, should the size check refuse it.
  std::unique_ptr<CudaIpcMemory> opened(
      new CudaIpcMemory(shared_from_this(), static_cast<int>(device_id), context, pointer));
  CuDevicePointer base = 0;
  size_t allocation = 0;
  result = api.address_range(&base, &allocation, pointer);
  if (result != kCudaSuccess) {
    spdlog::warn("CUDA shared memory: no address range for an opened handle: {}", ErrorText(result));
    return InvalidArgument("raw_handle: the CUDA driver tells no size for the allocation it names");
  }
  // The handle names a whole allocation: the opened pointer is its start.
  const uint64_t available = static_cast<uint64_t>(allocation) - (pointer - base);
  if (byte_size > available) {
    return InvalidArgument("byte_size: " + std::to_string(byte_size) + " bytes, more than the " +
                           std::to_string(available) + " of the allocation the handle names");
  }
  *memory = std::move(opened);
  return Status::Ok();
}

CudaIpcMemory::~CudaIpcMemory() {
  const CudaDriver::Api& api = *driver_->api_;
  CuResult result = api.set_current(context_);
  if (result == kCudaSuccess) result = api.ipc_close(pointer_);
  if (result != kCudaSuccess) {
    spdlog::warn("CUDA shared memory: closing an IPC handle on device {} failed: {}", device_,
                 driver_->ErrorText(result));
  }
  CuDevice device = 0;
  if (api.device_get(&device, device_) == kCudaSuccess) api.primary_release(device);
}

Status CudaIpcMemory::CopyToHost(uint64_t offset, size_t bytes, char* to) const {
  const CudaDriver::Api& api = *driver_->api_;
  CuResult result = driver_->MakeCurrent(context_);
  // From device to pageable host memory the copy is done when the call returns.
  if (result == kCudaSuccess) result = api.copy_to_host(to, pointer_ + offset, bytes);
  if (result == kCudaSuccess) return Status::Ok();
  spdlog::warn("CUDA shared memory: copy of {} bytes from device {} failed: {}", bytes, device_,
               driver_->ErrorText(result));
  return Internal("the copy out of CUDA device " + std::to_string(device_) + " failed");
}

Status CudaIpcMemory::CopyFromHost(uint64_t offset, const char* from, size_t bytes) const {
  const CudaDriver::Api& api = *driver_->api_;
  CuResult result = driver_->MakeCurrent(context_);
  if (result == kCudaSuccess) result = api.copy_to_device(pointer_ + offset, from, bytes);
  // From pageable host memory the call may return before the bytes reach the device; the copy ran on
  // the legacy default stream, so waiting for that stream waits for it.
  if (result == kCudaSuccess) result = api.stream_synchronize(nullptr);
  if (result == kCudaSuccess) return Status::Ok();
  spdlog::warn("CUDA shared memory: copy of {} bytes to device {} failed: {}", bytes, device_,
               driver_->ErrorText(result));
  return Internal("the copy into CUDA device " + std::to_string(device_) + " failed");
}

}  // namespace graphserve
