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

}  // namespace vision::data::synthetic::file_tree

#endif  // VISION_DATA_SYNTHETIC_TESTING_FILE_TREE_H_
