// CudaDriver against a stand-in for the driver's library (fake_cuda.cpp): a missing library, one
// without the driver's calls, a driver that does not initialise, handles opened, copied through from
// other threads and closed, and the untrusted handles, devices and sizes it refuses.
#include "graphserve/server/grpc/cuda_driver.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "fake_cuda_handles.h"
#include "shm_object.h"

namespace graphserve {
namespace {

void ExpectCode(const Status& status, StatusCode code, const std::string& fragment) {
  EXPECT_EQ(status.code(), code) << status.ToString();
  EXPECT_NE(status.message().find(fragment), std::string::npos) << status.message();
}

std::shared_ptr<CudaDriver> OpenFake() {
  std::string why;
  std::shared_ptr<CudaDriver> driver = CudaDriver::Open(FAKE_CUDA_LIBRARY, &why);
  EXPECT_NE(driver, nullptr) << why;
  return driver;
}

TEST(CudaDriverTest, AMissingLibraryIsNoDriverAndSaysSo) {
  std::string why;
  EXPECT_EQ(CudaDriver::Open("libgraphserve_no_such_cuda.so.1", &why), nullptr);
  EXPECT_NE(why.find("cannot open libgraphserve_no_such_cuda.so.1"), std::string::npos) << why;
}

TEST(CudaDriverTest, ALibraryWithoutTheDriversCallsIsNoDriver) {
  std::string why;
  EXPECT_EQ(CudaDriver::Open(FAKE_NVML_LIBRARY, &why), nullptr);
  EXPECT_NE(why.find("has no cuInit"), std::string::npos) << why;
}

TEST(CudaDriverTest, ADriverThatDoesNotInitialiseIsNoDriver) {
  setenv("FAKE_CUDA_FAIL_INIT", "1", 1);
  std::string why;
  EXPECT_EQ(CudaDriver::Open(FAKE_CUDA_LIBRARY, &why), nullptr);
  unsetenv("FAKE_CUDA_FAIL_INIT");
  EXPECT_NE(why.find("cuInit failed: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected (100)"),
            std::string::npos)
      << why;
}

TEST(CudaDriverTest, AHandleOpensCopiesFromAnyThreadAndClosesWithItsMemory) {
  std::shared_ptr<CudaDriver> driver = OpenFake();
  ASSERT_NE(driver, nullptr);
  EXPECT_EQ(driver->device_count(), 2);
  std::unique_ptr<CudaIpcMemory> memory;
  // byte_size may be less than the allocation.
  ASSERT_TRUE(driver->OpenIpcHandle(FakeIpcHandle(8192), 1, 4096, &memory).ok());
  EXPECT_EQ(memory->device_id(), 1);
  EXPECT_EQ(FakeCudaOpenHandles(), 1);
  // A thread that never made a context current: the copies do it (the fake refuses copies without).
  std::thread([&] {
    std::string bytes(100, '\0');
    ASSERT_TRUE(memory->CopyToHost(1000, bytes.size(), bytes.data()).ok());
    EXPECT_EQ(bytes, ShmPattern(1000, 100));
    ASSERT_TRUE(memory->CopyFromHost(10, "written", 7).ok());
    ASSERT_TRUE(memory->CopyToHost(8, 11, bytes.data()).ok());
    EXPECT_EQ(bytes.substr(0, 11), ShmPattern(8, 2) + "written" + ShmPattern(17, 2));
  }).join();
  memory.reset();
  EXPECT_EQ(FakeCudaOpenHandles(), 0);
}

TEST(CudaDriverTest, UntrustedHandlesDevicesAndSizesAreRefusedByField) {
  std::shared_ptr<CudaDriver> driver = OpenFake();
  ASSERT_NE(driver, nullptr);
  std::unique_ptr<CudaIpcMemory> memory;
  ExpectCode(driver->OpenIpcHandle(FakeIpcHandle(4096).substr(0, 63), 0, 64, &memory),
             StatusCode::kInvalidArgument, "raw_handle: 63 bytes; a cudaIpcMemHandle_t is 64");
  ExpectCode(driver->OpenIpcHandle("", 0, 64, &memory), StatusCode::kInvalidArgument, "raw_handle: 0 bytes");
  for (const int64_t device : {int64_t{-1}, int64_t{2}, int64_t{1} << 40}) {
    ExpectCode(driver->OpenIpcHandle(FakeIpcHandle(4096), device, 64, &memory), StatusCode::kInvalidArgument,
               "device_id: " + std::to_string(device) + " is no CUDA device of this server (it has 2");
  }
  ExpectCode(driver->OpenIpcHandle(std::string(64, 'x'), 0, 64, &memory), StatusCode::kInvalidArgument,
             "raw_handle: the CUDA driver cannot open it on device 0 (CUDA_ERROR_MAP_FAILED");
  ExpectCode(driver->OpenIpcHandle(FakeIpcHandle(4096), 0, 4097, &memory), StatusCode::kInvalidArgument,
             "byte_size: 4097 bytes, more than the 4096 of the allocation");
  ExpectCode(driver->OpenIpcHandle(FakeIpcHandle(4096), 0, ~uint64_t{0}, &memory),
             StatusCode::kInvalidArgument, "byte_size: ");
  EXPECT_EQ(memory, nullptr);
  // A handle refused after it opened (its size) is closed again.
  EXPECT_EQ(FakeCudaOpenHandles(), 0);
}

}  // namespace
}  // namespace graphserve
