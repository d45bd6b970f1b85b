#include "graphserve/server/grpc/shared_memory_registry.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>
#include <system_error>
#include <utility>

#include "graphserve/server/grpc/cuda_driver.h"

namespace graphserve {

// A registered region: its bytes given back to the registry's count when the registry and the last
// span let go of it. Subclasses copy in and out of what they opened, within bounds their caller
// checked.
class SharedMemoryMapping {
 public:
  SharedMemoryMapping(SharedMemoryRegionStatus status, std::shared_ptr<std::atomic<uint64_t>> mapped_bytes)
      : status_(std::move(status)), mapped_bytes_(std::move(mapped_bytes)) {}
  virtual ~SharedMemoryMapping() { mapped_bytes_->fetch_sub(status_.byte_size); }
  SharedMemoryMapping(const SharedMemoryMapping&) = delete;
  SharedMemoryMapping& operator=(const SharedMemoryMapping&) = delete;

  const SharedMemoryRegionStatus& status() const { return status_; }
  // `bytes` bytes at `offset` of the region into `to`, or from `from` into the region.
  virtual Status Read(uint64_t offset, size_t bytes, char* to) const = 0;
  virtual Status Write(uint64_t offset, const char* from, size_t bytes) const = 0;

 private:
  const SharedMemoryRegionStatus status_;
  const std::shared_ptr<std::atomic<uint64_t>> mapped_bytes_;
};

namespace {

// Longest names: a region's is quoted in logs and answers; a key's part after '/' is a file name
// under /dev/shm (NAME_MAX).
constexpr size_t kMaxNameBytes = 256;
constexpr size_t kMaxKeyNameBytes = 255;

std::string SystemError(int error) { return std::system_category().message(error); }

bool HasControlCharacter(const std::string& text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  }
  return false;
}

Status CheckName(const std::string& name) {
  if (name.empty()) return InvalidArgument("name: a region needs a name");
  if (name.size() > kMaxNameBytes) {
    return InvalidArgument("name: " + std::to_string(name.size()) + " bytes, at most " +
                           std::to_string(kMaxNameBytes));
  }
  if (HasControlCharacter(name)) return InvalidArgument("name: holds a control character");
  return Status::Ok();
}

// A POSIX shared-memory name, and nothing shm_open could resolve outside /dev/shm.
Status CheckKey(const std::string& key) {
  const std::string rule = "a POSIX shared-memory name is '/' followed by 1 to " +
                           std::to_string(kMaxKeyNameBytes) + " characters, none of them '/'";
  if (key.size() < 2 || key.size() > kMaxKeyNameBytes + 1 || key[0] != '/') {
    return InvalidArgument("key: " + std::to_string(key.size()) + " bytes" +
                           (key.empty() || key[0] == '/' ? "" : " not starting with '/'") + "; " + rule);
  }
  // A NUL would end the name early for shm_open; and the key is quoted below.
  if (HasControlCharacter(key)) return InvalidArgument("key: holds a control character; " + rule);
  if (key.find('/', 1) != std::string::npos) return InvalidArgument("key: '" + key + "' holds a second '/'; " + rule);
  if (key == "/." || key == "/..") return InvalidArgument("key: '" + key + "' names a folder; " + rule);
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------------
// Copies that survive a shrunk object. A client may truncate its object while it is registered; the
// pages past the new end then raise SIGBUS when touched. The copy marks its thread, and the handler
// jumps back out of the copy instead of letting the signal end the process.

// Initial-exec: the handler reads it on the faulting thread without the lazy allocation a dynamic
// TLS model may do (malloc is no function for a signal handler).
__attribute__((tls_model("initial-exec"))) thread_local sigjmp_buf* t_bus_error_exit = nullptr;
struct sigaction g_previous_bus_action;

void OnBusError(int signal, siginfo_t* info, void*) {
  if (t_bus_error_exit != nullptr) siglongjmp(*t_bus_error_exit, 1);
  // Not one of our copies: the action from before ours takes over. A fault runs its access again
  // under it; a signal sent by kill() must be raised again.
  sigaction(SIGBUS, &g_previous_bus_action, nullptr);
  if (info->si_code <= 0) raise(signal);
}

void InstallBusErrorHandler() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action {};
    action.sa_sigaction = OnBusError;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGBUS, &action, &g_previous_bus_action) != 0) {
      spdlog::error("shared memory: no SIGBUS handler ({}): a client that shrinks a registered object "
                    "can end the process", SystemError(errno));
    }
  });
}

// memcpy, false when a page it touched was gone (SIGBUS). The signal mask is saved with the jump
// point, so that SIGBUS, blocked while its handler runs, is unblocked again after the jump.
bool CopyCatchingBusError(char* to, const char* from, size_t bytes) {
  sigjmp_buf exit_point;
  if (sigsetjmp(exit_point, 1) != 0) {
    t_bus_error_exit = nullptr;
    return false;
  }
  t_bus_error_exit = &exit_point;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(to, from, bytes);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_bus_error_exit = nullptr;
  return true;
}

Status ShrunkObject(const SharedMemoryRegionStatus& region) {
  return InvalidArgument("shared-memory region '" + region.name + "': object '" + region.key +
                         "' no longer holds the region's bytes (it was truncated after registering)");
}

// One mmap of a client's object, unmapped when the last holder lets go.
class SystemMapping : public SharedMemoryMapping {
 public:
  SystemMapping(SharedMemoryRegionStatus status, void* base, size_t length, char* data,
                std::shared_ptr<std::atomic<uint64_t>> mapped_bytes)
      : SharedMemoryMapping(std::move(status), std::move(mapped_bytes)),
        base_(base),
        length_(length),
        data_(data) {}
  ~SystemMapping() override { munmap(base_, length_); }

  Status Read(uint64_t offset, size_t bytes, char* to) const override {
    if (bytes == 0 || CopyCatchingBusError(to, data_ + offset, bytes)) return Status::Ok();
    return ShrunkObject(status());
  }
  Status Write(uint64_t offset, const char* from, size_t bytes) const override {
    if (bytes == 0 || CopyCatchingBusError(data_ + offset, from, bytes)) return Status::Ok();
    return ShrunkObject(status());
  }

 private:
  // mmap's offset must be a multiple of the page size: the mapping starts at the page holding the
  // region's first byte.
  void* const base_;
  const size_t length_;
  char* const data_;  // the region's first byte (the registered offset of the object)
};

// A client's device memory, opened from its IPC handle; copies go through the host (correctness
// first: the batch's tensors are host tensors at this boundary).
class CudaMapping : public SharedMemoryMapping {
 public:
  CudaMapping(SharedMemoryRegionStatus status, std::unique_ptr<CudaIpcMemory> memory,
              std::shared_ptr<std::atomic<uint64_t>> mapped_bytes)
      : SharedMemoryMapping(std::move(status), std::move(mapped_bytes)), memory_(std::move(memory)) {}

  Status Read(uint64_t offset, size_t bytes, char* to) const override {
    return bytes == 0 ? Status::Ok() : Named(memory_->CopyToHost(offset, bytes, to));
  }
  Status Write(uint64_t offset, const char* from, size_t bytes) const override {
    return bytes == 0 ? Status::Ok() : Named(memory_->CopyFromHost(offset, from, bytes));
  }

 private:
  Status Named(const Status& status) const {
    if (status.ok()) return status;
    return Status(status.code(),
                  "CUDA shared-memory region '" + this->status().name + "': " + status.message());
  }
  const std::unique_ptr<CudaIpcMemory> memory_;
};

const char* KindName(SharedMemoryKind kind) { return kind == SharedMemoryKind::kCuda ? "CUDA" : "system"; }

}  // namespace

const std::string& SharedMemorySpan::region() const {
  static const std::string kNone;
  return mapping_ ? mapping_->status().name : kNone;
}

Status SharedMemorySpan::ReadInto(std::string* bytes) const {
  bytes->resize(size_);
  return size_ == 0 ? Status::Ok() : mapping_->Read(offset_, size_, bytes->data());
}

Status SharedMemorySpan::Write(const std::string& bytes) const {
  if (bytes.size() > size_) {
    return InvalidArgument("shared-memory region '" + region() + "': " + std::to_string(bytes.size()) +
                           " bytes do not fit in the " + std::to_string(size_) + " given");
  }
  return bytes.empty() ? Status::Ok() : mapping_->Write(offset_, bytes.data(), bytes.size());
}

SharedMemoryRegistry::SharedMemoryRegistry(SharedMemoryLimits limits, CudaSharedMemoryOptions cuda)
    : limits_(limits), cuda_(std::move(cuda)), mapped_bytes_(std::make_shared<std::atomic<uint64_t>>(0)) {
  InstallBusErrorHandler();
}

SharedMemoryRegistry::~SharedMemoryRegistry() = default;

Status SharedMemoryRegistry::Register(const std::string& name, const std::string& key, uint64_t offset,
                                      uint64_t byte_size) {
  Status status = CheckName(name);
  if (status.ok()) status = CheckKey(key);
  if (!status.ok()) return status;
  if (byte_size == 0) return InvalidArgument("byte_size: 0; a region holds at least one byte");
  if (offset > std::numeric_limits<uint64_t>::max() - byte_size ||
      byte_size > std::numeric_limits<size_t>::max()) {
    return InvalidArgument("offset: " + std::to_string(offset) + " + byte_size " + std::to_string(byte_size) +
                           " overflow");
  }
  MutexLock lock(&mutex_);
  status = Admit(name, byte_size);
  if (!status.ok()) return status;

  const int fd = shm_open(key.c_str(), O_RDWR, 0);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) {
      return NotFound("key: no shared-memory object '" + key + "' exists; create it (shm_open) before registering");
    }
    return InvalidArgument("key: shared-memory object '" + key + "' cannot be opened for reading and writing: " +
                           SystemError(error));
  }
  struct stat object {};
  if (fstat(fd, &object) != 0 || !S_ISREG(object.st_mode)) {
    close(fd);
    return InvalidArgument("key: '" + key + "' is not a shared-memory object");
  }
  const uint64_t object_size = static_cast<uint64_t>(object.st_size);
  if (offset + byte_size > object_size) {
    close(fd);
    return InvalidArgument("byte_size: offset " + std::to_string(offset) + " + byte_size " +
                           std::to_string(byte_size) + " pass the end of object '" + key + "' (" +
                           std::to_string(object_size) + " bytes)");
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t map_start = offset - offset % page;
  const size_t length = static_cast<size_t>(offset - map_start + byte_size);
  void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(map_start));
  const int map_error = errno;
  close(fd);  // the mapping keeps the object
  if (base == MAP_FAILED) {
    spdlog::warn("shared-memory region '{}': mmap of {} bytes of '{}' failed: {}", name, length, key,
                 SystemError(map_error));
    return ResourceExhausted("byte_size: the server could not map " + std::to_string(byte_size) + " bytes of '" +
                             key + "'");
  }
  mapped_bytes_->fetch_add(byte_size);
  SharedMemoryRegionStatus region{SharedMemoryKind::kSystem, name, key, offset, byte_size, 0};
  Add(std::make_shared<const SystemMapping>(region, base, length,
                                            static_cast<char*>(base) + (offset - map_start), mapped_bytes_));
  spdlog::info("system shared-memory region '{}' registered: {} bytes at offset {} of '{}'", name, byte_size,
               offset, key);
  return Status::Ok();
}

Status SharedMemoryRegistry::RegisterCuda(const std::string& name, const std::string& raw_handle,
                                          int64_t device_id, uint64_t byte_size) {
  Status status = CheckName(name);
  if (!status.ok()) return status;
  if (cuda_.driver == nullptr) {
    return InvalidArgument("CUDA shared memory needs a CUDA device: " + cuda_.unavailable +
                           "; register the tensors in system shared memory (SystemSharedMemoryRegister), or "
                           "send them in the request");
  }
  if (byte_size == 0) return InvalidArgument("byte_size: 0; a region holds at least one byte");
  // Spans are size_t copies from the region's start.
  if (byte_size > std::numeric_limits<size_t>::max()) {
    return InvalidArgument("byte_size: " + std::to_string(byte_size) + " overflows this host's sizes");
  }
  MutexLock lock(&mutex_);
  status = Admit(name, byte_size);
  if (!status.ok()) return status;
  std::unique_ptr<CudaIpcMemory> memory;
  status = cuda_.driver->OpenIpcHandle(raw_handle, device_id, byte_size, &memory);
  if (!status.ok()) return status;
  mapped_bytes_->fetch_add(byte_size);
  SharedMemoryRegionStatus region{SharedMemoryKind::kCuda, name, "", 0, byte_size, device_id};
  Add(std::make_shared<const CudaMapping>(region, std::move(memory), mapped_bytes_));
  spdlog::info("CUDA shared-memory region '{}' registered: {} bytes on device {}", name, byte_size,
               device_id);
  return Status::Ok();
}

Status SharedMemoryRegistry::Admit(const std::string& name, uint64_t byte_size) const {
  if (limits_.max_regions == 0 || limits_.max_mapped_bytes == 0) {
    return ResourceExhausted(
        "shared memory is turned off on this server (--max-shared-memory-regions or "
        "--max-shared-memory-bytes is 0); send tensors in the request");
  }
  const auto existing = regions_.find(name);
  if (existing != regions_.end()) {
    return Status(StatusCode::kAlreadyExists,
                  "name: " + std::string(KindName(existing->second->status().kind)) +
                      " shared-memory region '" + name + "' is already registered; unregister it first");
  }
  if (regions_.size() >= limits_.max_regions) {
    return ResourceExhausted(
        "name: " + std::to_string(regions_.size()) +
        " regions are registered, the most this server takes (--max-shared-memory-regions); "
        "unregister one first");
  }
  const uint64_t mapped = mapped_bytes_->load();
  if (byte_size > limits_.max_mapped_bytes || mapped > limits_.max_mapped_bytes - byte_size) {
    return ResourceExhausted(
        "byte_size: " + std::to_string(byte_size) + " bytes more than the " + std::to_string(mapped) +
        " mapped pass the server's " + std::to_string(limits_.max_mapped_bytes) +
        " (--max-shared-memory-bytes; regions still in use count until their requests end)");
  }
  return Status::Ok();
}

void SharedMemoryRegistry::Add(std::shared_ptr<const SharedMemoryMapping> mapping) {
  const std::string name = mapping->status().name;
  regions_.emplace(name, std::move(mapping));
}

void SharedMemoryRegistry::Unregister(const std::string& name, SharedMemoryKind kind) {
  // Mappings are released outside the lock: unmapping a large region takes a while.
  std::vector<std::shared_ptr<const SharedMemoryMapping>> released;
  {
    MutexLock lock(&mutex_);
    for (auto it = regions_.begin(); it != regions_.end();) {
      if ((name.empty() || it->first == name) && it->second->status().kind == kind) {
        released.push_back(std::move(it->second));
        it = regions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const auto& mapping : released) {
    spdlog::info("{} shared-memory region '{}' unregistered{}", KindName(kind), mapping->status().name,
                 mapping.use_count() > 1 ? " (unmapped once the requests using it finish)" : "");
  }
}

Status SharedMemoryRegistry::GetStatus(const std::string& name,
                                       std::vector<SharedMemoryRegionStatus>* regions,
                                       SharedMemoryKind kind) const {
  MutexLock lock(&mutex_);
  if (name.empty()) {
    for (const auto& [region_name, mapping] : regions_) {
      if (mapping->status().kind == kind) regions->push_back(mapping->status());
    }
    return Status::Ok();
  }
  const auto it = regions_.find(name);
  if (it == regions_.end()) {
    return NotFound("name: no " + std::string(KindName(kind)) + " shared-memory region '" + name +
                    "' is registered");
  }
  if (it->second->status().kind != kind) {
    return NotFound("name: region '" + name + "' is registered as " + KindName(it->second->status().kind) +
                    " shared memory, not " + KindName(kind) + " shared memory");
  }
  regions->push_back(it->second->status());
  return Status::Ok();
}

bool SharedMemoryRegistry::Contains(const std::string& name) const {
  MutexLock lock(&mutex_);
  return regions_.count(name) > 0;
}

Status SharedMemoryRegistry::Span(const std::string& name, uint64_t offset, uint64_t byte_size,
                                  SharedMemorySpan* span) const {
  MutexLock lock(&mutex_);
  const auto it = regions_.find(name);
  if (it == regions_.end()) return NotFound("no shared-memory region '" + name + "' is registered");
  const uint64_t region_size = it->second->status().byte_size;
  if (offset > region_size || byte_size > region_size - offset) {
    return InvalidArgument("offset " + std::to_string(offset) + " + byte_size " + std::to_string(byte_size) +
                           " pass the end of region '" + name + "' (" + std::to_string(region_size) + " bytes)");
  }
  span->mapping_ = it->second;
  span->offset_ = offset;
  span->size_ = static_cast<size_t>(byte_size);
  return Status::Ok();
}

uint64_t SharedMemoryRegistry::mapped_bytes() const { return mapped_bytes_->load(); }

}  // namespace graphserve
