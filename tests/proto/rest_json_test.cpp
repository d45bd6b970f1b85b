// What the REST binding's two ends share (rest_json.h): parameters as JSON, and the HTTP statuses
// the server answers with read back by the client as the codes they stand for.
#include <gtest/gtest.h>

#include "graphserve/rest_json.h"

namespace graphserve::rest_json {
namespace {

using nlohmann::json;

TEST(RestJsonTest, EachParameterKindIsItsJsonValue) {
  inference::InferParameter parameter;
  EXPECT_TRUE(InferParameterJson(parameter).is_null());
  parameter.set_bool_param(true);
  EXPECT_EQ(InferParameterJson(parameter), json(true));
  parameter.set_int64_param(-7);
  EXPECT_EQ(InferParameterJson(parameter), json(-7));
  parameter.set_uint64_param(18446744073709551615ull);
  EXPECT_EQ(InferParameterJson(parameter).get<uint64_t>(), 18446744073709551615ull);
  parameter.set_double_param(0.25);
  EXPECT_EQ(InferParameterJson(parameter), json(0.25));
  parameter.set_string_param("high");
  EXPECT_EQ(InferParameterJson(parameter), json("high"));
}

TEST(RestJsonTest, TheClientReadsBackTheCodeTheServerAnsweredWith) {
  for (const grpc::StatusCode code :
       {grpc::StatusCode::OK, grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::NOT_FOUND,
        grpc::StatusCode::RESOURCE_EXHAUSTED, grpc::StatusCode::INTERNAL, grpc::StatusCode::UNIMPLEMENTED,
        grpc::StatusCode::UNAVAILABLE, grpc::StatusCode::DEADLINE_EXCEEDED}) {
    EXPECT_EQ(CodeForHttpStatus(HttpStatusForCode(code)), code) << code;
  }
  EXPECT_EQ(HttpStatusForCode(grpc::StatusCode::NOT_FOUND), 404);
  EXPECT_EQ(HttpStatusForCode(grpc::StatusCode::RESOURCE_EXHAUSTED), 429);
  EXPECT_EQ(HttpStatusForCode(grpc::StatusCode::DEADLINE_EXCEEDED), 504);
}

TEST(RestJsonTest, CodesWithoutAStatusOfTheirOwnAre400AndUnknownStatusesUnknown) {
  EXPECT_EQ(HttpStatusForCode(grpc::StatusCode::CANCELLED), 400);
  EXPECT_EQ(HttpStatusForCode(grpc::StatusCode::FAILED_PRECONDITION), 400);
  EXPECT_EQ(CodeForHttpStatus(418), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(CodeForHttpStatus(502), grpc::StatusCode::UNKNOWN);
}

}  // namespace
}  // namespace graphserve::rest_json
