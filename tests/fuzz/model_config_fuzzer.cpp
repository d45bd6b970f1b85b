// The model config loader: the input is a config.pbtxt, read as the model repository reads one
// (parse, resolve Triton's settings, build the spec, place the instances) and described as the
// ModelConfig RPC and the REST config endpoint describe it.
#include <google/protobuf/util/message_differencer.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "graphserve/server/config/config.h"
#include "graphserve/server/config/triton_config.h"

namespace {

using graphserve::fuzz::Check;

// A model folder holding an (empty) model.pt, so that a config naming only backend "pytorch"
// resolves to a platform as it does in a real repository.
class ModelFolder {
 public:
  ModelFolder() {
    char dir[] = "/tmp/graphserve_config_fuzzer_XXXXXX";
    Check(mkdtemp(dir) != nullptr, "mkdtemp", "a scratch model folder", __FILE__, __LINE__);
    path_ = dir;
    std::ofstream(path_ + "/model.pt").put('\0');
  }
  ~ModelFolder() {
    unlink((path_ + "/model.pt").c_str());
    rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

const ModelFolder& Folder() {
  static const ModelFolder folder;
  return folder;
}

// model_spec.h: ascending, deduplicated, within [1, limit].
void CheckGrid(const std::vector<int64_t>& grid, int64_t limit, const char* axis) {
  FUZZ_CHECK(!grid.empty(), std::string(axis) + " not empty");
  FUZZ_CHECK(std::adjacent_find(grid.begin(), grid.end(), std::greater_equal<int64_t>()) == grid.end(),
             std::string(axis) + " ascending and deduplicated");
  FUZZ_CHECK(grid.front() >= 1 && grid.back() <= limit, std::string(axis) + " within its limit");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  graphserve::fuzz::SilenceLogs();
  Folder();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace graphserve;
  inference::ModelConfig config;
  ConfigWarnings warnings;
  if (!ParseModelConfig(std::string(reinterpret_cast<const char*>(data), size), "fuzz", &config, &warnings)
           .ok()) {
    return 0;
  }
  if (!ResolveModelConfig(Folder().path(), &config, &warnings).ok()) return 0;
  // triton_config.h: resolving again changes nothing.
  inference::ModelConfig again = config;
  const Status resolved = ResolveModelConfig(Folder().path(), &again, nullptr);
  FUZZ_CHECK(resolved.ok(), "a resolved config resolves again: " + resolved.message());
  FUZZ_CHECK(google::protobuf::util::MessageDifferencer::Equals(config, again),
             "resolving again changes nothing");

  ModelSpec spec;
  if (!ModelSpecFromConfig(config, &spec).ok()) return 0;
  // What the engine checks of every spec before it builds an executor: a config the loader accepts
  // must not be one the engine refuses.
  const Status engine = CheckModelSpec(spec);
  FUZZ_CHECK(engine.ok(), "the engine accepts the loader's spec: " + engine.message());
  CheckGrid(spec.bucket_lengths, spec.max_sequence_length, "bucket_lengths");
  // Batch sizes beyond max_batch_size only within the token budget, each a point of the grid at
  // the shortest length at least.
  FUZZ_CHECK(spec.max_batch_tokens >= 0, "max_batch_tokens not negative");
  FUZZ_CHECK(spec.has_sequence_length() || spec.max_batch_tokens == 0,
             "no token budget without a length");
  CheckGrid(spec.bucket_batch_sizes, std::max<int64_t>(spec.max_batch_size, spec.bucket_batch_sizes.back()),
            "bucket_batch_sizes");
  for (int64_t size : spec.bucket_batch_sizes) {
    FUZZ_CHECK(spec.HasBucket({size, spec.bucket_lengths.front()}),
               "every batch size is a bucket at the shortest length");
  }

  std::vector<InstancePlacement> placements;
  const Status placed = InstancePlacements(config, "cpu", &placements);
  FUZZ_CHECK(placed.ok(), "a resolved config's instances place: " + placed.message());
  // The grid's first and last points as captured graphs: EffectiveModelConfig writes a graph_spec
  // for each.
  const std::vector<BucketShape> points = spec.Buckets();
  FUZZ_CHECK(!points.empty(), "the grid has points");
  const std::vector<BucketShape> graphs = {points.front(), points.back()};
  const inference::ModelConfig effective = EffectiveModelConfig(
      ServedModel{config, spec, SchedulerOptionsFromConfig(config), placements, graphs});
  FUZZ_CHECK(!ProtoToRestJson(effective).empty(), "the REST config answer");
  return 0;
}
