#include "graphserve/server/common/usable_cores.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <thread>

namespace graphserve {
namespace {

// The quota in cores (1.5 for "150000 100000"); none when unlimited or unreadable.
std::optional<double> QuotaCores(const std::string& cgroup_root) {
  std::ifstream v2(cgroup_root + "/cpu.max");
  if (v2) {
    std::string quota;
    double period = 0;
    if (!(v2 >> quota >> period) || quota == "max" || period <= 0) return std::nullopt;
    try {
      const double cores = std::stod(quota) / period;
      return cores > 0 ? std::optional<double>(cores) : std::nullopt;
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  std::ifstream quota_file(cgroup_root + "/cpu/cpu.cfs_quota_us");
  std::ifstream period_file(cgroup_root + "/cpu/cpu.cfs_period_us");
  double quota = 0, period = 0;
  if (!(quota_file >> quota) || !(period_file >> period) || quota <= 0 || period <= 0) return std::nullopt;
  return quota / period;
}

int AffinityCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

}  // namespace

int UsableCores(const std::string& cgroup_root, int affinity_cores) {
  int cores = std::max(affinity_cores, 1);
  if (const std::optional<double> quota = QuotaCores(cgroup_root)) {
    cores = std::min(cores, std::max(1, static_cast<int>(std::ceil(*quota))));
  }
  return cores;
}

int UsableCores() { return UsableCores("/sys/fs/cgroup", AffinityCores()); }

}  // namespace graphserve
