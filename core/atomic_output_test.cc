#include "core/atomic_output.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::core {
namespace {

namespace fs = std::filesystem;

using ::testing::HasSubstr;
using ::testing::Not;

std::string Tmp(const std::string& name) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  fs::remove_all(path);
  return path;
}

void Write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

std::string Read(const fs::path& path) {
  std::ifstream file(path);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// Every entry of `dir` (relative names), to check that nothing partial is left beside it.
std::set<std::string> Entries(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

TEST(StagedDirectoryTest, NothingAppearsUntilCommitThenEverythingDoes) {
  const std::string parent = Tmp("new");
  const std::string out = parent + "/results";
  absl::StatusOr<std::unique_ptr<StagedDirectory>> staged = StagedDirectory::Create(out);
  ASSERT_TRUE(staged.ok()) << staged.status();
  EXPECT_THAT((*staged)->path(), HasSubstr(out + ".partial-"));
  Write(fs::path((*staged)->path()) / "a.png", "a");
  fs::create_directories(fs::path((*staged)->path()) / "sub");
  Write(fs::path((*staged)->path()) / "sub" / "b.txt", "b");
  EXPECT_FALSE(fs::exists(out));
  ASSERT_TRUE((*staged)->Commit().ok());
  EXPECT_EQ(Read(fs::path(out) / "a.png"), "a");
  EXPECT_EQ(Read(fs::path(out) / "sub" / "b.txt"), "b");
  EXPECT_EQ(Entries(parent), std::set<std::string>{"results"});
  staged->reset();
  EXPECT_TRUE(fs::exists(fs::path(out) / "a.png"));
}

TEST(StagedDirectoryTest, WithoutCommitNothingIsLeft) {
  const std::string parent = Tmp("failed");
  {
    absl::StatusOr<std::unique_ptr<StagedDirectory>> staged =
        StagedDirectory::Create(parent + "/results");
    ASSERT_TRUE(staged.ok()) << staged.status();
    Write(fs::path((*staged)->path()) / "000_img_1.png", "half");
  }
  EXPECT_TRUE(Entries(parent).empty());
}

TEST(StagedDirectoryTest, CommitIntoAnExistingDirectoryReplacesAndKeeps) {
  const std::string out = Tmp("existing");
  fs::create_directories(fs::path(out) / "sub");
  Write(fs::path(out) / "old.txt", "old");
  Write(fs::path(out) / "same.txt", "before");
  Write(fs::path(out) / "sub" / "kept.txt", "kept");
  absl::StatusOr<std::unique_ptr<StagedDirectory>> staged = StagedDirectory::Create(out + "/");
  ASSERT_TRUE(staged.ok()) << staged.status();
  Write(fs::path((*staged)->path()) / "same.txt", "after");
  fs::create_directories(fs::path((*staged)->path()) / "sub");
  Write(fs::path((*staged)->path()) / "sub" / "new.txt", "new");
  ASSERT_TRUE((*staged)->Commit().ok());
  EXPECT_EQ(Read(fs::path(out) / "old.txt"), "old");
  EXPECT_EQ(Read(fs::path(out) / "same.txt"), "after");
  EXPECT_EQ(Read(fs::path(out) / "sub" / "kept.txt"), "kept");
  EXPECT_EQ(Read(fs::path(out) / "sub" / "new.txt"), "new");
  for (const std::string& name : Entries(fs::path(out).parent_path())) {
    EXPECT_THAT(name, Not(HasSubstr(".partial-")));
  }
}

TEST(StagedDirectoryTest, AFileInTheWayIsAnError) {
  const std::string parent = Tmp("file");
  fs::create_directories(parent);
  Write(fs::path(parent) / "out", "x");
  const absl::Status status = StagedDirectory::Create(parent + "/out").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("exists and is not a directory"));
}

TEST(RenameDurablyTest, ReplacesAndReportsErrors) {
  const std::string dir = Tmp("rename");
  fs::create_directories(dir);
  Write(fs::path(dir) / "a.tmp", "new");
  Write(fs::path(dir) / "a", "old");
  ASSERT_TRUE(RenameDurably(dir + "/a.tmp", dir + "/a").ok());
  EXPECT_EQ(Read(fs::path(dir) / "a"), "new");
  EXPECT_THAT(RenameDurably(dir + "/missing", dir + "/b").message(), HasSubstr("cannot rename"));
}

TEST(WriteFileAtomicallyTest, WritesWholeOrLeavesNothing) {
  const std::string dir = Tmp("write");
  fs::create_directories(dir);
  Write(fs::path(dir) / "out.json", "old");
  ASSERT_TRUE(WriteFileAtomically(dir + "/out.json", "new contents").ok());
  EXPECT_EQ(Read(fs::path(dir) / "out.json"), "new contents");
  // A directory that does not exist: an error naming the temporary, and nothing written.
  const absl::Status missing = WriteFileAtomically(dir + "/no/such/out.json", "x");
  EXPECT_THAT(missing.message(), HasSubstr("out.json.partial-"));
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(names, std::vector<std::string>{"out.json"});
}

}  // namespace
}  // namespace vision::core
