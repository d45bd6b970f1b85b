#pragma once
// Many ModelInfer calls in flight at once from one thread, through gRPC's asynchronous client API
// (a CompletionQueue), for the front-end test and benchmark; and a model repository written at test
// time around a TorchScript file the fixture made. Not thread-safe: one thread owns an AsyncCaller.
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "grpc_service.grpc.pb.h"

namespace graphserve::testing {

// A token model that maps each token to 4 numbers on its own (the fixture's `tiny_traced`), under
// the name "projection", with this batching block and instance count.
inline std::string ProjectionConfig(int64_t max_batch_size, int64_t max_queue_size, int instances) {
  return "name: \"projection\"\n"
         "platform: \"pytorch_libtorch\"\n"
         "max_batch_size: " +
         std::to_string(max_batch_size) +
         "\n"
         "max_sequence_length: 64\n"
         "sequence_mask_input: \"attention_mask\"\n"
         "input { name: \"input_ids\" data_type: TYPE_INT64 dims: [ -1 ] pad_value: 0 }\n"
         "input { name: \"attention_mask\" data_type: TYPE_INT64 dims: [ -1 ] pad_value: 0 }\n"
         "output { name: \"projected\" data_type: TYPE_FP32 dims: [ -1, 4 ] }\n"
         "dynamic_batching { max_queue_delay_microseconds: 500 max_queue_size: " +
         std::to_string(max_queue_size) +
         " }\n"
         "instance_group { count: " +
         std::to_string(instances) + " }\n";
}

// Writes `root`/projection/{config.pbtxt, model.pt (a copy of `model_pt`)}. False on an I/O error.
inline bool WriteProjectionRepository(const std::string& root, const std::string& config,
                                      const std::string& model_pt) {
  const std::string folder = root + "/projection";
  ::mkdir(root.c_str(), 0755);
  ::mkdir(folder.c_str(), 0755);
  std::ifstream source(model_pt, std::ios::binary);
  std::ofstream model(folder + "/model.pt", std::ios::binary | std::ios::trunc);
  std::ofstream text(folder + "/config.pbtxt", std::ios::trunc);
  if (!source || !model || !text) return false;
  model << source.rdbuf();
  text << config;
  return static_cast<bool>(model) && static_cast<bool>(text);
}

// One call in flight; its address is the completion queue tag.
struct AsyncCall {
  grpc::ClientContext context;
  inference::ModelInferResponse response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<inference::ModelInferResponse>> reader;
  std::chrono::steady_clock::time_point sent;
  size_t index = 0;  // the caller's
};

class AsyncCaller {
 public:
  explicit AsyncCaller(const std::string& address, const grpc::ChannelArguments& arguments = {})
      : stub_(inference::GRPCInferenceService::NewStub(
            grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), arguments))) {}
  ~AsyncCaller() {
    queue_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (queue_.Next(&tag, &ok)) delete static_cast<AsyncCall*>(tag);
  }

  // Starts a call and returns at once; Next hands it back when answered. The call stays the
  // caller's until then (e.g. for its context's TryCancel).
  AsyncCall* Start(const inference::ModelInferRequest& request, size_t index,
                   std::chrono::seconds timeout) {
    auto* call = new AsyncCall;
    call->index = index;
    call->context.set_deadline(std::chrono::system_clock::now() + timeout);
    call->sent = std::chrono::steady_clock::now();
    call->reader = stub_->AsyncModelInfer(&call->context, request, &queue_);
    call->reader->Finish(&call->response, &call->status, call);
    ++in_flight_;
    return call;
  }

  // Blocks until some call is answered; nullptr only if the queue is shut down.
  std::unique_ptr<AsyncCall> Next() {
    void* tag = nullptr;
    bool ok = false;
    if (!queue_.Next(&tag, &ok)) return nullptr;
    --in_flight_;
    return std::unique_ptr<AsyncCall>(static_cast<AsyncCall*>(tag));
  }

  int64_t in_flight() const { return in_flight_; }

 private:
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  grpc::CompletionQueue queue_;
  int64_t in_flight_ = 0;
};

}  // namespace graphserve::testing
