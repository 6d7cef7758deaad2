#include "core/trace.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::core::trace {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Read(const std::string& path) {
  std::ifstream file(path);
  std::stringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

std::string TempPath(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  return (std::filesystem::path(root ? root : "/tmp") / name).string();
}

TEST(TraceTest, RecordsOnlyBetweenStartAndStop) {
  EXPECT_FALSE(Enabled());
  Record("before", "test", 0, 10, ThreadLane());
  Start(3);
  EXPECT_TRUE(Enabled());
  EXPECT_EQ(NumEvents(), 0u);
  { ScopedSpan span("scoped", "test"); }
  Record("a\"b\\c\nd", "test", 100, 250, NamedLane("bucket 0"), {{"bytes", 4096}});
  // Deferred spans (device timings) are resolved in Stop(), while recording is still on.
  AddDeferred([] { Record("deferred", "test", 300, 400, NamedLane("bucket 0")); });
  Stop();
  EXPECT_FALSE(Enabled());
  Record("after", "test", 500, 600, ThreadLane());
  EXPECT_EQ(NumEvents(), 3u);

  const std::string path = TempPath("trace_rank3.json");
  ASSERT_TRUE(WriteChromeTrace(path).ok());
  const std::string text = Read(path);
  EXPECT_EQ(text.rfind("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", 0), 0u);
  EXPECT_THAT(text, HasSubstr("\"name\":\"process_name\",\"pid\":3,\"tid\":0,\"ts\":0,"
                              "\"args\":{\"name\":\"rank 3\"}"));
  EXPECT_THAT(text, HasSubstr("\"args\":{\"name\":\"bucket 0\"}"));
  // Escaped as JSON; timestamps relative to the earliest span.
  EXPECT_THAT(text, HasSubstr("{\"ph\":\"X\",\"name\":\"a\\\"b\\\\c\\nd\",\"cat\":\"test\","
                              "\"pid\":3,\"tid\":1001,\"ts\":0,\"dur\":150,"
                              "\"args\":{\"bytes\":4096}}"));
  EXPECT_THAT(text, HasSubstr("\"name\":\"deferred\""));
  EXPECT_THAT(text, HasSubstr("\"name\":\"scoped\""));
  EXPECT_THAT(text, Not(HasSubstr("before")));
  EXPECT_THAT(text, Not(HasSubstr("after")));
}

TEST(TraceTest, UnwritableDirectoryIsAClearErrorAndLeavesNoFile) {
  Start(0);
  Record("x", "test", 0, 1, ThreadLane());
  Stop();
  const std::string path = TempPath("no/such/dir/trace_rank0.json");
  const absl::Status status = WriteChromeTrace(path);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("no/such/dir/trace_rank0.json"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("logging.trace.path"));
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace vision::core::trace
