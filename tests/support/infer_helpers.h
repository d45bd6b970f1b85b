#pragma once
// Building KServe v2 requests and reading answers in the black-box tests.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "grpc_service.pb.h"

namespace graphserve::testing {

using TokenRows = std::vector<std::vector<int64_t>>;  // rows × length token ids

// input_ids from `rows` and an all-ones attention_mask, as raw contents or typed int64_contents.
inline inference::ModelInferRequest TokenRequest(const std::string& model, const TokenRows& rows,
                                                 bool raw = true) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  const int64_t length = rows.empty() ? 0 : static_cast<int64_t>(rows[0].size());
  for (const char* name : {"input_ids", "attention_mask"}) {
    auto* input = request.add_inputs();
    input->set_name(name);
    input->set_datatype("INT64");
    input->add_shape(static_cast<int64_t>(rows.size()));
    input->add_shape(length);
    std::vector<int64_t> values;
    for (const auto& row : rows) {
      for (int64_t id : row) values.push_back(std::string(name) == "input_ids" ? id : 1);
    }
    if (raw) {
      std::string bytes(values.size() * sizeof(int64_t), '\0');
      std::memcpy(bytes.data(), values.data(), bytes.size());
      request.add_raw_input_contents(std::move(bytes));
    } else {
      for (int64_t v : values) input->mutable_contents()->add_int64_contents(v);
    }
  }
  return request;
}

inline TokenRows RandomTokens(std::mt19937& random, int64_t rows, int64_t length) {
  std::uniform_int_distribution<int64_t> token(1, 999);
  TokenRows ids(rows, std::vector<int64_t>(length));
  for (auto& row : ids) {
    for (auto& id : row) id = token(random);
  }
  return ids;
}

// `count` requests of 1-3 rows and lengths 1-64, raw and typed contents alternating, ids "r0", ...
inline std::vector<inference::ModelInferRequest> MixedLengthRequests(const std::string& model,
                                                                     int count, uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_int_distribution<int64_t> rows(1, 3), length(1, 64);
  std::vector<inference::ModelInferRequest> requests;
  for (int i = 0; i < count; ++i) {
    requests.push_back(TokenRequest(model, RandomTokens(random, rows(random), length(random)), i % 2 == 0));
    requests.back().set_id("r" + std::to_string(i));
  }
  return requests;
}

struct FloatOutput {
  std::vector<int64_t> shape;
  std::vector<float> values;
  bool found = false;
};

inline FloatOutput GetFloatOutput(const inference::ModelInferResponse& response, const std::string& name) {
  FloatOutput output;
  for (int i = 0; i < response.outputs_size(); ++i) {
    if (response.outputs(i).name() != name) continue;
    output.found = true;
    output.shape.assign(response.outputs(i).shape().begin(), response.outputs(i).shape().end());
    const std::string& bytes = response.raw_output_contents(i);
    output.values.resize(bytes.size() / sizeof(float));
    std::memcpy(output.values.data(), bytes.data(), output.values.size() * sizeof(float));
  }
  return output;
}

// Norm-wise relative difference max|a-b| / max|b|; huge when the sizes differ. Element-wise ratios
// are meaningless for values near zero (tanh pooler outputs), where BLAS kernels picked by batch shape
// legitimately differ in the last bits.
inline double MaxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 1e30;
  double scale = 0, worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::abs(double(b[i])));
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
  }
  return scale == 0 ? worst : worst / scale;
}

}  // namespace graphserve::testing
