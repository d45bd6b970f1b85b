#pragma once
// The models a server serves, and Triton's model-control API over them.
//
// A model folder holds config.pbtxt and either the model file itself (the flat layout, served as
// version "1") or Triton's numbered version folders (MODEL/1/model.pt, MODEL/2/model.pt2, ...), of
// which the highest is served. Loading reads the config, creates and warms up the executors (graph
// capture on CUDA) and starts the model's scheduler.
//
// Control modes, as Triton's --model-control-mode: kNone loads every model at start and refuses
// LoadModel/UnloadModel; kExplicit loads the models named at start and then whatever LoadModel asks;
// kPoll loads every model at start, then reads the repository again every poll interval: a new
// folder is loaded, a changed one (any file or version folder added, removed or rewritten) reloaded,
// a removed one unloaded and forgotten; LoadModel/UnloadModel are refused. A model that fails to load
// at start stops Start when exit_on_error is set, after every start-up model has been tried, naming
// each failure; without it the others serve and the failed ones are UNAVAILABLE with their reason.
// Loads and unloads run one at a time on the repository's control thread while the other models
// serve. A reload warms the new version up beside the old one, then swaps them: requests already
// holding the old version finish on it, later ones go to the new one, so none fails. An unload stops
// routing to the model, waits until every request that reached it has been answered, then releases
// it.
//
// Thread safety: every method may be called from any thread once Start returned. Lifetime: a request
// keeps the LoadedModel it found (a shared_ptr) until it is answered; the clock must outlive the
// repository. Errors name the model (and the field) but never a host path: paths go to the log.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "graphserve/engine/status.h"
#include "graphserve/server/batching/scheduler.h"
#include "graphserve/server/common/clock.h"
#include "graphserve/server/common/thread_annotations.h"
#include "model_config.pb.h"

namespace graphserve {

enum class ModelControlMode { kNone, kExplicit, kPoll };

// Triton's name of a mode: "none", "explicit" or "poll".
inline const char* ModelControlModeName(ModelControlMode mode) {
  switch (mode) {
    case ModelControlMode::kExplicit: return "explicit";
    case ModelControlMode::kPoll: return "poll";
    case ModelControlMode::kNone: break;
  }
  return "none";
}

struct RepositoryOptions {
  // Folder with one sub-folder per model; empty: serve the built-in encoder.
  std::string model_repository;
  // "cpu", "cuda", "cuda:N" or "auto": the device used by instance groups that name none.
  std::string device = "auto";
  ModelControlMode control_mode = ModelControlMode::kNone;
  // kExplicit only: the models loaded at start ("*": all of them).
  std::vector<std::string> startup_models;
  // Whether a model failing to load at start fails Start (Triton's --exit-on-error); without it the
  // others serve.
  bool exit_on_error = true;
  // kPoll only: how often the repository is read for changes.
  std::chrono::seconds poll_interval{15};
  // SchedulerOptions::busy_poll_us of every model loaded (ServerOptions::busy_poll sets it).
  std::chrono::microseconds scheduler_busy_poll{0};
  // The gRPC port's largest message, fixed at start-up from the models then in the repository: a
  // model loaded later whose largest request needs more is refused (its requests would be). 0: none.
  int64_t max_request_bytes = 0;
};

// One loaded version of a model. Immutable once serving.
struct LoadedModel {
  // What the model is served with, as the ModelConfig RPC answers it (EffectiveModelConfig).
  inference::ModelConfig effective_config;
  std::string version;
  std::unique_ptr<ModelScheduler> scheduler;
  // Whether the log has said that requests' custom parameters have no effect on this model.
  std::atomic<bool> custom_parameters_reported{false};
};

// A model's line in RepositoryIndex. `state` is Triton's: "READY", "LOADING", "UNLOADING",
// "UNAVAILABLE" (a failed load, or unloaded), or "" for a model never loaded.
struct ModelIndexEntry {
  std::string name;
  std::string version;
  std::string state;
  std::string reason;
};

class ModelRepository {
 public:
  // Told about every model version that starts serving (before any request can reach it) and every
  // one that stops (after its last request was answered, before it is destroyed); e.g. to export its
  // metrics. Called on the thread that loads or unloads.
  // `states_changed` is told after any model's state changed (EveryModelServes may answer
  // differently), on the thread that changed it, without the repository's lock held.
  struct Listener {
    std::function<void(const LoadedModel&)> serving;
    std::function<void(const LoadedModel&)> retired;
    std::function<void()> states_changed;
  };

  ModelRepository(const Clock* clock, Listener listener);
  ~ModelRepository();  // Stop()s

  ModelRepository(const ModelRepository&) = delete;
  ModelRepository& operator=(const ModelRepository&) = delete;

  // Loads the start-up models (all of them, or kExplicit's list) and starts the control thread. With
  // exit_on_error, fails when any of them cannot be served, after trying each, naming every failure
  // (the status code is the first failure's).
  Status Start(const RepositoryOptions& options) EXCLUDES(mutex_);
  // Finishes the control operation under way and answers the queued ones UNAVAILABLE; later ones are
  // refused. The models keep serving.
  void StopControl() EXCLUDES(mutex_);
  // StopControl, then stops every model after answering what it holds.
  void Stop() EXCLUDES(mutex_);

  // The served version of `name`. `version` empty means the served one; one that is not a version
  // number is INVALID_ARGUMENT and another number NOT_FOUND, both naming `version_field` (the
  // request's field name); an unknown or unloaded model is NOT_FOUND naming `name_field`. A model
  // still loading for the first time is UNAVAILABLE.
  Status Find(const std::string& name, const std::string& version, const char* name_field,
              const char* version_field, std::shared_ptr<LoadedModel>* model) const EXCLUDES(mutex_);
  // True for a model the repository holds a folder or an entry for, loaded or not.
  bool Contains(const std::string& name) const EXCLUDES(mutex_);
  // True when that version (empty: any; canonical, as CanonicalModelVersion gives it) of the model is
  // serving.
  bool IsReady(const std::string& name, const std::string& version) const EXCLUDES(mutex_);
  // Every model serving now, ordered by name.
  std::vector<std::shared_ptr<LoadedModel>> Serving() const EXCLUDES(mutex_);
  // Every model folder of the repository and every model known to it, ordered by name.
  std::vector<ModelIndexEntry> Index(bool ready_only) const EXCLUDES(mutex_);
  // Triton's strict readiness: true when every model the repository has loaded or tried to load
  // serves, but for those unloaded on request. False while one loads for the first time or after
  // one failed to load (until it loads, or is unloaded or leaves the repository).
  bool EveryModelServes() const EXCLUDES(mutex_);

  // Queue a load (or reload) / an unload of `name` on the control thread; `done` runs there with the
  // outcome once the model serves / once it has been drained and released. Refused at once
  // (FAILED_PRECONDITION, naming the mode) unless the mode is kExplicit and a repository folder is
  // served.
  void LoadAsync(const std::string& name, std::function<void(const Status&)> done) EXCLUDES(mutex_);
  void UnloadAsync(const std::string& name, std::function<void(const Status&)> done) EXCLUDES(mutex_);

 private:
  struct Entry {
    std::shared_ptr<LoadedModel> serving;
    std::string state;
    std::string reason;
  };
  struct Operation {
    bool load = true;
    std::string name;
    std::function<void(const Status&)> done;
  };

  Status CheckControllable() const;
  // Start's loads: each of `names` in turn; with exit_on_error, fails naming every failure.
  Status LoadAtStart(const std::vector<std::string>& names) EXCLUDES(mutex_);
  void Enqueue(Operation operation) EXCLUDES(mutex_);
  void ControlLoop() EXCLUDES(mutex_);
  // kPoll: loads what appeared or changed since the last look, unloads and forgets what left.
  void PollRepository() EXCLUDES(mutex_);
  Status LoadNamed(const std::string& name) EXCLUDES(mutex_);
  Status UnloadNamed(const std::string& name) EXCLUDES(mutex_);
  // Drops a model that is not serving from the repository's records (its folder is gone).
  void Forget(const std::string& name) EXCLUDES(mutex_);
  void NotifyStatesChanged() const;
  // Waits until nothing but `model` itself refers to the version, then stops and releases it.
  void Retire(std::shared_ptr<LoadedModel> model);
  void SetState(const std::string& name, const std::string& state, const std::string& reason)
      EXCLUDES(mutex_);
  // The error as a client may see it: the repository's own path removed.
  Status ForClient(const Status& status) const;

  const Clock* const clock_;
  const Listener listener_;
  RepositoryOptions options_;
  std::string default_device_;

  mutable Mutex mutex_;
  std::map<std::string, Entry> entries_ GUARDED_BY(mutex_);
  std::deque<Operation> operations_ GUARDED_BY(mutex_);
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::condition_variable operations_changed_;
  std::thread control_thread_;
  // kPoll: each model folder's contents (FolderFingerprint) when it was last loaded or tried. Read
  // and written by Start, then by the control thread alone.
  std::map<std::string, std::string> fingerprints_;
};

// What Start checks of the flags before it reads the repository, for a server to check before it
// opens a port: --device names a device of this host (INVALID_ARGUMENT or UNAVAILABLE naming
// --device), and --model-control-mode and --load-model fit --model-repository (INVALID_ARGUMENT
// naming them).
Status CheckRepositoryFlags(const RepositoryOptions& options);

// The models Start loads: none without a repository folder, else every model folder, or the
// --load-model ones in kExplicit. NOT_FOUND when the folder cannot be read, holds no model folder in
// kNone, or lacks a --load-model one; the message may hold the repository's path (for the log).
Status ListStartupModels(const RepositoryOptions& options, std::vector<std::string>* startup);

// Resolves "auto" to "cuda:0" when a CUDA device is present, else "cpu"; checks the others.
Status ResolveDevice(const std::string& requested, std::string* resolved);

// The bytes of tensor data in the largest request any model of `options`' repository (the built-in
// encoder without one) validly takes: max_batch_size rows at max_sequence_length of every input, read
// from the configs alone, before any model loads. Configs that fail to parse are skipped (loading
// them reports why). What the server's message size limits are derived from.
int64_t LargestRequestBytes(const RepositoryOptions& options);

// The version a model folder serves and the folder its model file is in: the one the config's
// `version_policy.specific` names (NOT_FOUND when its folder is missing), else the highest numbered
// sub-folder (Triton's layout), else "1" and the folder itself (the flat layout).
Status ResolveModelVersion(const std::string& model_dir, const inference::ModelVersionPolicy& policy,
                           std::string* version, std::string* version_dir);

// Reads, checks and warms up one model version; the scheduler is started. Errors name the model.
Status LoadModelVersion(const std::string& model_dir, const std::string& expected_name,
                        const std::string& default_device, const Clock* clock,
                        std::chrono::microseconds scheduler_busy_poll, std::shared_ptr<LoadedModel>* model);

}  // namespace graphserve
