#pragma once
// What the fuzz targets share: the models requests are decoded against, the checks that turn a
// broken promise of the code under test into a crash that libFuzzer reports, and the path a decoded
// request takes back out as an answer. Not thread-safe: libFuzzer runs one input at a time.
#include <string>
#include <vector>

#include "graphserve/engine/model_spec.h"
#include "graphserve/server/batching/scheduler_options.h"
#include "graphserve/server/http/rest_codec.h"
#include "grpc_service.pb.h"

// Aborts naming `what` when `condition` is false: the input broke a contract that a header states.
#define FUZZ_CHECK(condition, what) \
  ::graphserve::fuzz::Check((condition), #condition, (what), __FILE__, __LINE__)

namespace graphserve::fuzz {

void Check(bool condition, const char* expression, const std::string& what, const char* file, int line);

// Logging off: the code under test warns on most inputs, and writing that is most of a run's time.
void SilenceLogs();

struct FuzzModel {
  ModelSpec spec;
  QueuePolicy queue_policy;
};

// Built once, through the config path the server loads models with:
//   - "encoder": the built-in encoder (INT64 input_ids and attention_mask of variable length);
//   - "bert32": a BERT-like model with three INT32 inputs, FP16 outputs and a queue timeout that
//     requests may shorten;
//   - "tabular": a fixed-shape model (FP32 [2, 3] and BOOL [3] inputs).
const std::vector<FuzzModel>& Models();
// The model named `name`; for another name one of them chosen by the name's length, so that inputs
// with any name still reach the decoder.
const FuzzModel& ModelFor(const std::string& name);

// Decodes `request` against `model` as the gRPC handler does (consuming its raw contents). When it
// is accepted: checks what DecodeInferRequest promises of the item, answers it with zero-filled
// outputs of the model's shapes through EncodeInferResponse and then through
// EncodeRestInferResponse with `format`, and checks both answers. Returns whether it was accepted.
bool DecodeAndAnswer(const FuzzModel& model, const RestOutputFormat& format,
                     inference::ModelInferRequest* request);

}  // namespace graphserve::fuzz
