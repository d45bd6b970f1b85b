#!/usr/bin/env python3
"""Triton's GPU families on /metrics, as a Triton dashboard reads them: the server finds the NVML
library the way it finds the driver's (libnvidia-ml.so.1 on the loader's path), here the stand-in
tests/server/fake_nvml.cpp with fixed readings, so that a machine without a GPU checks the names,
labels, units and --allow-gpu-metrics=false."""
import os
import pathlib
import unittest

import server_fixture

FAKE_NVML = os.environ.get("FAKE_NVML_LIBRARY", "")
MODEL = "tiny_scripted"


def nvml_environment():
    """LD_LIBRARY_PATH with a folder where libnvidia-ml.so.1 is the stand-in, ahead of any driver's."""
    folder = server_fixture.scratch_dir("fake_nvml")
    link = folder / "libnvidia-ml.so.1"
    if not link.exists():
        link.symlink_to(pathlib.Path(FAKE_NVML).resolve())
    return {"LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("LD_LIBRARY_PATH")]))}


@unittest.skipUnless(FAKE_NVML, "FAKE_NVML_LIBRARY is not set (run through ctest)")
class GpuMetricsTest(unittest.TestCase):
    def serve(self, *args, log_name):
        repository = server_fixture.scratch_dir(f"{log_name}_repository")
        server_fixture.copy_model(MODEL, repository)
        return server_fixture.Server("--model-repository", str(repository), *args, log_name=log_name,
                                     env=nvml_environment())

    def test_tritons_gpu_families_with_the_gpu_uuid_label(self):
        with self.serve(log_name="gpu_metrics") as server:
            samples = server.metric_samples()
            by_gpu = {(name, labels.get("gpu_uuid")): value for name, labels, value in samples
                      if name.startswith(("nv_gpu_", "nv_energy_"))}
            self.assertAlmostEqual(by_gpu[("nv_gpu_utilization", "GPU-fake-0000")], 0.37)
            self.assertAlmostEqual(by_gpu[("nv_gpu_utilization", "GPU-fake-1111")], 0.8)
            self.assertEqual(by_gpu[("nv_gpu_memory_total_bytes", "GPU-fake-0000")], 80 * 2**30)
            self.assertEqual(by_gpu[("nv_gpu_memory_used_bytes", "GPU-fake-0000")], 3 * 2**30)
            self.assertAlmostEqual(by_gpu[("nv_gpu_power_usage", "GPU-fake-0000")], 123.456)
            self.assertEqual(by_gpu[("nv_gpu_power_limit", "GPU-fake-0000")], 700.0)
            self.assertGreater(by_gpu[("nv_energy_consumption", "GPU-fake-0000")], 0.0)
            # A board without power readings has no power series rather than a zero.
            self.assertNotIn(("nv_gpu_power_usage", "GPU-fake-1111"), by_gpu)
            self.assertIn("GPU metrics: nv_gpu_* of 2 GPU(s)", server.graphserve.log())

    def test_allow_gpu_metrics_false_exports_none(self):
        with self.serve("--allow-gpu-metrics=false", log_name="gpu_metrics_off") as server:
            names = {name for name, _, _ in server.metric_samples()}
            self.assertFalse({name for name in names if name.startswith("nv_gpu_")})
            self.assertIn("nv_inference_count", names)


if __name__ == "__main__":
    unittest.main()
