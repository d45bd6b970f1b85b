#pragma once
// Turning libtorch exceptions into engine Statuses. Header-only; thread-safe.
#include <c10/util/Exception.h>

#include <exception>
#include <string>

#include "graphserve/engine/status.h"

namespace graphserve {

// The exception's message without libtorch's C++ stack trace, which would bury the reason in logs
// and client-visible errors.
inline std::string ExceptionMessage(const std::exception& error) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&error)) {
    return torch_error->what_without_backtrace();
  }
  return error.what();
}

// A forward pass's failure: INVALID_ARGUMENT when libtorch blames the values it was given (an index
// beyond an embedding table: a request's token id out of range), INTERNAL otherwise. The server
// tells the client only the code; the message, which can quote the model's source, goes to the log.
inline Status ExecutionFailure(const std::string& context, const std::exception& error) {
  const bool bad_values = dynamic_cast<const c10::IndexError*>(&error) != nullptr ||
                          dynamic_cast<const c10::ValueError*>(&error) != nullptr;
  std::string message = context + ": " + ExceptionMessage(error);
  return bad_values ? InvalidArgument(std::move(message)) : Internal(std::move(message));
}

}  // namespace graphserve
