#pragma once
// Checks for the command-line tools' numeric flags. CLI11's PositiveNumber and NonNegativeNumber
// refuse -1 with "not in range 0.000000 to " and the largest double written out in 309 digits;
// these name what is wanted instead. Header-only, for any target that links CLI11.
#include <cmath>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

namespace graphserve {

namespace number_flags_detail {
inline CLI::Validator FiniteAtLeast(bool zero_allowed) {
  return CLI::Validator(
      [zero_allowed](std::string& typed) {
        const char* begin = typed.c_str();
        char* end = nullptr;
        const double value = std::strtod(begin, &end);
        if (typed.empty() || end == begin || *end != '\0') return "not a number: " + typed;
        const bool wanted = std::isfinite(value) && (zero_allowed ? value >= 0 : value > 0);
        return wanted ? std::string()
                      : std::string(zero_allowed ? "must be 0 or more" : "must be above 0") + ", not " + typed;
      },
      zero_allowed ? "NONNEGATIVE" : "POSITIVE");
}
}  // namespace number_flags_detail

// A finite number above 0.
inline CLI::Validator PositiveFlag() { return number_flags_detail::FiniteAtLeast(false); }
// A finite number, 0 or more.
inline CLI::Validator NonNegativeFlag() { return number_flags_detail::FiniteAtLeast(true); }

}  // namespace graphserve
