#pragma once
// Triton's shared-memory extensions: the regions clients register by name, which requests then name
// for their inputs and outputs instead of carrying the tensors' bytes. A system region is a mapping
// (shm_open + mmap) of part of a POSIX shared-memory object the client created; a CUDA region is
// device memory of the client's, opened from the cudaIpcMemHandle_t it sent (cuda_driver.h) and
// copied to and from the host as requests read and write it. A request reaches a region only through
// the name it was registered under, as in Triton; system and CUDA regions share one set of names, the
// name rules and the bounds.
//
// Bounds: at most `max_regions` regions registered and `max_mapped_bytes` of them mapped at once; a
// region unregistered while a request still uses it stays mapped, and counted, until that request
// lets go. A key is a POSIX shared-memory name ('/' and 1 to 255 more characters, no other '/', no
// control characters, not "." or ".."), so it can name nothing but an object under /dev/shm.
// Ownership: a region's mapping is shared by the registry and every SharedMemorySpan taken of it and
// unmapped (or its handle closed) when the last of them lets go, so unregistering while a request
// reads or writes it is safe.
// Copies into and out of a system region survive a client that shrinks its object meanwhile: touching
// the pages that vanished raises SIGBUS, which the copy turns into an error instead of a crash (the
// handler is installed with the first registry; other SIGBUS faults go on to the action installed
// before it).
// Thread safety: every method may be called from any thread. Errors: INVALID_ARGUMENT naming the
// field (`name`, `key`, `raw_handle`, `device_id`, `offset`, `byte_size`), ALREADY_EXISTS for a name in
// use, NOT_FOUND for a key or region that does not exist, RESOURCE_EXHAUSTED past the bounds (or when
// they are 0: shared memory off).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graphserve/engine/status.h"
#include "graphserve/server/common/thread_annotations.h"

namespace graphserve {

class CudaDriver;

struct SharedMemoryLimits {
  // Regions registered at once (--max-shared-memory-regions); 0 turns shared memory off.
  size_t max_regions = 256;
  // The regions' byte sizes added up, unregistered ones still in use included
  // (--max-shared-memory-bytes).
  uint64_t max_mapped_bytes = uint64_t{4} << 30;
};

enum class SharedMemoryKind { kSystem, kCuda };

// What {System,Cuda}SharedMemoryStatus report of a region: as registered.
struct SharedMemoryRegionStatus {
  SharedMemoryKind kind = SharedMemoryKind::kSystem;
  std::string name;
  std::string key;      // system regions
  uint64_t offset = 0;  // system regions
  uint64_t byte_size = 0;
  int64_t device_id = 0;  // CUDA regions
};

// Whether the registry serves CUDA regions: with the driver it opens their handles with, or without
// it, why not (shown to the client that tries, after "CUDA shared memory needs a CUDA device: ").
struct CudaSharedMemoryOptions {
  std::shared_ptr<CudaDriver> driver;
  std::string unavailable = "this server has no CUDA driver";
};

class SharedMemoryMapping;

// Part of a registered region that one tensor of one request reads or writes. Holds the region's
// mapping until it is destroyed. Value type: copies share the mapping; thread-compatible.
class SharedMemorySpan {
 public:
  SharedMemorySpan() = default;

  size_t size() const { return size_; }
  const std::string& region() const;

  // The span's bytes into `bytes` (resized to size()). INVALID_ARGUMENT naming the region when the
  // client's object no longer covers them; INTERNAL when a CUDA copy fails.
  Status ReadInto(std::string* bytes) const;
  // `bytes` (at most size()) into the start of the span. INVALID_ARGUMENT naming the region when the
  // client's object no longer covers them; the bytes before the failure are written.
  Status Write(const std::string& bytes) const;

 private:
  friend class SharedMemoryRegistry;
  std::shared_ptr<const SharedMemoryMapping> mapping_;
  uint64_t offset_ = 0;  // in the region
  size_t size_ = 0;
};

class SharedMemoryRegistry {
 public:
  explicit SharedMemoryRegistry(SharedMemoryLimits limits = {}, CudaSharedMemoryOptions cuda = {});
  ~SharedMemoryRegistry();

  SharedMemoryRegistry(const SharedMemoryRegistry&) = delete;
  SharedMemoryRegistry& operator=(const SharedMemoryRegistry&) = delete;

  const SharedMemoryLimits& limits() const { return limits_; }
  // Whether CUDA regions can be registered (the registry has a CUDA driver).
  bool serves_cuda() const { return cuda_.driver != nullptr; }

  // Maps `byte_size` bytes at `offset` of the shared-memory object `key` as region `name`. The object
  // must exist (NOT_FOUND), be open to the server for reading and writing (INVALID_ARGUMENT with the
  // system's reason) and hold offset + byte_size bytes (INVALID_ARGUMENT).
  Status Register(const std::string& name, const std::string& key, uint64_t offset, uint64_t byte_size)
      EXCLUDES(mutex_);
  // Opens `raw_handle` (a cudaIpcMemHandle_t's 64 bytes) on CUDA device `device_id` as region `name`
  // of `byte_size` bytes, under the same name rules and bounds. INVALID_ARGUMENT saying CUDA shared
  // memory needs a CUDA device where the registry has no driver; otherwise CudaDriver::OpenIpcHandle's
  // refusals (a bad handle, a device out of range, an allocation smaller than byte_size).
  Status RegisterCuda(const std::string& name, const std::string& raw_handle, int64_t device_id,
                      uint64_t byte_size) EXCLUDES(mutex_);
  // Forgets region `name` of kind `kind`, or every region of that kind when `name` is empty; a name
  // not registered as that kind is no error (Triton's answer too). Requests holding a span of it keep
  // their mapping until they finish.
  void Unregister(const std::string& name, SharedMemoryKind kind = SharedMemoryKind::kSystem)
      EXCLUDES(mutex_);
  // The status of region `name`, or of every region of kind `kind` (by name) when `name` is empty;
  // NOT_FOUND for a name not registered as that kind.
  Status GetStatus(const std::string& name, std::vector<SharedMemoryRegionStatus>* regions,
                   SharedMemoryKind kind = SharedMemoryKind::kSystem) const EXCLUDES(mutex_);
  bool Contains(const std::string& name) const EXCLUDES(mutex_);

  // The `byte_size` bytes at `offset` of region `name`, of either kind: NOT_FOUND when no such region is
  // registered, INVALID_ARGUMENT when offset + byte_size pass the region's end.
  Status Span(const std::string& name, uint64_t offset, uint64_t byte_size, SharedMemorySpan* span) const
      EXCLUDES(mutex_);

  // Bytes mapped now: registered regions and unregistered ones still in use.
  uint64_t mapped_bytes() const;

 private:
  // The checks every registration passes before anything is opened: the name, that it is new, and
  // the bounds with `byte_size` more.
  Status Admit(const std::string& name, uint64_t byte_size) const REQUIRES(mutex_);
  void Add(std::shared_ptr<const SharedMemoryMapping> mapping) REQUIRES(mutex_);

  const SharedMemoryLimits limits_;
  const CudaSharedMemoryOptions cuda_;
  // Shared with every mapping, which gives its bytes back as it is unmapped, after the registry if
  // need be.
  const std::shared_ptr<std::atomic<uint64_t>> mapped_bytes_;
  mutable Mutex mutex_;
  std::map<std::string, std::shared_ptr<const SharedMemoryMapping>> regions_ GUARDED_BY(mutex_);
};

}  // namespace graphserve
