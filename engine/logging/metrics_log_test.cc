#include "engine/logging/metrics_log.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::engine::logging {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(MetricsLogTest, WritesOneFlushedObjectPerLine) {
  const std::string dir = FreshDir("metrics") + "/nested";
  auto log = MetricsLog::Open(dir);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ((*log)->path(), dir + "/metrics.jsonl");

  MetricsRecord train;
  train.step = 20;
  train.epoch = 1;
  train.time = 1700000000.25;
  train.values = {{"loss", 1.5}, {"lr", 0.007}};
  train.strings = {{"phase", "train"}};
  ASSERT_TRUE((*log)->Append(train).ok());
  MetricsRecord eval;
  eval.step = 40;
  eval.epoch = 2;
  eval.values = {{"hmean", 0.8125}};
  ASSERT_TRUE((*log)->Append(eval).ok());

  // Read while the log is still open: every line must already be on disk.
  const std::vector<std::string> lines = ReadLines((*log)->path());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], StartsWith("{\"step\":20,\"epoch\":1,\"time\":"));
  const nlohmann::json first = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(first["step"], 20);
  EXPECT_EQ(first["epoch"], 1);
  EXPECT_EQ(first["time"].get<double>(), 1700000000.25);
  EXPECT_EQ(first["loss"].get<double>(), 1.5);
  EXPECT_EQ(first["lr"].get<double>(), 0.007);
  EXPECT_EQ(first["phase"], "train");
  EXPECT_EQ(first.size(), 6u);
  const nlohmann::json second = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(second["step"], 40);
  EXPECT_EQ(second["hmean"].get<double>(), 0.8125);
  EXPECT_GT(second["time"].get<double>(), 1.6e9);  // unset time is filled with now
}

TEST(MetricsLogTest, ReopenAppends) {
  const std::string dir = FreshDir("metrics_reopen");
  for (int step : {1, 2}) {
    auto log = MetricsLog::Open(dir);
    ASSERT_TRUE(log.ok()) << log.status();
    MetricsRecord r;
    r.step = step;
    r.values = {{"loss", step * 0.5}};
    ASSERT_TRUE((*log)->Append(r).ok());
  }
  const std::vector<std::string> lines = ReadLines(dir + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(lines[0])["step"], 1);
  EXPECT_EQ(nlohmann::json::parse(lines[1])["step"], 2);
  EXPECT_EQ(nlohmann::json::parse(lines[1])["loss"].get<double>(), 1.0);
}

TEST(MetricsLogTest, PartialLastLineOfKilledRunStaysOnItsOwnLine) {
  const std::string dir = FreshDir("metrics_partial");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/metrics.jsonl") << "{\"step\":1}\n{\"step\":2,\"lo";
  auto log = MetricsLog::Open(dir);
  ASSERT_TRUE(log.ok()) << log.status();
  MetricsRecord r;
  r.step = 3;
  ASSERT_TRUE((*log)->Append(r).ok());
  const std::vector<std::string> lines = ReadLines(dir + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1], "{\"step\":2,\"lo");
  EXPECT_EQ(nlohmann::json::parse(lines[2])["step"], 3);
}

TEST(MetricsLogTest, NonFiniteValuesBecomeNull) {
  const std::string dir = FreshDir("metrics_nan");
  auto log = MetricsLog::Open(dir);
  ASSERT_TRUE(log.ok()) << log.status();
  MetricsRecord r;
  r.values = {{"loss", std::numeric_limits<double>::quiet_NaN()},
              {"grad_norm", std::numeric_limits<double>::infinity()}};
  ASSERT_TRUE((*log)->Append(r).ok());
  const nlohmann::json line = nlohmann::json::parse(ReadLines((*log)->path()).at(0));
  EXPECT_TRUE(line["loss"].is_null());
  EXPECT_TRUE(line["grad_norm"].is_null());
}

TEST(MetricsLogTest, ReservedOrDuplicateNamesAreRejectedAndNothingWritten) {
  const std::string dir = FreshDir("metrics_reserved");
  auto log = MetricsLog::Open(dir);
  ASSERT_TRUE(log.ok()) << log.status();
  MetricsRecord reserved;
  reserved.values = {{"step", 1.0}};
  const absl::Status s = (*log)->Append(reserved);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'step' is reserved"));
  MetricsRecord duplicate;
  duplicate.values = {{"name", 1.0}};
  duplicate.strings = {{"name", "x"}};
  EXPECT_EQ((*log)->Append(duplicate).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ReadLines((*log)->path()).empty());
}

TEST(MetricsLogTest, UnopenableDirectoryNamesPath) {
  const std::string dir = FreshDir("metrics_blocked");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/file") << "x";
  auto log = MetricsLog::Open(dir + "/file");
  ASSERT_FALSE(log.ok());
  EXPECT_THAT(log.status().message(), HasSubstr(dir + "/file"));
}

}  // namespace
}  // namespace vision::engine::logging
