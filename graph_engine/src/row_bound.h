#pragma once
// A ragged export's row bound: the longest row its attention computes whole (ragged_bert.py's
// max_row_length, which deploy/models records in the export's graphserve signature). A row longer
// than it would be attended in pieces and answered wrong, so the config may not admit one.
// Stateless; thread-safe.
#include <cstdint>
#include <string>

#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"

namespace graphserve {

// The key of the bound in the signature's JSON object (absent: the export has none).
inline constexpr const char* kMaxRowLengthKey = "max_row_length";

// INVALID_ARGUMENT, naming both, when `spec` is ragged and its max_sequence_length exceeds
// `exported_max_row_length`; OK when it does not or the export records no bound (0).
Status CheckRowBound(const ModelSpec& spec, int64_t exported_max_row_length);

// The bound in a signature's JSON text: 0 when the key is absent; INVALID_ARGUMENT when the text
// is not a JSON object or the bound is not a positive integer.
Status ParseRowBound(const std::string& signature_json, int64_t* max_row_length);

}  // namespace graphserve
