// The COCO detection metric (pycocotools' COCOeval: evaluate, accumulate, summarize) and the
// mask geometry it needs (maskApi.c's polygon rasterisation, RLE area, union and IoU), in C++
// so that evaluation needs no Python. Every rule follows pycocotools 2.0.11 to the bit where
// it decides a count: the IoU and recall thresholds are numpy.linspace's doubles, detections
// are ordered by a stable sort on the score (numpy's mergesort), the matching loop and its
// 1 - 1e-10 cap, precision's eps (numpy.spacing(1)), the recall lookup (searchsorted, left).
//
// Areas (they choose the small/medium/large range): a detection's is its box's w * h for
// bbox and its mask's pixel count for segm (pycocotools' loadRes, with the results' "bbox"
// dropped for segm as detectron2 does, so that segm ranges use mask areas); a ground truth's
// is the annotation's "area" field in pycocotools, which core::ObjectInstance does not carry:
// here it is the mask's pixel count (the polygons rasterised as pycocotools does), or the
// box's w * h for a ground truth without a mask. With a file whose "area" is its masks' area
// the two agree; where they differ, objects near the 32^2 and 96^2 borders change range and
// APs/APm/ARs/ARm differ from pycocotools'. Our synthetic generator's "area" is OpenCV's fill
// of the polygon, which includes boundary pixels pycocotools' rasterisation leaves out (on
// its val set 81 px more on average, up to 166: APs 0.46 with the file's areas against 0.52
// with mask areas in the "synthetic" golden case; AP, AP50, AP75, AR1-AR100 agree).
#ifndef VISION_EVALUATION_COCO_COCO_PROTOCOL_H_
#define VISION_EVALUATION_COCO_COCO_PROTOCOL_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/run_length_mask.h"
#include "core/sample.h"

namespace vision::evaluation::coco {

// maskApi.c's rleIou: intersection over union, or over the detection's area when the ground
// truth is a crowd region; 0 when they share no pixel. Both masks must have the same size.
double RleIoU(const core::RunLengthMask& detection, const core::RunLengthMask& truth,
              bool truth_is_crowd);
// maskApi.c's bbIou for [x, y, w, h] boxes, with the same crowd rule.
double BoxIoU(const std::array<double, 4>& detection, const std::array<double, 4>& truth,
              bool truth_is_crowd);

enum class IouType { kBbox, kSegm };

// One instance as the metric sees it. Only what the IoU type needs must be set: `mask` for
// segm (height 0 otherwise).
struct Instance {
  int label = 0;
  bool crowd = false;  // ground truth only
  std::array<double, 4> box = {0, 0, 0, 0};
  core::RunLengthMask mask;
  double area = 0;     // see the header comment
  double score = 1.0;  // detections only
};

// The ground truth and detections of one image.
struct ImageRecord {
  int64_t image_id = 0;
  std::vector<Instance> truths;
  std::vector<Instance> detections;
};

// The twelve numbers in pycocotools' summarize() order.
inline constexpr int kNumStats = 12;
// Their names: AP, AP50, AP75, APs, APm, APl, AR<d0>, AR<d1>, AR<d2>, ARs, ARm, ARl, with the
// three max_dets (AR1, AR10, AR100 by default).
std::array<std::string, kNumStats> StatNames(const std::array<int, 3>& max_dets);

struct CocoResult {
  // -1 where nothing could be measured (no ground truth in any category), as pycocotools.
  std::array<double, kNumStats> stats;
  // AP per label over IoU 0.50:0.95, all areas, max_dets[2]; -1 for a label without ground
  // truth.
  std::vector<double> class_ap;
};

// COCOeval over `images` (in ascending image id: pycocotools' order, which decides ties of
// equal scores across images) for labels 0..num_labels-1, each label a category, with
// max_dets ascending (pycocotools' maxDets; summarize() reads exactly three).
absl::StatusOr<CocoResult> EvaluateCoco(const std::vector<const ImageRecord*>& images,
                                        int num_labels, IouType iou_type,
                                        const std::array<int, 3>& max_dets);

}  // namespace vision::evaluation::coco

#endif  // VISION_EVALUATION_COCO_COCO_PROTOCOL_H_
