#pragma once
// Turning libtorch exceptions into engine Statuses. Header-only; thread-safe.
#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace graphserve {

// The exception's message without libtorch's C++ stack trace, which would bury the reason in logs
// and client-visible errors.
inline std::string ExceptionMessage(const std::exception& error) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&error)) {
    return torch_error->what_without_backtrace();
  }
  return error.what();
}

}  // namespace graphserve
