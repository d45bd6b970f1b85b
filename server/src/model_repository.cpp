#include "graphserve/server/model_repository.h"

#include <spdlog/spdlog.h>

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <string>

#include "graphserve/engine/device.h"
#include "graphserve/server/config.h"
#include "graphserve/server/triton_config.h"

namespace graphserve {
namespace {

// Sorted names of the folders in `dir`, hidden ones left out. POSIX rather than std::filesystem:
// PyTorch's CUDA wheels export std::filesystem symbols of their own, and a binary that links them
// can have its std::filesystem calls bound to those copies and crash.
Status ListSubdirectories(const std::string& dir, std::vector<std::string>* names) {
  DIR* handle = opendir(dir.c_str());
  if (handle == nullptr) {
    return NotFound("--model-repository '" + dir + "': " + std::strerror(errno));
  }
  while (const dirent* entry = readdir(handle)) {
    const std::string name = entry->d_name;
    struct stat info {};
    if (name.empty() || name[0] == '.') continue;
    if (stat((dir + "/" + name).c_str(), &info) == 0 && S_ISDIR(info.st_mode)) names->push_back(name);
  }
  closedir(handle);
  std::sort(names->begin(), names->end());
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

ModelRepository::~ModelRepository() { Stop(); }

Status ModelRepository::Load(const RepositoryOptions& options) {
  std::string default_device;
  Status status = ResolveDevice(options.device, &default_device);
  if (!status.ok()) return Status(status.code(), "--device: " + status.message());

  if (options.model_repository.empty()) {
    spdlog::info("no --model-repository given: serving the built-in model 'encoder'");
    return LoadModel(BuiltinEncoderConfig(), "", default_device);
  }
  std::vector<std::string> model_names;
  status = ListSubdirectories(options.model_repository, &model_names);
  if (!status.ok()) return status;
  if (model_names.empty()) {
    return NotFound("--model-repository '" + options.model_repository + "' holds no model folders");
  }
  for (const std::string& name : model_names) {
    const std::string dir = options.model_repository + "/" + name;
    inference::ModelConfig config;
    status = LoadModelConfig(dir + "/config.pbtxt", &config);
    if (!status.ok()) return status;
    // Triton's convention: the folder names the model when the config does not.
    if (config.name().empty()) config.set_name(name);
    if (config.name() != name) {
      return InvalidArgument(dir + "/config.pbtxt: name '" + config.name() +
                             "' differs from its folder's name");
    }
    status = LoadModel(config, dir, default_device);
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

Status ModelRepository::LoadModel(inference::ModelConfig config, const std::string& model_dir,
                                  const std::string& default_device) {
  Status status = ResolveModelConfig(model_dir, &config, nullptr);
  if (!status.ok()) return status;
  ModelSpec spec;
  status = ModelSpecFromConfig(config, &spec);
  if (!status.ok()) return status;

  // One executor per instance per device.
  std::vector<InstancePlacement> placements;
  status = InstancePlacements(config, default_device, &placements);
  std::vector<std::string> devices;
  for (InstancePlacement& placement : placements) {
    if (!status.ok()) break;
    for (std::string& device : placement.devices) {
      status = ResolveDevice(device, &device);
      if (!status.ok()) break;
      devices.insert(devices.end(), placement.count, device);
    }
  }
  if (!status.ok()) {
    return Status(status.code(), "model '" + spec.name + "': instance_group: " + status.message());
  }

  std::vector<std::unique_ptr<Executor>> executors;
  for (const std::string& device : devices) {
    ExecutorOptions executor_options;
    executor_options.device = device;
    executor_options.model_dir = model_dir;
    executor_options.model_filename = config.default_model_filename();
    std::unique_ptr<Executor> executor;
    status = CreateExecutor(spec, executor_options, &executor);
    if (status.ok()) status = executor->Warmup();
    if (!status.ok()) return status;
    std::string grid;
    for (const BucketInfo& bucket : executor->Buckets()) {
      grid += " " + spec.BucketLabel(bucket.shape) + (bucket.graph ? "(graph " : "(eager ") +
              std::to_string(static_cast<int64_t>(bucket.execute_time_us)) + "us)";
    }
    spdlog::info("model '{}' instance {} on {}: {} buckets:{}", spec.name, executors.size(),
                 executor->device(), executor->Buckets().size(), grid);
    executors.push_back(std::move(executor));
  }

  auto model = std::make_unique<LoadedModel>();
  const SchedulerOptions scheduler_options = SchedulerOptionsFromConfig(config);
  model->effective_config = EffectiveModelConfig(
      ServedModel{config, spec, scheduler_options, std::move(placements), GraphBuckets(executors)});
  model->scheduler = std::make_unique<ModelScheduler>(spec, scheduler_options, std::move(executors), clock_);
  model->scheduler->Start();
  spdlog::info("model '{}' ready: platform {}, max_batch_size {}, max_sequence_length {}, "
               "{} instance(s), {}, queue size {}",
               spec.name, spec.platform, spec.max_batch_size,
               spec.has_sequence_length() ? std::to_string(spec.max_sequence_length)
                                          : std::string("- (fixed shape)"),
               devices.size(),
               scheduler_options.batching_disabled
                   ? std::string("batching disabled")
                   : "queue delay " + std::to_string(scheduler_options.max_queue_delay_us) + " us",
               scheduler_options.max_queue_size);
  if (!models_.emplace(spec.name, std::move(model)).second) {
    return InvalidArgument("model '" + spec.name + "' is defined twice");
  }
  return Status::Ok();
}

void ModelRepository::Stop() {
  for (auto& [name, model] : models_) model->scheduler->Stop();
}

LoadedModel* ModelRepository::Find(const std::string& name) const {
  auto found = models_.find(name);
  return found == models_.end() ? nullptr : found->second.get();
}

}  // namespace graphserve
