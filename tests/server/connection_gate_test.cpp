// ConnectionGate's choices, with time set exactly: which connection makes room past each cap, when
// a new one is refused, and which ones their deadline drops, however much they trickled.
#include "common/connection_gate.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace graphserve {
namespace {

constexpr int64_t kSecond = 1'000'000;

class ConnectionGateTest : public ::testing::Test {
 protected:
  ConnectionGate Gate(int cap, int per_address, int64_t timeout_us = 5 * kSecond) {
    ConnectionGateOptions options;
    options.max_connections = cap;
    options.max_connections_per_address = per_address;
    options.client_timeout_us = timeout_us;
    return ConnectionGate(options, [this](int id, const char* reason) {
      dropped_.push_back(id);
      reasons_.push_back(reason);
    });
  }
  std::vector<int> dropped_;
  std::vector<std::string> reasons_;
};

TEST_F(ConnectionGateTest, PastThePortsCapTheBusiestAddresssOldestWaitingConnectionMakesRoom) {
  ConnectionGate gate = Gate(4, 4);
  EXPECT_TRUE(gate.Admit(10, "10.0.0.1", 0).admitted);
  EXPECT_TRUE(gate.Admit(11, "10.0.0.2", 1).admitted);
  EXPECT_TRUE(gate.Admit(12, "10.0.0.2", 2).admitted);
  EXPECT_TRUE(gate.Admit(13, "10.0.0.2", 3).admitted);
  // Full: 10.0.0.2 holds the most, and 11 is its oldest; 10 is older but its address holds one.
  const ConnectionGate::Admission admission = gate.Admit(14, "10.0.0.3", 4);
  EXPECT_TRUE(admission.admitted);
  EXPECT_EQ(admission.evict, 11);
  EXPECT_EQ(dropped_, std::vector<int>{11});
  EXPECT_EQ(reasons_, std::vector<std::string>{"evicted"});
  EXPECT_EQ(gate.live(), 4);
  // The dropped one holds its descriptor until its socket closes.
  EXPECT_EQ(gate.open(), 5);
  gate.Closed(11);
  EXPECT_EQ(gate.open(), 4);
}

TEST_F(ConnectionGateTest, AConnectionBeingAnsweredIsNeverEvictedAndWhenAllAreTheNewOneIsRefused) {
  ConnectionGate gate = Gate(2, 2);
  ASSERT_TRUE(gate.Admit(10, "a", 0).admitted);
  ASSERT_TRUE(gate.Admit(11, "a", 1).admitted);
  gate.RequestArrived(10, 2);
  // 10 is older but being answered: 11 makes room.
  EXPECT_EQ(gate.Admit(12, "b", 3).evict, 11);
  gate.RequestArrived(12, 4);
  const ConnectionGate::Admission refused = gate.Admit(13, "c", 5);
  EXPECT_FALSE(refused.admitted);
  EXPECT_STREQ(refused.refusal, "connection_cap");
  // Once answered, 10 waits again and may make room.
  gate.Answered(10, 6);
  EXPECT_EQ(gate.Admit(13, "c", 7).evict, 10);
}

TEST_F(ConnectionGateTest, PastTheAddressCapOnlyThatAddressMakesRoom) {
  ConnectionGate gate = Gate(10, 2);
  ASSERT_TRUE(gate.Admit(10, "a", 0).admitted);
  ASSERT_TRUE(gate.Admit(11, "b", 1).admitted);
  ASSERT_TRUE(gate.Admit(12, "b", 2).admitted);
  // b is at its cap: its oldest, 11, makes room, not a's older 10.
  EXPECT_EQ(gate.Admit(13, "b", 3).evict, 11);
  gate.RequestArrived(12, 4);
  gate.RequestArrived(13, 4);
  const ConnectionGate::Admission refused = gate.Admit(14, "b", 5);
  EXPECT_FALSE(refused.admitted);
  EXPECT_STREQ(refused.refusal, "address_cap");
  // Another address is still admitted without evicting anyone.
  EXPECT_EQ(gate.Admit(15, "c", 6).evict, -1);
}

TEST_F(ConnectionGateTest, DescriptorsStillClosingCountUpToTwiceTheCap) {
  ConnectionGate gate = Gate(2, 2);
  // Each new connection evicts the older one, whose socket never reports closed.
  for (int id = 0; id < 4; ++id) ASSERT_TRUE(gate.Admit(id, "a", id).admitted) << id;
  EXPECT_EQ(gate.open(), 4);
  EXPECT_EQ(gate.live(), 2);
  const ConnectionGate::Admission refused = gate.Admit(4, "a", 4);
  EXPECT_FALSE(refused.admitted);
  EXPECT_STREQ(refused.refusal, "connection_cap");
  gate.Closed(0);
  EXPECT_TRUE(gate.Admit(4, "a", 5).admitted);
}

TEST_F(ConnectionGateTest, EachPhaseHasTheTimeoutFromItsStart) {
  ConnectionGate gate = Gate(8, 8, 5 * kSecond);
  ASSERT_TRUE(gate.Admit(10, "a", 0).admitted);  // will never send a whole request
  ASSERT_TRUE(gate.Admit(11, "a", 0).admitted);  // asks, and reads its answer slowly
  ASSERT_TRUE(gate.Admit(12, "a", 0).admitted);  // asks, is answered, then idles
  gate.RequestArrived(11, 3 * kSecond);
  gate.RequestArrived(12, 1 * kSecond);
  gate.Answered(12, 2 * kSecond);
  EXPECT_EQ(gate.DropExpired(5 * kSecond - 1), 0);
  EXPECT_EQ(gate.DropExpired(5 * kSecond), 1);
  EXPECT_EQ(dropped_, std::vector<int>{10});
  EXPECT_EQ(gate.DropExpired(7 * kSecond), 1);
  EXPECT_EQ(dropped_, (std::vector<int>{10, 12}));
  EXPECT_EQ(gate.DropExpired(8 * kSecond), 1);
  EXPECT_EQ(dropped_, (std::vector<int>{10, 12, 11}));
  EXPECT_EQ(reasons_, std::vector<std::string>(3, "client_timeout"));
  // Dropped once: a connection still closing is not dropped again.
  EXPECT_EQ(gate.DropExpired(60 * kSecond), 0);
  EXPECT_EQ(gate.live(), 0);
  EXPECT_EQ(gate.open(), 3);
}

TEST_F(ConnectionGateTest, ClosedIsIdempotentAndIgnoresUnknownIds) {
  ConnectionGate gate = Gate(2, 2);
  ASSERT_TRUE(gate.Admit(10, "a", 0).admitted);
  gate.Closed(10);
  gate.Closed(10);
  gate.Closed(99);
  gate.RequestArrived(99, 1);
  EXPECT_EQ(gate.open(), 0);
  EXPECT_EQ(gate.live(), 0);
  // The number is free for a new connection.
  EXPECT_TRUE(gate.Admit(10, "a", 2).admitted);
  EXPECT_EQ(gate.live(), 1);
}

}  // namespace
}  // namespace graphserve
