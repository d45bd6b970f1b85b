#pragma once
// Triton's ModelStatistics RPC: the answer, filled from each served model version's
// ModelStatisticsRecorder. Stateless; thread-safe as the recorders are.
#include <string>
#include <vector>

#include "graphserve/engine/status.h"
#include "graphserve/server/observability/model_statistics_recorder.h"
#include "grpc_service.pb.h"

namespace graphserve {

// One served version of a model and the recorder of its statistics (not owned; must outlive the call).
struct ServedModelStatistics {
  std::string name;
  std::string version;
  const ModelStatisticsRecorder* recorder = nullptr;
};

// Answers `request` with one entry per model version of `served` that it selects, in the order of
// `served`: an empty name selects every model, an empty version every version of the selected ones.
// INVALID_ARGUMENT naming `version` when it is no version number (model_version.h); NOT_FOUND naming
// `name` when no model of that name is served, naming `version` when the selected models have no such
// version; `response` is then left empty.
Status FillModelStatistics(const std::vector<ServedModelStatistics>& served,
                           const inference::ModelStatisticsRequest& request,
                           inference::ModelStatisticsResponse* response);

}  // namespace graphserve
