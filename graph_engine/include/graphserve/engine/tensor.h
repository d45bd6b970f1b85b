#pragma once
// Torch-free tensors in host memory: what crosses the boundary between the server and the engine.
// HostTensor owns its bytes (a std::string, so that protobuf `bytes` fields can be moved in and out
// without a copy). Value type; thread-compatible.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace graphserve {

enum class DataType {
  kBool,
  kUint8,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFp16,
  kBf16,
  kFp32,
  kFp64,
};

// Bytes per element.
size_t ElementSize(DataType dtype);
// The KServe v2 datatype string: "BOOL", "UINT8", ..., "FP16", "BF16", "FP32", "FP64".
const char* DataTypeName(DataType dtype);
// Inverse of DataTypeName; nullopt for a name graphserve does not serve (e.g. "BYTES").
std::optional<DataType> DataTypeFromName(std::string_view name);

// Product of the dimensions; 1 for a scalar. Dimensions must be non-negative.
int64_t ElementCount(const std::vector<int64_t>& shape);
// "[2, 16, 256]" for messages.
std::string ShapeToString(const std::vector<int64_t>& shape);

struct HostTensor {
  DataType dtype = DataType::kFp32;
  std::vector<int64_t> shape;
  // Row-major, little-endian; size() == ElementCount(shape) * ElementSize(dtype).
  std::string bytes;

  int64_t element_count() const { return ElementCount(shape); }
};

}  // namespace graphserve
