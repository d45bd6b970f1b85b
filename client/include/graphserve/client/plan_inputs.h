// What graphserve-cli plan-grid reads from a server, turned into the grid planner's inputs: the
// model's limits and grid from its effective config (the ModelConfig RPC), and its traffic, bucket
// times and graph memory from a /metrics scrape, fetched over HTTP(S) with the client's TLS files and
// token. The planner (grid_planner.h) does no I/O; this is where the server's names and formats are
// known. Free functions; thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "graphserve/client/client.h"
#include "graphserve/client/grid_planner.h"
#include "graphserve/client/metrics_text.h"
#include "model_config.pb.h"

namespace graphserve {

// graphserve's default /metrics port (its --metrics-address is 0.0.0.0:8002).
inline constexpr int kDefaultMetricsPort = 8002;

// "http://HOST:8002/metrics" for the host of a normalized gRPC address ("https://" with `tls`); empty
// for a unix: address, which has no host to guess from.
std::string DefaultMetricsUrl(const std::string& grpc_address, bool tls);

// GETs `url` into `body`, sending the token of `options` and trusting its TLS roots (and presenting
// its client certificate) over HTTPS; waits up to options.timeout_ms (0: no limit). False with `error`
// saying what failed: no connection, TLS, or an HTTP status other than 200 (401 names the token).
bool FetchMetricsText(const std::string& url, const ClientOptions& options, std::string* body,
                      std::string* error);

// max_batch_size, max_sequence_length and buckets with max_batch_tokens (0: none), from the config's
// parameters (max_sequence_length, bucket_batch_sizes, bucket_sequence_lengths, max_batch_tokens), or,
// from a server older than those, from graphserve's own fields (max_batch_tokens read by name, or as
// BucketGrid's unknown field 3). False for a model without a variable dimension, whose grid has no
// lengths to plan, or whose parameters do not read.
bool GridFromConfig(const inference::ModelConfig& config, planner::ModelLimits* limits,
                    planner::BucketGrid* grid, std::string* error);

// One model's figures in a scrape.
struct ScrapedModel {
  std::string device;                // the device whose bucket times and graph pool were read
  std::vector<std::string> devices;  // every device with bucket times for the model
  std::vector<planner::MeasuredBucket> measured;  // graphserve_bucket_execution_seconds
  double graph_pool_bytes = 0;                    // graphserve_graph_pool_bytes (0 without graphs)
  std::vector<HistogramBucket> lengths;           // graphserve_request_length
  std::vector<HistogramBucket> rows;              // graphserve_request_rows
  // Real rows per batch the server formed (graphserve_batch_rows_total / graphserve_batches_total,
  // every device); 0 before the first batch.
  double observed_rows_per_batch = 0;
};

// Reads `model`'s series from `exposition`; `device` empty picks the only device, or the first CUDA
// one. False with `error` when the model has no bucket times there (not loaded, or another server).
bool ReadScrapedModel(const MetricsExposition& exposition, const std::string& model,
                      const std::string& device, ScrapedModel* scraped, std::string* error);

}  // namespace graphserve
