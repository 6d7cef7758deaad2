#include "engine/logging/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace vision::engine::logging {
namespace {

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);  // RFC 3720 B.4
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<char>(i);
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);  // RFC 3720 B.4
}

// The 8-byte loop and the byte tail must agree for every length and split point.
TEST(Crc32cTest, ExtendMatchesWholeForEverySplit) {
  std::string data;
  for (int i = 0; i < 41; ++i) data.push_back(static_cast<char>(i * 37 + 11));
  const uint32_t whole = Crc32c(data);
  for (size_t split = 0; split <= data.size(); ++split) {
    const uint32_t head = Crc32cExtend(0, data.data(), split);
    EXPECT_EQ(Crc32cExtend(head, data.data() + split, data.size() - split), whole) << split;
  }
}

TEST(Crc32cTest, MaskMatchesTfRecordAndRoundTrips) {
  const uint32_t crc = 0xE3069283u;
  // ((crc >> 15) | (crc << 17)) + 0xa282ead8, worked by hand:
  // 0xE3069283 >> 15 = 0x0001C60D, << 17 (mod 2^32) = 0x25060000, or = 0x2507C60D.
  EXPECT_EQ(MaskCrc32c(crc), 0x2507C60Du + 0xa282ead8u);
  EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(crc)), crc);
  EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(0u)), 0u);
  EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(0xFFFFFFFFu)), 0xFFFFFFFFu);
}

}  // namespace
}  // namespace vision::engine::logging
