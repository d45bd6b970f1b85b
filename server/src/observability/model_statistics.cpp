#include "graphserve/server/observability/model_statistics.h"

#include "graphserve/server/repository/model_version.h"

namespace graphserve {
namespace {

void FillDuration(const DurationTotal& total, inference::StatisticDuration* duration) {
  duration->set_count(total.count);
  duration->set_ns(total.ns);
}

void FillEntry(const ServedModelStatistics& model, inference::ModelStatistics* entry) {
  const ModelStatisticsSnapshot totals = model.recorder->Snapshot();
  entry->set_name(model.name);
  entry->set_version(model.version);
  entry->set_last_inference(totals.last_inference_ms);
  entry->set_inference_count(totals.inference_count);
  entry->set_execution_count(totals.execution_count);
  inference::InferStatistics* stats = entry->mutable_inference_stats();
  FillDuration(totals.success, stats->mutable_success());
  FillDuration(totals.fail, stats->mutable_fail());
  FillDuration(totals.queue, stats->mutable_queue());
  FillDuration(totals.compute_input, stats->mutable_compute_input());
  FillDuration(totals.compute_infer, stats->mutable_compute_infer());
  FillDuration(totals.compute_output, stats->mutable_compute_output());
  // cache_hit and cache_miss stay zero: graphserve has no response cache.
  for (const auto& [batch_size, by_size] : totals.batches_by_size) {
    inference::InferBatchStatistics* batch = entry->add_batch_stats();
    batch->set_batch_size(static_cast<uint64_t>(batch_size));
    FillDuration(by_size.compute_input, batch->mutable_compute_input());
    FillDuration(by_size.compute_infer, batch->mutable_compute_infer());
    FillDuration(by_size.compute_output, batch->mutable_compute_output());
  }
}

}  // namespace

Status FillModelStatistics(const std::vector<ServedModelStatistics>& served,
                           const inference::ModelStatisticsRequest& request,
                           inference::ModelStatisticsResponse* response) {
  std::string version;
  const Status well_formed = CanonicalModelVersion(request.version(), "version", &version);
  if (!well_formed.ok()) return well_formed;
  std::vector<const ServedModelStatistics*> named;
  for (const ServedModelStatistics& model : served) {
    if (request.name().empty() || model.name == request.name()) named.push_back(&model);
  }
  if (named.empty() && !request.name().empty()) {
    return NotFound("name: unknown model '" + request.name() + "'");
  }
  std::vector<const ServedModelStatistics*> selected;
  std::string versions;  // those served, for the message when none matches
  for (const ServedModelStatistics* model : named) {
    if (version.empty() || model->version == version) selected.push_back(model);
    versions += (versions.empty() ? "'" : ", '") + model->version + "'";
  }
  if (selected.empty() && !request.version().empty()) {
    if (request.name().empty()) {
      return NotFound("version: no served model has version '" + request.version() + "'");
    }
    return NotFound("version: model '" + request.name() + "' has no version '" + request.version() +
                    "' (served: " + versions + ")");
  }
  for (const ServedModelStatistics* model : selected) FillEntry(*model, response->add_model_stats());
  return Status::Ok();
}

}  // namespace graphserve
