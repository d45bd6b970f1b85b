// UsableCores against cgroup files written here: v2's cpu.max, v1's quota and period, and none.
#include "graphserve/server/common/usable_cores.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace graphserve {
namespace {

class UsableCoresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/usable_cores_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
  }
  void TearDown() override { std::system(("rm -rf " + root_).c_str()); }

  void Write(const std::string& relative, const std::string& text) {
    const size_t slash = relative.rfind('/');
    if (slash != std::string::npos) mkdir((root_ + "/" + relative.substr(0, slash)).c_str(), 0755);
    std::ofstream(root_ + "/" + relative) << text;
  }

  std::string root_;
};

// Each case in a fresh cgroup folder: the files written, the affinity, the cores expected.
struct Case {
  std::vector<std::pair<std::string, std::string>> files;
  int affinity;
  int expected;
};

TEST_F(UsableCoresTest, TheQuotaCapsTheAffinityRoundedUpAndNothingReadableMeansNoQuota) {
  const std::vector<Case> cases = {
      {{}, 16, 16},                                      // no cgroup files
      {{{"cpu.max", "max 100000\n"}}, 16, 16},           // v2, unlimited
      {{{"cpu.max", "150000 100000\n"}}, 64, 2},         // v2, 1.5 CPUs
      {{{"cpu.max", "800000 100000\n"}}, 1, 1},          // a quota above the affinity
      {{{"cpu/cpu.cfs_quota_us", "50000\n"}, {"cpu/cpu.cfs_period_us", "100000\n"}}, 64, 1},  // v1
      {{{"cpu/cpu.cfs_quota_us", "-1\n"}, {"cpu/cpu.cfs_period_us", "100000\n"}}, 64, 64},    // v1, none
      {{{"cpu.max", "garbage\n"}}, 8, 8},                // unreadable
      {{}, 0, 1},                                        // never below one
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    std::system(("rm -rf " + root_ + "/cpu " + root_ + "/cpu.max").c_str());
    for (const auto& [path, text] : cases[i].files) Write(path, text);
    EXPECT_EQ(UsableCores(root_, cases[i].affinity), cases[i].expected) << "case " << i;
  }
  EXPECT_GE(UsableCores(), 1);
}

}  // namespace
}  // namespace graphserve
