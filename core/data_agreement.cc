#include "core/data_agreement.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace vision::core {
namespace {

// A dataset in messages: its config field and what it read ("train_data.dataset (COCO(...))").
struct DatasetRef {
  std::string field;
  std::string description;
  DatasetMetadata metadata;

  std::string Name() const { return absl::StrCat(field, " (", description, ")"); }
};

// A model or evaluator in messages.
struct ConsumerRef {
  std::string field;  // "model", "evaluation.evaluator"
  std::string type;   // the registered plugin name
  std::string verb;   // "trains on", "scores"
  std::string other;  // how to name a replacement: "a model", "an evaluator"
  TaskRequirements requirements;
};

std::optional<DatasetRef> Ref(const std::string& field, const Dataset* dataset) {
  if (dataset == nullptr) return std::nullopt;
  std::optional<DatasetMetadata> metadata = dataset->Metadata();
  if (!metadata) return std::nullopt;
  return DatasetRef{field, dataset->Describe(), *std::move(metadata)};
}

// "circle, rectangle, triangle, star"; long tables (COCO's 80) are cut after ten names.
std::string ClassList(const std::vector<std::string>& names) {
  constexpr size_t kMaxNames = 10;
  if (names.size() <= kMaxNames) return absl::StrJoin(names, ", ");
  return absl::StrCat(absl::StrJoin(names.begin(), names.begin() + kMaxNames, ", "), ", ... (",
                      names.size(), " in all)");
}

std::string ClassesOf(const DatasetMetadata& metadata) {
  if (metadata.class_names.empty()) return "no classes (its annotations are class-agnostic)";
  return absl::StrCat(metadata.num_classes(), " classes: ", ClassList(metadata.class_names));
}

absl::Status CheckConsumer(const ConsumerRef& consumer, const DatasetRef& dataset) {
  const TaskRequirements& needs = consumer.requirements;
  const DatasetMetadata& has = dataset.metadata;
  if (needs.annotation_kind != has.annotation_kind) {
    return absl::InvalidArgumentError(absl::StrCat(
        consumer.field, " (", consumer.type, ") ", consumer.verb, " ",
        AnnotationKindName(needs.annotation_kind), " but ", dataset.Name(), " carries ",
        AnnotationKindName(has.annotation_kind), "; use a dataset with ",
        AnnotationKindName(needs.annotation_kind), ", or ", consumer.other, " that ",
        consumer.verb, " ", AnnotationKindName(has.annotation_kind)));
  }
  if (!needs.num_classes || *needs.num_classes == has.num_classes()) return absl::OkStatus();
  const std::string option =
      needs.num_classes_option.empty()
          ? std::string()
          : absl::StrCat(consumer.field, ".options.", needs.num_classes_option);
  const std::string subject =
      option.empty() ? absl::StrCat(consumer.field, " (", consumer.type, ") has ",
                                    *needs.num_classes, " classes")
                     : absl::StrCat(option, " is ", *needs.num_classes);
  std::string fix;
  if (has.class_names.empty()) {
    fix = absl::StrCat("use a dataset with ", *needs.num_classes, " classes, or ",
                       consumer.other, " that is class-agnostic");
  } else if (option.empty()) {
    fix = absl::StrCat("use a dataset with ", *needs.num_classes, " classes, or ",
                       consumer.other, " for ", has.num_classes());
  } else {
    fix = absl::StrCat("set ", option, ": ", has.num_classes());
  }
  return absl::InvalidArgumentError(absl::StrCat(subject, " but ", dataset.Name(), " has ",
                                                 ClassesOf(has), "; ", fix));
}

// The evaluation split must label the same classes the same way as the training split, or the
// model's labels would be scored (and results written) as other classes.
absl::Status CheckSplits(const DatasetRef& train, const DatasetRef& eval) {
  const DatasetMetadata& a = train.metadata;
  const DatasetMetadata& b = eval.metadata;
  const std::string fix = "; both splits must list the same classes in the same order";
  if (a.annotation_kind != b.annotation_kind) {
    return absl::InvalidArgumentError(absl::StrCat(
        train.Name(), " carries ", AnnotationKindName(a.annotation_kind), " but ", eval.Name(),
        " carries ", AnnotationKindName(b.annotation_kind),
        "; evaluate on the kind of annotations the model trains on"));
  }
  if (a.num_classes() != b.num_classes()) {
    return absl::InvalidArgumentError(absl::StrCat(train.Name(), " has ", ClassesOf(a), " but ",
                                                   eval.Name(), " has ", ClassesOf(b), fix));
  }
  for (int label = 0; label < a.num_classes(); ++label) {
    if (a.class_names[label] != b.class_names[label]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "label ", label, " is '", a.class_names[label], "' in ", train.Name(), " but '",
          b.class_names[label], "' in ", eval.Name(), fix));
    }
  }
  if (a.source_ids != b.source_ids) {
    for (size_t label = 0; label < a.class_names.size() && label < a.source_ids.size() &&
                           label < b.source_ids.size();
         ++label) {
      if (a.source_ids[label] != b.source_ids[label]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "label ", label, " ('", a.class_names[label], "') is ", a.source_id_name, " ",
            a.source_ids[label], " in ", train.Name(), " but ", b.source_id_name, " ",
            b.source_ids[label], " in ", eval.Name(),
            "; results would be written with the wrong ids", fix));
      }
    }
    // One side has no ids.
    const std::string& ids = a.source_id_name.empty() ? b.source_id_name : a.source_id_name;
    return absl::InvalidArgumentError(absl::StrCat(train.Name(), " has ", a.source_ids.size(), " ",
                                                   ids, "s but ", eval.Name(), " has ",
                                                   b.source_ids.size(), fix));
  }
  if (a.ignore_label != b.ignore_label) {
    auto name = [](const std::optional<int>& label) {
      return label ? absl::StrCat("ignore label ", *label) : std::string("no ignore label");
    };
    return absl::InvalidArgumentError(absl::StrCat(
        train.Name(), " has ", name(a.ignore_label), " but ", eval.Name(), " has ",
        name(b.ignore_label), "; pixels ignored in training would be scored in evaluation"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckDataAgreement(const TrainPipelineConfig& config, const Model* model,
                                const Dataset* train_dataset, const Dataset* eval_dataset,
                                const Evaluator* evaluator) {
  const std::optional<DatasetRef> train = Ref("train_data.dataset", train_dataset);
  const std::optional<DatasetRef> eval = Ref("eval_data.dataset", eval_dataset);
  // The model first: its mismatch names the plugin to change, the likelier mistake.
  if (model != nullptr) {
    if (std::optional<TaskRequirements> needs = model->DataRequirements()) {
      const ConsumerRef consumer{"model", config.model().type(), "trains on", "a model", *needs};
      for (const std::optional<DatasetRef>& dataset : {train, eval}) {
        if (!dataset) continue;
        VISION_RETURN_IF_ERROR(CheckConsumer(consumer, *dataset));
      }
    }
  }
  if (evaluator != nullptr && eval) {
    if (std::optional<TaskRequirements> needs = evaluator->DataRequirements()) {
      const ConsumerRef consumer{"evaluation.evaluator", config.evaluation().evaluator().type(),
                                 "scores", "an evaluator", *needs};
      VISION_RETURN_IF_ERROR(CheckConsumer(consumer, *eval));
    }
  }
  if (train && eval) return CheckSplits(*train, *eval);
  return absl::OkStatus();
}

}  // namespace vision::core
