#pragma once
// The --address flag of graphserve-cli and graphserve-loadgen: checked and completed as typed
// (NormalizeServerAddress), so that a mistake is named before anything connects.
#include <string>

#include <CLI/CLI.hpp>

#include "graphserve/client/client.h"

namespace graphserve {

inline CLI::Option* AddAddressFlag(CLI::App* app, std::string* address) {
  const CLI::Validator server_address(
      [](std::string& typed) {
        std::string normalized;
        std::string error;
        if (!NormalizeServerAddress(typed, &normalized, &error)) return error;
        typed = normalized;
        return std::string();
      },
      "HOST[:PORT]");
  return app->add_option("--address", *address, "Server address, HOST[:PORT] (port 8001 when left out)")
      ->transform(server_address)
      ->capture_default_str();
}

}  // namespace graphserve
