#include "row_bound.h"

#include <nlohmann/json.hpp>

namespace graphserve {

Status CheckRowBound(const ModelSpec& spec, int64_t exported_max_row_length) {
  if (!spec.ragged || exported_max_row_length <= 0 || spec.max_sequence_length <= exported_max_row_length) {
    return Status::Ok();
  }
  const std::string config = std::to_string(spec.max_sequence_length);
  const std::string exported = std::to_string(exported_max_row_length);
  std::string message = "max_sequence_length " + config;
  message += " is longer than the rows the model's attention was exported for (" + exported + ")";
  message += ": a longer row would be attended in pieces and answered wrong";
  message += "; export with --max-length " + config + ", or set max_sequence_length to at most " + exported;
  return InvalidArgument(message);
}

Status ParseRowBound(const std::string& signature_json, int64_t* max_row_length) {
  *max_row_length = 0;
  try {
    const nlohmann::json json = nlohmann::json::parse(signature_json);
    if (!json.is_object()) return InvalidArgument("its graphserve signature is not a JSON object");
    const auto found = json.find(kMaxRowLengthKey);
    if (found == json.end()) return Status::Ok();
    if (!found->is_number_integer() || found->get<int64_t>() < 1) {
      return InvalidArgument(std::string("its graphserve signature's ") + kMaxRowLengthKey + " is " +
                             found->dump() + ", not a positive integer");
    }
    *max_row_length = found->get<int64_t>();
  } catch (const nlohmann::json::exception& error) {
    return InvalidArgument(std::string("its graphserve signature cannot be read: ") + error.what());
  }
  return Status::Ok();
}

}  // namespace graphserve
