#include "evaluation/semantic_segmentation/semantic_segmentation_evaluator.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/palette.h"

namespace vision::evaluation::semantic_segmentation {
namespace {

constexpr char kStateTag[] = "SemanticSegmentation";
// Sample::semantic's ignore value (core::kIgnoreLabel, which lives in a torch header).
constexpr int kIgnore = 255;

std::string SampleName(const core::Sample& sample) {
  if (!sample.id.empty()) return sample.id;
  return sample.image_path.empty() ? std::string("(unnamed sample)") : sample.image_path;
}

absl::Status CheckLabelMap(const cv::Mat& labels, const std::string& sample, const char* role) {
  if (labels.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample '", sample, "': the ", role,
                     " has no label map (Sample::semantic); SemanticSegmentation scores label "
                     "maps, so evaluate a segmentation model on a dataset with label maps"));
  }
  if (labels.type() != CV_8UC1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample '", sample, "': the ", role, " label map has OpenCV type ", labels.type(),
        " with ", labels.channels(), " channels; it must be one 8-bit channel (CV_8UC1)"));
  }
  return absl::OkStatus();
}

// Counts of (truth, predicted) over one image in a (K+2) x (K+2) table: indices 0..K-1 are the
// classes, K the ignore label 255 and K+1 any other value (invalid). Label maps are mostly
// long runs of one pair, so a block of 16 pixels that is one pair is counted at once; other
// blocks map each byte to its index by a lookup (no branch per pixel, whatever the maps look
// like), with four tables taking turns so that neighbouring pixels of one pair do not wait on
// one counter.
std::vector<int64_t> CountPairs(const cv::Mat& truth, const cv::Mat& predicted, int k) {
  constexpr uint64_t kEveryByte = 0x0101010101010101ULL;
  const int size = k + 2;
  std::array<int32_t, 256> row_start, column;
  for (int v = 0; v < 256; ++v) {
    const int index = v < k ? v : (v == kIgnore ? k : k + 1);
    row_start[v] = index * size;
    column[v] = index;
  }
  const size_t cells = static_cast<size_t>(size) * size;
  std::vector<int64_t> tables(4 * cells, 0);
  int64_t* c0 = tables.data();
  int64_t* c1 = c0 + cells;
  int64_t* c2 = c1 + cells;
  int64_t* c3 = c2 + cells;
  for (int y = 0; y < truth.rows; ++y) {
    const uint8_t* t = truth.ptr<uint8_t>(y);
    const uint8_t* p = predicted.ptr<uint8_t>(y);
    int x = 0;
    for (; x + 16 <= truth.cols; x += 16) {
      uint64_t words[4];
      std::memcpy(&words[0], t + x, 16);
      std::memcpy(&words[2], p + x, 16);
      const uint64_t t_fill = t[x] * kEveryByte, p_fill = p[x] * kEveryByte;
      if (((words[0] ^ t_fill) | (words[1] ^ t_fill) | (words[2] ^ p_fill) |
           (words[3] ^ p_fill)) == 0) {
        c0[row_start[t[x]] + column[p[x]]] += 16;
        continue;
      }
      for (int i = x; i < x + 16; i += 4) {
        ++c0[row_start[t[i]] + column[p[i]]];
        ++c1[row_start[t[i + 1]] + column[p[i + 1]]];
        ++c2[row_start[t[i + 2]] + column[p[i + 2]]];
        ++c3[row_start[t[i + 3]] + column[p[i + 3]]];
      }
    }
    for (; x < truth.cols; ++x) ++c0[row_start[t[x]] + column[p[x]]];
  }
  for (size_t i = 0; i < cells; ++i) c0[i] += c1[i] + c2[i] + c3[i];
  tables.resize(cells);
  return tables;
}

}  // namespace

SemanticSegmentationEvaluator::SemanticSegmentationEvaluator(
    const SemanticSegmentationOptions& options)
    : options_(options), num_classes_(options.num_classes()) {
  Reset();
}

absl::StatusOr<std::unique_ptr<SemanticSegmentationEvaluator>>
SemanticSegmentationEvaluator::Create(const SemanticSegmentationOptions& options) {
  if (options.num_classes() < 0 || options.num_classes() > 255) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SemanticSegmentationOptions.num_classes is ", options.num_classes(),
        "; it must be 1..255 (labels 0..254; 255 is the ignore label), or 0 to take the "
        "evaluation dataset's"));
  }
  if (options.unlabeled_result_id() < 0 || options.unlabeled_result_id() > 255) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SemanticSegmentationOptions.unlabeled_result_id is ", options.unlabeled_result_id(),
        "; result label maps are 8-bit, so it must be 0..255"));
  }
  return std::unique_ptr<SemanticSegmentationEvaluator>(new SemanticSegmentationEvaluator(options));
}

void SemanticSegmentationEvaluator::Reset() {
  matrix_.assign(static_cast<size_t>(num_classes_) * (num_classes_ + 1), 0);
}

std::optional<core::TaskRequirements> SemanticSegmentationEvaluator::DataRequirements() const {
  core::TaskRequirements needs;
  needs.annotation_kind = core::AnnotationKind::kLabelMaps;
  if (options_.num_classes() > 0) {
    needs.num_classes = options_.num_classes();
    needs.num_classes_option = "num_classes";
  }
  return needs;
}

absl::Status SemanticSegmentationEvaluator::SetDatasetMetadata(
    const core::DatasetMetadata& metadata) {
  const int k = metadata.num_classes();
  if (metadata.annotation_kind != core::AnnotationKind::kLabelMaps || k == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SemanticSegmentation scores label maps of named classes, but the evaluation dataset "
        "has ",
        core::DescribeMetadata(metadata), "; evaluate on a semantic segmentation dataset"));
  }
  if (k > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("the evaluation dataset has ", k,
                     " classes but 8-bit label maps hold at most 255 (0..254, 255 = ignore)"));
  }
  if (options_.num_classes() > 0 && options_.num_classes() != k) {
    return absl::InvalidArgumentError(
        absl::StrCat("SemanticSegmentation's num_classes is ", options_.num_classes(),
                     " but the evaluation dataset has ", k, " classes; set num_classes: ", k,
                     " (or 0 to take the dataset's)"));
  }
  if (metadata.ignore_label.has_value() && *metadata.ignore_label != kIgnore) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the evaluation dataset's ignore label is ", *metadata.ignore_label,
        " but label maps (Sample::semantic) mark ignored pixels 255; the dataset must map them "
        "to 255"));
  }
  for (const auto& [size, what] :
       {std::pair<size_t, const char*>{metadata.source_ids.size(), "source ids"},
        {metadata.class_categories.size(), "class categories"},
        {metadata.class_colours.size(), "class colours"}}) {
    if (size != 0 && size != static_cast<size_t>(k)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the evaluation dataset's metadata has ", size, " ", what, " for ", k,
                       " classes; it must give one per class or none"));
    }
  }
  metadata_ = metadata;
  num_classes_ = k;
  Reset();
  return absl::OkStatus();
}

std::string SemanticSegmentationEvaluator::ClassName(int label) const {
  return label < metadata_.num_classes() ? metadata_.class_names[label] : absl::StrCat(label);
}

absl::Status SemanticSegmentationEvaluator::CheckLabels(const cv::Mat& labels,
                                                        const std::string& sample,
                                                        bool is_prediction) const {
  for (int y = 0; y < labels.rows; ++y) {
    const uint8_t* row = labels.ptr<uint8_t>(y);
    for (int x = 0; x < labels.cols; ++x) {
      if (row[x] < num_classes_ || row[x] == kIgnore) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "sample '", sample, "': the ", is_prediction ? "prediction" : "ground truth",
          " label map has value ", row[x], " at (x=", x, ", y=", y,
          "), which is neither a class (0..", num_classes_ - 1, ") nor the ignore label 255; ",
          is_prediction
              ? absl::StrCat("the model must predict the evaluation dataset's ", num_classes_,
                             " classes (check the model's num_classes)")
              : "the dataset's label maps and its class list disagree"));
    }
  }
  return absl::OkStatus();
}

absl::Status SemanticSegmentationEvaluator::Add(const core::Sample& prediction,
                                                const core::Sample& ground_truth) {
  const std::string name = SampleName(ground_truth);
  if (num_classes_ == 0) {
    return absl::FailedPreconditionError(
        "SemanticSegmentation has no classes: give it the evaluation dataset's metadata "
        "(SetDatasetMetadata) or set num_classes before adding samples");
  }
  if (!prediction.id.empty() && !ground_truth.id.empty() && prediction.id != ground_truth.id) {
    return absl::InvalidArgumentError(absl::StrCat("prediction for '", prediction.id,
                                                   "' was paired with the ground truth of '",
                                                   ground_truth.id, "'; pair them by sample"));
  }
  if (absl::Status s = CheckLabelMap(ground_truth.semantic, name, "ground truth"); !s.ok()) return s;
  if (absl::Status s = CheckLabelMap(prediction.semantic, name, "prediction"); !s.ok()) return s;
  const cv::Mat& truth = ground_truth.semantic;
  const cv::Mat& predicted = prediction.semantic;
  if (truth.size() != predicted.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample '", name, "': the prediction is ", predicted.cols, "x", predicted.rows,
        " but the ground truth is ", truth.cols, "x", truth.rows,
        " (width x height); predictions must be resized to the original image before they are "
        "scored"));
  }

  const int k = num_classes_;
  const int size = k + 2;
  const std::vector<int64_t> pairs = CountPairs(truth, predicted, k);
  // Validate from the counts (cheap), and only on a bad value look for where it is.
  for (int p = 0; p < size; ++p) {
    if (pairs[static_cast<size_t>(k + 1) * size + p] != 0) {
      return CheckLabels(truth, name, /*is_prediction=*/false);
    }
  }
  for (int t = 0; t < size; ++t) {
    if (pairs[static_cast<size_t>(t) * size + k + 1] != 0) {
      return CheckLabels(predicted, name, /*is_prediction=*/true);
    }
  }
  // Rows 0..K-1 and columns 0..K (the last: predicted 255) are the matrix's.
  const int columns = k + 1;
  for (int t = 0; t < k; ++t) {
    int64_t* row = &matrix_[static_cast<size_t>(t) * columns];
    for (int p = 0; p < columns; ++p) row[p] += pairs[static_cast<size_t>(t) * size + p];
  }
  return absl::OkStatus();
}

std::map<std::string, double> SemanticSegmentationEvaluator::Compute() const {
  const int k = num_classes_;
  const int columns = k + 1;
  std::vector<int64_t> row_sum(k, 0), column_sum(k, 0);
  int64_t correct = 0, scored = 0;
  for (int t = 0; t < k; ++t) {
    for (int p = 0; p < columns; ++p) {
      const int64_t n = matrix_[static_cast<size_t>(t) * columns + p];
      row_sum[t] += n;
      if (p < k) column_sum[p] += n;
    }
    correct += matrix_[static_cast<size_t>(t) * columns + t];
    scored += row_sum[t];
  }

  std::map<std::string, double> metrics;
  double iou_sum = 0, accuracy_sum = 0;
  int num_iou = 0, num_accuracy = 0;
  for (int c = 0; c < k; ++c) {
    const int64_t tp = matrix_[static_cast<size_t>(c) * columns + c];
    const int64_t denominator = row_sum[c] + column_sum[c] - tp;
    if (denominator > 0) {
      const double iou = static_cast<double>(tp) / static_cast<double>(denominator);
      metrics[absl::StrCat("IoU/", ClassName(c))] = iou;
      iou_sum += iou;
      ++num_iou;
    }
    if (row_sum[c] > 0) {
      accuracy_sum += static_cast<double>(tp) / static_cast<double>(row_sum[c]);
      ++num_accuracy;
    }
  }
  metrics["mIoU"] = num_iou > 0 ? iou_sum / num_iou : 0;
  metrics["mAcc"] = num_accuracy > 0 ? accuracy_sum / num_accuracy : 0;
  metrics["aAcc"] = scored > 0 ? static_cast<double>(correct) / static_cast<double>(scored) : 0;

  if (!metadata_.class_categories.empty()) {
    // Categories in order of first appearance, each with its classes.
    std::vector<std::pair<std::string, std::vector<bool>>> categories;
    for (int c = 0; c < k; ++c) {
      const std::string& category = metadata_.class_categories[c];
      auto it = std::find_if(categories.begin(), categories.end(),
                             [&](const auto& entry) { return entry.first == category; });
      if (it == categories.end()) {
        categories.emplace_back(category, std::vector<bool>(k, false));
        it = categories.end() - 1;
      }
      it->second[c] = true;
    }
    double category_sum = 0;
    int num_categories = 0;
    for (const auto& [category, member] : categories) {
      int64_t tp = 0, fn = 0, fp = 0;
      for (int t = 0; t < k; ++t) {
        for (int p = 0; p < columns; ++p) {
          const int64_t n = matrix_[static_cast<size_t>(t) * columns + p];
          const bool predicted_in = p < k && member[p];
          if (member[t]) {
            (predicted_in ? tp : fn) += n;
          } else if (predicted_in) {
            fp += n;
          }
        }
      }
      if (tp + fp + fn == 0) continue;
      const double iou = static_cast<double>(tp) / static_cast<double>(tp + fp + fn);
      metrics[absl::StrCat("category_IoU/", category)] = iou;
      category_sum += iou;
      ++num_categories;
    }
    metrics["category_mIoU"] = num_categories > 0 ? category_sum / num_categories : 0;
  }
  return metrics;
}

std::string SemanticSegmentationEvaluator::SerializeState() const {
  std::string state = absl::StrCat(kStateTag, " ", num_classes_);
  for (int64_t n : matrix_) absl::StrAppend(&state, " ", n);
  return state;
}

absl::Status SemanticSegmentationEvaluator::MergeState(const std::string& state) {
  const std::vector<absl::string_view> fields = absl::StrSplit(state, ' ');
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SemanticSegmentation MergeState: ", why,
        "; expected another SemanticSegmentation evaluator's SerializeState() ('", kStateTag,
        " <K> <K*(K+1) counts>'), got '", state.substr(0, 80), state.size() > 80 ? "...'" : "'"));
  };
  int k = 0;
  if (fields.size() < 2 || fields[0] != kStateTag || !absl::SimpleAtoi(fields[1], &k)) {
    return bad("not a SemanticSegmentation state");
  }
  if (k != num_classes_) {
    return bad(absl::StrCat("it has ", k, " classes but this evaluator ", num_classes_,
                            "; every rank must evaluate the same dataset"));
  }
  if (fields.size() != 2 + matrix_.size()) {
    return bad(absl::StrCat("it has ", fields.size() - 2, " counts for ", k, " classes"));
  }
  std::vector<int64_t> counts(matrix_.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    if (!absl::SimpleAtoi(fields[i + 2], &counts[i]) || counts[i] < 0) {
      return bad(absl::StrCat("count ", i, " is '", fields[i + 2], "'"));
    }
  }
  for (size_t i = 0; i < counts.size(); ++i) matrix_[i] += counts[i];
  return absl::OkStatus();
}

absl::Status SemanticSegmentationEvaluator::WriteResult(const core::Sample& prediction,
                                                        const core::Sample& truth,
                                                        const std::string& dir) const {
  const std::string name = SampleName(truth);
  if (absl::Status s = CheckLabelMap(prediction.semantic, name, "prediction"); !s.ok()) return s;
  // Without the dataset's classes (tools/infer on a folder of images) any label is written.
  if (num_classes_ > 0) {
    if (absl::Status s = CheckLabels(prediction.semantic, name, /*is_prediction=*/true);
        !s.ok()) {
      return s;
    }
  }
  // Labels to the format's ids; without format ids the labels are written as they are, and
  // under another name, so they are never taken for format ids.
  const bool format_ids = !metadata_.source_ids.empty();
  cv::Mat lut(1, 256, CV_8U);
  for (int v = 0; v < 256; ++v) lut.at<uint8_t>(0, v) = static_cast<uint8_t>(v);
  if (format_ids) {
    lut.at<uint8_t>(0, kIgnore) = static_cast<uint8_t>(options_.unlabeled_result_id());
    for (int c = 0; c < num_classes_; ++c) {
      const int64_t id = metadata_.source_ids[c];
      if (id < 0 || id > 255) {
        return absl::InvalidArgumentError(absl::StrCat(
            "class '", ClassName(c), "' has ", metadata_.source_id_name, " ", id,
            ", which an 8-bit label-id PNG cannot hold; results need ids 0..255"));
      }
      if (id == options_.unlabeled_result_id()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "SemanticSegmentationOptions.unlabeled_result_id is ", id, ", the ",
            metadata_.source_id_name, " of class '", ClassName(c),
            "'; set it to an id no class has, so unlabelled pixels are not written as that "
            "class"));
      }
      lut.at<uint8_t>(0, c) = static_cast<uint8_t>(id);
    }
  }
  cv::Mat ids;
  cv::LUT(prediction.semantic, lut, ids);

  const std::filesystem::path image(truth.image_path);
  if (image.filename().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample '", name, "' has no image path; result files are named after the image"));
  }
  const std::string file = absl::StrCat(image.stem().string(), ".png");
  const std::filesystem::path folder = image.parent_path().filename();
  for (const auto& [subdir, map] :
       {std::pair<const char*, cv::Mat>{format_ids ? "labelIds" : "trainIds", ids},
        {"color", core::ColourLabelMap(prediction.semantic, metadata_.class_colours)}}) {
    const std::filesystem::path out_dir = std::filesystem::path(dir) / subdir / folder;
    std::error_code error;
    std::filesystem::create_directories(out_dir, error);
    const std::string path = (out_dir / file).string();
    if (error || !cv::imwrite(path, map)) {
      return absl::InternalError(absl::StrCat("cannot write ", path,
                                              error ? absl::StrCat(": ", error.message()) : ""));
    }
  }
  return absl::OkStatus();
}

VISION_REGISTER_PLUGIN(core::EvaluatorRegistry, "SemanticSegmentation",
                       SemanticSegmentationEvaluator, SemanticSegmentationOptions);

}  // namespace vision::evaluation::semantic_segmentation
