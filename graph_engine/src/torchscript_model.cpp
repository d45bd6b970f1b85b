#include "torchscript_model.h"

#include <torch/script.h>

#include <exception>
#include <fstream>
#include <utility>
#include <vector>

#include "engine_log.h"
#include "torch_errors.h"

namespace graphserve {
namespace {

class TorchScriptModel : public Model {
 public:
  TorchScriptModel(const ModelSpec& spec, torch::jit::Module module)
      : spec_(spec),
        module_(std::move(module)),
        compute_type_(PrecisionScalarType(spec.precision)) {}

  Status Forward(const std::vector<at::Tensor>& inputs, std::vector<at::Tensor>* outputs) override {
    std::vector<c10::IValue> arguments;
    arguments.reserve(inputs.size());
    for (const at::Tensor& input : inputs) {
      // A half-precision module cannot multiply fp32 activations with its fp16/bf16 weights.
      const bool cast = compute_type_ != at::kFloat && input.is_floating_point();
      arguments.emplace_back(cast ? input.to(compute_type_) : input);
    }
    return MapResult(module_.forward(std::move(arguments)), outputs);
  }

 private:
  Status MapResult(const c10::IValue& result, std::vector<at::Tensor>* outputs) const {
    // Messages leave out the model and bucket: the executor prefixes them.
    outputs->clear();
    if (result.isTensor()) {
      outputs->push_back(result.toTensor());
      return Status::Ok();
    }
    if (result.isTuple() || result.isList()) {
      std::vector<c10::IValue> elements;
      if (result.isTuple()) {
        const auto& tuple_elements = result.toTupleRef().elements();
        elements.assign(tuple_elements.begin(), tuple_elements.end());
      } else {
        elements = result.toListRef().vec();
      }
      for (size_t i = 0; i < elements.size(); ++i) {
        if (!elements[i].isTensor()) {
          return InvalidArgument("forward() returned a sequence whose element " +
                                 std::to_string(i) + " is a " + elements[i].tagKind() +
                                 ", not a tensor");
        }
        outputs->push_back(elements[i].toTensor());
      }
      return Status::Ok();
    }
    if (result.isGenericDict()) {
      const c10::Dict<c10::IValue, c10::IValue> dict = result.toGenericDict();
      for (const TensorSpec& output : spec_.outputs) {
        const auto entry = dict.find(c10::IValue(output.name));
        if (entry == dict.end()) {
          return InvalidArgument("forward() returned a dict without output '" + output.name + "'");
        }
        if (!entry->value().isTensor()) {
          return InvalidArgument("forward() returned a dict whose '" + output.name + "' is a " +
                                 entry->value().tagKind() + ", not a tensor");
        }
        outputs->push_back(entry->value().toTensor());
      }
      return Status::Ok();
    }
    return InvalidArgument("forward() returned a " + result.tagKind() +
                           "; expected a tensor, a tuple or list of tensors, or a dict of them");
  }

  const ModelSpec spec_;
  torch::jit::Module module_;
  const at::ScalarType compute_type_;
};

}  // namespace

Status LoadTorchScriptModel(const ModelSpec& spec, const std::string& model_dir,
                            const c10::Device& device, std::unique_ptr<Model>* model) {
  const std::string path = model_dir + "/" + kTorchScriptFileName;
  if (!std::ifstream(path).good()) {
    return NotFound("model '" + spec.name + "': " + path + " does not exist or cannot be read");
  }
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, device);
  } catch (const std::exception& error) {
    return InvalidArgument("model '" + spec.name + "': loading " + path +
                           " failed: " + ExceptionMessage(error));
  }
  try {
    module.eval();
    const at::ScalarType compute_type = PrecisionScalarType(spec.precision);
    // Cast only floating-point parameters and buffers: Module::to(dtype) also converts integer
    // buffers (BERT's position_ids), which then fail as gather indices.
    if (compute_type != at::kFloat) {
      for (at::Tensor tensor : module.parameters()) {
        if (tensor.is_floating_point()) tensor.set_data(tensor.to(compute_type));
      }
      for (at::Tensor tensor : module.buffers()) {
        if (tensor.is_floating_point()) tensor.set_data(tensor.to(compute_type));
      }
    }
  } catch (const std::exception& error) {
    return Internal("model '" + spec.name + "': preparing " + path + " for " +
                    PrecisionName(spec.precision) + " on " + device.str() +
                    " failed: " + ExceptionMessage(error));
  }
  *model = std::make_unique<TorchScriptModel>(spec, std::move(module));
  EngineLog(LogLevel::kInfo, "model '" + spec.name + "': loaded " + path + " (" +
                                 PrecisionName(spec.precision) + ") on " + device.str());
  return Status::Ok();
}

}  // namespace graphserve
