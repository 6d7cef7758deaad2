// The unit of data that flows from datasets through augmentations and target generation to
// the model and evaluators. One type serves all three tasks: each field is optional and a
// dataset fills the ones its format has. Predictions use the same type (with scores), so an
// evaluator compares two Samples.
#ifndef VISION_CORE_SAMPLE_H_
#define VISION_CORE_SAMPLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

namespace vision::core {

using Polygon = std::vector<cv::Point2f>;

// A text region (ICDAR2015): a polygon with its transcription.
struct TextInstance {
  Polygon polygon;
  std::string transcription;
  // "###" in ICDAR2015: counts neither as a hit nor a miss.
  bool ignore = false;
  // Confidence, for predictions.
  float score = 1.0f;
};

// COCO-style run-length encoding, column-major, counts alternate background/foreground.
struct RunLengthMask {
  int height = 0;
  int width = 0;
  std::vector<uint32_t> counts;
};

// An object instance (COCO): box, class and mask as polygons or RLE.
struct ObjectInstance {
  cv::Rect2f box;  // x, y, width, height in pixels
  int label = 0;   // contiguous class index, 0-based
  bool is_crowd = false;
  std::vector<Polygon> polygons;  // mask as polygons (empty when rle is used)
  RunLengthMask rle;              // mask as RLE (height == 0 when polygons are used)
  int64_t annotation_id = -1;
  float score = 1.0f;
  // The annotation file's own area (COCO "area": what COCOeval's small/medium/large ranges
  // use), for evaluation ground truth; < 0 when the file gives none (the mask's pixels count).
  double area = -1;
};

struct Sample {
  // Where the sample came from, for error messages ("img_12.jpg", "annotation 8812").
  std::string id;
  std::string image_path;
  // HxWx3, 8-bit, BGR as decoded by OpenCV (float after normalisation).
  cv::Mat image;
  // Size of the image as stored on disk, before any augmentation.
  int original_height = 0;
  int original_width = 0;
  // Current image = original image scaled by these factors (resize augmentations update
  // them; crops and pads keep the origin where the original's was), so a prediction in
  // current pixels maps back to the original by dividing by them.
  double scale_x = 1.0;
  double scale_y = 1.0;
  // The image's size before an augmentation padded it bottom and right (PadToDivisor), which
  // Batch::image_sizes carries so that models clip boxes to the picture, not to the padding
  // (torchvision's image_sizes); empty when the image is not padded. Any other geometric
  // augmentation clears it (the whole image is then the picture).
  cv::Size size_before_padding;
  std::vector<TextInstance> texts;
  std::vector<ObjectInstance> objects;
  // HxW 8-bit train ids, 255 = ignore (semantic segmentation); empty when absent.
  cv::Mat semantic;
  // Model training targets made in the loader's worker threads (e.g. DBNet's maps), HxW.
  std::map<std::string, cv::Mat> targets;
  // For evaluation: the annotations as the annotation file states them (Dataset::GroundTruth:
  // no augmentation, no clamping made for training; image not kept), so metrics are computed
  // on the reference's ground truth in original-image coordinates.
  std::shared_ptr<const Sample> ground_truth;
};

}  // namespace vision::core

#endif  // VISION_CORE_SAMPLE_H_
