#include "tools/flags_util.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::tools {
namespace {

TEST(ExtractRepeatedFlagTest, TakesBothFormsInOrderAndKeepsTheRest) {
  std::vector<std::string> storage = {"train", "--override=optimizer { lr: 0.1, x: 1 }",
                                      "--config=a.pbtxt", "--override", "seed: 3", "--dry_run",
                                      "--", "--override=not-mine"};
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  int argc = static_cast<int>(argv.size());
  std::vector<std::string> values = ExtractRepeatedFlag("override", &argc, argv.data());
  EXPECT_THAT(values, ::testing::ElementsAre("optimizer { lr: 0.1, x: 1 }", "seed: 3"));
  ASSERT_EQ(argc, 5);
  EXPECT_STREQ(argv[0], "train");
  EXPECT_STREQ(argv[1], "--config=a.pbtxt");
  EXPECT_STREQ(argv[2], "--dry_run");
  EXPECT_STREQ(argv[3], "--");
  EXPECT_STREQ(argv[4], "--override=not-mine");
}

}  // namespace
}  // namespace vision::tools
