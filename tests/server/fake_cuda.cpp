// A stand-in for the driver's libcuda.so.1, for the CUDA shared-memory tests on machines without a
// GPU: two devices whose "device memory" is host memory. A handle is valid when it starts with
// "fake-ipc" followed by the allocation's size (8 bytes, host order); opening it allocates that many
// bytes, byte i holding i % 251. Copies need a current context, as the driver's do.
// FAKE_CUDA_FAIL_INIT=1 makes cuInit fail; FakeCudaOpenHandles() counts the handles open now.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

extern "C" {

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef unsigned long long CUdeviceptr;  // NOLINT(runtime/int): the driver's type
typedef struct {
  char reserved[64];
} CUipcMemHandle;

enum {
  kSuccess = 0,
  kInvalidValue = 1,
  kNotInitialized = 3,
  kNoDevice = 100,
  kInvalidDevice = 101,
  kInvalidContext = 201,
  kMapFailed = 205,
};
}

namespace {

constexpr int kDevices = 2;
char contexts[kDevices];  // a context is the address of its device's byte
std::atomic<bool> initialised{false};
thread_local CUcontext current = nullptr;
std::mutex mutex;
std::map<CUdeviceptr, size_t> allocations;  // open handles: start and size

bool Within(CUdeviceptr pointer, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = allocations.upper_bound(pointer);
  if (it == allocations.begin()) return false;
  --it;
  return pointer - it->first <= it->second && bytes <= it->second - (pointer - it->first);
}

}  // namespace

extern "C" {

CUresult cuInit(unsigned int) {
  const char* fail = getenv("FAKE_CUDA_FAIL_INIT");
  if (fail != nullptr && strcmp(fail, "1") == 0) return kNoDevice;
  initialised = true;
  return kSuccess;
}
CUresult cuGetErrorName(CUresult error, const char** name) {
  switch (error) {
    case kInvalidValue:
      *name = "CUDA_ERROR_INVALID_VALUE";
      return kSuccess;
    case kNoDevice:
      *name = "CUDA_ERROR_NO_DEVICE";
      return kSuccess;
    case kInvalidContext:
      *name = "CUDA_ERROR_INVALID_CONTEXT";
      return kSuccess;
    case kMapFailed:
      *name = "CUDA_ERROR_MAP_FAILED";
      return kSuccess;
    default:
      *name = nullptr;
      return kInvalidValue;
  }
}
CUresult cuGetErrorString(CUresult error, const char** text) {
  *text = error == kNoDevice ? "no CUDA-capable device is detected" : "fake error";
  return kSuccess;
}
CUresult cuDeviceGetCount(int* count) {
  if (!initialised) return kNotInitialized;
  *count = kDevices;
  return kSuccess;
}
CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (ordinal < 0 || ordinal >= kDevices) return kInvalidDevice;
  *device = ordinal;
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  *context = &contexts[device];
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return kSuccess; }
CUresult cuCtxSetCurrent(CUcontext context) {
  current = context;
  return kSuccess;
}
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pointer, CUipcMemHandle handle, unsigned int) {
  if (current == nullptr) return kInvalidContext;
  if (memcmp(handle.reserved, "fake-ipc", 8) != 0) return kMapFailed;
  uint64_t size = 0;
  memcpy(&size, handle.reserved + 8, sizeof(size));
  if (size == 0 || size > (uint64_t{1} << 30)) return kInvalidValue;
  auto* memory = static_cast<unsigned char*>(malloc(size));
  if (memory == nullptr) return kInvalidValue;
  for (uint64_t i = 0; i < size; ++i) memory[i] = static_cast<unsigned char>(i % 251);
  *pointer = reinterpret_cast<CUdeviceptr>(memory);
  std::lock_guard<std::mutex> lock(mutex);
  allocations[*pointer] = size;
  return kSuccess;
}
CUresult cuIpcCloseMemHandle(CUdeviceptr pointer) {
  if (current == nullptr) return kInvalidContext;
  std::lock_guard<std::mutex> lock(mutex);
  if (allocations.erase(pointer) == 0) return kInvalidValue;
  free(reinterpret_cast<void*>(pointer));
  return kSuccess;
}
CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr pointer) {
  std::lock_guard<std::mutex> lock(mutex);
  const auto it = allocations.find(pointer);
  if (it == allocations.end()) return kInvalidValue;
  *base = it->first;
  *size = it->second;
  return kSuccess;
}
CUresult cuMemcpyDtoH_v2(void* to, CUdeviceptr from, size_t bytes) {
  if (current == nullptr) return kInvalidContext;
  if (!Within(from, bytes)) return kInvalidValue;
  memcpy(to, reinterpret_cast<const void*>(from), bytes);
  return kSuccess;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr to, const void* from, size_t bytes) {
  if (current == nullptr) return kInvalidContext;
  if (!Within(to, bytes)) return kInvalidValue;
  memcpy(reinterpret_cast<void*>(to), from, bytes);
  return kSuccess;
}
CUresult cuStreamSynchronize(void*) { return current == nullptr ? kInvalidContext : kSuccess; }

int FakeCudaOpenHandles() {
  std::lock_guard<std::mutex> lock(mutex);
  return static_cast<int>(allocations.size());
}

}  // extern "C"
