#pragma once
// A fixed-shape model's config, shared by the config, request codec and planner tests: an image
// classifier whose input has no -1 dimension, served with a batch-only grid.
#include <string>

#include "graphserve/server/config/config.h"

namespace graphserve {
namespace fixed_shape_test {

inline constexpr const char* kCnnConfig = R"pb(
  name: "cnn"
  platform: "pytorch_libtorch"
  max_batch_size: 8
  input { name: "image" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] pad_value: 0 }
  output { name: "logits" data_type: TYPE_FP32 dims: [ 1000 ] }
)pb";

inline inference::ModelConfig CnnConfig(const std::string& edit = "") {
  inference::ModelConfig config;
  inference::ModelConfig changes;
  if (!ParseModelConfig(kCnnConfig, "kCnnConfig", &config).ok() ||
      !ParseModelConfig(edit, "edit", &changes).ok()) {
    return inference::ModelConfig();  // an empty config: every test using it fails on its name
  }
  config.MergeFrom(changes);
  return config;
}

}  // namespace fixed_shape_test
}  // namespace graphserve
