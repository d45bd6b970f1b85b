#pragma once
// The token-features test models of make_test_models.py (TorchScript) and make_aoti_test_models.py
// (AOTInductor): their spec, and a check of every item's slice against the values they compute
// exactly. Torch-free, like the server.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "graphserve/engine/executor.h"

namespace graphserve::testing {

inline constexpr int64_t kFeatures = 8;

TensorSpec PerTokenSpec();
TensorSpec PooledSpec();

// Batch 4 (buckets 2, 4) x length 8 (buckets 4, 8); input_ids pad with 5, which would show in
// per_token if the mask did not zero it.
ModelSpec TokenFeaturesSpec(const std::string& name, std::vector<TensorSpec> outputs,
                            const std::string& platform);

Status CreateOnCpu(const ModelSpec& spec, const std::string& model_dir,
                   std::unique_ptr<Executor>* executor);

// Serves three items of different rows and lengths in one 4x8 bucket and checks every slice
// against the exact values. `per_token_index` / `pooled_index`: where the spec lists them.
void ExpectServesEachItemItsOwnSlice(Executor& executor, size_t per_token_index,
                                     size_t pooled_index);

}  // namespace graphserve::testing
