#include "core/run_length_mask.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace vision::core {

absl::StatusOr<cv::Mat> DecodeRle(const RunLengthMask& rle) {
  if (rle.height <= 0 || rle.width <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("RLE mask has size ", rle.height, "x", rle.width,
                                                   "; both sides must be positive"));
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

RunLengthMask RleFromPolygon(const Polygon& polygon, int height, int width) {
  std::vector<double> xy;
  xy.reserve(2 * polygon.size());
  for (const cv::Point2f& p : polygon) {
    xy.push_back(p.x);
    xy.push_back(p.y);
  }
  return RleFromPolygonCoordinates(xy, height, width);
}

RunLengthMask RleFromPolygonCoordinates(const std::vector<double>& xy, int height, int width) {
  RunLengthMask rle;
  rle.height = height;
  rle.width = width;
  const size_t k = xy.size() / 2;
  if (k == 0) {
    rle.counts = {static_cast<uint32_t>(static_cast<int64_t>(height) * width)};
    return rle;
  }
  // Upsample 5x and walk the boundary densely (the C code's first loop, verbatim).
  constexpr double kScale = 5;
  std::vector<int> x(k + 1), y(k + 1);
  for (size_t j = 0; j < k; ++j) {
    x[j] = static_cast<int>(kScale * xy[2 * j] + .5);
    y[j] = static_cast<int>(kScale * xy[2 * j + 1] + .5);
  }
  x[k] = x[0];
  y[k] = y[0];
  std::vector<int> u, v;
  for (size_t j = 0; j < k; ++j) {
    int xs = x[j], xe = x[j + 1], ys = y[j], ye = y[j + 1];
    const int dx = std::abs(xe - xs), dy = std::abs(ys - ye);
    const bool flip = (dx >= dy && xs > xe) || (dx < dy && ys > ye);
    if (flip) {
      std::swap(xs, xe);
      std::swap(ys, ye);
    }
    if (dx == 0 && dy == 0) {
      // A repeated vertex. The C code divides 0 by 0 here and converts the NaN to int
      // (undefined behaviour; INT_MIN on x86); that point's v is never read, since its u equals
      // both neighbours', so the vertex itself gives the same mask.
      u.push_back(xs);
      v.push_back(ys);
      continue;
    }
    const double s =
        dx >= dy ? static_cast<double>(ye - ys) / dx : static_cast<double>(xe - xs) / dy;
    if (dx >= dy) {
      for (int d = 0; d <= dx; ++d) {
        const int t = flip ? dx - d : d;
        u.push_back(t + xs);
        v.push_back(static_cast<int>(ys + s * t + .5));
      }
    } else {
      for (int d = 0; d <= dy; ++d) {
        const int t = flip ? dy - d : d;
        v.push_back(t + ys);
        u.push_back(static_cast<int>(xs + s * t + .5));
      }
    }
  }
  // Points where the boundary crosses a pixel column's centre, downsampled.
  std::vector<uint32_t> a;
  for (size_t j = 1; j < u.size(); ++j) {
    if (u[j] == u[j - 1]) continue;
    double xd = u[j] < u[j - 1] ? u[j] : u[j] - 1;
    xd = (xd + .5) / kScale - .5;
    if (std::floor(xd) != xd || xd < 0 || xd > width - 1) continue;
    double yd = v[j] < v[j - 1] ? v[j] : v[j - 1];
    yd = (yd + .5) / kScale - .5;
    if (yd < 0) {
      yd = 0;
    } else if (yd > height) {
      yd = height;
    }
    yd = std::ceil(yd);
    a.push_back(static_cast<uint32_t>(static_cast<int>(xd) * height + static_cast<int>(yd)));
  }
  // Each crossing toggles inside/outside from there down the column-major order.
  a.push_back(static_cast<uint32_t>(height * width));
  std::sort(a.begin(), a.end());
  uint32_t previous = 0;
  for (uint32_t& value : a) {
    const uint32_t t = value;
    value -= previous;
    previous = t;
  }
  // Zero-length runs merge their neighbours, as the C code does.
  size_t j = 0;
  rle.counts.push_back(a[j++]);
  while (j < a.size()) {
    if (a[j] > 0) {
      rle.counts.push_back(a[j++]);
    } else {
      ++j;
      if (j < a.size()) rle.counts.back() += a[j++];
    }
  }
  return rle;
}

RunLengthMask RleUnion(const RunLengthMask& a, const RunLengthMask& b) {
  if (a.counts.empty()) return b;
  if (b.counts.empty()) return a;
  // maskApi.c's rleMerge for two masks: consecutive stretches in the same state make one run.
  RunLengthMask out;
  out.height = a.height;
  out.width = a.width;
  uint64_t run = 0;
  bool in_run = false;
  WalkRunPairs(a.counts, b.counts, [&](uint64_t length, bool in_a, bool in_b) {
    if ((in_a || in_b) != in_run) {
      out.counts.push_back(static_cast<uint32_t>(run));
      run = 0;
      in_run = !in_run;
    }
    run += length;
  });
  out.counts.push_back(static_cast<uint32_t>(run));
  return out;
}

RunLengthMask RleFromPolygons(const std::vector<Polygon>& polygons, int height, int width) {
  RunLengthMask mask;
  for (const Polygon& polygon : polygons) {
    mask = RleUnion(mask, RleFromPolygon(polygon, height, width));
  }
  if (mask.counts.empty()) mask = RleFromPolygon({}, height, width);
  return mask;
}

int64_t RleArea(const RunLengthMask& rle) {
  int64_t area = 0;
  for (size_t j = 1; j < rle.counts.size(); j += 2) area += rle.counts[j];
  return area;
}

}  // namespace vision::core
