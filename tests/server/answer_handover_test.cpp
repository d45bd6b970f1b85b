// AnswerHandover: a REST infer call's answer is counted once as not delivered whichever of the
// service and REST learns its part second, and never when only one part happens.
#include "grpc/answer_handover.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace graphserve {
namespace {

TEST(AnswerHandoverTest, WhoeverComesSecondCounts) {
  AnswerHandover service_first;
  EXPECT_FALSE(service_first.HandedOver());  // REST may still deliver it: REST counts
  EXPECT_TRUE(service_first.GivenUp());      // it did not: REST counts it as not delivered

  AnswerHandover rest_first;
  EXPECT_FALSE(rest_first.GivenUp());    // the service has not answered: it counts what it does
  EXPECT_TRUE(rest_first.HandedOver());  // it answered a call REST had given up: it counts
}

TEST(AnswerHandoverTest, RacingSidesCountEachAnswerExactlyOnce) {
  constexpr int kHandovers = 2000;
  std::vector<AnswerHandover> handovers(kHandovers);
  std::atomic<int> counted{0};
  std::atomic<bool> go{false};
  auto side = [&](bool service) {
    while (!go.load()) std::this_thread::yield();
    for (AnswerHandover& handover : handovers) {
      if (service ? handover.HandedOver() : handover.GivenUp()) counted.fetch_add(1);
    }
  };
  std::thread service(side, true), rest(side, false);
  go.store(true);
  service.join();
  rest.join();
  EXPECT_EQ(counted.load(), kHandovers);
}

TEST(AnswerHandoversTest, AnOpenHandoverIsFoundByItsIdUntilForgotten) {
  AnswerHandovers& handovers = AnswerHandovers::Instance();
  const size_t before = handovers.open();
  auto [id, handover] = handovers.Open();
  auto [other_id, other] = handovers.Open();
  EXPECT_NE(id, other_id);
  EXPECT_EQ(handovers.Find(id), handover);
  EXPECT_EQ(handovers.Find(other_id), other);
  EXPECT_EQ(handovers.Find("no such id"), nullptr);
  handovers.Forget(id);
  EXPECT_EQ(handovers.Find(id), nullptr);
  EXPECT_EQ(handovers.Find(other_id), other);
  handovers.Forget(other_id);
  EXPECT_EQ(handovers.open(), before);  // nothing is kept after its call
}

}  // namespace
}  // namespace graphserve
