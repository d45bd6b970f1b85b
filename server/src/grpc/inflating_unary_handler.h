#pragma once
// A unary RPC on gRPC's callback API whose request may come compressed: gRPC's own decompression is
// off (compressed_message.h says why), so the handler gRPC generates would parse the compressed
// bytes as the message. This one inflates them first, within the request limit, and hands the
// generated handler the plain message; a request refused for its compression (RESOURCE_EXHAUSTED,
// INVALID_ARGUMENT) is answered with that status. It drives the handler gRPC generates (the
// grpc::internal interface every generated service is built on), so that the RPCs' own code is
// unchanged.
// Thread safety: gRPC calls it from any thread; it holds no state of its own between calls.
#include <grpc/byte_buffer.h>
#include <grpc/slice.h>
#include <grpcpp/grpcpp.h>

#include <functional>
#include <string>
#include <utility>

#include "graphserve/server/grpc/compressed_message.h"

namespace graphserve {

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context, const grpc::Status& status);

// The refusal RunHandler is passing to the reactor getter it calls, on this thread (see RunHandler).
inline thread_local const grpc::Status* refusal_being_answered = nullptr;

template <class Request, class Response>
class InflatingUnaryHandler final : public grpc::internal::MethodHandler {
 public:
  using Method =
      std::function<grpc::ServerUnaryReactor*(grpc::CallbackServerContext*, const Request*, Response*)>;

  // `max_request_bytes` is read at each call: it is set before serving, after the service is built.
  InflatingUnaryHandler(Method method, const size_t* max_request_bytes)
      : max_request_bytes_(max_request_bytes),
        generated_([method = std::move(method)](grpc::CallbackServerContext* context, const Request* request,
                                                Response* response) {
          if (refusal_being_answered != nullptr) return FinishNow(context, *refusal_being_answered);
          return method(context, request, response);
        }) {}

  // Owns `request` (as the generated handler does). A plain request goes to the generated handler as
  // it came; a compressed one inflated, or, when refused, an empty one, with the refusal in *status.
  void* Deserialize(grpc_call* call, grpc_byte_buffer* request, grpc::Status* status,
                    void** handler_data) override {
    if (request == nullptr || request->data.raw.compression == GRPC_COMPRESS_NONE) {
      return generated_.Deserialize(call, request, status, handler_data);
    }
    std::string plain;
    const Status inflated = InflateGrpcMessage(request, *max_request_bytes_, &plain);
    grpc_byte_buffer_destroy(request);
    grpc_slice slice = grpc_slice_from_copied_buffer(plain.data(), inflated.ok() ? plain.size() : 0);
    grpc_byte_buffer* handed_over = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    void* deserialized = generated_.Deserialize(call, handed_over, status, handler_data);
    if (!inflated.ok())
      *status = grpc::Status(static_cast<grpc::StatusCode>(inflated.code()), inflated.message());
    return deserialized;
  }

  void RunHandler(const HandlerParameter& param) override {
    if (param.status.ok()) {
      generated_.RunHandler(param);
      return;
    }
    // The generated handler answers a request it could not parse UNIMPLEMENTED, without a word. It
    // calls its reactor getter synchronously, on this thread: the refusal reaches it there.
    const HandlerParameter parsed(param.call, param.server_context, param.request, grpc::Status::OK,
                                  param.internal_data, param.call_requester);
    refusal_being_answered = &param.status;
    generated_.RunHandler(parsed);
    refusal_being_answered = nullptr;
  }

 private:
  const size_t* const max_request_bytes_;
  grpc::internal::CallbackUnaryHandler<Request, Response> generated_;
};

}  // namespace graphserve
