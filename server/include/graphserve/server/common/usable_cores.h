#pragma once
// How many cores this process may really use, for sizing its threads and deciding whether to
// busy-poll. std::thread::hardware_concurrency counts the host's cores: a container limited to 2
// CPUs on a 64-core node would start threads, and spin them, as if it had 64, and a CPU quota then
// throttles it. Thread safety: reads files only; callable from any thread.
#include <string>

namespace graphserve {

// The CPUs the affinity mask allows (cpusets: Docker's --cpuset-cpus, Kubernetes' static CPU
// manager), capped by the CPU quota of the process's cgroup (Docker's --cpus, a Kubernetes CPU
// limit) rounded up; at least 1.
int UsableCores();

// The same from `affinity_cores` and the cgroup file system mounted at `cgroup_root`: cgroup v2's
// cpu.max ("max PERIOD" or "QUOTA PERIOD"), else v1's cpu/cpu.cfs_quota_us (-1: none) and
// cpu/cpu.cfs_period_us. Files that are missing or unreadable mean no quota.
int UsableCores(const std::string& cgroup_root, int affinity_cores);

}  // namespace graphserve
