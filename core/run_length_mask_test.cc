#include "core/run_length_mask.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::core {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// Worked by hand through maskApi.c's rleToString (and checked against a line-by-line Python
// port of it): five value bits per character, least significant first, 0x20 = more follows,
// 0x10 of the last character = sign, plus 48; runs from the fourth on are deltas to the run
// two before.
struct Vector {
  std::vector<uint32_t> counts;
  const char* encoded;
};
const Vector kVectors[] = {
    // 3 -> '3', 5 -> '5', 2 -> '2', then 7 - 5 = 2 -> '2'.
    {{3, 5, 2, 7}, "3522"},
    // 10 -> 58 ':'; the fourth run is 3 - 10 = -7: -7 & 0x1f = 25 (sign bit 0x10 set),
    // -7 >> 5 = -1, so it ends there: 25 + 48 = 73 'I'.
    {{1, 10, 1, 3}, "1:1I"},
    // 100 = 3 * 32 + 4: group 4 with the more bit (36 + 48 = 'T'), then 3 -> '3'.
    {{100}, "T3"},
    // 16 alone would read as negative (0x10 is the sign bit), so a zero group follows:
    // 16 | 0x20 = 48 + 48 = '`', then '0'.
    {{16}, "`0"},
    // 0, 16, 3, then 100 - 16 = 84 = 2 * 32 + 20: 20 | 0x20 = 52 + 48 = 'd', then 2 -> '2'.
    {{0, 16, 3, 100}, "0`03d2"},
    // Two pixels of a 32x48 mask. 768 = 24 * 32 + 0: 0 | 0x20 = 'P'; 24 has the sign bit,
    // so it takes the more bit too (24 | 0x20 = 56 + 48 = 'h') and a zero group ends it: '0'.
    // Then 1, 1, 2 - 1 = 1, and 763 - 1 = 762 = 23 * 32 + 26: 'j', 23 | 0x20 = 'g', '0'.
    {{768, 1, 1, 2, 763}, "Ph0111jg0"},
    {{5, 3, 2, 4, 10}, "53218"},
    // 0, 4, 2; 1 - 4 = -3 -> -3 & 31 = 29 = 'M'; 3 - 2 = 1; 14 - 1 = 13 = '='.
    {{0, 4, 2, 1, 3, 14}, "042M1="},
    {{}, ""},
};

TEST(CocoRleTest, EncodesHandComputedVectors) {
  for (const Vector& v : kVectors) {
    EXPECT_EQ(EncodeCocoRleString(v.counts), v.encoded);
  }
}

TEST(CocoRleTest, DecodesHandComputedVectors) {
  for (const Vector& v : kVectors) {
    absl::StatusOr<std::vector<uint32_t>> counts = DecodeCocoRleString(v.encoded);
    ASSERT_TRUE(counts.ok()) << v.encoded << ": " << counts.status();
    EXPECT_THAT(*counts, ElementsAreArray(v.counts)) << v.encoded;
  }
}

TEST(CocoRleTest, RoundTripsRandomCounts) {
  std::mt19937_64 engine(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint32_t> counts(engine() % 40);
    for (uint32_t& run : counts) {
      // Mostly short runs, some long ones, and the extremes.
      const uint64_t kind = engine() % 10;
      run = kind == 0   ? 0
            : kind == 1 ? 0xffffffffu
            : kind < 5  ? static_cast<uint32_t>(engine() % 100000)
                        : static_cast<uint32_t>(engine() % 64);
    }
    const std::string encoded = EncodeCocoRleString(counts);
    for (char c : encoded) ASSERT_TRUE(c >= '0' && c <= 'o') << encoded;
    absl::StatusOr<std::vector<uint32_t>> decoded = DecodeCocoRleString(encoded);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, counts);
  }
}

TEST(CocoRleTest, RejectsCorruptStrings) {
  struct Case {
    const char* encoded;
    const char* expected;
  };
  const Case cases[] = {
      {"35 2", "' ' at character 2"},
      {"35p", "'p' at character 2"},
      // 'T' carries the more bit and nothing follows.
      {"3T", "end inside the value that starts at character 1"},
      // A lone negative first run: 'I' is -7.
      {"I", "run 0 (at character 0) decodes to -7"},
      // Runs 1, 10, 1, 3 ("1:1I"), then the delta -7 to run 2 (1) gives -6.
      {"1:1II", "run 4 (at character 4) decodes to -6"},
      {"PPPPPPPPPPPPPP0", "longer than 64 bits"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<uint32_t>> counts = DecodeCocoRleString(c.encoded);
    ASSERT_FALSE(counts.ok()) << c.encoded;
    EXPECT_EQ(counts.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(counts.status().message(), HasSubstr(c.expected)) << c.encoded;
  }
}

}  // namespace
}  // namespace vision::core
