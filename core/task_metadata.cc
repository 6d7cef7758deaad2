#include "core/task_metadata.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace vision::core {

const char* AnnotationKindName(AnnotationKind kind) {
  switch (kind) {
    case AnnotationKind::kTextPolygons:
      return "text polygons";
    case AnnotationKind::kObjectInstances:
      return "object instances";
    case AnnotationKind::kLabelMaps:
      return "label maps";
  }
  return "unknown annotations";
}

std::string DescribeMetadata(const DatasetMetadata& metadata) {
  std::string text = AnnotationKindName(metadata.annotation_kind);
  if (metadata.class_names.empty()) {
    absl::StrAppend(&text, ", class-agnostic");
  } else {
    std::vector<std::string> classes;
    for (size_t i = 0; i < metadata.class_names.size(); ++i) {
      classes.push_back(i < metadata.source_ids.size()
                            ? absl::StrCat(metadata.class_names[i], " (",
                                           metadata.source_id_name, " ",
                                           metadata.source_ids[i], ")")
                            : metadata.class_names[i]);
    }
    absl::StrAppend(&text, ", ", metadata.num_classes(), " classes: ",
                    absl::StrJoin(classes, ", "));
  }
  if (metadata.ignore_label) absl::StrAppend(&text, "; ignore label ", *metadata.ignore_label);
  return text;
}

std::string DescribeRequirements(const TaskRequirements& requirements) {
  std::string text = AnnotationKindName(requirements.annotation_kind);
  if (!requirements.num_classes) return absl::StrCat(text, ", class-agnostic");
  absl::StrAppend(&text, ", ", *requirements.num_classes, " classes");
  if (!requirements.num_classes_option.empty()) {
    absl::StrAppend(&text, " (option ", requirements.num_classes_option, ")");
  }
  return text;
}

}  // namespace vision::core
