// Geometry shared by the augmentation plugins: one function maps a whole Sample (image, texts,
// objects, semantic labels, targets) through an affine matrix, so each geometric plugin only
// chooses its matrix and output size.
//
// Coordinate convention: continuous pixel coordinates in which pixel (col, row) covers
// [col, col + 1) x [row, row + 1). Polygons, boxes and Sample::scale_x/scale_y use it, so
// resizing by s maps a coordinate x to exactly x * s and the image with cv::resize agrees.
// cv::warpAffine puts pixel centres on integers; WarpRaster converts between the two.
//
// After the mapping every annotation is clipped to the output canvas [0, W] x [0, H]:
//  - texts: a polygon with no visible area (a degenerate one included) is dropped; a partly
//    visible one is replaced by its visible part (the largest piece when clipping splits it)
//    and marked ignore when less than ClipRules::text_min_visible_fraction of its area is
//    visible;
//  - objects: each polygon (or the RLE mask, or a box-only object's box) is clipped; an object
//    whose visible area is below ClipRules::object_min_area (or zero) is dropped, and every
//    surviving object's box is recomputed as the bounds of its clipped polygons or mask;
//  - the semantic map is resampled with nearest neighbour and padded with 255 (ignore);
//    Sample::targets with nearest neighbour, padded with 0.
// Polygons that lie entirely inside the canvas keep their points; a mapping that mirrors
// (negative determinant) re-orders them so they keep their orientation and a
// top-left, top-right, bottom-right, bottom-left quad starts at its new top-left again.
#ifndef VISION_DATA_AUGMENTATIONS_GEOMETRY_H_
#define VISION_DATA_AUGMENTATIONS_GEOMETRY_H_

#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/sample.h"
#include "data/augmentations/augmentations.pb.h"
#include "google/protobuf/repeated_field.h"

namespace vision::data::augmentations {

struct ClipRules {
  float text_min_visible_fraction = 0.5f;
  float object_min_area = 4.0f;
};

ClipRules ClipRulesFromProto(const ClipPolicy& policy);

struct WarpParams {
  // Fill for image pixels the mapping uncovers.
  cv::Scalar image_fill = cv::Scalar::all(0);
  // cv::INTER_LINEAR or cv::INTER_NEAREST for the image; labels always use nearest.
  int image_interpolation = cv::INTER_LINEAR;
  ClipRules clip;
};

// FailedPrecondition naming the sample when it has no image (augmentations need one).
absl::Status CheckHasImage(const core::Sample& sample);

// Maps every geometric field of `sample` through `m` (output point = m * [x, y, 1]) onto a
// canvas of `out_size`, clipping annotations as described at the top of this file. Leaves
// scale_x/scale_y alone: only resizes change them (see ResizeSample).
// Clears Sample::size_before_padding: after a general warp the whole image is the picture.
absl::Status WarpSample(const cv::Matx23d& m, cv::Size out_size, const WarpParams& params,
                        core::Sample* sample);

// Resizes `sample` to `new_size` (each side scaled independently) and multiplies its scale
// factors by new_size / old size.
absl::Status ResizeSample(cv::Size new_size, core::Sample* sample);

// Resamples a raster (any depth, 1-4 channels) through `m` given in the corner convention.
// Integer translations (crops, pads) and left-right mirrors are copied exactly and pure scalings
// use cv::resize; other mappings use cv::warpAffine. Nearest neighbour samples pixel centres (INTER_NEAREST_EXACT).
cv::Mat WarpRaster(const cv::Mat& src, const cv::Matx23d& m, cv::Size out_size,
                   int interpolation, const cv::Scalar& fill);

core::Polygon TransformPolygon(const core::Polygon& polygon, const cv::Matx23d& m);

// An image fill from an options field: none -> 0, one value -> every channel, else per channel
// (at most 4). `field` names the option in the error.
absl::StatusOr<cv::Scalar> FillFromValues(const google::protobuf::RepeatedField<float>& values,
                                          const char* field);

}  // namespace vision::data::augmentations

#endif  // VISION_DATA_AUGMENTATIONS_GEOMETRY_H_
