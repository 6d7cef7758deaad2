#include "evaluation/coco/coco_evaluator.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/nesting.h"
#include "core/run_length_mask.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"

namespace vision::evaluation::coco {
namespace {

using Json = nlohmann::json;

constexpr char kStateFormat[] = "COCO-records-1";
constexpr char kImageIdMarker[] = "(image id ";

const char* Prefix(IouType type) { return type == IouType::kBbox ? "bbox_" : "segm_"; }

// Checks an RLE against the image it belongs to.
absl::Status CheckRle(const core::RunLengthMask& rle, int height, int width) {
  if (rle.height != height || rle.width != width) {
    return absl::InvalidArgumentError(absl::StrCat("its RLE mask is ", rle.width, "x", rle.height,
                                                   " but the image is ", width, "x", height));
  }
  uint64_t total = 0;
  for (uint32_t c : rle.counts) total += c;
  if (total != static_cast<uint64_t>(height) * static_cast<uint64_t>(width)) {
    return absl::InvalidArgumentError(
        absl::StrCat("its RLE runs add up to ", total, " pixels, not ", height, " * ", width));
  }
  return absl::OkStatus();
}

// The instance the metric sees. A ground truth's area is the file's "area" when the dataset
// gives it (ObjectInstance::area, what pycocotools' area ranges use), else its mask's pixels;
// the mask itself is kept only when masks are scored.
absl::StatusOr<Instance> ToInstance(const core::ObjectInstance& object, bool detection,
                                    bool keep_mask, int height, int width) {
  Instance instance;
  instance.label = object.label;
  instance.crowd = !detection && object.is_crowd;
  instance.box = {object.box.x, object.box.y, object.box.width, object.box.height};
  for (double v : instance.box) {
    if (!std::isfinite(v)) return absl::InvalidArgumentError("its box has a non-finite coordinate");
  }
  if (detection) {
    if (!std::isfinite(object.score)) {
      return absl::InvalidArgumentError(absl::StrCat("its score is ", object.score));
    }
    instance.score = object.score;
  }
  const bool has_mask = object.rle.height > 0 || !object.polygons.empty();
  if (has_mask && (keep_mask || !detection)) {
    if (height <= 0 || width <= 0) {
      return absl::InvalidArgumentError(
          "it has a mask but the ground truth sample has no original_height/original_width");
    }
    if (object.rle.height > 0) {
      VISION_RETURN_IF_ERROR(CheckRle(object.rle, height, width));
      instance.mask = object.rle;
    } else {
      for (const core::Polygon& polygon : object.polygons) {
        for (const cv::Point2f& p : polygon) {
          if (!std::isfinite(p.x) || !std::isfinite(p.y)) {
            return absl::InvalidArgumentError("a polygon has a non-finite coordinate");
          }
        }
      }
      instance.mask = core::RleFromPolygons(object.polygons, height, width);
    }
  } else if (keep_mask) {
    return absl::InvalidArgumentError(
        "it has no mask (rle or polygons) but segm is scored; score bbox only for a model "
        "without masks");
  }
  if (!detection && object.area >= 0) {
    if (!std::isfinite(object.area)) return absl::InvalidArgumentError("its area is not finite");
    instance.area = object.area;
  } else {
    instance.area = (detection && !keep_mask) || !has_mask
                        ? instance.box[2] * instance.box[3]
                        : static_cast<double>(core::RleArea(instance.mask));
  }
  if (!keep_mask) instance.mask = core::RunLengthMask();
  return instance;
}

Json InstanceJson(const Instance& instance, bool detection) {
  Json j;
  j["l"] = instance.label;
  j["b"] = instance.box;
  j["a"] = instance.area;
  if (detection) {
    j["s"] = instance.score;
  } else {
    j["c"] = instance.crowd;
  }
  if (instance.mask.height > 0) j["m"] = core::EncodeCocoRleString(instance.mask.counts);
  return j;
}

absl::StatusOr<Instance> InstanceFromJson(const Json& j, bool detection, int height, int width) {
  Instance instance;
  try {
    instance.label = j.at("l").get<int>();
    instance.box = j.at("b").get<std::array<double, 4>>();
    instance.area = j.at("a").get<double>();
    if (detection) {
      instance.score = j.at("s").get<double>();
    } else {
      instance.crowd = j.at("c").get<bool>();
    }
    if (j.contains("m")) {
      VISION_ASSIGN_OR_RETURN(instance.mask.counts,
                              core::DecodeCocoRleString(j.at("m").get<std::string>()));
      instance.mask.height = height;
      instance.mask.width = width;
      VISION_RETURN_IF_ERROR(CheckRle(instance.mask, height, width));
    }
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return instance;
}

}  // namespace

absl::StatusOr<int64_t> CocoImageId(const std::string& sample_id) {
  const size_t at = sample_id.rfind(kImageIdMarker);
  int64_t id = 0;
  if (at == std::string::npos || sample_id.back() != ')' ||
      !absl::SimpleAtoi(absl::string_view(sample_id).substr(
                            at + sizeof(kImageIdMarker) - 1,
                            sample_id.size() - 1 - (at + sizeof(kImageIdMarker) - 1)),
                        &id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample '", sample_id,
        "' has no COCO image id (the COCO dataset names samples '<file> (image id <n>)'); the "
        "COCO evaluator scores samples of the COCO dataset"));
  }
  return id;
}

absl::StatusOr<std::unique_ptr<CocoEvaluator>> CocoEvaluator::Create(
    const CocoEvalOptions& options) {
  std::vector<IouType> iou_types;
  for (int type : options.iou_types()) {
    const IouType t = type == CocoEvalOptions::SEGM ? IouType::kSegm : IouType::kBbox;
    if (std::find(iou_types.begin(), iou_types.end(), t) != iou_types.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CocoEvalOptions.iou_types lists ",
          CocoEvalOptions::IouType_Name(static_cast<CocoEvalOptions::IouType>(type)), " twice"));
    }
    iou_types.push_back(t);
  }
  if (iou_types.empty()) iou_types.push_back(IouType::kBbox);
  std::array<int, 3> max_dets = {1, 10, 100};
  if (options.max_dets_size() > 0) {
    if (options.max_dets_size() != 3 || options.max_dets(0) < 1 ||
        options.max_dets(0) >= options.max_dets(1) || options.max_dets(1) >= options.max_dets(2)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CocoEvalOptions.max_dets must be three ascending positive numbers (AR at each; AP "
          "at the last), got [",
          absl::StrJoin(options.max_dets(), ", "), "]"));
    }
    max_dets = {options.max_dets(0), options.max_dets(1), options.max_dets(2)};
  }
  if (options.results_file().empty() ||
      std::filesystem::path(options.results_file()).has_parent_path()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CocoEvalOptions.results_file must be a file "
                     "name inside the results directory, got '",
                     options.results_file(), "'"));
  }
  return std::unique_ptr<CocoEvaluator>(new CocoEvaluator(options, std::move(iou_types), max_dets));
}

absl::Status CocoEvaluator::SetDatasetMetadata(const core::DatasetMetadata& metadata) {
  if (metadata.annotation_kind != core::AnnotationKind::kObjectInstances ||
      metadata.num_classes() == 0 || metadata.source_ids.size() != metadata.class_names.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the COCO evaluator needs object instances with a category id per class; the dataset "
        "has ",
        core::DescribeMetadata(metadata)));
  }
  metadata_ = metadata;
  return absl::OkStatus();
}

bool CocoEvaluator::ScoresMasks() const {
  return std::find(iou_types_.begin(), iou_types_.end(), IouType::kSegm) != iou_types_.end();
}

std::string CocoEvaluator::MainMetric() const { return ScoresMasks() ? "segm_AP" : "bbox_AP"; }

absl::Status CocoEvaluator::AddRecord(ImageRecord record, int height, int width) {
  const std::string where = absl::StrCat("image id ", record.image_id);
  std::set<int> unknown;
  for (const auto* instances : {&record.truths, &record.detections}) {
    for (const Instance& instance : *instances) {
      if (instance.label < 0 || (metadata_ && instance.label >= metadata_->num_classes())) {
        unknown.insert(instance.label);
      }
      if (instance.mask.height > 0 &&
          (instance.mask.height != height || instance.mask.width != width)) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": a mask is ", instance.mask.width,
                                                       "x", instance.mask.height,
                                                       " but the image is ", width, "x", height));
      }
    }
  }
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": label(s) ", absl::StrJoin(unknown, ", "), " are not classes of the dataset (",
        metadata_ ? core::DescribeMetadata(*metadata_) : std::string("labels are 0-based"), ")"));
  }
  const int64_t id = record.image_id;
  if (!images_.emplace(id, std::move(record)).second) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " was evaluated twice (added twice, or on two ranks)"));
  }
  image_sizes_[id] = {height, width};
  return absl::OkStatus();
}

absl::Status CocoEvaluator::Add(const core::Sample& prediction, const core::Sample& ground_truth) {
  VISION_ASSIGN_OR_RETURN(const int64_t image_id, CocoImageId(ground_truth.id));
  const int height = ground_truth.original_height, width = ground_truth.original_width;
  const bool masks = ScoresMasks();
  ImageRecord record;
  record.image_id = image_id;
  for (const auto* objects : {&ground_truth.objects, &prediction.objects}) {
    const bool detection = objects == &prediction.objects;
    for (size_t i = 0; i < objects->size(); ++i) {
      absl::StatusOr<Instance> instance =
          ToInstance((*objects)[i], detection, masks, height, width);
      if (!instance.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sample '", ground_truth.id, "': ", detection ? "prediction" : "ground truth",
            " object ", i, ": ", instance.status().message()));
      }
      (detection ? record.detections : record.truths).push_back(*std::move(instance));
    }
  }
  return AddRecord(std::move(record), height, width);
}

std::map<std::string, double> CocoEvaluator::Compute() const {
  std::vector<const ImageRecord*> with_masks;
  std::vector<ImageRecord> with_boxes;
  with_boxes.reserve(images_.size());
  int num_labels = metadata_ ? metadata_->num_classes() : 0;
  for (const auto& [id, record] : images_) {
    with_masks.push_back(&record);
    // bbox areas for detections; the masks are not needed.
    ImageRecord& boxes = with_boxes.emplace_back();
    boxes.image_id = id;
    boxes.truths = record.truths;
    boxes.detections = record.detections;
    for (auto* instances : {&boxes.truths, &boxes.detections}) {
      for (Instance& instance : *instances) {
        instance.mask = core::RunLengthMask();
        num_labels = std::max(num_labels, instance.label + 1);
      }
    }
    for (Instance& d : boxes.detections) d.area = d.box[2] * d.box[3];
  }
  std::vector<const ImageRecord*> box_pointers;
  for (const ImageRecord& record : with_boxes) box_pointers.push_back(&record);

  std::map<std::string, double> metrics;
  const std::array<std::string, kNumStats> names = StatNames(max_dets_);
  for (IouType type : iou_types_) {
    // Add() and MergeState() checked every mask against its image's size, the one error
    // EvaluateCoco reports.
    const CocoResult result = EvaluateCoco(type == IouType::kSegm ? with_masks : box_pointers,
                                           num_labels, type, max_dets_)
                                  .value();
    for (int i = 0; i < kNumStats; ++i) metrics[Prefix(type) + names[i]] = result.stats[i];
    for (int k = 0; k < num_labels; ++k) {
      if (result.class_ap[k] <= -1) continue;
      metrics[absl::StrCat(Prefix(type), "AP/",
                           metadata_ ? metadata_->class_names[k] : absl::StrCat(k))] =
          result.class_ap[k];
    }
  }
  return metrics;
}

std::string CocoEvaluator::SerializeState() const {
  Json images = Json::array();
  for (const auto& [id, record] : images_) {
    Json image;
    image["id"] = id;
    image["h"] = image_sizes_.at(id).first;
    image["w"] = image_sizes_.at(id).second;
    image["gt"] = Json::array();
    for (const Instance& g : record.truths) image["gt"].push_back(InstanceJson(g, false));
    image["dt"] = Json::array();
    for (const Instance& d : record.detections) image["dt"].push_back(InstanceJson(d, true));
    images.push_back(std::move(image));
  }
  Json state;
  state["format"] = kStateFormat;
  state["images"] = std::move(images);
  return state.dump();
}

absl::Status CocoEvaluator::MergeState(const std::string& state) {
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("COCO MergeState: expected another COCO evaluator's SerializeState(): ", why));
  };
  if (const std::optional<size_t> deep = core::FindExcessNesting(state, core::TextSyntax::kJson)) {
    return invalid(absl::StrCat("lists and objects nest more than ", core::kMaxNestingDepth,
                                " deep at byte ", *deep));
  }
  Json root;
  try {
    root = Json::parse(state);
  } catch (const Json::exception& e) {
    return invalid(e.what());
  }
  if (!root.is_object() || root.value("format", "") != kStateFormat || !root.contains("images") ||
      !root["images"].is_array()) {
    return invalid(absl::StrCat("no '", kStateFormat, "' records"));
  }
  for (const Json& image : root["images"]) {
    ImageRecord record;
    int height = 0, width = 0;
    try {
      record.image_id = image.at("id").get<int64_t>();
      height = image.at("h").get<int>();
      width = image.at("w").get<int>();
      for (const auto& [key, out] : {std::pair{"gt", &record.truths}, {"dt", &record.detections}}) {
        for (const Json& j : image.at(key)) {
          absl::StatusOr<Instance> instance =
              InstanceFromJson(j, out == &record.detections, height, width);
          if (!instance.ok()) return invalid(instance.status().message());
          out->push_back(*std::move(instance));
        }
      }
    } catch (const Json::exception& e) {
      return invalid(e.what());
    }
    VISION_RETURN_IF_ERROR(AddRecord(std::move(record), height, width));
  }
  return absl::OkStatus();
}

absl::Status CocoEvaluator::WriteMergedResults(const std::string& dir) const {
  if (!metadata_) {
    return absl::FailedPreconditionError(
        "the COCO results JSON needs the dataset's category ids, and this evaluator was given "
        "no dataset metadata (CocoEvaluator::SetDatasetMetadata)");
  }
  // combined: detectron2's file; then one per scored IoU type.
  Json combined = Json::array();
  Json boxes = Json::array();
  Json masks = Json::array();
  for (const auto& [id, record] : images_) {
    for (const Instance& d : record.detections) {
      Json result;
      result["image_id"] = id;
      result["category_id"] = metadata_->source_ids[d.label];
      result["score"] = d.score;
      Json box = result;
      box["bbox"] = d.box;
      if (d.mask.height > 0) {
        result["segmentation"] = {{"size", {d.mask.height, d.mask.width}},
                                  {"counts", core::EncodeCocoRleString(d.mask.counts)}};
        masks.push_back(result);
      }
      result["bbox"] = d.box;
      combined.push_back(std::move(result));
      boxes.push_back(std::move(box));
    }
  }
  const std::filesystem::path results(options_.results_file());
  const std::string stem = results.stem().string();
  const std::string extension = results.has_extension() ? results.extension().string() : ".json";
  std::vector<std::pair<std::string, const Json*>> files = {{options_.results_file(), &combined}};
  for (IouType type : iou_types_) {
    files.emplace_back(absl::StrCat(stem, type == IouType::kBbox ? "_bbox" : "_segm", extension),
                       type == IouType::kBbox ? &boxes : &masks);
  }
  for (const auto& [name, json] : files) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    const std::string partial = path + ".partial";
    std::ofstream out(partial);
    out << json->dump() << "\n";
    out.close();
    std::error_code error;
    if (!out) {
      std::filesystem::remove(partial, error);
      return absl::InternalError(absl::StrCat("cannot write ", partial));
    }
    std::filesystem::rename(partial, path, error);
    if (error) {
      return absl::InternalError(
          absl::StrCat("cannot rename ", partial, " to ", path, ": ", error.message()));
    }
  }
  return absl::OkStatus();
}

VISION_REGISTER_PLUGIN(core::EvaluatorRegistry, "COCO", CocoEvaluator, CocoEvalOptions);

}  // namespace vision::evaluation::coco
