#include "graphserve/engine/tensor.h"

#include <sstream>

namespace graphserve {
namespace {

struct DataTypeEntry {
  DataType dtype;
  const char* name;
  size_t element_size;
};

// One row per DataType, in enum order.
constexpr DataTypeEntry kDataTypes[] = {
    {DataType::kBool, "BOOL", 1},   {DataType::kUint8, "UINT8", 1}, {DataType::kInt8, "INT8", 1},
    {DataType::kInt16, "INT16", 2}, {DataType::kInt32, "INT32", 4}, {DataType::kInt64, "INT64", 8},
    {DataType::kFp16, "FP16", 2},   {DataType::kBf16, "BF16", 2},   {DataType::kFp32, "FP32", 4},
    {DataType::kFp64, "FP64", 8},
};

const DataTypeEntry& EntryFor(DataType dtype) {
  for (const DataTypeEntry& entry : kDataTypes) {
    if (entry.dtype == dtype) return entry;
  }
  // Unreachable for a valid enum value; a corrupted one gets FP32's row, not a read past the end.
  return kDataTypes[8];
}

}  // namespace

size_t ElementSize(DataType dtype) { return EntryFor(dtype).element_size; }

const char* DataTypeName(DataType dtype) { return EntryFor(dtype).name; }

std::optional<DataType> DataTypeFromName(std::string_view name) {
  for (const DataTypeEntry& entry : kDataTypes) {
    if (name == entry.name) return entry.dtype;
  }
  return std::nullopt;
}

int64_t ElementCount(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::ostringstream text;
  text << '[';
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text << ", ";
    text << shape[i];
  }
  text << ']';
  return text.str();
}

}  // namespace graphserve
