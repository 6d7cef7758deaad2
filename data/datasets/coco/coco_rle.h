// COCO's compressed RLE strings: the "counts" of a segmentation written as a string, e.g.
// {"size": [240, 320], "counts": "Ph0111jg0"}, as pycocotools' maskApi.c (rleToString,
// rleFrString) reads and writes them.
//
// Each run is delta-coded against the run two before it (from the fourth run on: the C code
// tests `i > 2`), then written like LEB128 but in 6-bit groups: five value bits per character,
// least significant first, 0x20 set while more characters follow, and bit 0x10 of the last
// character the sign; the character is the group plus 48, so '0' (48) to 'o' (111).
#ifndef VISION_DATA_DATASETS_COCO_COCO_RLE_H_
#define VISION_DATA_DATASETS_COCO_COCO_RLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vision::data::datasets::coco {

// The run lengths of a compressed counts string. Fails on a character outside '0'..'o', a
// string that ends inside a value, a value too long for 64 bits, or a run that is negative
// or does not fit in 32 bits; messages give the character position. That the runs add up to
// the mask's height * width is for the caller to check.
absl::StatusOr<std::vector<uint32_t>> DecodeCocoRleString(absl::string_view counts);

// The compressed counts string of `counts` (the inverse of DecodeCocoRleString).
std::string EncodeCocoRleString(const std::vector<uint32_t>& counts);

}  // namespace vision::data::datasets::coco

#endif  // VISION_DATA_DATASETS_COCO_COCO_RLE_H_
