#include "padding.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <exception>

#include "batch_accounting.h"
#include "torch_errors.h"

namespace graphserve {
namespace {

std::vector<int64_t> ToVector(at::IntArrayRef sizes) {
  return std::vector<int64_t>(sizes.begin(), sizes.end());
}

// The part of a padded tensor that belongs to the item starting at `row_offset`.
at::Tensor ItemRegion(const at::Tensor& padded, const TensorSpec& tensor, const InferenceItem& item,
                      int64_t row_offset) {
  at::Tensor region = padded.narrow(0, row_offset, item.rows);
  const int variable_dim = tensor.variable_dim();
  if (variable_dim >= 0) region = region.narrow(variable_dim + 1, 0, item.length);
  return region;
}

Status ValidateItem(const ModelSpec& spec, const std::string& context, size_t index,
                    const InferenceItem& item) {
  const std::string where = context + ": item " + std::to_string(index);
  if (item.rows < 1 || item.length < 0) {
    return InvalidArgument(where + " has " + std::to_string(item.rows) + " rows and length " +
                           std::to_string(item.length));
  }
  if (item.inputs.size() != spec.inputs.size()) {
    return InvalidArgument(where + " has " + std::to_string(item.inputs.size()) +
                           " inputs, the model takes " + std::to_string(spec.inputs.size()));
  }
  if (item.outputs_wanted.size() != spec.outputs.size()) {
    return InvalidArgument(where + " has " + std::to_string(item.outputs_wanted.size()) +
                           " outputs_wanted flags, the model has " +
                           std::to_string(spec.outputs.size()) + " outputs");
  }
  // The request itself was validated against the spec once, by the server's codec; what is checked
  // here is what the copies rely on: each input's bytes hold its shape in the spec's dtype.
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const TensorSpec& input = spec.inputs[i];
    const HostTensor& tensor = item.inputs[i];
    const size_t expected_bytes =
        static_cast<size_t>(ElementCount(tensor.shape)) * ElementSize(input.dtype);
    if (tensor.shape.empty() || tensor.shape[0] != item.rows || tensor.bytes.size() != expected_bytes) {
      return InvalidArgument(where + " input '" + input.name + "' holds " +
                             std::to_string(tensor.bytes.size()) + " bytes for shape " +
                             ShapeToString(tensor.shape) + " " + DataTypeName(input.dtype) +
                             " with " + std::to_string(item.rows) + " rows");
    }
  }
  return Status::Ok();
}

}  // namespace

at::ScalarType ToScalarType(DataType dtype) {
  switch (dtype) {
    case DataType::kBool: return at::kBool;
    case DataType::kUint8: return at::kByte;
    case DataType::kInt8: return at::kChar;
    case DataType::kInt16: return at::kShort;
    case DataType::kInt32: return at::kInt;
    case DataType::kInt64: return at::kLong;
    case DataType::kFp16: return at::kHalf;
    case DataType::kBf16: return at::kBFloat16;
    case DataType::kFp32: return at::kFloat;
    case DataType::kFp64: return at::kDouble;
  }
  return at::kFloat;
}

namespace {

// A batch input's values as an int64 host tensor; copy_ converts to the configured dtype.
at::Tensor BatchInputTensor(BatchInputKind kind, const std::vector<int64_t>& lengths) {
  const std::vector<int64_t> values = BatchInputValues(kind, lengths);
  return at::tensor(at::IntArrayRef(values), at::TensorOptions().dtype(at::kLong));
}

// Input `i` of every item, end to end along the tokens of the ragged `destination` ([tokens,
// ...]); the tail keeps the pad value the caller wrote.
void FillRaggedInput(const Batch& batch, size_t i, at::ScalarType scalar_type,
                     const at::Tensor& destination) {
  int64_t token_offset = 0;
  for (const InferenceItem* item : batch.items) {
    const HostTensor& source = item->inputs[i];
    const int64_t tokens = item->rows * item->length;
    // [rows, length, rest...] is its rows' tokens end to end already: a view, no copy.
    std::vector<int64_t> flat{tokens};
    flat.insert(flat.end(), source.shape.begin() + 2, source.shape.end());
    const at::Tensor source_view =
        at::from_blob(const_cast<char*>(source.bytes.data()), flat, at::TensorOptions().dtype(scalar_type));
    destination.narrow(0, token_offset, tokens).copy_(source_view);
    token_offset += tokens;
  }
}

}  // namespace

std::string DescribeBucket(const ModelSpec& spec, const BucketShape& shape) {
  return "model '" + spec.name + "' bucket " + spec.BucketLabel(shape);
}

Status ValidateBatch(const ModelSpec& spec, const Batch& batch) {
  const std::string context = DescribeBucket(spec, batch.padded_shape);
  if (batch.items.empty()) return InvalidArgument(context + ": the batch has no items");
  int64_t total_rows = 0;
  int64_t longest = 0;
  for (size_t k = 0; k < batch.items.size(); ++k) {
    const InferenceItem* item = batch.items[k];
    if (item == nullptr) {
      return InvalidArgument(context + ": item " + std::to_string(k) + " is null");
    }
    Status status = ValidateItem(spec, context, k, *item);
    if (!status.ok()) return status;
    total_rows += item->rows;
    longest = std::max(longest, item->length);
  }
  if (spec.ragged) {
    // The rows go end to end: the tokens must fit the bucket's, and a tail needs a filler row.
    int64_t tokens = 0;
    for (const InferenceItem* item : batch.items) tokens += item->rows * item->length;
    if (tokens > batch.padded_shape.length ||
        RaggedRowsNeeded(total_rows, tokens, batch.padded_shape.length) > batch.padded_shape.batch) {
      return InvalidArgument(context + ": the ragged bucket does not hold the batch's " +
                             std::to_string(total_rows) + " rows of " + std::to_string(tokens) +
                             " tokens (with a filler row for a tail)");
    }
    return Status::Ok();
  }
  if (total_rows > batch.padded_shape.batch || longest > batch.padded_shape.length) {
    return InvalidArgument(context + ": the padded shape does not hold the batch's " +
                           std::to_string(total_rows) + " rows of length up to " +
                           std::to_string(longest));
  }
  return Status::Ok();
}

Status FillPaddedInputs(const ModelSpec& spec, const Batch& batch,
                        const std::vector<at::Tensor>& destinations) {
  Status status = ValidateBatch(spec, batch);
  if (!status.ok()) return status;
  const std::string context = DescribeBucket(spec, batch.padded_shape);
  const std::vector<TensorSpec> arguments = spec.arguments();
  if (destinations.size() != arguments.size()) {
    return Internal(context + ": " + std::to_string(destinations.size()) + " destination tensors for " +
                    std::to_string(arguments.size()) + " arguments");
  }
  try {
    for (size_t i = 0; i < arguments.size(); ++i) {
      const TensorSpec& input = arguments[i];
      const at::Tensor& destination = destinations[i];
      const at::ScalarType scalar_type = ToScalarType(input.dtype);
      const std::vector<int64_t> expected_shape = PaddedShape(input, batch.padded_shape);
      if (!destination.defined() || ToVector(destination.sizes()) != expected_shape ||
          destination.scalar_type() != scalar_type) {
        return Internal(context + ": destination for input '" + input.name + "' is " +
                        (destination.defined() ? ShapeToString(ToVector(destination.sizes())) +
                                                     " " + c10::toString(destination.scalar_type())
                                               : std::string("undefined")) +
                        ", expected " + ShapeToString(expected_shape) + " " +
                        c10::toString(scalar_type));
      }
      if (input.batch_input_kind != BatchInputKind::kNone) {
        destination.copy_(BatchInputTensor(input.batch_input_kind, RaggedRowLengths(batch)));
        continue;
      }
      destination.fill_(input.pad_value);
      if (input.ragged) {
        FillRaggedInput(batch, i, scalar_type, destination);
        continue;
      }
      int64_t row_offset = 0;
      for (const InferenceItem* item : batch.items) {
        const HostTensor& source = item->inputs[i];
        // from_blob only views the request's bytes, which copy_ reads and never writes.
        const at::Tensor source_view =
            at::from_blob(const_cast<char*>(source.bytes.data()), source.shape,
                          at::TensorOptions().dtype(scalar_type));
        ItemRegion(destination, input, *item, row_offset).copy_(source_view);
        row_offset += item->rows;
      }
    }
  } catch (const std::exception& error) {
    return Internal(context + ": padding the inputs failed: " + ExceptionMessage(error));
  }
  return Status::Ok();
}

Status MakePaddedInputs(const ModelSpec& spec, const Batch& batch,
                        std::vector<at::Tensor>* inputs) {
  inputs->clear();
  try {
    for (const TensorSpec& input : spec.arguments()) {
      inputs->push_back(at::empty(PaddedShape(input, batch.padded_shape),
                                  at::TensorOptions().dtype(ToScalarType(input.dtype))));
    }
  } catch (const std::exception& error) {
    inputs->clear();
    return Internal(DescribeBucket(spec, batch.padded_shape) +
                    ": allocating the padded inputs failed: " + ExceptionMessage(error));
  }
  return FillPaddedInputs(spec, batch, *inputs);
}

namespace {

// Input i's configured range, or an empty one.
ValueRange RangeOf(const ModelSpec& spec, size_t i) {
  return i < spec.input_ranges.size() ? spec.input_ranges[i] : ValueRange{};
}

double ClampTo(const ValueRange& range, double value) {
  if (range.min) value = std::max(value, *range.min);
  if (range.max) value = std::min(value, *range.max);
  return value;
}

}  // namespace

Status MakeWarmupInputs(const ModelSpec& spec, const BucketShape& shape,
                        std::vector<at::Tensor>* inputs) {
  inputs->clear();
  try {
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      const TensorSpec& input = spec.inputs[i];
      at::Tensor tensor = at::full(PaddedShape(input, shape), input.pad_value,
                                   at::TensorOptions().dtype(ToScalarType(input.dtype)));
      const int variable_dim = input.variable_dim();
      if (input.ragged) {
        tensor.fill_(ClampTo(RangeOf(spec, i), 1.0));  // every token belongs to some row
      } else if (variable_dim >= 0 && shape.length > 0) {
        tensor.select(variable_dim + 1, 0).fill_(ClampTo(RangeOf(spec, i), 1.0));
      }
      inputs->push_back(std::move(tensor));
    }
    // A ragged bucket's tokens spread evenly over its rows, as a full batch of requests would.
    std::vector<int64_t> lengths(static_cast<size_t>(shape.batch), 0);
    for (size_t row = 0; row < lengths.size(); ++row) {
      lengths[row] =
          shape.length / shape.batch + (static_cast<int64_t>(row) < shape.length % shape.batch ? 1 : 0);
    }
    for (const TensorSpec& batch_input : spec.batch_inputs) {
      inputs->push_back(
          BatchInputTensor(batch_input.batch_input_kind, lengths).to(ToScalarType(batch_input.dtype)));
    }
  } catch (const std::exception& error) {
    inputs->clear();
    return Internal(DescribeBucket(spec, shape) +
                    ": making warm-up inputs failed: " + ExceptionMessage(error));
  }
  return Status::Ok();
}

std::vector<at::Tensor> MakeVerificationInputs(const ModelSpec& spec, const BucketShape& shape, uint64_t seed) {
  at::Generator generator = at::detail::createCPUGenerator(seed);
  const at::Tensor lengths =
      at::randint(1, shape.length + 1, {shape.batch}, generator, at::TensorOptions().dtype(at::kLong));
  std::vector<at::Tensor> inputs;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const TensorSpec& input = spec.inputs[i];
    const ValueRange range = RangeOf(spec, i);
    const std::vector<int64_t> padded = PaddedShape(input, shape);
    const at::ScalarType type = ToScalarType(input.dtype);
    at::Tensor values;
    // The name first: a floating-point mask holds 1 as an integer one does.
    if (input.name.find("mask") != std::string::npos || type == at::kBool) {
      values = at::full(padded, ClampTo(range, 1.0), at::TensorOptions().dtype(type));
    } else if (at::isFloatingType(type)) {
      const double low = range.min.value_or(range.max ? *range.max - 2 : -1);
      const double high = range.max.value_or(low + 2);
      values = (at::rand(padded, generator) * (high - low) + low).to(type);
    } else {
      const int64_t low = range.min ? static_cast<int64_t>(std::ceil(*range.min)) : 1;
      const int64_t highest = range.max ? static_cast<int64_t>(std::floor(*range.max)) : low + 98;
      values = at::randint(low, std::max(highest, low) + 1, padded, generator, at::TensorOptions().dtype(type));
    }
    const int variable_dim = input.variable_dim();
    if (variable_dim >= 0 && !input.ragged) {
      // real[b, ..., l, ...] = l < lengths[b], broadcast over the other dimensions.
      std::vector<int64_t> position_shape(padded.size(), 1);
      position_shape[variable_dim + 1] = shape.length;
      std::vector<int64_t> length_shape(padded.size(), 1);
      length_shape[0] = shape.batch;
      const at::Tensor real = at::arange(shape.length, at::TensorOptions().dtype(at::kLong))
                                  .view(position_shape)
                                  .lt(lengths.view(length_shape));
      values = at::where(real, values, at::full({}, input.pad_value, values.options()));
    }
    inputs.push_back(values.contiguous());
  }
  if (!spec.batch_inputs.empty()) {
    // Ragged: the bucket's tokens cut at random places into its rows, some of them empty.
    const at::Tensor cuts = std::get<0>(
        at::randint(0, shape.length + 1, {shape.batch - 1}, generator, at::TensorOptions().dtype(at::kLong))
            .sort());
    std::vector<int64_t> lengths;
    int64_t previous = 0;
    for (int64_t row = 0; row + 1 < shape.batch; ++row) {
      const int64_t cut = cuts[row].item<int64_t>();
      lengths.push_back(cut - previous);
      previous = cut;
    }
    lengths.push_back(shape.length - previous);
    for (const TensorSpec& batch_input : spec.batch_inputs) {
      inputs.push_back(
          BatchInputTensor(batch_input.batch_input_kind, lengths).to(ToScalarType(batch_input.dtype)));
    }
  }
  return inputs;
}

Status ValidateOutputs(const ModelSpec& spec, const BucketShape& shape,
                       const std::vector<at::Tensor>& outputs) {
  const std::string context = DescribeBucket(spec, shape);
  if (outputs.size() != spec.outputs.size()) {
    return Internal(context + ": the model returned " + std::to_string(outputs.size()) +
                    " outputs, the config declares " + std::to_string(spec.outputs.size()));
  }
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    const TensorSpec& output = spec.outputs[o];
    if (!outputs[o].defined()) {
      return Internal(context + ": output '" + output.name + "' is an undefined tensor");
    }
    const std::vector<int64_t> expected = PaddedShape(output, shape);
    const std::vector<int64_t> actual = ToVector(outputs[o].sizes());
    if (actual != expected) {
      return Internal(context + ": output '" + output.name + "' has shape " + ShapeToString(actual) +
                      ", expected " + ShapeToString(expected) +
                      " (batch, then the config's dims with -1 = the padded length)");
    }
  }
  return Status::Ok();
}

Status SliceOutputs(const ModelSpec& spec, const Batch& batch,
                    const std::vector<at::Tensor>& model_outputs, BatchOutputs* outputs) {
  Status status = ValidateOutputs(spec, batch.padded_shape, model_outputs);
  if (!status.ok()) return status;
  outputs->assign(batch.items.size(), std::vector<HostTensor>(spec.outputs.size()));
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    for (std::vector<HostTensor>& item_outputs : *outputs) {
      item_outputs[o].dtype = spec.outputs[o].dtype;
      item_outputs[o].shape = {0};  // not wanted, unless a slice fills it below
    }
  }
  try {
    const std::vector<OutputSlice> slices = PlanOutputSlices(spec, batch);
    // One device-to-host copy per wanted output (not one per item), in the spec's dtype (e.g. a
    // bf16 network's outputs become FP32), contiguous for the slices' arithmetic.
    std::vector<at::Tensor> host_outputs(spec.outputs.size());
    for (const OutputSlice& slice : slices) {
      at::Tensor& host = host_outputs[slice.output];
      if (!host.defined()) {
        host = model_outputs[slice.output]
                   .to(at::kCPU, ToScalarType(spec.outputs[slice.output].dtype))
                   .contiguous();
      }
      HostTensor& result = (*outputs)[slice.item][slice.output];
      const size_t element_size = ElementSize(result.dtype);
      result.shape = slice.shape;
      result.bytes.resize(static_cast<size_t>(ElementCount(slice.shape)) * element_size);
      CopySlice(slice, element_size, static_cast<const char*>(host.data_ptr()), result.bytes.data());
    }
  } catch (const std::exception& error) {
    outputs->clear();
    return Internal(DescribeBucket(spec, batch.padded_shape) +
                    ": slicing the outputs failed: " + ExceptionMessage(error));
  }
  return Status::Ok();
}

}  // namespace graphserve
