// "COCO": box and mask AP with pycocotools' COCOeval protocol (coco_protocol.h), for object
// instances (core::Sample::objects) in original-image coordinates.
//
// Per IoU type (options.iou_types) Compute() gives, prefixed "bbox_" or "segm_": AP, AP50,
// AP75, APs, APm, APl, AR1, AR10, AR100, ARs, ARm, ARl, and "AP/<class>" per class with
// ground truth. Each label is a category; categories without ground truth are left out of
// the averages (pycocotools' -1 entries). MainMetric is segm_AP when masks are scored, else
// bbox_AP.
//
// Images are identified by the COCO image id the COCO dataset writes into Sample::id
// ("<file> (image id <n>)"): the metric orders images by it (pycocotools' order, which
// breaks ties between equal scores in different images), merging ranks' states is therefore
// independent of how images were split, and the results JSON uses it.
//
// Masks: a detection's or ground truth's ObjectInstance::rle, or its polygons rasterised as
// pycocotools rasterises them, on the ground truth's original_height x original_width.
//
// Dataset metadata (SetDatasetMetadata) gives the COCO category id and name of each label:
// with it, labels outside the metadata's classes are an error naming them, per-class AP
// carries class names, and WriteMergedResults can write category ids. core::Evaluator has
// no hook through which the pipeline passes metadata yet, so a pipeline-built evaluator
// computes the metrics (which need only labels) and its WriteMergedResults reports the
// missing metadata instead of writing guessed ids.
#ifndef VISION_EVALUATION_COCO_COCO_EVALUATOR_H_
#define VISION_EVALUATION_COCO_COCO_EVALUATOR_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/evaluator.h"
#include "core/sample.h"
#include "core/task_metadata.h"
#include "evaluation/coco/coco_eval.pb.h"
#include "evaluation/coco/coco_protocol.h"

namespace vision::evaluation::coco {

// The image id in a COCO sample's id ("000000000139.jpg (image id 139)").
absl::StatusOr<int64_t> CocoImageId(const std::string& sample_id);

class CocoEvaluator : public core::Evaluator {
 public:
  static absl::StatusOr<std::unique_ptr<CocoEvaluator>> Create(const CocoEvalOptions& options);

  // Labels -> category ids and names; see the header comment. Fails when the metadata has no
  // classes or its source ids do not match them one to one.
  absl::Status SetDatasetMetadata(const core::DatasetMetadata& metadata) override;

  void Reset() override {
    images_.clear();
    image_sizes_.clear();
  }
  absl::Status Add(const core::Sample& prediction, const core::Sample& ground_truth) override;
  std::map<std::string, double> Compute() const override;
  std::string MainMetric() const override;
  // The per-image records (ground truth and detections with scores, masks as compressed RLE)
  // as JSON; merging adds the other rank's images.
  std::string SerializeState() const override;
  absl::Status MergeState(const std::string& state) override;
  // <dir>/<results_file>: every detection with the dataset's image and category ids, "bbox" and
  // "segmentation" in one entry, as detectron2's coco_instances_results.json. Beside it, one
  // file per scored IoU type, which pycocotools' COCO.loadRes + COCOeval score exactly as this
  // evaluator does: <stem>_bbox.json (no "segmentation") and <stem>_segm.json (no "bbox": given
  // one, loadRes would take the box's area for every mask and move APs/APm/APl; see
  // coco_protocol.h). Each file is written to a temporary name and renamed.
  absl::Status WriteMergedResults(const std::string& dir) const override;
  std::optional<core::TaskRequirements> DataRequirements() const override {
    return core::TaskRequirements{core::AnnotationKind::kObjectInstances};
  }

 private:
  explicit CocoEvaluator(const CocoEvalOptions& options, std::vector<IouType> iou_types,
                         std::array<int, 3> max_dets)
      : options_(options), iou_types_(std::move(iou_types)), max_dets_(max_dets) {}

  bool ScoresMasks() const;
  // Adds one image's record after checking it (labels, masks' sizes, a new image id).
  absl::Status AddRecord(ImageRecord record, int height, int width);

  const CocoEvalOptions options_;
  const std::vector<IouType> iou_types_;
  const std::array<int, 3> max_dets_;
  std::optional<core::DatasetMetadata> metadata_;
  // By image id. Detections' areas are their masks' when segm is scored (Compute() uses box
  // areas for bbox); each image's mask size is in image_sizes_.
  std::map<int64_t, ImageRecord> images_;
  std::map<int64_t, std::pair<int, int>> image_sizes_;  // height, width
};

}  // namespace vision::evaluation::coco

#endif  // VISION_EVALUATION_COCO_COCO_EVALUATOR_H_
