#include "graphserve/server/repository/model_version.h"

#include <charconv>
#include <cstdint>

namespace graphserve {

Status CanonicalModelVersion(const std::string& version, const std::string& field, std::string* canonical) {
  canonical->clear();
  if (version.empty()) return Status::Ok();
  int64_t number = 0;
  const char* end = version.data() + version.size();
  // from_chars takes a leading '-'; Triton refuses negative versions, so digits only.
  const auto [stop, error] = std::from_chars(version.data(), end, number);
  if (version[0] < '0' || version[0] > '9' || error != std::errc() || stop != end) {
    return InvalidArgument(field + ": '" + version + "' is not a model version (an integer of at least 0)");
  }
  *canonical = std::to_string(number);
  return Status::Ok();
}

}  // namespace graphserve
