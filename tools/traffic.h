#pragma once
// The in-process ceiling of the end-to-end benchmark (deploy/bench/e2e_benchmark.py): the buckets a
// server would replay for a stream of requests, run back to back through one Executor, without
// gRPC, queueing or batching decisions. Requests are binned the way the server's batcher bins them
// at saturation (every bin full): each request goes to the smallest bucket length that holds it,
// each bin is cut into full batches of the largest batch size at its length (ModelSpec's grid is a
// staircase), and its remainder goes into the smallest batch bucket that holds it.
//
// Not thread-safe: one thread plans and runs.
#include <cstdint>
#include <random>
#include <vector>

#include "graphserve/engine/executor.h"
#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"

namespace graphserve::tools {

// A [rows, length] INT64 tensor of token ids in [1, 1000) (every vocabulary here is larger), or of
// ones for a mask.
HostTensor TokenTensor(int64_t rows, int64_t length, bool mask, std::mt19937_64& random);

// A full batch of `input` padded to `shape`: token ids (TokenTensor) for an INT64 [-1] input,
// values in [-1, 1) for an FP32 one (an image, say), zeros for any other dtype.
HostTensor BucketInput(const TensorSpec& input, const BucketShape& shape, std::mt19937_64& random);

// One batch of one-row requests, padded to `shape`, a bucket of the grid.
struct TrafficBatch {
  BucketShape shape;
  std::vector<int64_t> lengths;  // one per request, in arrival order
};

// Bins `lengths` (one-row requests) into batches as described above, bins in length order; a ragged
// model's requests are packed end to end in arrival order instead, each batch as full as the grid's
// largest bucket allows.
// INVALID_ARGUMENT when a length is below 1 or longer than the grid's longest bucket (the server
// would run such a request as an oversize batch, which is no bucket to replay).
Status PlanTraffic(const ModelSpec& spec, const std::vector<int64_t>& lengths,
                   std::vector<TrafficBatch>* batches);

struct TrafficResult {
  std::vector<double> pass_s;  // wall time of each timed pass over every batch
  double median_pass_s = 0;
};

// Runs every batch through `executor.Launch`/`Complete` (padding, copies in and out, forward or
// replay), keeping the executor's pipeline depth in flight as the server's workers do, once untimed
// and then `passes` timed passes; inputs are random token ids with an all-ones mask (inputs named
// like a mask get ones); each request wants the outputs flagged in `outputs_wanted` (one flag per
// spec output). Fails with the first error.
Status RunTraffic(Executor& executor, const ModelSpec& spec, const std::vector<TrafficBatch>& batches,
                  const std::vector<bool>& outputs_wanted, int passes, uint64_t seed,
                  TrafficResult* result);

}  // namespace graphserve::tools
