// Test helpers for the generators' byte-identical-output tests.
#ifndef VISION_DATA_SYNTHETIC_TESTING_FILE_TREE_H_
#define VISION_DATA_SYNTHETIC_TESTING_FILE_TREE_H_

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace vision::data::synthetic::file_tree {

// An empty path under the test's temporary directory (removed if a previous run left it).
inline std::string FreshDir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::remove_all(dir);
  return dir.string();
}

inline std::string ReadBytes(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << file.rdbuf();
  return bytes.str();
}

// (path relative to `root`, contents) of every file under `root`, sorted by path.
inline std::vector<std::pair<std::string, std::string>> ReadTree(const std::string& root) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file()) continue;
    files.emplace_back(std::filesystem::relative(entry.path(), root).string(),
                       ReadBytes(entry.path()));
  }
  std::sort(files.begin(), files.end());
  return files;
}

using Tree = std::vector<std::pair<std::string, std::string>>;

// `a` and `b` (ReadTree results) hold the same files with the same bytes.
inline void ExpectIdenticalTrees(const Tree& a, const Tree& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(a[i].second == b[i].second) << a[i].first << " differs between runs";
  }
}

// `a` and `b` hold the same file names, and every file whose name ends in `suffix` (all
// files when empty) has different bytes in the two.
inline void ExpectSameNamesDifferentBytes(const Tree& a, const Tree& b,
                                          const std::string& suffix = "") {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first);
    const std::string& name = a[i].first;
    if (name.size() < suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    EXPECT_NE(a[i].second, b[i].second) << name << " is the same for both seeds";
  }
}

}  // namespace vision::data::synthetic::file_tree

#endif  // VISION_DATA_SYNTHETIC_TESTING_FILE_TREE_H_
