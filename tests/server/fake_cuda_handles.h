#pragma once
// What the tests of CUDA shared memory need of fake_cuda.cpp (loaded by path, FAKE_CUDA_LIBRARY, as
// the server loads the driver's library by name): handles it opens, and how many are open now.
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace graphserve {

// A handle the fake driver opens as an allocation of `size` bytes (byte i holding i % 251).
inline std::string FakeIpcHandle(uint64_t size) {
  std::string handle(64, '\0');
  std::memcpy(handle.data(), "fake-ipc", 8);
  std::memcpy(handle.data() + 8, &size, sizeof(size));
  return handle;
}

// Handles the fake driver has open: those the registry has not closed yet.
inline int FakeCudaOpenHandles() {
  // The loader hands back the library the driver wrapper opened; it stays loaded for the process.
  void* library = dlopen(FAKE_CUDA_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return -1;
  auto* count = reinterpret_cast<int (*)()>(dlsym(library, "FakeCudaOpenHandles"));
  const int open = count != nullptr ? count() : -1;
  dlclose(library);
  return open;
}

}  // namespace graphserve
