// The run-length codec beside the type it serves (core::RunLengthMask, core/sample.h):
// masks <-> 8-bit rasters, so mask annotations can be warped like images and rasterised into
// training targets, and COCO's compressed RLE strings.
//
// Compressed strings: the "counts" of a segmentation written as a string, e.g.
// {"size": [240, 320], "counts": "Ph0111jg0"}, as pycocotools' maskApi.c (rleToString,
// rleFrString) reads and writes them.
//
// Each run is delta-coded against the run two before it (from the fourth run on: the C code
// tests `i > 2`), then written like LEB128 but in 6-bit groups: five value bits per character,
// least significant first, 0x20 set while more characters follow, and bit 0x10 of the last
// character the sign; the character is the group plus 48, so '0' (48) to 'o' (111).
#ifndef VISION_CORE_RUN_LENGTH_MASK_H_
#define VISION_CORE_RUN_LENGTH_MASK_H_

#include <cstdint>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/sample.h"

namespace vision::core {


// HxW CV_8U, 1 on the mask, 0 elsewhere. Fails when the counts do not add up to H * W.
absl::StatusOr<cv::Mat> DecodeRle(const RunLengthMask& rle);

// Encodes the non-zero pixels of an HxW CV_8U mask (column-major, background run first).
RunLengthMask EncodeRle(const cv::Mat& mask);


// The run lengths of a compressed counts string. Fails on a character outside '0'..'o', a
// string that ends inside a value, a value too long for 64 bits, or a run that is negative
// or does not fit in 32 bits; messages give the character position. That the runs add up to
// the mask's height * width is for the caller to check.
absl::StatusOr<std::vector<uint32_t>> DecodeCocoRleString(absl::string_view counts);

// The compressed counts string of `counts` (the inverse of DecodeCocoRleString).
std::string EncodeCocoRleString(const std::vector<uint32_t>& counts);


// maskApi.c's rleFrPoly: one polygon rasterised on an h x w grid (5x upsampled boundary,
// pixel centres), the mask pycocotools compares for a polygon segmentation.
RunLengthMask RleFromPolygon(const Polygon& polygon, int height, int width);
// The same from the file's coordinates x0, y0, x1, y1, ... in double precision, as pycocotools
// reads them (a Polygon's floats can move a boundary pixel).
RunLengthMask RleFromPolygonCoordinates(const std::vector<double>& xy, int height, int width);
// The union of the polygons' masks (pycocotools' annToRLE: frPyObjects then merge).
RunLengthMask RleFromPolygons(const std::vector<Polygon>& polygons, int height,
                                    int width);
// The union of two masks of the same size, by walking their runs.
RunLengthMask RleUnion(const RunLengthMask& a, const RunLengthMask& b);
// Foreground pixels.
int64_t RleArea(const RunLengthMask& rle);

// maskApi.c's walk over two masks' runs (rleMerge, rleIou): calls
// visit(uint64_t length, bool in_a, bool in_b) for each stretch, in column-major order, over
// which neither mask changes; zero-length stretches included, as the C code steps them. Both
// run lists must be non-empty.
template <typename Visit>
void WalkRunPairs(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b, Visit&& visit) {
  uint64_t ca = a[0], cb = b[0], ct = 1;
  size_t ia = 1, ib = 1;
  bool va = false, vb = false;
  while (ct > 0) {
    const uint64_t c = ca < cb ? ca : cb;
    visit(c, va, vb);
    ct = 0;
    ca -= c;
    if (ca == 0 && ia < a.size()) {
      ca = a[ia++];
      va = !va;
    }
    ct += ca;
    cb -= c;
    if (cb == 0 && ib < b.size()) {
      cb = b[ib++];
      vb = !vb;
    }
    ct += cb;
  }
}

}  // namespace vision::core

#endif  // VISION_CORE_RUN_LENGTH_MASK_H_
