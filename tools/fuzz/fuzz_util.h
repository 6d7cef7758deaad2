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

// The pixel limit the image fuzzers set (core::ScopedMaxImagePixels) instead of the default
// 2^28: 2048 x 2048, so that no input may make a decode allocate more than about 60 MB (a
// progressive CMYK JPEG: 12 bytes per pixel, plus the differential cv::imdecode) or take long,
// far below run_fuzzers.sh's -rss_limit_mb and -malloc_limit_mb of 2048. A Huffman-coded JPEG
// of libFuzzer's usual lengths (a few KB) cannot claim more anyway (8 blocks per byte).
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 22;

// A file of this process for entry points that take a path; rewritten for every input.
// Under $TEST_TMPDIR in tests, else $TMPDIR or /tmp.
const std::string& ScratchPath(const std::string& suffix);

// Writes `size` bytes to `path` (aborts if it cannot: that is the harness, not the input).
void WriteScratch(const std::string& path, const uint8_t* data, size_t size);

}  // namespace vision::fuzz

#endif  // VISION_TOOLS_FUZZ_FUZZ_UTIL_H_
