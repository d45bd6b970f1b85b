#include "common/descriptor_budget.h"

#include <sys/resource.h>

#include <algorithm>

namespace graphserve {

int OpenFileLimit() {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur == RLIM_INFINITY) return 1 << 20;
  return static_cast<int>(std::min<rlim_t>(files.rlim_cur, 1 << 30));
}

int DescriptorReserve(int limit) { return std::max(32, limit / 16); }

int RestConnectionCap(int limit, int wanted) {
  const int shareable = std::max(0, limit - DescriptorReserve(limit));
  return std::max(8, std::min(wanted, shareable / 2));
}

int GrpcConnectionsPerAddressCap(int limit, int wanted) {
  if (wanted <= 0) return 0;
  const int shareable = std::max(0, limit - DescriptorReserve(limit));
  const int grpc_share = shareable - shareable / 2 - shareable / 8;
  return std::max(1, std::min(wanted, grpc_share / 4));
}

int MetricsConnectionCap(int limit, int wanted) {
  const int shareable = std::max(0, limit - DescriptorReserve(limit));
  return std::min(wanted, std::max(4, shareable / 8));
}

int MetricsHighestDescriptor(int limit) { return limit - DescriptorReserve(limit) / 2; }

}  // namespace graphserve
