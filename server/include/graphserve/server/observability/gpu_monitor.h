#pragma once
// Triton's per-GPU readings (nv_gpu_utilization, nv_gpu_memory_*, nv_gpu_power_*,
// nv_energy_consumption) through NVML, which the NVIDIA driver installs as libnvidia-ml.so.1. The
// library is opened at run time: graphserve has no build dependency on it, and on a machine without
// the driver there is simply no monitor and no GPU series.
// Thread safety: Read may run from concurrent scrapes (NVML's calls are thread-safe). Lifetime: the
// monitor initialises NVML on Open and shuts it down when destroyed.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace graphserve {

// One GPU at one scrape; a reading the GPU does not support (power on some boards) is absent.
struct GpuReading {
  std::string uuid;                   // "GPU-...", the gpu_uuid label
  std::optional<double> utilization;  // share of the last sample period a kernel ran, 0..1
  std::optional<double> memory_total_bytes;
  std::optional<double> memory_used_bytes;
  std::optional<double> power_watts;
  std::optional<double> power_limit_watts;
  std::optional<double> energy_joules;  // consumed since the monitor opened
};

class GpuMonitor {
 public:
  // The NVML library graphserve opens: the driver's, found as the dynamic loader finds libraries.
  static constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";

  // Opens `library`, initialises NVML and picks the GPUs CUDA_VISIBLE_DEVICES leaves visible (by
  // index, in NVML's PCI-bus order, or by UUID or a UUID's prefix; unset: all). nullptr, with `why`
  // saying what failed, when the library is missing, NVML does not initialise or no GPU is left.
  static std::unique_ptr<GpuMonitor> Open(const std::string& library, std::string* why);
  ~GpuMonitor();

  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // Every monitored GPU's readings, now.
  std::vector<GpuReading> Read() const;
  size_t gpu_count() const;

 private:
  struct Nvml;
  struct Gpu;
  GpuMonitor(std::unique_ptr<Nvml> nvml, std::vector<Gpu> gpus);

  std::unique_ptr<Nvml> nvml_;
  std::vector<Gpu> gpus_;
};

}  // namespace graphserve
