#include "graphserve/server/observability/gpu_monitor.h"

#include <dlfcn.h>

#include <cstdlib>
#include <sstream>
#include <utility>

namespace graphserve {
namespace {

// NVML's C interface, as its documentation declares it: the calls graphserve makes and the two
// structures they fill. NVML keeps these signatures stable across driver releases (a changed call
// gets a new _vN name), so they are declared here rather than taken from a header the build would
// need.
using NvmlReturn = int;  // nvmlReturn_t; NVML_SUCCESS is 0
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr unsigned kUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
struct NvmlUtilization {
  unsigned int gpu;  // percent
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;  // NOLINT(runtime/int): NVML's own type
  unsigned long long free;   // NOLINT(runtime/int)
  unsigned long long used;   // NOLINT(runtime/int)
};

template <typename Function>
bool Bind(void* library, const char* name, Function** function, std::string* missing) {
  *function = reinterpret_cast<Function*>(dlsym(library, name));
  if (*function == nullptr) *missing = name;
  return *function != nullptr;
}

// CUDA_VISIBLE_DEVICES' entries: GPU indices or UUIDs (or their prefixes); empty when unset.
std::vector<std::string> VisibleDeviceEntries() {
  std::vector<std::string> entries;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) return entries;
  std::stringstream list(visible);
  for (std::string entry; std::getline(list, entry, ',');) entries.push_back(entry);
  if (entries.empty()) entries.push_back("");  // set but empty: CUDA sees no GPU
  return entries;
}

bool IsVisible(const std::vector<std::string>& entries, unsigned index, const std::string& uuid) {
  if (entries.empty()) return true;
  for (const std::string& entry : entries) {
    if (entry.empty()) continue;
    if (entry.rfind("GPU-", 0) == 0 || entry.rfind("MIG-", 0) == 0) {
      if (uuid.rfind(entry, 0) == 0) return true;
    } else if (entry.find_first_not_of("0123456789") == std::string::npos && std::stoul(entry) == index) {
      return true;
    }
  }
  return false;
}

}  // namespace

struct GpuMonitor::Nvml {
  void* library = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*device_count)(unsigned*) = nullptr;
  NvmlReturn (*device_by_index)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*uuid)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*power)(NvmlDevice, unsigned*) = nullptr;             // mW
  NvmlReturn (*power_limit)(NvmlDevice, unsigned*) = nullptr;       // mW
  NvmlReturn (*energy)(NvmlDevice, unsigned long long*) = nullptr;  // NOLINT(runtime/int); mJ
  bool initialised = false;

  ~Nvml() {
    if (initialised) shutdown();
    if (library != nullptr) dlclose(library);
  }
};

struct GpuMonitor::Gpu {
  NvmlDevice device;
  std::string uuid;
  // The energy counter at Open (mJ, since the driver loaded): Triton reports energy since it started.
  std::optional<unsigned long long> energy_at_open;  // NOLINT(runtime/int)
};

std::unique_ptr<GpuMonitor> GpuMonitor::Open(const std::string& library, std::string* why) {
  auto nvml = std::make_unique<Nvml>();
  nvml->library = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (nvml->library == nullptr) {
    const char* error = dlerror();
    *why = "cannot open " + library + ": " + (error != nullptr ? error : "unknown error");
    return nullptr;
  }
  std::string missing;
  void* lib = nvml->library;
  if (!Bind(lib, "nvmlInit_v2", &nvml->init, &missing) ||
      !Bind(lib, "nvmlShutdown", &nvml->shutdown, &missing) ||
      !Bind(lib, "nvmlErrorString", &nvml->error_string, &missing) ||
      !Bind(lib, "nvmlDeviceGetCount_v2", &nvml->device_count, &missing) ||
      !Bind(lib, "nvmlDeviceGetHandleByIndex_v2", &nvml->device_by_index, &missing) ||
      !Bind(lib, "nvmlDeviceGetUUID", &nvml->uuid, &missing) ||
      !Bind(lib, "nvmlDeviceGetUtilizationRates", &nvml->utilization, &missing) ||
      !Bind(lib, "nvmlDeviceGetMemoryInfo", &nvml->memory, &missing) ||
      !Bind(lib, "nvmlDeviceGetPowerUsage", &nvml->power, &missing) ||
      !Bind(lib, "nvmlDeviceGetPowerManagementLimit", &nvml->power_limit, &missing) ||
      !Bind(lib, "nvmlDeviceGetTotalEnergyConsumption", &nvml->energy, &missing)) {
    *why = library + " has no " + missing;
    return nullptr;
  }
  if (const NvmlReturn status = nvml->init(); status != kNvmlSuccess) {
    *why = std::string("nvmlInit failed: ") + nvml->error_string(status);
    return nullptr;
  }
  nvml->initialised = true;
  unsigned count = 0;
  if (const NvmlReturn status = nvml->device_count(&count); status != kNvmlSuccess) {
    *why = std::string("nvmlDeviceGetCount failed: ") + nvml->error_string(status);
    return nullptr;
  }
  const std::vector<std::string> visible = VisibleDeviceEntries();
  std::vector<Gpu> gpus;
  for (unsigned index = 0; index < count; ++index) {
    Gpu gpu{};
    char uuid[kUuidBufferSize] = {};
    if (nvml->device_by_index(index, &gpu.device) != kNvmlSuccess ||
        nvml->uuid(gpu.device, uuid, kUuidBufferSize) != kNvmlSuccess) {
      continue;  // a GPU NVML cannot name (lost, or not ours to see) is left out
    }
    gpu.uuid = uuid;
    if (!IsVisible(visible, index, gpu.uuid)) continue;
    unsigned long long energy = 0;  // NOLINT(runtime/int)
    if (nvml->energy(gpu.device, &energy) == kNvmlSuccess) gpu.energy_at_open = energy;
    gpus.push_back(std::move(gpu));
  }
  if (gpus.empty()) {
    *why = "NVML reports " + std::to_string(count) + " GPU(s), none of them visible to CUDA";
    return nullptr;
  }
  return std::unique_ptr<GpuMonitor>(new GpuMonitor(std::move(nvml), std::move(gpus)));
}

GpuMonitor::GpuMonitor(std::unique_ptr<Nvml> nvml, std::vector<Gpu> gpus)
    : nvml_(std::move(nvml)), gpus_(std::move(gpus)) {}

GpuMonitor::~GpuMonitor() = default;

size_t GpuMonitor::gpu_count() const { return gpus_.size(); }

std::vector<GpuReading> GpuMonitor::Read() const {
  std::vector<GpuReading> readings;
  readings.reserve(gpus_.size());
  for (const Gpu& gpu : gpus_) {
    GpuReading reading;
    reading.uuid = gpu.uuid;
    NvmlUtilization utilization{};
    if (nvml_->utilization(gpu.device, &utilization) == kNvmlSuccess) {
      reading.utilization = utilization.gpu / 100.0;
    }
    NvmlMemory memory{};
    if (nvml_->memory(gpu.device, &memory) == kNvmlSuccess) {
      reading.memory_total_bytes = static_cast<double>(memory.total);
      reading.memory_used_bytes = static_cast<double>(memory.used);
    }
    unsigned milliwatts = 0;
    if (nvml_->power(gpu.device, &milliwatts) == kNvmlSuccess) reading.power_watts = milliwatts / 1000.0;
    if (nvml_->power_limit(gpu.device, &milliwatts) == kNvmlSuccess) {
      reading.power_limit_watts = milliwatts / 1000.0;
    }
    unsigned long long energy = 0;  // NOLINT(runtime/int)
    if (gpu.energy_at_open && nvml_->energy(gpu.device, &energy) == kNvmlSuccess &&
        energy >= *gpu.energy_at_open) {
      reading.energy_joules = static_cast<double>(energy - *gpu.energy_at_open) / 1000.0;
    }
    readings.push_back(std::move(reading));
  }
  return readings;
}

}  // namespace graphserve
