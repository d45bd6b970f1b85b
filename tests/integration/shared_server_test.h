#pragma once
// A GoogleTest fixture whose suite shares one real graphserve, started once before its first test
// (warm-up is the slow part) and stopped with SIGTERM after its last, which must exit 0. Under ctest
// each suite is a process of its own. Not thread-safe: the test thread owns the server.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "server_process.h"

namespace graphserve::testing {

// How long a server may take to load and warm up its models on a CI machine's CPU.
inline constexpr auto kServerStartTimeout = std::chrono::seconds(240);

// `Suite` supplies the server's flags (`static std::vector<std::string> Flags()`) and its log file's
// name (`static constexpr const char* kLogName`), written under TEST_OUTPUT_DIR after the running
// GoogleTest suite's name: two suites of one fixture (a TEST_P suite beside its base's) run side by
// side under ctest, and one server truncating the other's log file lost that server's lines.
template <typename Suite>
class SharedServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string suite = ::testing::UnitTest::GetInstance()->current_test_suite()->name();
    std::replace(suite.begin(), suite.end(), '/', '_');  // "Requests/BadInputTest"
    server_ = new ServerProcess(GRAPHSERVE_BINARY, Suite::Flags(),
                                std::string(TEST_OUTPUT_DIR) + "/" + suite + "_" + Suite::kLogName);
    ASSERT_TRUE(server_->WaitUntilReady(kServerStartTimeout)) << server_->Log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->Stop(SIGTERM, std::chrono::seconds(60)), 0) << server_->Log();
    delete server_;
    server_ = nullptr;
  }
  static inline ServerProcess* server_ = nullptr;
};

}  // namespace graphserve::testing
