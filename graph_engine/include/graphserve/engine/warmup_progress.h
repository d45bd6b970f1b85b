#pragma once
// How an executor tells its caller how far its warm-up has got, so that the server can show
// progress while a model warms up (minutes on a busy CPU, or capturing hundreds of CUDA graphs).
// Torch-free: the server's progress reporter includes it beside spdlog.
//
// The callback runs on the thread that called Executor::Warmup, after each bucket, and must return
// quickly without calling back into the executor. Errors: none; a callback that throws is the
// caller's bug.
#include <functional>

namespace graphserve {

enum class WarmupStage {
  kWarmingUp,  // running buckets eagerly to pay one-time costs and measure their time
  kCapturing,  // capturing and verifying CUDA graphs
};

// "warming up" or "capturing": the stage as a log line says it.
inline const char* WarmupStageName(WarmupStage stage) {
  return stage == WarmupStage::kCapturing ? "capturing" : "warming up";
}

struct WarmupProgress {
  WarmupStage stage = WarmupStage::kWarmingUp;
  // Buckets of this stage done so far, of `total`; done == total ends the stage.
  int done = 0;
  int total = 0;
};

using WarmupProgressCallback = std::function<void(const WarmupProgress&)>;

}  // namespace graphserve
