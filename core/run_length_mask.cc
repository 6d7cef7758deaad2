#include "core/run_length_mask.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace vision::core {

absl::StatusOr<cv::Mat> DecodeRle(const RunLengthMask& rle) {
  if (rle.height <= 0 || rle.width <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("RLE mask has size ", rle.height, "x",
                                                   rle.width, "; both sides must be positive"));
  }
  const int64_t total = static_cast<int64_t>(rle.height) * rle.width;
  // Decode column-major into the transpose (W rows of H), whose memory order is the RLE's.
  cv::Mat transposed(rle.width, rle.height, CV_8U, cv::Scalar(0));
  uint8_t* data = transposed.ptr<uint8_t>();
  int64_t position = 0;
  for (size_t i = 0; i < rle.counts.size(); ++i) {
    const int64_t run = rle.counts[i];
    if (position + run > total) {
      return absl::InvalidArgumentError(
          absl::StrCat("RLE counts exceed the mask's ", rle.height, "x", rle.width, " = ", total,
                       " pixels at run ", i, "; the counts do not belong to this size"));
    }
    if (i % 2 == 1) std::fill(data + position, data + position + run, uint8_t{1});
    position += run;
  }
  if (position != total) {
    return absl::InvalidArgumentError(absl::StrCat("RLE counts cover ", position, " of the mask's ",
                                                   total, " pixels; they must cover all"));
  }
  return cv::Mat(transposed.t());
}

RunLengthMask EncodeRle(const cv::Mat& mask) {
  CV_Assert(mask.type() == CV_8U);
  RunLengthMask rle;
  rle.height = mask.rows;
  rle.width = mask.cols;
  const cv::Mat transposed = mask.t();
  const uint8_t* data = transposed.ptr<uint8_t>();
  const int64_t total = static_cast<int64_t>(mask.rows) * mask.cols;
  bool foreground = false;
  uint32_t run = 0;
  for (int64_t i = 0; i < total; ++i) {
    if ((data[i] != 0) != foreground) {
      rle.counts.push_back(run);
      foreground = !foreground;
      run = 0;
    }
    ++run;
  }
  rle.counts.push_back(run);
  return rle;
}


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

}  // namespace vision::core
