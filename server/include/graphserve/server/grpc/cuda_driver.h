#pragma once
// The few CUDA driver calls that CUDA shared memory (Triton's cudaIPC handles) needs: open another
// process's device memory from its IPC handle, and copy between it and host memory. The driver
// library is opened at run time (dlopen), so the server builds and runs unchanged where there is no
// driver, and no gRPC translation unit includes a CUDA header (docs/development/gpu-host.md).
// Ownership: CudaDriver is shared by every CudaIpcMemory opened through it, so the library stays
// loaded until the last of them is closed.
// Thread safety: every method may be called from any thread; each makes the device's primary
// context current on the calling thread before it calls the driver.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "graphserve/engine/status.h"

namespace graphserve {

class CudaIpcMemory;

class CudaDriver : public std::enable_shared_from_this<CudaDriver> {
 public:
  // The driver's library, found as the dynamic loader finds libraries.
  static constexpr const char* kLibrary = "libcuda.so.1";
  // sizeof(cudaIpcMemHandle_t), CU_IPC_HANDLE_SIZE.
  static constexpr size_t kIpcHandleBytes = 64;

  // Opens `library`, binds the calls and initialises the driver; null, with `why` saying what
  // failed, when the library is missing, lacks a call or the driver does not initialise.
  static std::shared_ptr<CudaDriver> Open(const std::string& library, std::string* why);
  ~CudaDriver();
  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

  // CUDA devices this process sees (CUDA_VISIBLE_DEVICES applies).
  int device_count() const { return device_count_; }

  // Opens `handle` (the kIpcHandleBytes bytes of a cudaIpcMemHandle_t made by another process) on
  // device `device_id`; the allocation it names must hold `byte_size` bytes. The handle is untrusted:
  // INVALID_ARGUMENT naming the field (`raw_handle`, `device_id`, `byte_size`) for a handle of the
  // wrong size, a device out of range, a handle the driver cannot open (with the driver's reason) or
  // an allocation smaller than byte_size.
  Status OpenIpcHandle(const std::string& handle, int64_t device_id, uint64_t byte_size,
                       std::unique_ptr<CudaIpcMemory>* memory);

 private:
  friend class CudaIpcMemory;
  struct Api;
  CudaDriver();
  // The driver's name and text for `result`, e.g. "CUDA_ERROR_INVALID_VALUE: invalid argument".
  std::string ErrorText(int result) const;
  // Makes `context` (a retained primary context) current on this thread; the driver's result.
  int MakeCurrent(void* context) const;

  std::unique_ptr<Api> api_;
  int device_count_ = 0;
};

// Device memory of another process, opened from its IPC handle; closed (and the device's primary
// context released) when destroyed. Thread-safe: copies may run from any thread at once.
class CudaIpcMemory {
 public:
  ~CudaIpcMemory();
  CudaIpcMemory(const CudaIpcMemory&) = delete;
  CudaIpcMemory& operator=(const CudaIpcMemory&) = delete;

  int device_id() const { return device_; }

  // The `bytes` bytes at `offset` into `to` (device to host); blocks until they are there. The
  // caller keeps offset + bytes within the byte_size it opened. INTERNAL with the driver's reason
  // when the copy fails.
  Status CopyToHost(uint64_t offset, size_t bytes, char* to) const;
  // `bytes` bytes of `from` into the memory at `offset` (host to device); blocks until they are on
  // the device, so that the client reads them once the answer reaches it.
  Status CopyFromHost(uint64_t offset, const char* from, size_t bytes) const;

 private:
  friend class CudaDriver;
  CudaIpcMemory(std::shared_ptr<const CudaDriver> driver, int device, void* context, uint64_t pointer)
      : driver_(std::move(driver)), device_(device), context_(context), pointer_(pointer) {}

  const std::shared_ptr<const CudaDriver> driver_;
  const int device_;
  void* const context_;     // the device's primary context (CUcontext), retained
  const uint64_t pointer_;  // CUdeviceptr of the opened allocation
};

}  // namespace graphserve
