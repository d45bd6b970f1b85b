#pragma once
// Model configuration: reading config.pbtxt (protobuf text format of graphserve.config.ModelConfig),
// validating it, and turning it into the engine's ModelSpec. Stateless functions; thread-safe.
#include <string>

#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"
#include "graphserve/server/scheduler.h"
#include "model_config.pb.h"

namespace graphserve {

// Parses `path`. INVALID_ARGUMENT with the parser's line and column for bad text, NOT_FOUND when the
// file is missing.
Status LoadModelConfig(const std::string& path, config::ModelConfig* config);
Status ParseModelConfig(const std::string& text, const std::string& origin,
                        config::ModelConfig* config);

// Checks a config and builds the ModelSpec the engine runs, filling in the default bucket grid.
// Errors name the model and the offending field ("model 'm': input[1].dims: ...").
Status ModelSpecFromConfig(const config::ModelConfig& config, ModelSpec* spec);

// The configuration of the built-in `encoder` served when no repository is given.
config::ModelConfig BuiltinEncoderConfig();

// Scheduler options after defaults: the queue delay and size from `dynamic_batching`.
SchedulerOptions SchedulerOptionsFromConfig(const config::ModelConfig& config);

}  // namespace graphserve
