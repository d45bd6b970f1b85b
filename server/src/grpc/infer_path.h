#pragma once
// What ModelInfer and every request of a ModelStreamInfer stream share: find the model, decode and
// validate the request, queue it in the model's scheduler, and once it has run, encode the answer,
// count it in the metrics and, when sampled, trace it. One path, so that a request is refused,
// batched, answered, counted and traced alike whichever RPC carried it (stream requests share batches
// with unary ones).
//
// Two steps, so that the caller makes what the answer goes to (a unary reactor, a stream's entry)
// only for a request that will be queued: Prepare refuses a request or readies it, Start queues it.
// Thread safety: InferPath is a few pointers and holds no state; any method may be called from any
// thread. Lifetime: the repository, clock, metrics and readiness flag must outlive every request
// started. Errors: Prepare returns refusals (already counted); every later outcome goes to the
// request's InferenceReceiver.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "graphserve/engine/status.h"
#include "graphserve/server/common/clock.h"
#include "graphserve/server/grpc/request_codec.h"
#include "graphserve/server/grpc/shared_memory_registry.h"
#include "graphserve/server/observability/trace_writer.h"
#include "graphserve/server/repository/model_repository.h"
#include "grpc_service.pb.h"

namespace graphserve {

class GrpcApiGate;
class ModelRequestMetrics;
class ServerMetrics;

// Told a started request's outcome, exactly once: on a scheduler thread once the request ran (or was
// cancelled or expired in the queue), or on Start's own thread when the scheduler refused it. When
// the outcome is OK the response has been filled in. Once Answered is called the path touches
// neither the receiver nor the request, the response or the PreparedInference again, so Answered
// may destroy them.
class InferenceReceiver {
 public:
  virtual void Answered(const Status& outcome) = 0;

 protected:
  ~InferenceReceiver() = default;
};

// A request that Prepare accepted: its model version (held until the request is answered, so that an
// unload or reload of that version waits for it, and no longer: a receiver drops `model` once
// answered, since writing the answer can take as long as the client likes), the decoded request, its
// metrics series and when it arrived.
struct PreparedInference {
  std::shared_ptr<LoadedModel> model;
  ModelScheduler* scheduler = nullptr;
  ModelRequestMetrics* metrics = nullptr;
  std::shared_ptr<PendingRequest> pending;
  // The regions its shared-memory outputs go to: their mappings are held as long as this is.
  SharedMemoryTensors shared_memory;
  int64_t arrival_us = 0;
  // The call's gRPC deadline (time_point::max() when none), to tell an expired call from a cancelled
  // one when its client cancels it.
  std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max();

  // For a started request whose client went away (at its deadline: marked expired, else cancelled): it leaves the queue (its receiver is answered
  // CANCELLED), or, already in a batch, is answered when the batch completes.
  void Cancel() const;
};

// How requests and answers travel. max_request_bytes: the most a compressed request may inflate to
// (the gRPC receive limit, which bounds it on the wire). answer_compression: the level answers are
// compressed at (Triton's --grpc-infer-response-compression-level; none leaves them plain).
struct InferWireOptions {
  size_t max_request_bytes = 0;
  grpc_compression_level answer_compression = GRPC_COMPRESS_LEVEL_NONE;
};

class InferPath {
 public:
  // `ready`: false while the models load and once the server drains; requests are then refused.
  // `shared_memory`: the regions requests may name for their tensors (null: none may).
  // `tracing`: samples and writes the traces of requests that reach a scheduler (null members: none).
  // `gate`: who may call the inference group (null: everyone).
  // `wire`: how compressed requests are bounded and answers compressed.
  InferPath(const ModelRepository* repository, const Clock* clock, ServerMetrics* metrics,
            const std::atomic<bool>* ready, const SharedMemoryRegistry* shared_memory, RequestTracing tracing,
            InferWireOptions wire, const GrpcApiGate* gate = nullptr)
      : repository_(repository),
        clock_(clock),
        metrics_(metrics),
        ready_(ready),
        shared_memory_(shared_memory),
        gate_(gate),
        tracing_(tracing),
        wire_(wire) {}

  // OK, or the API gate's refusal of the call (ModelInfer's, or a whole ModelStreamInfer stream's),
  // asked before anything of it is read. Not counted in the metrics: no model has been looked up.
  grpc::Status Admit(const grpc::ServerContextBase& context) const;

  // Parses a request as gRPC handed it over, inflating a compressed one within max_request_bytes
  // (compressed_message.h: RESOURCE_EXHAUSTED past it, INVALID_ARGUMENT for bad bytes). Not counted
  // in the metrics: no model has been looked up.
  Status Parse(grpc::ByteBuffer* payload, inference::ModelInferRequest* request) const;
  // Has the call's answers compressed at the configured level; call before its first answer.
  void CompressAnswers(grpc::ServerContextBase* context) const;

  // Finds the model `request` names and decodes `request` into `prepared`, consuming its raw
  // contents and copying its inputs in shared memory; the request's deadline is the call's. A refusal
  // (UNAVAILABLE when not ready or while the model loads, NOT_FOUND for an unknown model, a version
  // not served or a shared-memory region not registered, INVALID_ARGUMENT naming the field) is
  // counted and returned, and nothing is queued.
  Status Prepare(const grpc::ServerContextBase& context, inference::ModelInferRequest* request,
                 PreparedInference* prepared) const;

  // Queues a prepared request and returns at once; never blocks on inference. `receiver` is answered
  // exactly once (see InferenceReceiver); until then `prepared`, `request`, `response` and `receiver`
  // must stay alive and `request` unchanged.
  void Start(const PreparedInference& prepared, const inference::ModelInferRequest& request,
             inference::ModelInferResponse* response, InferenceReceiver* receiver) const;

  // How long an answer may wait for its client to read it before its call is cancelled (0: no
  // limit).
  std::chrono::milliseconds answer_write_timeout() const { return answer_write_timeout_; }
  void set_answer_write_timeout(std::chrono::milliseconds timeout) { answer_write_timeout_ = timeout; }

  // A call REST made through the in-process channel. A receiver counts where a successful answer
  // went (ModelRequestMetrics::AnswerWritten) once its write is over, except when REST's call got
  // its answer: REST counts that once its own client has it.
  static bool CountedByRest(const grpc::ServerContextBase& context);

 private:
  const ModelRepository* repository_;
  const Clock* clock_;
  ServerMetrics* metrics_;
  const std::atomic<bool>* ready_;
  const SharedMemoryRegistry* shared_memory_;
  const GrpcApiGate* gate_;
  RequestTracing tracing_;
  InferWireOptions wire_;
  std::chrono::milliseconds answer_write_timeout_{0};
};

}  // namespace graphserve
