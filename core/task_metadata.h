// What a dataset's annotations are (DatasetMetadata) and what a model trains on or an evaluator
// scores (TaskRequirements), so that the pipeline builder can check at start-up that they agree
// (core/data_agreement.h) instead of a run failing, or silently learning nonsense, hours later.
#ifndef VISION_CORE_TASK_METADATA_H_
#define VISION_CORE_TASK_METADATA_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vision::core {

// Which Sample field carries a dataset's annotations.
enum class AnnotationKind {
  kTextPolygons,     // Sample::texts (ICDAR2015)
  kObjectInstances,  // Sample::objects (COCO instances)
  kLabelMaps,        // Sample::semantic (Cityscapes)
};

// "text polygons", "object instances", "label maps".
const char* AnnotationKindName(AnnotationKind kind);

struct DatasetMetadata {
  AnnotationKind annotation_kind = AnnotationKind::kTextPolygons;
  // Names of the contiguous labels 0..K-1 that samples carry (ObjectInstance::label, the values
  // of Sample::semantic); empty when annotations have no class (ICDAR2015's text).
  std::vector<std::string> class_names;
  // The format's own id of each label, to write results in the format's ids (COCO category
  // ids, Cityscapes label ids); empty when the format has none.
  std::vector<int64_t> source_ids;
  // What the format calls those ids, for descriptions and errors ("category id").
  std::string source_id_name;
  // The group each label belongs to, where the format's own evaluation also scores groups
  // (Cityscapes' "flat", "vehicle", ... category IoU); empty when the format has none.
  std::vector<std::string> class_categories;
  // The format's display colour of each label, RGB (Cityscapes' palette), so drawings look like
  // the format's own; empty when the format has none.
  std::vector<std::array<uint8_t, 3>> class_colours;
  // The label-map value that belongs to no class (Cityscapes' 255); nullopt without label maps.
  std::optional<int> ignore_label;

  int num_classes() const { return static_cast<int>(class_names.size()); }
};

// What a model trains on, or an evaluator scores.
struct TaskRequirements {
  AnnotationKind annotation_kind = AnnotationKind::kTextPolygons;
  // The number of dataset classes (labels 0..K-1) predicted or scored, not counting a
  // background class a model adds internally; nullopt when class-agnostic (DBNet).
  std::optional<int> num_classes;
  // The plugin option that sets num_classes ("num_classes"), so that a mismatch names what to
  // change; empty when the count is fixed.
  std::string num_classes_option;
};

// "object instances, 4 classes: circle (category id 1), rectangle (category id 3), ...";
// "label maps, ..., ignore label 255"; "text polygons, class-agnostic".
std::string DescribeMetadata(const DatasetMetadata& metadata);

// "text polygons, class-agnostic"; "object instances, 80 classes (option num_classes)".
std::string DescribeRequirements(const TaskRequirements& requirements);

}  // namespace vision::core

#endif  // VISION_CORE_TASK_METADATA_H_
