// The C++ side of benchmarks/miou_vs_numpy.sh: scores --images label-map pairs of
// --height x --width (raw 8-bit train ids, 19 classes, 255 = ignore, one image after another
// in <data>/truth.u8 and <data>/prediction.u8) with the SemanticSegmentation evaluator,
// --repeats times, and prints the best images/s with the metrics (for the agreement check).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "evaluation/semantic_segmentation/semantic_segmentation_evaluator.h"

ABSL_FLAG(std::string, data, "", "directory with truth.u8 and prediction.u8");
ABSL_FLAG(int, images, 20, "number of image pairs in the files");
ABSL_FLAG(int, height, 1024, "label map height");
ABSL_FLAG(int, width, 2048, "label map width");
ABSL_FLAG(int, repeats, 3, "timed passes over all images; the best is printed");

namespace {

std::vector<cv::Mat> ReadMaps(const std::string& path, int images, int height, int width) {
  std::ifstream in(path, std::ios::binary);
  std::vector<cv::Mat> maps;
  for (int i = 0; i < images; ++i) {
    cv::Mat map(height, width, CV_8U);
    in.read(reinterpret_cast<char*>(map.data), static_cast<std::streamsize>(height) * width);
    if (!in) {
      std::fprintf(stderr, "%s: cannot read image %d of %dx%d bytes\n", path.c_str(), i, width,
                   height);
      std::exit(1);
    }
    maps.push_back(map);
  }
  return maps;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using vision::evaluation::semantic_segmentation::SemanticSegmentationEvaluator;
  const std::string dir = absl::GetFlag(FLAGS_data);
  const int images = absl::GetFlag(FLAGS_images);
  const int height = absl::GetFlag(FLAGS_height), width = absl::GetFlag(FLAGS_width);
  const std::vector<cv::Mat> truths = ReadMaps(dir + "/truth.u8", images, height, width);
  const std::vector<cv::Mat> predictions = ReadMaps(dir + "/prediction.u8", images, height, width);

  vision::core::DatasetMetadata metadata;
  metadata.annotation_kind = vision::core::AnnotationKind::kLabelMaps;
  for (int c = 0; c < 19; ++c) metadata.class_names.push_back(absl::StrCat("c", c));
  metadata.ignore_label = 255;
  auto evaluator = SemanticSegmentationEvaluator::Create({});
  if (!evaluator.ok() || !(*evaluator)->SetDatasetMetadata(metadata).ok()) return 1;

  std::vector<vision::core::Sample> truth_samples(images), prediction_samples(images);
  for (int i = 0; i < images; ++i) {
    truth_samples[i].semantic = truths[i];
    prediction_samples[i].semantic = predictions[i];
  }
  double best = 0;
  std::map<std::string, double> metrics;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    const auto start = std::chrono::steady_clock::now();
    (*evaluator)->Reset();
    for (int i = 0; i < images; ++i) {
      const absl::Status status = (*evaluator)->Add(prediction_samples[i], truth_samples[i]);
      if (!status.ok()) {
        std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
        return 1;
      }
    }
    metrics = (*evaluator)->Compute();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, images / seconds);
  }
  std::printf("ours images_per_s %.2f\n", best);
  std::printf("ours mIoU %.12f aAcc %.12f mAcc %.12f\n", metrics["mIoU"], metrics["aAcc"],
              metrics["mAcc"]);
  return 0;
}
