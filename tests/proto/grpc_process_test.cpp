// The process-wide gRPC set-up (grpc_process.h).
#include <absl/synchronization/mutex.h>
#include <gtest/gtest.h>

#include "graphserve/grpc_process.h"

#include <grpc/grpc.h>

namespace graphserve {
namespace {

// With Debian's Abseil (debug build) taking two mutexes in both orders aborts the process as a
// potential deadlock, unless the detection is off; with an NDEBUG build it passes either way.
TEST(GrpcProcessTest, AbseilNoLongerChecksLockOrder) {
  TurnOffAbseilDeadlockDetection();
  absl::Mutex first, second;
  first.Lock();
  second.Lock();
  second.Unlock();
  first.Unlock();
  second.Lock();
  first.Lock();
  first.Unlock();
  second.Unlock();
}

// gRPC starts its default executor's threads when it initialises; after the call they are gone, and
// stay gone when the program's own gRPC objects let go of gRPC (the call holds it initialised).
TEST(GrpcProcessTest, TransportWorkStaysOnPollingThreads) {
  grpc_init();
  EXPECT_TRUE(GrpcDefaultExecutorIsThreaded());
  ASSERT_TRUE(KeepGrpcTransportWorkOnPollingThreads());
  EXPECT_FALSE(GrpcDefaultExecutorIsThreaded());
  grpc_shutdown();
  EXPECT_FALSE(GrpcDefaultExecutorIsThreaded());
}

}  // namespace
}  // namespace graphserve
