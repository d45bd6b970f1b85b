// How the open-file limit is shared: the reserve, and REST's cap, which leaves gRPC and /metrics
// descriptors of their own however many REST connections a client opens.
#include "common/descriptor_budget.h"

#include <gtest/gtest.h>

namespace graphserve {
namespace {

TEST(DescriptorBudgetTest, TheReserveIsASixteenthAndNeverBelow32) {
  EXPECT_EQ(DescriptorReserve(256), 32);
  EXPECT_EQ(DescriptorReserve(1024), 64);
  EXPECT_EQ(DescriptorReserve(1 << 20), 1 << 16);
}

TEST(DescriptorBudgetTest, RestGetsAtMostHalfOfWhatTheReserveLeaves) {
  // ulimit -n 256: 224 shareable, REST 112, so that its connections alone cannot take them all.
  EXPECT_EQ(RestConnectionCap(256, 1024), 112);
  // A generous limit keeps the configured cap.
  EXPECT_EQ(RestConnectionCap(1 << 20, 1024), 1024);
  EXPECT_EQ(RestConnectionCap(4096, 1024), 1024);
  // A tiny one still lets a few in.
  EXPECT_EQ(RestConnectionCap(16, 1024), 8);
}

TEST(DescriptorBudgetTest, TheOpenFileLimitIsTheSoftOne) { EXPECT_GT(OpenFileLimit(), 0); }

TEST(DescriptorBudgetTest, MetricsGetsAtMostAnEighthOfWhatTheReserveLeaves) {
  // ulimit -n 256: 224 shareable, /metrics 28 of the 64 asked for.
  EXPECT_EQ(MetricsConnectionCap(256, 64), 28);
  EXPECT_EQ(MetricsConnectionCap(1 << 20, 64), 64);
  // A tiny limit still leaves room for a scrape, and a smaller cap asked for is kept.
  EXPECT_EQ(MetricsConnectionCap(40, 64), 4);
  EXPECT_EQ(MetricsConnectionCap(1 << 20, 2), 2);
}

TEST(DescriptorBudgetTest, OneGrpcClientAddressGetsAtMostAQuarterOfWhatRestAndMetricsLeave) {
  // ulimit -n 256: 224 shareable, REST up to 112 and /metrics up to 28 of them: 84 are gRPC's, 21
  // of those one address's.
  EXPECT_EQ(GrpcConnectionsPerAddressCap(256, 256), 21);
  EXPECT_EQ(GrpcConnectionsPerAddressCap(1 << 20, 256), 256);
  EXPECT_EQ(GrpcConnectionsPerAddressCap(256, 8), 8);
  EXPECT_EQ(GrpcConnectionsPerAddressCap(40, 256), 1);
  // 0 is no cap, whatever the limit.
  EXPECT_EQ(GrpcConnectionsPerAddressCap(256, 0), 0);
}

TEST(DescriptorBudgetTest, MetricsMayTakeHalfOfTheReserveThatGrpcAndRestLeave) {
  // ulimit -n 256: gRPC and REST stop at descriptor 224, /metrics at 240.
  EXPECT_EQ(MetricsHighestDescriptor(256), 240);
  EXPECT_GT(MetricsHighestDescriptor(1 << 20), (1 << 20) - DescriptorReserve(1 << 20));
}

}  // namespace
}  // namespace graphserve
