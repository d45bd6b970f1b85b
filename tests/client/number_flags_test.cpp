#include "graphserve/client/number_flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace graphserve {
namespace {

// The message CLI11 gives for `value` on a flag checked by `check`, or "" when it is taken.
std::string Refusal(const CLI::Validator& check, const std::string& value) {
  CLI::App app;
  double number = 0;
  app.add_option("--n", number)->check(check);
  std::vector<std::string> args = {value, "--n"};  // CLI11 parses a vector back to front
  try {
    app.parse(args);
  } catch (const CLI::ParseError& error) {
    return error.what();
  }
  return "";
}

TEST(NumberFlagsTest, PositiveAndNonNegativeNameWhatIsWanted) {
  EXPECT_EQ(Refusal(PositiveFlag(), "2.5"), "");
  EXPECT_EQ(Refusal(PositiveFlag(), "-1"), "--n: must be above 0, not -1");
  EXPECT_EQ(Refusal(PositiveFlag(), "0"), "--n: must be above 0, not 0");
  EXPECT_EQ(Refusal(NonNegativeFlag(), "0"), "");
  EXPECT_EQ(Refusal(NonNegativeFlag(), "-0.5"), "--n: must be 0 or more, not -0.5");
  for (const char* endless : {"inf", "nan", "1e400"}) {
    EXPECT_NE(Refusal(PositiveFlag(), endless).find("must be above 0"), std::string::npos) << endless;
  }
  EXPECT_EQ(Refusal(PositiveFlag(), "3x"), "--n: not a number: 3x");
  // CLI11's own checks wrote the largest double out in full.
  EXPECT_LT(Refusal(PositiveFlag(), "-1").size(), 40u);
}

}  // namespace
}  // namespace graphserve
