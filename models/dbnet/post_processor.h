// DBNet inference: from the probability map to text polygons in original-image pixels.
//
// Follows MhLiao/DB's SegDetectorRepresenter and mmocr's DBPostprocessor: binarise at
// binary_threshold, take every contour (up to max_candidates), simplify it (approxPolyDP,
// epsilon = 1% of its length), score it by the mean probability inside, drop it below
// box_threshold or when thinner than min_box_size, expand ("unclip") it by
// area * unclip_ratio / perimeter with a round-join Clipper offset (the inverse of the label
// shrink), then keep the minimum-area rectangle (quadrilateral) or the expanded polygon.
// Coordinates are mapped back with Sample's convention (current = original * scale) and
// clipped to the original image.
#ifndef VISION_MODELS_DBNET_POST_PROCESSOR_H_
#define VISION_MODELS_DBNET_POST_PROCESSOR_H_

#include <vector>

#include "core/sample.h"

namespace vision::models::dbnet {

enum class OutputShape { kQuadrilateral, kPolygon };

struct PostProcessorOptions {
  float binary_threshold = 0.3f;
  float box_threshold = 0.7f;
  float unclip_ratio = 1.5f;
  int max_candidates = 1000;
  OutputShape output = OutputShape::kQuadrilateral;
  // Shorter side of the minimum-area rectangle, in map pixels, below which a region is
  // dropped (min_box_size + 2 after expansion, as in MhLiao/DB).
  float min_box_size = 3.0f;
};

// `probability` is an H x W CV_32F map in current-image pixels; the image it came from is
// the original scaled by (scale_x, scale_y) and the original is original_width x
// original_height. Quadrilaterals are ordered top-left, top-right, bottom-right, bottom-left.
std::vector<core::TextInstance> ExtractTextRegions(const cv::Mat& probability,
                                                   const PostProcessorOptions& options,
                                                   double scale_x, double scale_y,
                                                   int original_width, int original_height);

}  // namespace vision::models::dbnet

#endif  // VISION_MODELS_DBNET_POST_PROCESSOR_H_
