// CRC-32C (Castagnoli), the checksum of TFRecord framing, and TFRecord's masked form of it.
#ifndef VISION_ENGINE_LOGGING_CRC32C_H_
#define VISION_ENGINE_LOGGING_CRC32C_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace vision::engine::logging {

// CRC of `data` continuing from the CRC `crc` of the bytes before it (0 to start):
// Crc32cExtend(Crc32c(a), b) == Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);

inline uint32_t Crc32c(absl::string_view data) { return Crc32cExtend(0, data.data(), data.size()); }

// TFRecord stores CRCs masked: a CRC of bytes that themselves contain CRCs is weak, and the
// mask keeps the stored value from being a plain CRC.
inline uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

inline uint32_t UnmaskCrc32c(uint32_t masked) {
  const uint32_t rotated = masked - 0xa282ead8u;
  return (rotated >> 17) | (rotated << 15);
}

}  // namespace vision::engine::logging

#endif  // VISION_ENGINE_LOGGING_CRC32C_H_
