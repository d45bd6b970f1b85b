#pragma once
// The --address flag of graphserve-cli and graphserve-loadgen (and the loadgen's --http-address):
// checked and completed as typed (NormalizeServerAddress, NormalizeHttpAddress), so that a mistake is
// named before anything connects.
#include <string>

#include <CLI/CLI.hpp>

#include "graphserve/client/client.h"

namespace graphserve {

// A CLI11 transform that replaces what was typed by `normalize`'s address, or names the mistake.
inline CLI::Validator AddressValidator(bool (*normalize)(const std::string&, std::string*, std::string*)) {
  return CLI::Validator(
      [normalize](std::string& typed) {
        std::string normalized;
        std::string error;
        if (!normalize(typed, &normalized, &error)) return error;
        typed = normalized;
        return std::string();
      },
      "HOST[:PORT]");
}

inline CLI::Option* AddAddressFlag(CLI::App* app, std::string* address) {
  return app->add_option("--address", *address, "Server address, HOST[:PORT] (port 8001 when left out)")
      ->transform(AddressValidator(&NormalizeServerAddress))
      ->capture_default_str();
}

// A scheme, a missing host or a bad port sent every call of a run to fail at once.
inline CLI::Option* AddHttpAddressFlag(CLI::App* app, std::string* address, const std::string& description) {
  return app->add_option("--http-address", *address, description)->transform(AddressValidator(&NormalizeHttpAddress));
}

}  // namespace graphserve
