// A rank killed with SIGKILL while the "shm" backend is in use: the launcher's restart finishes
// the run and no segment of the job is left in /dev/shm.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "distributed/process_group/multiprocess_testing.h"
#include "distributed/shm/segment_name.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::distributed::shm {
namespace {

using ::testing::HasSubstr;

// Runs `command` with a shell, returns its exit code and combined output.
std::pair<int, std::string> RunCommand(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

TEST(ShmRestartTest, KilledRankIsRestartedAndNoSegmentRemains) {
  const int port = process_group::PickFreePort();
  // As if a worker of an earlier attempt died between creating and unlinking its segment.
  const std::string stale = SegmentName(port, 9, 0);
  const int fd = shm_open(stale.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  const auto [code, output] =
      RunCommand(absl::StrCat("tools/launch --nproc_per_node=2 --max_restarts=1 "
                              "--master_port=",
                              port, " -- distributed/shm/shm_worker"));
  EXPECT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("[rank 0]: done restart=1"));
  EXPECT_THAT(output, HasSubstr("[rank 1]: done restart=1"));
  EXPECT_THAT(output, HasSubstr("signal"));  // Rank 1's SIGKILL in the first attempt.
  EXPECT_THAT(output, HasSubstr("removed 1 stale shared-memory segment(s) of this job"));
  EXPECT_EQ(RemoveJobSegments(port), 0) << "segments left in /dev/shm";
}

}  // namespace
}  // namespace vision::distributed::shm
