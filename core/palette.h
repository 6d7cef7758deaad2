// Colours for class labels: one per label, stable across runs, and label maps in colour (the
// drawing library's and the mIoU evaluator's colour images).
#ifndef VISION_CORE_PALETTE_H_
#define VISION_CORE_PALETTE_H_

#include <array>
#include <cstdint>
#include <vector>

#include <opencv2/core.hpp>

namespace vision::core {

// A distinct, stable colour per class label (golden-angle hue steps), BGR.
cv::Scalar ClassColour(int label);

// A label map (HxW 8-bit labels) in colour, 8-bit BGR: label i in palette_rgb[i] (RGB, as
// formats publish their palettes, e.g. DatasetMetadata::class_colours), labels beyond the
// palette in ClassColour, the ignore label 255 black.
cv::Mat ColourLabelMap(const cv::Mat& labels,
                       const std::vector<std::array<uint8_t, 3>>& palette_rgb = {});

}  // namespace vision::core

#endif  // VISION_CORE_PALETTE_H_
