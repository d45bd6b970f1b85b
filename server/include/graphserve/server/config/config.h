#pragma once
// Model configuration: reading config.pbtxt (protobuf text format of inference.ModelConfig: Triton's
// schema plus graphserve's fields), validating it, and turning it into the engine's ModelSpec.
// A Triton config is first resolved into graphserve's settings (triton_config.h); the functions
// here read a resolved config. Stateless functions; thread-safe.
#include <optional>
#include <string>
#include <vector>

#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"
#include "graphserve/server/batching/scheduler_options.h"
#include "model_config.pb.h"

namespace graphserve {

// What reading a config found that its author should know but that does not stop the model (a field
// graphserve does not know or does not act on, a default chosen for it), one message per finding,
// each naming the field.
using ConfigWarnings = std::vector<std::string>;

// Parses `path`. Fields outside graphserve's schema (the rest of Triton's, or a typo) are skipped,
// each with a warning naming it, logged and appended to `warnings` (may be null). INVALID_ARGUMENT
// with the parser's line and column for text that is not a ModelConfig, NOT_FOUND when the file is
// missing.
Status LoadModelConfig(const std::string& path, inference::ModelConfig* config,
                       ConfigWarnings* warnings = nullptr);
Status ParseModelConfig(const std::string& text, const std::string& origin,
                        inference::ModelConfig* config, ConfigWarnings* warnings = nullptr);

// Checks a resolved config and builds the ModelSpec the engine runs, filling in the default bucket
// grid. Errors name the model and the offending field ("model 'm': input[1].dims: ...").
Status ModelSpecFromConfig(const inference::ModelConfig& config, ModelSpec* spec);

// The configuration of the built-in `encoder` served when no repository is given.
inference::ModelConfig BuiltinEncoderConfig();

// The engine's type of a config data type; nullopt for those graphserve does not serve (TYPE_STRING,
// TYPE_UINT16, ...). And back.
std::optional<DataType> DataTypeFromConfig(inference::DataType type);
inference::DataType DataTypeToConfig(DataType type);

// Scheduler options after defaults: the queue delay and size from a resolved `dynamic_batching`.
SchedulerOptions SchedulerOptionsFromConfig(const inference::ModelConfig& config);

}  // namespace graphserve
