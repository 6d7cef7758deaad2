// Helpers shared by the fuzz entry points.
#ifndef VISION_TOOLS_FUZZ_FUZZ_UTIL_H_
#define VISION_TOOLS_FUZZ_FUZZ_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace vision::fuzz {

// Aborts (a finding for libFuzzer, a failure for the replay test) when an invariant of the
// code under test does not hold.
#define VISION_FUZZ_CHECK(condition)                                                              \
  do {                                                                                            \
    if (!(condition)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                               \
    }                                                                                             \
  } while (0)

// A file of this process for entry points that take a path; rewritten for every input.
// Under $TEST_TMPDIR in tests, else $TMPDIR or /tmp.
const std::string& ScratchPath(const std::string& suffix);

// Writes `size` bytes to `path` (aborts if it cannot: that is the harness, not the input).
void WriteScratch(const std::string& path, const uint8_t* data, size_t size);

}  // namespace vision::fuzz

#endif  // VISION_TOOLS_FUZZ_FUZZ_UTIL_H_
