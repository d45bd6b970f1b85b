#include "graphserve/server/repository/model_repository.h"

#include <spdlog/spdlog.h>

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <string>

#include "common/thread_name.h"
#include "graphserve/engine/device.h"
#include "graphserve/server/config/config.h"
#include "graphserve/server/config/triton_config.h"
#include "graphserve/server/repository/model_version.h"
#include "graphserve/server/repository/warmup_reporter.h"

namespace graphserve {
namespace {

constexpr const char* kStateReady = "READY";
constexpr const char* kStateLoading = "LOADING";
constexpr const char* kStateUnloading = "UNLOADING";
constexpr const char* kStateUnavailable = "UNAVAILABLE";
// The reason of a model unloaded on request: as in Triton, it does not make the server unready.
constexpr const char* kReasonUnloaded = "unloaded";
constexpr const char* kLoadAllModels = "*";
// How deep FolderFingerprint looks into a model folder: Triton's layout is two levels deep, and a
// symbolic link that loops must end somewhere.
constexpr int kFingerprintDepth = 8;

bool IsDirectory(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

// Sorted names of the folders in `dir`, hidden ones left out. POSIX rather than std::filesystem:
// PyTorch's CUDA wheels export std::filesystem symbols of their own, and a binary that links them
// can have its std::filesystem calls bound to those copies and crash.
Status ListSubdirectories(const std::string& dir, std::vector<std::string>* names) {
  DIR* handle = opendir(dir.c_str());
  if (handle == nullptr) return NotFound("'" + dir + "': " + std::strerror(errno));
  while (const dirent* entry = readdir(handle)) {
    const std::string name = entry->d_name;
    if (!name.empty() && name[0] != '.' && IsDirectory(dir + "/" + name)) names->push_back(name);
  }
  closedir(handle);
  std::sort(names->begin(), names->end());
  return Status::Ok();
}

// What a poll compares to see whether a model folder changed: the path, size and modification
// time of every file and folder under it, hidden ones left out (an editor's swap file is no
// change), symbolic links followed (a Kubernetes volume swaps its files through one). Empty for a
// folder that cannot be read.
void AppendFingerprint(const std::string& dir, const std::string& relative, int depth, std::string* fingerprint) {
  std::vector<std::string> names;
  DIR* handle = opendir(dir.c_str());
  if (handle == nullptr) return;
  while (const dirent* entry = readdir(handle)) {
    if (entry->d_name[0] != '.') names.push_back(entry->d_name);
  }
  closedir(handle);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    struct stat info {};
    const std::string path = dir + "/" + name;
    if (stat(path.c_str(), &info) != 0) continue;
    *fingerprint += relative + name + " " + std::to_string(info.st_size) + " " +
                    std::to_string(info.st_mtim.tv_sec) + "." + std::to_string(info.st_mtim.tv_nsec) + "\n";
    if (S_ISDIR(info.st_mode) && depth > 0) AppendFingerprint(path, relative + name + "/", depth - 1, fingerprint);
  }
}

std::string FolderFingerprint(const std::string& dir) {
  std::string fingerprint;
  AppendFingerprint(dir, "", kFingerprintDepth, &fingerprint);
  return fingerprint;
}

// Triton's version folders are positive decimal numbers; other folders are not versions.
bool ParseVersion(const std::string& name, int64_t* version) {
  if (name.empty() || name.size() > 18 || name[0] == '0') return false;
  for (char c : name) {
    if (c < '0' || c > '9') return false;
  }
  *version = std::stoll(name);
  return true;
}

// A model name a client may ask to load: one folder of the repository, nothing outside it.
bool IsPlainFolderName(const std::string& name) {
  return !name.empty() && name[0] != '.' && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos;
}

void ReplaceAll(std::string* text, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (size_t at = text->find(from); at != std::string::npos; at = text->find(from, at + to.size())) {
    text->replace(at, from.size(), to);
  }
}

// One instance's buckets in a line of bounded length: how many replay as graphs, how many were
// measured, and the range of their times. InstanceDetail lists every bucket, for the debug level.
std::string InstanceSummary(const ModelSpec& spec, const Executor& executor) {
  const std::vector<BucketInfo> buckets = executor.Buckets();
  size_t graphs = 0, measured = 0;
  const BucketInfo* fastest = nullptr;
  const BucketInfo* slowest = nullptr;
  for (const BucketInfo& bucket : buckets) {
    graphs += bucket.graph ? 1 : 0;
    measured += bucket.time_measured ? 1 : 0;
    if (bucket.execute_time_us <= 0) continue;
    if (fastest == nullptr || bucket.execute_time_us < fastest->execute_time_us) fastest = &bucket;
    if (slowest == nullptr || bucket.execute_time_us > slowest->execute_time_us) slowest = &bucket;
  }
  std::string line =
      fmt::format("{} buckets ({} graphs, {} eager; {} measured, {} estimated)", buckets.size(), graphs,
                  buckets.size() - graphs, measured, buckets.size() - measured);
  if (fastest != nullptr) {
    line += fmt::format(", {:.1f} ms ({}) to {:.1f} ms ({}) a batch", fastest->execute_time_us / 1000,
                        spec.BucketLabel(fastest->shape), slowest->execute_time_us / 1000,
                        spec.BucketLabel(slowest->shape));
  }
  return line;
}

std::string InstanceDetail(const ModelSpec& spec, const Executor& executor) {
  std::string grid;
  for (const BucketInfo& bucket : executor.Buckets()) {
    grid += " " + spec.BucketLabel(bucket.shape) + (bucket.graph ? "(graph " : "(eager ") +
            std::to_string(static_cast<int64_t>(bucket.execute_time_us)) + "us" +
            (bucket.time_measured ? ")" : " estimated)");
  }
  return grid;
}

// The grid and what it costs, in one line: its points, largest bucket and token budget, and each
// CUDA instance's graph pool and static buffers as captured (a CPU instance has neither).
std::string GridSummary(const ModelSpec& spec, const std::vector<std::unique_ptr<Executor>>& executors) {
  const BucketShape largest = spec.LargestBucket();
  std::string line = std::to_string(spec.Buckets().size()) + " buckets, largest " +
                     spec.BucketLabel(largest);
  if (spec.ragged) {
    line += " (rows x total tokens: ragged, packed end to end), max_batch_tokens " +
            std::to_string(spec.max_batch_tokens);
  } else if (spec.has_sequence_length()) {
    line += " (" + std::to_string(largest.batch * largest.length) + " tokens), max_batch_tokens " +
            std::to_string(spec.max_batch_tokens);
    line += spec.max_batch_tokens == 0
                ? " (none: batches of at most max_batch_size " + std::to_string(spec.max_batch_size) +
                      " rows)"
                : " (up to " + std::to_string(spec.LargestBatchFor(1)) + " rows at length " +
                      std::to_string(spec.bucket_lengths.front()) + ", max_batch_size " +
                      std::to_string(spec.max_batch_size) + " rows a request)";
  }
  auto mib = [](uint64_t bytes) { return std::to_string((bytes + (1u << 19)) >> 20) + " MiB"; };
  for (size_t i = 0; i < executors.size(); ++i) {
    const CaptureSummary capture = executors[i]->capture_summary();
    if (capture.graph_pool_bytes == 0 && capture.static_buffer_bytes == 0) continue;
    line += "; instance " + std::to_string(i) + " on " + executors[i]->device() + ": graph pool " +
            mib(capture.graph_pool_bytes) + ", static buffers " + mib(capture.static_buffer_bytes);
  }
  return line;
}

// One executor per instance: a placement's devices resolved, `count` executors on each.
Status InstanceDevices(const inference::ModelConfig& config, const std::string& default_device,
                       std::vector<InstancePlacement>* placements, std::vector<std::string>* devices) {
  Status status = InstancePlacements(config, default_device, placements);
  if (!status.ok()) return status;
  for (InstancePlacement& placement : *placements) {
    for (std::string& device : placement.devices) {
      status = ResolveDevice(device, &device);
      if (!status.ok()) return Status(status.code(), "instance_group: " + status.message());
      devices->insert(devices->end(), placement.count, device);
    }
  }
  return Status::Ok();
}

// The buckets that replay as a CUDA graph on every CUDA instance (a CPU instance has none to offer).
std::vector<BucketShape> GraphBuckets(const std::vector<std::unique_ptr<Executor>>& executors) {
  std::set<BucketShape> common;
  bool first = true;
  for (const auto& executor : executors) {
    if (executor->device() == "cpu") continue;
    std::set<BucketShape> graphs;
    for (const BucketInfo& bucket : executor->Buckets()) {
      if (bucket.graph && (first || common.count(bucket.shape) > 0)) graphs.insert(bucket.shape);
    }
    common = std::move(graphs);
    first = false;
  }
  return std::vector<BucketShape>(common.begin(), common.end());
}

Status CreateExecutors(const ModelSpec& spec, const std::vector<std::string>& devices,
                       const std::string& model_dir, const std::string& model_filename,
                       std::vector<std::unique_ptr<Executor>>* executors) {
  for (const std::string& device : devices) {
    const std::unique_ptr<WarmupReporter> progress = NewProcessWarmupReporter(
        fmt::format("model '{}' instance {} on {}", spec.name, executors->size(), device));
    ExecutorOptions executor_options;
    executor_options.device = device;
    executor_options.model_dir = model_dir;
    executor_options.model_filename = model_filename;
    executor_options.warmup_progress = [reporter = progress.get()](const WarmupProgress& done) {
      reporter->Report(done);
    };
    std::unique_ptr<Executor> executor;
    Status status = CreateExecutor(spec, executor_options, &executor);
    if (status.ok()) {
      status = executor->Warmup();
      executor->set_warmup_progress(nullptr);  // the reporter goes with this iteration
    }
    if (!status.ok()) {
      // The engine's message can quote libtorch (a zip reader's complaint, a stack of TorchScript
      // frames) and host paths: it goes to the log, and the caller of a load gets its code and a
      // number to find it there, as a failed request does.
      static std::atomic<uint64_t> last_error_id{0};
      const uint64_t error_id = last_error_id.fetch_add(1) + 1;
      spdlog::error("model '{}' on {} (load error {}): {}", spec.name, device, error_id, status.message());
      return Status(status.code(), "model '" + spec.name + "' failed to load on " + device + " (load error " +
                                       std::to_string(error_id) + " in the server log)");
    }
    spdlog::info("model '{}' instance {} on {}: {}", spec.name, executors->size(), executor->device(),
                 InstanceSummary(spec, *executor));
    spdlog::debug("model '{}' instance {} on {}, every bucket:{}", spec.name, executors->size(),
                  executor->device(), InstanceDetail(spec, *executor));
    executors->push_back(std::move(executor));
  }
  return Status::Ok();
}

// On a GPU an integer input with no max_value is a hazard worth a line in the log: a token id beyond
// an embedding table is a device-side assert there, after which the whole process has to restart.
// (The built-in encoder clamps its ids itself.)
void WarnOfUnboundedIndexInputs(const ModelSpec& spec, const std::vector<std::string>& devices) {
  const bool on_cuda = std::any_of(devices.begin(), devices.end(), [](const std::string& text) {
    DeviceName device;
    return ParseDeviceName(text, &device).ok() && device.cuda;
  });
  if (spec.platform == kPlatformBuiltinEncoder || !on_cuda) return;
  std::string unbounded;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const TensorSpec& input = spec.inputs[i];
    if (input.dtype != DataType::kInt64 && input.dtype != DataType::kInt32) continue;
    if (i < spec.input_ranges.size() && spec.input_ranges[i].max) continue;
    unbounded += (unbounded.empty() ? "'" : ", '") + input.name + "'";
  }
  if (unbounded.empty()) return;
  spdlog::warn("model '{}': integer input(s) {} have no max_value: should one index a table (token ids), a value "
               "beyond it on CUDA is a device-side assert that fails every later batch of the process; set "
               "min_value and max_value",
               spec.name, unbounded);
}

// Whether batches pad lengths, and why: a model that does not say how it ignores padding is served
// at exact lengths, which a user switching from Triton should know (and may change).
void LogLengthPadding(const ModelSpec& spec) {
  if (!spec.has_sequence_length()) return;
  if (spec.ragged) {
    spdlog::info(
        "model '{}' is ragged: requests of any lengths are packed end to end into buckets of "
        "rows x total tokens, each padded only by the tail of its tokens",
        spec.name);
    return;
  }
  if (spec.masks_padding()) {
    spdlog::info("model '{}' pads lengths to its bucket lengths: input '{}' (sequence_mask_input) marks "
                 "padded positions",
                 spec.name, spec.sequence_mask_input);
    return;
  }
  std::string lengths;
  for (int64_t length : spec.bucket_lengths) {
    lengths += (lengths.empty() ? "" : ", ") + std::to_string(length);
  }
  std::string hint;
  for (const TensorSpec& input : spec.inputs) {
    const bool looks_like_a_mask = input.name.find("mask") != std::string::npos;
    if (looks_like_a_mask && input.variable_dim() >= 0 && input.pad_value == 0) {
      hint = fmt::format("; if input '{}' masks padding, sequence_mask_input: \"{}\" lets batches of "
                         "different lengths share a bucket",
                         input.name, input.name);
      break;
    }
  }
  spdlog::info("model '{}' runs every batch at its requests' exact length: its config names no "
               "sequence_mask_input, so padding could change its answers; lengths {} replay their "
               "buckets, others run eagerly (reason exact_length){}",
               spec.name, lengths, hint);
}

void LogReady(const LoadedModel& model, size_t instances, const SchedulerOptions& options) {
  const ModelSpec& spec = model.scheduler->spec();
  spdlog::info("model '{}' version {} ready: platform {}, max_batch_size {}, max_sequence_length {}, "
               "{} instance(s), {}, queue size {}",
               spec.name, model.version, spec.platform, spec.max_batch_size,
               spec.has_sequence_length() ? std::to_string(spec.max_sequence_length)
                                          : std::string("- (fixed shape)"),
               instances,
               options.batching_disabled ? std::string("batching disabled")
                                         : "queue delay " + std::to_string(options.max_queue_delay_us) + " us",
               options.max_queue_size);
}

// Builds a started model from a parsed config (graphserve's or Triton's, resolved here) whose model
// file is in `model_dir` (the version folder, where there is one).
Status BuildModel(inference::ModelConfig config, const std::string& version, const std::string& model_dir,
                  const std::string& default_device, const Clock* clock,
                  std::chrono::microseconds scheduler_busy_poll, std::shared_ptr<LoadedModel>* model) {
  Status status = ResolveModelConfig(model_dir, &config, nullptr);
  if (!status.ok()) return status;
  ModelSpec spec;
  status = ModelSpecFromConfig(config, &spec);
  if (!status.ok()) return status;
  std::vector<InstancePlacement> placements;
  std::vector<std::string> devices;
  status = InstanceDevices(config, default_device, &placements, &devices);
  if (!status.ok()) return Status(status.code(), "model '" + spec.name + "': " + status.message());
  std::vector<std::unique_ptr<Executor>> executors;
  status = CreateExecutors(spec, devices, model_dir, config.default_model_filename(), &executors);
  if (!status.ok()) return status;

  spdlog::info("model '{}' bucket grid: {}", spec.name, GridSummary(spec, executors));
  LogLengthPadding(spec);
  WarnOfUnboundedIndexInputs(spec, devices);

  auto loaded = std::make_shared<LoadedModel>();
  loaded->version = version;
  SchedulerOptions scheduler_options = SchedulerOptionsFromConfig(config);
  scheduler_options.busy_poll_us = scheduler_busy_poll.count();
  loaded->effective_config = EffectiveModelConfig(
      ServedModel{config, spec, scheduler_options, std::move(placements), GraphBuckets(executors)});
  loaded->scheduler = std::make_unique<ModelScheduler>(spec, scheduler_options, std::move(executors), clock);
  loaded->scheduler->Start();
  LogReady(*loaded, devices.size(), scheduler_options);
  *model = std::move(loaded);
  return Status::Ok();
}

}  // namespace

Status ResolveDevice(const std::string& requested, std::string* resolved) {
  const EngineInfo engine = GetEngineInfo();
  if (requested == "auto") {
    *resolved = engine.cuda_device_count > 0 ? "cuda:0" : "cpu";
    return Status::Ok();
  }
  DeviceName device;
  if (!ParseDeviceName(requested, &device).ok()) {
    return InvalidArgument("device '" + requested + "': expected cpu, cuda, cuda:N or auto");
  }
  if (device.cuda && device.index >= engine.cuda_device_count) {
    return Unavailable("device '" + requested + "': this host has " +
                       std::to_string(engine.cuda_device_count) + " CUDA device(s)");
  }
  *resolved = device.ToString();
  return Status::Ok();
}

Status ResolveModelVersion(const std::string& model_dir, const inference::ModelVersionPolicy& policy,
                           std::string* version, std::string* version_dir) {
  std::vector<std::string> folders;
  Status status = ListSubdirectories(model_dir, &folders);
  if (!status.ok()) return status;
  std::set<int64_t> versions;
  for (const std::string& folder : folders) {
    int64_t number = 0;
    if (ParseVersion(folder, &number)) versions.insert(number);
  }
  if (policy.specific().versions_size() == 1) {
    // ResolveModelConfig refuses more than one: graphserve serves one version of each model.
    const int64_t wanted = policy.specific().versions(0);
    if (versions.count(wanted) == 0) {
      return NotFound("version_policy.specific.versions: no version folder " + std::to_string(wanted));
    }
    *version = std::to_string(wanted);
    *version_dir = model_dir + "/" + *version;
  } else if (versions.empty()) {
    *version = "1";
    *version_dir = model_dir;
  } else {
    *version = std::to_string(*versions.rbegin());
    *version_dir = model_dir + "/" + *version;
  }
  return Status::Ok();
}

namespace {

// A model folder's config.pbtxt, named after the folder when it names itself nothing, and the
// version folder its version policy picks.
Status ReadModelVersionConfig(const std::string& model_dir, const std::string& expected_name,
                              inference::ModelConfig* config, std::string* version, std::string* version_dir) {
  Status status = LoadModelConfig(model_dir + "/config.pbtxt", config);
  if (!status.ok()) return status;
  // Triton's convention: the folder names the model when the config does not.
  if (config->name().empty()) config->set_name(expected_name);
  if (config->name() != expected_name) {
    return InvalidArgument(model_dir + "/config.pbtxt: name '" + config->name() +
                           "' differs from its folder's name");
  }
  status = ResolveModelVersion(model_dir, config->version_policy(), version, version_dir);
  if (!status.ok()) return Status(status.code(), "model '" + expected_name + "': " + status.message());
  return Status::Ok();
}

}  // namespace

Status LoadModelVersion(const std::string& model_dir, const std::string& expected_name,
                        const std::string& default_device, const Clock* clock,
                        std::chrono::microseconds scheduler_busy_poll, std::shared_ptr<LoadedModel>* model) {
  inference::ModelConfig config;
  std::string version;
  std::string version_dir;
  Status status = ReadModelVersionConfig(model_dir, expected_name, &config, &version, &version_dir);
  if (!status.ok()) return status;
  return BuildModel(std::move(config), version, version_dir, default_device, clock, scheduler_busy_poll, model);
}

namespace {

int64_t LargestRequestBytes(const ModelSpec& spec) {
  int64_t bytes = 0;
  for (const TensorSpec& input : spec.inputs) {
    int64_t elements = std::max<int64_t>(spec.max_batch_size, 1);
    for (int64_t dim : input.dims) elements *= dim < 0 ? std::max<int64_t>(spec.max_sequence_length, 1) : dim;
    bytes += elements * static_cast<int64_t>(ElementSize(input.dtype));
  }
  return bytes;
}

}  // namespace

int64_t LargestRequestBytes(const RepositoryOptions& options) {
  ModelSpec spec;
  if (options.model_repository.empty()) {
    return ModelSpecFromConfig(BuiltinEncoderConfig(), &spec).ok() ? LargestRequestBytes(spec) : 0;
  }
  std::vector<std::string> names;
  if (!ListSubdirectories(options.model_repository, &names).ok()) return 0;
  int64_t largest = 0;
  for (const std::string& name : names) {
    inference::ModelConfig config;
    std::string version, version_dir;
    if (!ReadModelVersionConfig(options.model_repository + "/" + name, name, &config, &version, &version_dir).ok() ||
        !ResolveModelConfig(version_dir, &config, nullptr).ok()) {
      continue;
    }
    if (ModelSpecFromConfig(config, &spec).ok()) largest = std::max(largest, LargestRequestBytes(spec));
  }
  return largest;
}

ModelRepository::ModelRepository(const Clock* clock, Listener listener)
    : clock_(clock), listener_(std::move(listener)) {}

ModelRepository::~ModelRepository() { Stop(); }

Status CheckRepositoryFlags(const RepositoryOptions& options) {
  std::string device;
  const Status status = ResolveDevice(options.device, &device);
  if (!status.ok()) return Status(status.code(), "--device: " + status.message());
  if (options.model_repository.empty()) {
    if (options.control_mode != ModelControlMode::kNone) {
      return InvalidArgument(std::string("--model-control-mode ") + ModelControlModeName(options.control_mode) +
                             ": needs --model-repository");
    }
    if (!options.startup_models.empty()) {
      return InvalidArgument("--load-model: only with --model-repository and --model-control-mode explicit");
    }
    return Status::Ok();
  }
  if (options.control_mode != ModelControlMode::kExplicit && !options.startup_models.empty()) {
    return InvalidArgument(std::string("--load-model: only with --model-control-mode explicit (") +
                           ModelControlModeName(options.control_mode) + " loads every model)");
  }
  return Status::Ok();
}

Status ListStartupModels(const RepositoryOptions& options, std::vector<std::string>* startup) {
  startup->clear();
  if (options.model_repository.empty()) return Status::Ok();
  std::vector<std::string> names;
  const Status status = ListSubdirectories(options.model_repository, &names);
  if (!status.ok()) return Status(status.code(), "--model-repository " + status.message());
  if (options.control_mode != ModelControlMode::kExplicit) {
    // Poll mode may start empty: models can be added later.
    if (options.control_mode == ModelControlMode::kNone && names.empty()) {
      return NotFound("--model-repository '" + options.model_repository + "' holds no model folders");
    }
    *startup = names;
    return Status::Ok();
  }
  for (const std::string& name : options.startup_models) {
    if (name == kLoadAllModels) {
      *startup = names;
      return Status::Ok();
    }
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      return NotFound("--load-model: no model folder '" + name + "' in the repository");
    }
    startup->push_back(name);
  }
  return Status::Ok();
}

Status ModelRepository::Start(const RepositoryOptions& options) {
  options_ = options;
  Status status = CheckRepositoryFlags(options);
  if (!status.ok()) return status;
  status = ResolveDevice(options.device, &default_device_);
  if (!status.ok()) return status;

  if (options.model_repository.empty()) {
    spdlog::info("no --model-repository given: serving the built-in model 'encoder'");
    std::shared_ptr<LoadedModel> encoder;
    status = BuildModel(BuiltinEncoderConfig(), "1", "", default_device_, clock_, options.scheduler_busy_poll,
                        &encoder);
    if (!status.ok()) return status;
    if (listener_.serving) listener_.serving(*encoder);
    MutexLock lock(&mutex_);
    entries_["encoder"] = Entry{std::move(encoder), kStateReady, ""};
    return Status::Ok();
  }

  std::vector<std::string> startup;
  status = ListStartupModels(options, &startup);
  if (!status.ok()) return status;
  status = LoadAtStart(startup);
  if (!status.ok()) return status;
  control_thread_ = std::thread([this] {
    NameThisThread("gs-control");
    ControlLoop();
  });
  return Status::Ok();
}

Status ModelRepository::LoadAtStart(const std::vector<std::string>& names) {
  std::vector<Status> failures;
  for (const std::string& name : names) {
    if (options_.control_mode == ModelControlMode::kPoll) {
      fingerprints_[name] = FolderFingerprint(options_.model_repository + "/" + name);
    }
    const Status status = LoadNamed(name);  // logs its own failure
    if (!status.ok()) failures.push_back(status);
  }
  if (failures.empty()) return Status::Ok();
  std::string summary = std::to_string(failures.size()) + " of " + std::to_string(names.size()) +
                        " model(s) failed to load:";
  for (const Status& failure : failures) summary += " [" + failure.message() + "]";
  if (options_.exit_on_error) {
    return Status(failures.front().code(), summary + "; --exit-on-error=false serves the others");
  }
  spdlog::error("{}; serving the other {} (--exit-on-error=false)", summary, names.size() - failures.size());
  return Status::Ok();
}

void ModelRepository::StopControl() {
  {
    MutexLock lock(&mutex_);
    stopping_ = true;
  }
  operations_changed_.notify_all();
  if (control_thread_.joinable()) control_thread_.join();
}

void ModelRepository::Stop() {
  StopControl();
  std::vector<std::shared_ptr<LoadedModel>> serving;
  {
    MutexLock lock(&mutex_);
    for (auto& [name, entry] : entries_) {
      if (entry.serving) serving.push_back(std::move(entry.serving));
    }
    entries_.clear();
  }
  for (const std::shared_ptr<LoadedModel>& model : serving) {
    model->scheduler->Stop();
    if (listener_.retired) listener_.retired(*model);
  }
}

Status ModelRepository::Find(const std::string& name, const std::string& requested_version, const char* name_field,
                             const char* version_field, std::shared_ptr<LoadedModel>* model) const {
  std::string version;
  const Status well_formed = CanonicalModelVersion(requested_version, version_field, &version);
  if (!well_formed.ok()) return well_formed;
  MutexLock lock(&mutex_);
  auto found = entries_.find(name);
  if (found == entries_.end() || !found->second.serving) {
    const std::string state = found == entries_.end() ? "" : found->second.state;
    if (state == kStateLoading) return Unavailable("model '" + name + "' is loading");
    if (state == kStateUnloading) return Unavailable("model '" + name + "' is unloading");
    return NotFound(std::string(name_field) + ": unknown model '" + name + "'");
  }
  const std::shared_ptr<LoadedModel>& serving = found->second.serving;
  if (!version.empty() && version != serving->version) {
    return NotFound(std::string(version_field) + ": model '" + name + "' has no version '" + version +
                    "' being served (it serves version " + serving->version + ")");
  }
  *model = serving;
  return Status::Ok();
}

bool ModelRepository::Contains(const std::string& name) const {
  {
    MutexLock lock(&mutex_);
    if (entries_.count(name) > 0) return true;
  }
  return !options_.model_repository.empty() && IsPlainFolderName(name) &&
         IsDirectory(options_.model_repository + "/" + name);
}

bool ModelRepository::IsReady(const std::string& name, const std::string& version) const {
  MutexLock lock(&mutex_);
  auto found = entries_.find(name);
  return found != entries_.end() && found->second.serving &&
         (version.empty() || version == found->second.serving->version);
}

std::vector<std::shared_ptr<LoadedModel>> ModelRepository::Serving() const {
  MutexLock lock(&mutex_);
  std::vector<std::shared_ptr<LoadedModel>> serving;
  for (const auto& [name, entry] : entries_) {
    if (entry.serving) serving.push_back(entry.serving);
  }
  return serving;
}

bool ModelRepository::EveryModelServes() const {
  MutexLock lock(&mutex_);
  for (const auto& [name, entry] : entries_) {
    const bool unloaded = entry.state == kStateUnavailable && entry.reason == kReasonUnloaded;
    if (!entry.serving && !unloaded) return false;
  }
  return true;
}

std::vector<ModelIndexEntry> ModelRepository::Index(bool ready_only) const {
  // The folders are read anew: a model copied into the repository after start is listed (and can be
  // loaded) without a restart.
  std::vector<std::string> folders;
  if (!options_.model_repository.empty()) {
    if (!ListSubdirectories(options_.model_repository, &folders).ok()) folders.clear();
  }
  std::map<std::string, ModelIndexEntry> index;
  for (const std::string& name : folders) index[name] = ModelIndexEntry{name, "", "", ""};
  {
    MutexLock lock(&mutex_);
    for (const auto& [name, entry] : entries_) {
      index[name] = ModelIndexEntry{name, entry.serving ? entry.serving->version : "", entry.state,
                                    entry.reason};
    }
  }
  std::vector<ModelIndexEntry> entries;
  for (auto& [name, entry] : index) {
    if (!ready_only || entry.state == kStateReady) entries.push_back(std::move(entry));
  }
  return entries;
}

Status ModelRepository::CheckControllable() const {
  if (options_.model_repository.empty()) {
    return Status(StatusCode::kFailedPrecondition,
                  "graphserve serves its built-in model: start it with --model-repository and "
                  "--model-control-mode explicit to load and unload models");
  }
  if (options_.control_mode != ModelControlMode::kExplicit) {
    return Status(StatusCode::kFailedPrecondition,
                  std::string("model control mode is '") + ModelControlModeName(options_.control_mode) +
                      "': start graphserve with --model-control-mode explicit to load and unload models");
  }
  return Status::Ok();
}

void ModelRepository::LoadAsync(const std::string& name, std::function<void(const Status&)> done) {
  Enqueue(Operation{true, name, std::move(done)});
}

void ModelRepository::UnloadAsync(const std::string& name, std::function<void(const Status&)> done) {
  Enqueue(Operation{false, name, std::move(done)});
}

void ModelRepository::Enqueue(Operation operation) {
  Status refused = CheckControllable();
  if (refused.ok() && !IsPlainFolderName(operation.name)) {
    refused = InvalidArgument("model_name: '" + operation.name + "' is not a model folder name");
  }
  if (refused.ok()) {
    MutexLock lock(&mutex_);
    if (stopping_) {
      refused = Unavailable("the server is shutting down");
    } else {
      operations_.push_back(std::move(operation));
    }
  }
  if (!refused.ok()) {
    operation.done(refused);
    return;
  }
  operations_changed_.notify_all();
}

void ModelRepository::ControlLoop() {
  const bool polling = options_.control_mode == ModelControlMode::kPoll;
  const int64_t poll_interval_us = std::chrono::microseconds(options_.poll_interval).count();
  int64_t next_poll_us = clock_->NowMicros() + poll_interval_us;
  MutexLock lock(&mutex_);
  while (true) {
    while (!stopping_ && operations_.empty() && !(polling && clock_->NowMicros() >= next_poll_us)) {
      if (polling) {
        clock_->WaitUntil(operations_changed_, lock.native(), next_poll_us);
      } else {
        lock.Wait(operations_changed_);
      }
    }
    if (stopping_) break;
    if (operations_.empty()) {  // the poll's time has come
      lock.Unlock();
      PollRepository();
      lock.Lock();
      next_poll_us = clock_->NowMicros() + poll_interval_us;
      continue;
    }
    Operation operation = std::move(operations_.front());
    operations_.pop_front();
    lock.Unlock();
    const Status status = operation.load ? LoadNamed(operation.name) : UnloadNamed(operation.name);
    operation.done(ForClient(status));
    lock.Lock();
  }
  // Queued operations are answered, not run: a load could take minutes of a shutdown.
  for (Operation& operation : operations_) operation.done(Unavailable("the server is shutting down"));
  operations_.clear();
}

void ModelRepository::PollRepository() {
  std::vector<std::string> folders;
  const Status listed = ListSubdirectories(options_.model_repository, &folders);
  if (!listed.ok()) {
    // An unmounted volume unloading every model would be worse than serving what is loaded.
    spdlog::error("polling --model-repository: {}; the models loaded keep serving", listed.message());
    return;
  }
  std::vector<std::string> known;
  {
    MutexLock lock(&mutex_);
    for (const auto& [name, entry] : entries_) known.push_back(name);
  }
  for (const std::string& name : known) {
    if (std::binary_search(folders.begin(), folders.end(), name)) continue;
    spdlog::info("model '{}' left the repository: unloading it", name);
    UnloadNamed(name);
    Forget(name);
    fingerprints_.erase(name);
  }
  for (const std::string& name : folders) {
    std::string fingerprint = FolderFingerprint(options_.model_repository + "/" + name);
    auto found = fingerprints_.find(name);
    if (found != fingerprints_.end() && found->second == fingerprint) continue;
    spdlog::info("model '{}' {} in the repository", name, found == fingerprints_.end() ? "appeared" : "changed");
    // Recorded before the load: a change made while it loads is seen by the next poll.
    fingerprints_[name] = std::move(fingerprint);
    LoadNamed(name);  // logs its own failure; a failed reload keeps the served version
  }
}

void ModelRepository::Forget(const std::string& name) {
  {
    MutexLock lock(&mutex_);
    auto found = entries_.find(name);
    if (found == entries_.end() || found->second.serving) return;
    entries_.erase(found);
  }
  NotifyStatesChanged();
}

void ModelRepository::NotifyStatesChanged() const {
  if (listener_.states_changed) listener_.states_changed();
}

void ModelRepository::SetState(const std::string& name, const std::string& state, const std::string& reason) {
  {
    MutexLock lock(&mutex_);
    Entry& entry = entries_[name];
    entry.state = state;
    entry.reason = reason;
  }
  NotifyStatesChanged();
}

Status ModelRepository::LoadNamed(const std::string& name) {
  const std::string model_dir = options_.model_repository + "/" + name;
  if (!IsDirectory(model_dir)) return NotFound("model_name: no model folder '" + name + "' in the repository");
  bool reloading = false;
  {
    MutexLock lock(&mutex_);
    Entry& entry = entries_[name];
    reloading = entry.serving != nullptr;
    // While a reload warms up, the old version keeps serving and the model stays READY.
    if (!reloading) entry.state = kStateLoading;
  }
  if (!reloading) NotifyStatesChanged();
  spdlog::info("{} model '{}' from {}", reloading ? "reloading" : "loading", name, model_dir);
  std::shared_ptr<LoadedModel> loaded;
  Status status =
      LoadModelVersion(model_dir, name, default_device_, clock_, options_.scheduler_busy_poll, &loaded);
  const int64_t largest_request = status.ok() ? LargestRequestBytes(loaded->scheduler->spec()) : 0;
  if (options_.max_request_bytes > 0 && largest_request > options_.max_request_bytes) {
    status = ResourceExhausted(
        "model '" + name + "': its largest request comes to " + std::to_string(largest_request) +
        " bytes, beyond the " +
        std::to_string(options_.max_request_bytes) +
        " the server takes (set at start-up from the models then in the repository): restart it, or start it "
        "with a larger --max-request-bytes");
    loaded.reset();
  }
  if (!status.ok()) {
    spdlog::error("model '{}' failed to load: {}", name, status.message());
    if (!reloading) SetState(name, kStateUnavailable, ForClient(status).message());
    return status;
  }
  if (listener_.serving) listener_.serving(*loaded);
  std::shared_ptr<LoadedModel> previous;
  {
    MutexLock lock(&mutex_);
    Entry& entry = entries_[name];
    previous = std::move(entry.serving);
    entry = Entry{std::move(loaded), kStateReady, ""};
  }
  NotifyStatesChanged();
  if (previous) Retire(std::move(previous));
  return Status::Ok();
}

Status ModelRepository::UnloadNamed(const std::string& name) {
  std::shared_ptr<LoadedModel> previous;
  {
    MutexLock lock(&mutex_);
    auto found = entries_.find(name);
    if (found == entries_.end() && !IsDirectory(options_.model_repository + "/" + name)) {
      return NotFound("model_name: unknown model '" + name + "'");
    }
    if (found == entries_.end() || !found->second.serving) return Status::Ok();  // nothing to unload
    previous = std::move(found->second.serving);
    found->second.state = kStateUnloading;
    found->second.reason = "";
  }
  NotifyStatesChanged();
  spdlog::info("unloading model '{}' version {}: draining its requests", name, previous->version);
  Retire(std::move(previous));
  SetState(name, kStateUnavailable, kReasonUnloaded);
  return Status::Ok();
}

void ModelRepository::Retire(std::shared_ptr<LoadedModel> model) {
  // Requests hold the version from Find until their answer is sent, so once this is the last
  // reference nothing can reach it any more and its queue is empty.
  const auto started = std::chrono::steady_clock::now();
  auto next_report = started + std::chrono::seconds(10);
  while (model.use_count() > 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (std::chrono::steady_clock::now() >= next_report) {
      spdlog::warn("model '{}' version {}: still waiting for {} request(s) to be answered",
                   model->scheduler->spec().name, model->version, model.use_count() - 1);
      next_report += std::chrono::seconds(10);
    }
  }
  model->scheduler->Stop();
  if (listener_.retired) listener_.retired(*model);
  spdlog::info("model '{}' version {} released after {} ms", model->scheduler->spec().name, model->version,
               std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started)
                   .count());
}

Status ModelRepository::ForClient(const Status& status) const {
  if (status.ok() || options_.model_repository.empty()) return status;
  std::string message = status.message();
  ReplaceAll(&message, options_.model_repository + "/", "");
  ReplaceAll(&message, options_.model_repository, "the model repository");
  return Status(status.code(), message);
}

}  // namespace graphserve
