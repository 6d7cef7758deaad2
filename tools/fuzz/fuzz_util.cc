#include "tools/fuzz/fuzz_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

namespace vision::fuzz {

const std::string& ScratchPath(const std::string& suffix) {
  static auto* const paths = new std::map<std::string, std::string>();
  auto it = paths->find(suffix);
  if (it != paths->end()) return it->second;
  const char* dir = std::getenv("TEST_TMPDIR");
  if (dir == nullptr) dir = std::getenv("TMPDIR");
  if (dir == nullptr) dir = "/tmp";
  std::string path =
      std::string(dir) + "/vision_fuzz_" + std::to_string(getpid()) + "_scratch" + suffix;
  return paths->emplace(suffix, std::move(path)).first->second;
}

void WriteScratch(const std::string& path, const uint8_t* data, size_t size) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr || (size > 0 && std::fwrite(data, 1, size, file) != size) ||
      std::fclose(file) != 0) {
    std::fprintf(stderr, "fuzz harness: cannot write %s\n", path.c_str());
    std::abort();
  }
}

}  // namespace vision::fuzz
