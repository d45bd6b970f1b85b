#include "torchscript_model.h"

#include <torch/script.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <exception>
#include <fstream>
#include <set>
#include <utility>
#include <vector>

#include "engine_log.h"
#include "row_bound.h"
#include "torch_errors.h"

namespace graphserve {
namespace {

// The extra file deploy/models/ragged_export.py saves beside a TorchScript module.
constexpr const char* kSignatureFile = "graphserve.signature";

// The N of a name "<anything>__<N>", Triton's PyTorch backend's naming convention; -1 otherwise.
int NamedIndex(const std::string& name) {
  const size_t separator = name.rfind("__");
  if (separator == std::string::npos) return -1;
  const char* first = name.data() + separator + 2;
  const char* last = name.data() + name.size();
  int index = -1;
  const auto [end, error] = std::from_chars(first, last, index);
  const bool digits_only = first != last && std::isdigit(static_cast<unsigned char>(*first));
  return error == std::errc() && end == last && digits_only ? index : -1;
}

// Which of forward's arguments (inputs) or of its result's elements (outputs) each of `tensors`
// is. Empty: its place in the config. Else, when every name carries a __N, that N, as Triton's
// PyTorch backend binds them: N must be distinct, and for inputs (every argument needs a value)
// exactly 0..n-1.
Status BindPositions(const std::vector<TensorSpec>& tensors, const char* kind, bool dense,
                     std::vector<size_t>* positions) {
  positions->clear();
  for (const TensorSpec& tensor : tensors) {
    if (NamedIndex(tensor.name) < 0) return Status::Ok();
  }
  std::set<int> seen;
  for (const TensorSpec& tensor : tensors) {
    const int index = NamedIndex(tensor.name);
    if (!seen.insert(index).second) {
      return InvalidArgument(std::string(kind) + " '" + tensor.name + "': index " +
                             std::to_string(index) + " is taken by another " + kind);
    }
    if (dense && static_cast<size_t>(index) >= tensors.size()) {
      return InvalidArgument(std::string(kind) + " '" + tensor.name + "': index " +
                             std::to_string(index) + " leaves a gap among forward()'s " +
                             std::to_string(tensors.size()) + " arguments (expected 0 to " +
                             std::to_string(tensors.size() - 1) + ")");
    }
    positions->push_back(static_cast<size_t>(index));
  }
  return Status::Ok();
}

// forward()'s arguments after self, as "forward(a, b)" for messages.
std::string SignatureText(const std::vector<c10::Argument>& arguments) {
  std::string text = "forward(";
  for (size_t i = 1; i < arguments.size(); ++i) text += (i > 1 ? ", " : "") + arguments[i].name();
  return text + ")";
}

// Checks BindPositions' binding against forward()'s own arguments, and binds by name where the
// config names every input as forward() does: a config listing them in another order then still
// feeds each its tensor, where binding by place silently swapped them. A config that uses forward's
// names but not all of them, or for other places, is refused, as is one that leaves an argument
// without a default unfed.
Status BindToSignature(const std::vector<TensorSpec>& inputs, const std::vector<c10::Argument>& schema,
                       std::vector<size_t>* positions) {
  const std::string signature = SignatureText(schema);
  std::vector<std::string> names;  // without self
  for (size_t i = 1; i < schema.size(); ++i) names.push_back(schema[i].name());
  const auto place_of = [&names](const std::string& name) {
    return static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
  };
  if (positions->empty()) {
    std::vector<size_t> by_name;
    for (const TensorSpec& input : inputs) by_name.push_back(place_of(input.name));
    if (std::all_of(by_name.begin(), by_name.end(), [&names](size_t at) { return at < names.size(); })) {
      *positions = std::move(by_name);
    } else {
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (by_name[i] < names.size() && by_name[i] != i) {
          return InvalidArgument("input '" + inputs[i].name + "' is argument " + std::to_string(by_name[i]) +
                                 " of " + signature + " but config input " + std::to_string(i) +
                                 ": name every input as forward() does, or none, in its order");
        }
      }
    }
  }
  if (inputs.size() > names.size()) {
    return InvalidArgument("the config has " + std::to_string(inputs.size()) + " inputs; " + signature +
                           " takes " + std::to_string(names.size()));
  }
  std::vector<bool> fed(names.size(), false);
  for (size_t i = 0; i < inputs.size(); ++i) fed[positions->empty() ? i : (*positions)[i]] = true;
  for (size_t j = 0; j < names.size(); ++j) {
    // Forward passes exactly inputs.size() arguments, so the fed ones must come first.
    if (!fed[j] && (j < inputs.size() || !schema[j + 1].default_value())) {
      return InvalidArgument("argument '" + names[j] + "' of " + signature + " gets no config input");
    }
  }
  return Status::Ok();
}

class TorchScriptModel : public Model {
 public:
  // `input_positions` / `output_positions`: BindPositions of the spec's inputs and outputs.
  TorchScriptModel(const ModelSpec& spec, torch::jit::Module module,
                   std::vector<size_t> input_positions, std::vector<size_t> output_positions)
      : spec_(spec),
        module_(std::move(module)),
        compute_type_(PrecisionScalarType(spec.precision)),
        input_positions_(std::move(input_positions)),
        output_positions_(std::move(output_positions)) {}

  Status Forward(const std::vector<at::Tensor>& inputs, std::vector<at::Tensor>* outputs) override {
    std::vector<c10::IValue> arguments(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      // A half-precision module cannot multiply fp32 activations with its fp16/bf16 weights.
      const bool cast = compute_type_ != at::kFloat && inputs[i].is_floating_point();
      const size_t position = input_positions_.empty() ? i : input_positions_[i];
      arguments[position] = cast ? inputs[i].to(compute_type_) : inputs[i];
    }
    return MapResult(module_.forward(std::move(arguments)), outputs);
  }

 private:
  Status MapResult(const c10::IValue& result, std::vector<at::Tensor>* outputs) const {
    // Messages leave out the model and bucket: the executor prefixes them. INTERNAL: what the model
    // returned is the model's fault, not the request's (a client would be told its values were).
    outputs->clear();
    if (result.isTensor() || result.isTuple() || result.isList()) {
      std::vector<c10::IValue> elements;
      if (result.isTensor()) {
        elements.push_back(result);
      } else if (result.isTuple()) {
        const auto& tuple_elements = result.toTupleRef().elements();
        elements.assign(tuple_elements.begin(), tuple_elements.end());
      } else {
        elements = result.toListRef().vec();
      }
      for (size_t i = 0; i < elements.size(); ++i) {
        if (!elements[i].isTensor()) {
          return Internal("forward() returned a sequence whose element " +
                                 std::to_string(i) + " is a " + elements[i].tagKind() +
                                 ", not a tensor");
        }
      }
      if (output_positions_.empty()) {
        // In config order; a count that differs from the config's is reported by the executor.
        for (const c10::IValue& element : elements) outputs->push_back(element.toTensor());
        return Status::Ok();
      }
      for (size_t i = 0; i < spec_.outputs.size(); ++i) {
        if (output_positions_[i] >= elements.size()) {
          return Internal("output '" + spec_.outputs[i].name + "' names element " +
                                 std::to_string(output_positions_[i]) + ", but forward() returned " +
                                 std::to_string(elements.size()) + " tensor(s)");
        }
        outputs->push_back(elements[output_positions_[i]].toTensor());
      }
      return Status::Ok();
    }
    if (result.isGenericDict()) {
      const c10::Dict<c10::IValue, c10::IValue> dict = result.toGenericDict();
      for (const TensorSpec& output : spec_.outputs) {
        const auto entry = dict.find(c10::IValue(output.name));
        if (entry == dict.end()) {
          return Internal("forward() returned a dict without output '" + output.name + "'");
        }
        if (!entry->value().isTensor()) {
          return Internal("forward() returned a dict whose '" + output.name + "' is a " +
                                 entry->value().tagKind() + ", not a tensor");
        }
        outputs->push_back(entry->value().toTensor());
      }
      return Status::Ok();
    }
    return Internal("forward() returned a " + result.tagKind() +
                           "; expected a tensor, a tuple or list of tensors, or a dict of them");
  }

  const ModelSpec spec_;
  torch::jit::Module module_;
  const at::ScalarType compute_type_;
  const std::vector<size_t> input_positions_;
  const std::vector<size_t> output_positions_;
};

}  // namespace

Status LoadTorchScriptModel(const ModelSpec& spec, const std::string& path,
                            const c10::Device& device, std::unique_ptr<Model>* model) {
  if (!std::ifstream(path).good()) {
    return NotFound("model '" + spec.name + "': " + path + " does not exist or cannot be read");
  }
  std::vector<size_t> input_positions, output_positions;
  // A ragged model's batch inputs are arguments after its inputs.
  const std::vector<TensorSpec> arguments = spec.arguments();
  Status status = BindPositions(arguments, "input", /*dense=*/true, &input_positions);
  if (status.ok()) status = BindPositions(spec.outputs, "output", /*dense=*/false, &output_positions);
  if (!status.ok()) return InvalidArgument("model '" + spec.name + "': " + status.message());
  torch::jit::Module module;
  // What deploy/models records beside the module (torch.jit.save's _extra_files): a ragged export's
  // row bound. Asked for by name; an export without it leaves the entry empty.
  torch::jit::ExtraFilesMap extra_files{{kSignatureFile, ""}};
  try {
    module = torch::jit::load(path, device, extra_files);
    status = BindToSignature(arguments, module.get_method("forward").function().getSchema().arguments(),
                             &input_positions);
  } catch (const std::exception& error) {
    return InvalidArgument("model '" + spec.name + "': loading " + path +
                           " failed: " + ExceptionMessage(error));
  }
  if (status.ok() && !extra_files[kSignatureFile].empty()) {
    int64_t max_row_length = 0;
    status = ParseRowBound(extra_files[kSignatureFile], &max_row_length);
    if (status.ok()) status = CheckRowBound(spec, max_row_length);
  }
  if (!status.ok()) return InvalidArgument("model '" + spec.name + "': " + status.message());
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
  *model = std::make_unique<TorchScriptModel>(spec, std::move(module), std::move(input_positions),
                                              std::move(output_positions));
  EngineLog(LogLevel::kInfo, "model '" + spec.name + "': loaded " + path + " (" +
                                 PrecisionName(spec.precision) + ") on " + device.str());
  return Status::Ok();
}

}  // namespace graphserve
