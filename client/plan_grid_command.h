#pragma once
// graphserve-cli plan-grid: reads a model's grid (ModelConfig) and its traffic and bucket times
// (/metrics), and prints today's grid against the planner's proposal (grid_planner.h) with the
// proposal as a config.pbtxt fragment, or all of it as JSON. Exit status 0, or 1 with the reason on
// stderr.
#include <string>

#include "graphserve/client/client.h"

namespace graphserve {

struct PlanGridFlags {
  std::string model;
  std::string metrics_url;  // empty: http(s)://HOST:8002/metrics of the gRPC address
  std::string device;       // empty: the only device, or the first CUDA one
  double memory_budget_mib = 0;  // 0: today's graph memory (today's largest bucket)
  int max_lengths = 8;
  bool json = false;
};

int RunPlanGrid(const std::string& address, const ClientOptions& options, const PlanGridFlags& flags);

}  // namespace graphserve
