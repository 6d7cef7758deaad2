#include "tools/flags_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

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

// `bazel run` sets BUILD_WORKSPACE_DIRECTORY; relative paths then mean that directory.
TEST(EnterWorkspaceDirectoryTest, EntersTheWorkspaceOnlyWhenSet) {
  char start[4096];
  ASSERT_NE(::getcwd(start, sizeof(start)), nullptr);
  const std::string workspace = std::string(std::getenv("TEST_TMPDIR")) + "/workspace";
  ASSERT_EQ(::mkdir(workspace.c_str(), 0755), 0);

  ::unsetenv("BUILD_WORKSPACE_DIRECTORY");
  ASSERT_TRUE(EnterWorkspaceDirectory().ok());
  char now[4096];
  EXPECT_STREQ(::getcwd(now, sizeof(now)), start);

  ::setenv("BUILD_WORKSPACE_DIRECTORY", workspace.c_str(), 1);
  ASSERT_TRUE(EnterWorkspaceDirectory().ok());
  char real[4096];
  ASSERT_NE(::realpath(workspace.c_str(), real), nullptr);
  EXPECT_STREQ(::getcwd(now, sizeof(now)), real);

  ::setenv("BUILD_WORKSPACE_DIRECTORY", (workspace + "/absent").c_str(), 1);
  const absl::Status missing = EnterWorkspaceDirectory();
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.message(), ::testing::HasSubstr("BUILD_WORKSPACE_DIRECTORY=" + workspace +
                                                      "/absent"));
  ::unsetenv("BUILD_WORKSPACE_DIRECTORY");
  ASSERT_EQ(::chdir(start), 0);
}

}  // namespace
}  // namespace vision::tools
