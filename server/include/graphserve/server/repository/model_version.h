#pragma once
// A model version as a request names it: Triton's version numbers travel as strings, and Triton
// refuses one that is not an integer >= 0 with INVALID_ARGUMENT (HTTP 400) before it looks for the
// model, while a well-formed version that is not served is NOT_FOUND (HTTP 404). Stateless;
// thread-safe.
#include <string>

#include "graphserve/engine/status.h"

namespace graphserve {

// `version` in its canonical decimal form ("007" -> "7", as a served version is named), or empty for
// an empty one (the served version). INVALID_ARGUMENT naming `field` for anything else: a sign,
// spaces, letters, or a number beyond int64.
Status CanonicalModelVersion(const std::string& version, const std::string& field, std::string* canonical);

}  // namespace graphserve
