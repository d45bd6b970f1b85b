#pragma once
// The engine's record of a CUDA fault that no later launch survives (DeviceFault in executor.h
// says what the server does with it). Thread-safe.
#include <c10/core/Device.h>

namespace graphserve {

// After a batch failed on `device`: when the device's context is left faulted (a device-side
// assert such as an embedding index out of range, an illegal address, a failed launch), records
// the first such fault for DeviceFault. Waits for the device's queued work. Nothing on the CPU.
void NoteFailureOn(const c10::Device& device);

}  // namespace graphserve
