// A stand-in for the driver's libnvidia-ml.so.1, for GpuMonitorTest and the metrics test on machines
// without a GPU: two GPUs with fixed readings, the second without power readings (as some boards),
// an energy counter that grows 1500 mJ per read, and FAKE_NVML_FAIL_INIT=1 to make nvmlInit fail.
#include <cstdlib>
#include <cstring>

extern "C" {

struct FakeDevice;
typedef FakeDevice* nvmlDevice_t;
typedef struct {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;
typedef struct {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

enum { kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kNotSupported = 3, kUnknown = 999 };
struct FakeDevice {
  const char* uuid;
  unsigned int utilization;
  int has_power;
};
static FakeDevice devices[2] = {{"GPU-fake-0000", 37, 1}, {"GPU-fake-1111", 80, 0}};
static unsigned long long energy_mj = 5000000;

int nvmlInit_v2(void) {
  const char* fail = getenv("FAKE_NVML_FAIL_INIT");
  return fail != nullptr && strcmp(fail, "1") == 0 ? kUnknown : kSuccess;
}
int nvmlShutdown(void) { return kSuccess; }
const char* nvmlErrorString(int status) { return status == kUnknown ? "Unknown Error" : "fake error"; }
int nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = 2;
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (index >= 2) return kInvalidArgument;
  *device = &devices[index];
  return kSuccess;
}
int nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  strncpy(uuid, device->uuid, length - 1);
  uuid[length - 1] = '\0';
  return kSuccess;
}
int nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  utilization->gpu = device->utilization;
  utilization->memory = 10;
  return kSuccess;
}
int nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  memory->total = 80ull << 30;
  memory->used = device == &devices[0] ? 3ull << 30 : 0;
  memory->free = memory->total - memory->used;
  return kSuccess;
}
int nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* milliwatts) {
  if (!device->has_power) return kNotSupported;
  *milliwatts = 123456;
  return kSuccess;
}
int nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int* milliwatts) {
  if (!device->has_power) return kNotSupported;
  *milliwatts = 700000;
  return kSuccess;
}
int nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long* millijoules) {
  if (!device->has_power) return kNotSupported;
  energy_mj += 1500;
  *millijoules = energy_mj;
  return kSuccess;
}

}  // extern "C"
