// GpuMonitor over a stand-in NVML library (fake_nvml.cpp, built beside this test): Triton's units,
// CUDA_VISIBLE_DEVICES, a missing library or a failed nvmlInit, and the nv_gpu_* families /metrics
// serves from it.
#include "graphserve/server/observability/gpu_monitor.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>
#include <string>

#include "graphserve/server/observability/metrics.h"
#include "prometheus_text.h"

namespace graphserve {
namespace {

using testing::Exposition;

// Sets an environment variable for one test, restoring what it was.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::unique_ptr<GpuMonitor> OpenFake() {
  std::string why;
  std::unique_ptr<GpuMonitor> monitor = GpuMonitor::Open(FAKE_NVML_LIBRARY, &why);
  EXPECT_NE(monitor, nullptr) << why;
  return monitor;
}

TEST(GpuMonitorTest, ReadsEveryGpuInTritonsUnitsLeavingOutWhatAGpuDoesNotSupport) {
  unsetenv("CUDA_VISIBLE_DEVICES");
  const std::unique_ptr<GpuMonitor> monitor = OpenFake();
  ASSERT_NE(monitor, nullptr);
  ASSERT_EQ(monitor->gpu_count(), 2u);
  const std::vector<GpuReading> readings = monitor->Read();
  ASSERT_EQ(readings.size(), 2u);
  const GpuReading& first = readings[0];
  EXPECT_EQ(first.uuid, "GPU-fake-0000");
  EXPECT_DOUBLE_EQ(*first.utilization, 0.37);
  EXPECT_DOUBLE_EQ(*first.memory_total_bytes, 80.0 * (1ull << 30));
  EXPECT_DOUBLE_EQ(*first.memory_used_bytes, 3.0 * (1ull << 30));
  EXPECT_DOUBLE_EQ(*first.power_watts, 123.456);
  EXPECT_DOUBLE_EQ(*first.power_limit_watts, 700.0);
  // Since the monitor opened, not since the driver loaded: one read later, 1500 mJ more.
  EXPECT_DOUBLE_EQ(*first.energy_joules, 1.5);
  EXPECT_DOUBLE_EQ(*monitor->Read()[0].energy_joules, 3.0);
  const GpuReading& second = readings[1];
  EXPECT_EQ(second.uuid, "GPU-fake-1111");
  EXPECT_DOUBLE_EQ(*second.utilization, 0.8);
  EXPECT_FALSE(second.power_watts.has_value());
  EXPECT_FALSE(second.power_limit_watts.has_value());
  EXPECT_FALSE(second.energy_joules.has_value());
}

TEST(GpuMonitorTest, CudaVisibleDevicesPicksGpusByIndexOrUuidPrefix) {
  {
    ScopedEnv visible("CUDA_VISIBLE_DEVICES", "1");
    const std::unique_ptr<GpuMonitor> monitor = OpenFake();
    ASSERT_NE(monitor, nullptr);
    ASSERT_EQ(monitor->Read().size(), 1u);
    EXPECT_EQ(monitor->Read()[0].uuid, "GPU-fake-1111");
  }
  {
    ScopedEnv visible("CUDA_VISIBLE_DEVICES", "GPU-fake-00");
    const std::unique_ptr<GpuMonitor> monitor = OpenFake();
    ASSERT_NE(monitor, nullptr);
    EXPECT_EQ(monitor->Read().at(0).uuid, "GPU-fake-0000");
  }
  ScopedEnv none("CUDA_VISIBLE_DEVICES", "");
  std::string why;
  EXPECT_EQ(GpuMonitor::Open(FAKE_NVML_LIBRARY, &why), nullptr);
  EXPECT_NE(why.find("none of them visible"), std::string::npos) << why;
}

TEST(GpuMonitorTest, AMissingLibraryOrAFailedInitIsNoMonitorWithTheReason) {
  std::string why;
  EXPECT_EQ(GpuMonitor::Open("/nonexistent/libnvidia-ml.so.1", &why), nullptr);
  EXPECT_NE(why.find("cannot open /nonexistent/libnvidia-ml.so.1"), std::string::npos) << why;
  ScopedEnv fail("FAKE_NVML_FAIL_INIT", "1");
  EXPECT_EQ(GpuMonitor::Open(FAKE_NVML_LIBRARY, &why), nullptr);
  EXPECT_EQ(why, "nvmlInit failed: Unknown Error");
}

TEST(GpuMonitorTest, MetricsServeTritonsGpuFamiliesFromTheMonitor) {
  unsetenv("CUDA_VISIBLE_DEVICES");
  const std::unique_ptr<GpuMonitor> monitor = OpenFake();
  ASSERT_NE(monitor, nullptr);
  ServerMetricsOptions options;
  options.gpu_monitor = monitor.get();
  ServerMetrics metrics(options);
  const std::string text = metrics.TextExposition();
  const Exposition exposition(text);
  EXPECT_DOUBLE_EQ(exposition.One("nv_gpu_utilization", {{"gpu_uuid", "GPU-fake-0000"}}), 0.37);
  EXPECT_DOUBLE_EQ(exposition.One("nv_gpu_utilization", {{"gpu_uuid", "GPU-fake-1111"}}), 0.8);
  EXPECT_DOUBLE_EQ(exposition.One("nv_gpu_memory_used_bytes", {{"gpu_uuid", "GPU-fake-0000"}}),
                   3.0 * (1ull << 30));
  EXPECT_DOUBLE_EQ(exposition.One("nv_gpu_power_limit", {{"gpu_uuid", "GPU-fake-0000"}}), 700.0);
  EXPECT_NE(text.find("# TYPE nv_energy_consumption counter"), std::string::npos);
  // The board without power readings has no power series, rather than a zero.
  EXPECT_EQ(text.find("nv_gpu_power_usage{gpu_uuid=\"GPU-fake-1111\"}"), std::string::npos) << text;
  // Without a monitor (no NVML, --allow-gpu-metrics=false), no nv_gpu_ family at all.
  EXPECT_EQ(ServerMetrics(ServerMetricsOptions{}).TextExposition().find("nv_gpu_"), std::string::npos);
}

}  // namespace
}  // namespace graphserve
