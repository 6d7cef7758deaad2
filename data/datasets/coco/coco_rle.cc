#include "data/datasets/coco/coco_rle.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace vision::data::datasets::coco {
namespace {

constexpr int kOffset = 48;  // '0'
constexpr int kValueBits = 0x1f;
constexpr int kSignBit = 0x10;
constexpr int kMoreBit = 0x20;
// 13 groups of 5 bits hold any 64-bit value; a longer value is corrupt.
constexpr int kMaxGroups = 13;

// The position of a run in the decoded counts: the first three are absolute.
constexpr size_t kFirstDelta = 3;

}  // namespace

absl::StatusOr<std::vector<uint32_t>> DecodeCocoRleString(absl::string_view counts) {
  std::vector<uint32_t> runs;
  size_t p = 0;
  while (p < counts.size()) {
    const size_t start = p;
    uint64_t bits = 0;
    int groups = 0;
    bool more = true;
    while (more) {
      if (p >= counts.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("compressed RLE counts end inside the value that starts at character ",
                         start, " (its last character has the continuation bit set)"));
      }
      const int c = static_cast<unsigned char>(counts[p]) - kOffset;
      if (c < 0 || c > kMoreBit + kValueBits) {
        return absl::InvalidArgumentError(
            absl::StrCat("compressed RLE counts have '", counts.substr(p, 1), "' at character ", p,
                         "; only '0' to 'o' occur in COCO's encoding (is this another format?)"));
      }
      if (groups == kMaxGroups) {
        return absl::InvalidArgumentError(
            absl::StrCat("compressed RLE value at character ", start, " is longer than 64 bits"));
      }
      bits |= static_cast<uint64_t>(c & kValueBits) << (5 * groups);
      more = (c & kMoreBit) != 0;
      ++p;
      ++groups;
      // Sign-extend a negative delta (only ever the last group carries the sign).
      if (!more && (c & kSignBit) && 5 * groups < 64) bits |= ~uint64_t{0} << (5 * groups);
    }
    int64_t value = static_cast<int64_t>(bits);
    if (runs.size() >= kFirstDelta) value += runs[runs.size() - 2];
    if (value < 0 || value > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat("compressed RLE run ", runs.size(),
                                                     " (at character ", start, ") decodes to ",
                                                     value, ", not a pixel count"));
    }
    runs.push_back(static_cast<uint32_t>(value));
  }
  return runs;
}

std::string EncodeCocoRleString(const std::vector<uint32_t>& counts) {
  std::string out;
  for (size_t i = 0; i < counts.size(); ++i) {
    int64_t x = counts[i];
    if (i >= kFirstDelta) x -= counts[i - 2];
    bool more = true;
    while (more) {
      int c = static_cast<int>(x & kValueBits);
      // Arithmetic shift: a negative delta ends when only sign bits remain.
      x >>= 5;
      more = (c & kSignBit) ? x != -1 : x != 0;
      if (more) c |= kMoreBit;
      out.push_back(static_cast<char>(c + kOffset));
    }
  }
  return out;
}

}  // namespace vision::data::datasets::coco
