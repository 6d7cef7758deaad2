// For semantic_segmentation_results_test: writes each golden case's predictions (label ids read
// from testdata, converted to train ids as the Cityscapes dataset converts them) through
// SemanticSegmentationEvaluator::WriteResult, with the evaluator given the real Cityscapes
// plugin's metadata, so that cityscapesScripts can score the files we write.
//   write_golden_results <golden_<case>.json> <output dir>
// Each prediction's image path is the Cityscapes one of its ground truth,
// leftImg8bit/val/<city>/<city>_<seq>_<frame>_leftImg8bit.png.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/dataset.h"
#include "data/datasets/cityscapes/cityscapes.pb.h"
#include "data/datasets/cityscapes/cityscapes_labels.h"
#include "evaluation/semantic_segmentation/semantic_segmentation_evaluator.h"
#include "google/protobuf/any.pb.h"
#include "nlohmann/json.hpp"

namespace vision::evaluation::semantic_segmentation {
namespace {

absl::Status Run(const std::filesystem::path& golden_path, const std::string& out) {
  std::ifstream in(golden_path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", golden_path.string()));
  const nlohmann::json golden = nlohmann::json::parse(in);

  data::datasets::CityscapesOptions options;
  options.set_root("testdata/cityscapes");
  options.set_split("val");
  google::protobuf::Any any;
  any.PackFrom(options);
  absl::StatusOr<std::unique_ptr<core::Dataset>> dataset =
      core::DatasetRegistry::Get().Create("Cityscapes", any);
  if (!dataset.ok()) return dataset.status();
  absl::StatusOr<std::unique_ptr<SemanticSegmentationEvaluator>> evaluator =
      SemanticSegmentationEvaluator::Create(SemanticSegmentationOptions());
  if (!evaluator.ok()) return evaluator.status();
  if (absl::Status s = (*evaluator)->SetDatasetMetadata(*(*dataset)->Metadata()); !s.ok()) {
    return s;
  }

  for (const nlohmann::json& pair : golden.at("pairs")) {
    const std::filesystem::path truth_file(pair[0].get<std::string>());
    const std::string prediction_file =
        (golden_path.parent_path() / pair[1].get<std::string>()).string();
    core::Sample prediction;
    prediction.semantic = cv::imread(prediction_file, cv::IMREAD_UNCHANGED);
    if (prediction.semantic.empty()) {
      return absl::NotFoundError(absl::StrCat("cannot read ", prediction_file));
    }
    cv::LUT(prediction.semantic, data::datasets::cityscapes::LabelIdToTrainIdLut(),
            prediction.semantic);
    core::Sample truth;
    truth.id = truth_file.filename().string();
    truth.image_path = absl::StrCat(
        "leftImg8bit/val/", truth_file.parent_path().filename().string(), "/",
        absl::StrReplaceAll(truth_file.filename().string(),
                            {{"_gtFine_labelIds.png", "_leftImg8bit.png"}}));
    if (absl::Status s = (*evaluator)->WriteResult(prediction, truth, out); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace vision::evaluation::semantic_segmentation

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <golden_<case>.json> <output dir>\n", argv[0]);
    return 2;
  }
  const absl::Status status = vision::evaluation::semantic_segmentation::Run(argv[1], argv[2]);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
