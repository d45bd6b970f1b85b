#pragma once
// The models a server serves: loads each from its config.pbtxt (graphserve's or Triton's) or the
// built-in encoder, creates and warms up its executors, and owns one scheduler per model.
// Thread safety: Load before serving; Find and models() are safe from any thread afterwards (the set
// of models never changes while serving).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graphserve/engine/status.h"
#include "graphserve/server/clock.h"
#include "graphserve/server/scheduler.h"
#include "model_config.pb.h"

namespace graphserve {

struct RepositoryOptions {
  // Folder with one sub-folder per model; empty: serve the built-in encoder.
  std::string model_repository;
  // "cpu", "cuda", "cuda:N" or "auto": the device used by instance groups that name none.
  std::string device = "auto";
};

struct LoadedModel {
  // What the model is served with, as the ModelConfig RPC answers it (EffectiveModelConfig).
  inference::ModelConfig effective_config;
  std::unique_ptr<ModelScheduler> scheduler;
};

class ModelRepository {
 public:
  explicit ModelRepository(const Clock* clock) : clock_(clock) {}
  ~ModelRepository();

  // Loads and warms up every model; fails on the first model that cannot be served, naming it.
  Status Load(const RepositoryOptions& options);
  // Stops every scheduler after draining its queue.
  void Stop();

  // nullptr when no model has that name.
  LoadedModel* Find(const std::string& name) const;
  const std::map<std::string, std::unique_ptr<LoadedModel>>& models() const { return models_; }

 private:
  // Resolves `config` (a Triton config's fields into graphserve's), then creates and warms up its
  // executors; `model_dir` holds the model file.
  Status LoadModel(inference::ModelConfig config, const std::string& model_dir,
                   const std::string& device);

  const Clock* const clock_;
  std::map<std::string, std::unique_ptr<LoadedModel>> models_;
};

// Resolves "auto" to "cuda:0" when a CUDA device is present, else "cpu"; checks the others.
Status ResolveDevice(const std::string& requested, std::string* resolved);

}  // namespace graphserve
