#pragma once
// Device names as users write them: "cpu", "cuda" (device 0) and "cuda:N". The one parser of them,
// shared by the server's --device/instance_group checks and the engine, so that both accept and
// refuse the same names. Torch-free; no availability check (the engine and the server each check
// against what this host has). Thread safety: pure functions.
#include <string>

#include "graphserve/engine/status.h"

namespace graphserve {

struct DeviceName {
  bool cuda = false;
  int index = 0;  // the CUDA device's index; 0 for the CPU

  std::string ToString() const;  // "cpu" or "cuda:N"
};

// INVALID_ARGUMENT naming the text for anything else, an index out of int's range included.
Status ParseDeviceName(const std::string& text, DeviceName* device);

}  // namespace graphserve
