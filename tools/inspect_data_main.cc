// Shows what a model is fed: writes N samples of a config's training (or evaluation) data,
// after its augmentations and the model's target generation, as PNG files with every
// annotation drawn (texts green, don't-care grey; objects with their masks filled, box and
// label in a colour per class, crowd regions hatched grey; label maps blended in) and each
// training target as a heat map beside the image:
//   inspect_data --config=models/dbnet/configs/quickstart.pbtxt --num=8 --output_dir=out
// The config needs only its data sections (and a model, if its targets should be shown).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/config/loader.h"
#include "core/pipeline_builder.h"
#include "core/status_macros.h"
#include "core/run_length_mask.h"
#include "data/loader/loader.h"
#include "distributed/sampler/distributed_sampler.h"
#include "tools/flags_util.h"

ABSL_FLAG(std::string, config, "", "Path of the pipeline config (.pbtxt).");
ABSL_FLAG(std::string, split, "train", "\"train\" (train_data, with targets) or \"eval\" (eval_data).");
ABSL_FLAG(int, num, 8, "How many samples to write.");
ABSL_FLAG(int, epoch, 0, "Which epoch's order and augmentation draws to show.");
ABSL_FLAG(std::string, output_dir, "", "Where the PNG files go.");

namespace vision::tools {
namespace {

namespace fs = std::filesystem;

// 8-bit BGR for display: decoded images as they are; normalised float (RGB) images stretched
// per channel to 0..255.
cv::Mat Displayable(const cv::Mat& image) {
  if (image.depth() == CV_8U) return image.clone();
  std::vector<cv::Mat> channels;
  cv::split(image, channels);
  for (cv::Mat& c : channels) cv::normalize(c, c, 0, 255, cv::NORM_MINMAX, CV_8U);
  cv::Mat rgb, bgr;
  cv::merge(channels, rgb);
  cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  return bgr;
}

void DrawPolygon(cv::Mat& image, const core::Polygon& polygon, const cv::Scalar& color) {
  std::vector<cv::Point> points;
  for (const cv::Point2f& p : polygon) points.emplace_back(cvRound(p.x), cvRound(p.y));
  if (points.size() >= 2) cv::polylines(image, points, true, color, 1, cv::LINE_AA);
}

// A distinct, stable colour per class label (golden-angle hue steps).
cv::Scalar ClassColour(int label) {
  cv::Mat hsv(1, 1, CV_8UC3, cv::Scalar((label * 137) % 180, 220, 255)), bgr;
  cv::cvtColor(hsv, bgr, cv::COLOR_HSV2BGR);
  const cv::Vec3b c = bgr.at<cv::Vec3b>(0, 0);
  return cv::Scalar(c[0], c[1], c[2]);
}

cv::Mat Draw(const core::Sample& s) {
  cv::Mat image = Displayable(s.image);
  if (!s.semantic.empty()) {
    cv::Mat lut(1, 256, CV_8UC3, cv::Scalar(0, 0, 0));  // 255 (ignore) and unused ids black
    for (int id = 0; id < 255; ++id) {
      const cv::Scalar c = ClassColour(id);
      lut.at<cv::Vec3b>(0, id) = cv::Vec3b(c[0], c[1], c[2]);
    }
    cv::Mat ids3, colored;
    cv::cvtColor(s.semantic, ids3, cv::COLOR_GRAY2BGR);
    cv::LUT(ids3, lut, colored);
    cv::addWeighted(image, 0.5, colored, 0.5, 0, image);
  }
  for (const core::TextInstance& t : s.texts) {
    DrawPolygon(image, t.polygon, t.ignore ? cv::Scalar(160, 160, 160) : cv::Scalar(0, 220, 0));
  }
  for (const core::ObjectInstance& o : s.objects) {
    const cv::Scalar colour = o.is_crowd ? cv::Scalar(128, 128, 128) : ClassColour(o.label);
    cv::Mat mask = cv::Mat::zeros(image.size(), CV_8U);
    for (const core::Polygon& p : o.polygons) {
      std::vector<cv::Point> points;
      for (const cv::Point2f& q : p) points.emplace_back(cvRound(q.x), cvRound(q.y));
      cv::fillPoly(mask, std::vector<std::vector<cv::Point>>{points}, cv::Scalar(1));
    }
    if (o.rle.height > 0) {
      absl::StatusOr<cv::Mat> decoded = core::DecodeRle(o.rle);
      if (decoded.ok() && decoded->size() == image.size()) mask |= *decoded;
    }
    cv::Mat tinted = image.clone();
    tinted.setTo(colour, mask);
    if (o.is_crowd) {
      // Hatched, so a crowd region reads as "ignored" at a glance.
      for (int d = 0; d < image.cols + image.rows; d += 6) {
        cv::line(tinted, cv::Point(d, 0), cv::Point(d - image.rows, image.rows), cv::Scalar(0, 0, 0));
      }
      image.copyTo(tinted, mask == 0);
    }
    cv::addWeighted(image, 0.55, tinted, 0.45, 0, image);
    cv::rectangle(image, o.box, colour, 1);
    cv::putText(image, absl::StrCat(o.label, o.is_crowd ? " crowd" : ""), o.box.tl(),
                cv::FONT_HERSHEY_PLAIN, 0.8, colour);
  }
  // Targets beside the image, each as a heat map over its own range, with its name.
  std::vector<cv::Mat> tiles = {image};
  for (const auto& [name, map] : s.targets) {
    cv::Mat scaled, colored;
    cv::normalize(map, scaled, 0, 255, cv::NORM_MINMAX, CV_8U);
    cv::applyColorMap(scaled, colored, cv::COLORMAP_JET);
    cv::putText(colored, name, cv::Point(3, 12), cv::FONT_HERSHEY_PLAIN, 0.9, cv::Scalar(255, 255, 255));
    tiles.push_back(colored);
  }
  cv::Mat row;
  cv::hconcat(tiles, row);
  return row;
}

absl::Status Run(const std::vector<std::string>& overrides) {
  const std::string output_dir = absl::GetFlag(FLAGS_output_dir);
  const std::string split = absl::GetFlag(FLAGS_split);
  if (absl::GetFlag(FLAGS_config).empty() || output_dir.empty()) {
    return absl::InvalidArgumentError("--config and --output_dir are required");
  }
  if (split != "train" && split != "eval") {
    return absl::InvalidArgumentError(absl::StrCat("--split must be train or eval, got '", split, "'"));
  }
  VISION_ASSIGN_OR_RETURN(core::TrainPipelineConfig config,
                          core::LoadPipelineConfig(absl::GetFlag(FLAGS_config), overrides,
                                                   core::ConfigUse::kDataOnly));
  const bool train = split == "train";
  if (train && !config.has_train_data()) {
    return absl::InvalidArgumentError("the config has no train_data (use --split=eval?)");
  }
  if (!train && !config.has_eval_data()) return absl::InvalidArgumentError("the config has no eval_data");
  const core::DataConfig& data = train ? config.train_data() : config.eval_data();
  const std::string field = train ? "train_data" : "eval_data";
  VISION_ASSIGN_OR_RETURN(std::unique_ptr<core::Dataset> dataset, core::BuildDataset(data, field));
  VISION_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<core::Augmentation>> augmentations,
                          core::BuildAugmentations(data, field));
  std::shared_ptr<const core::TargetGenerator> targets;
  if (train && config.has_model()) {
    VISION_ASSIGN_OR_RETURN(std::shared_ptr<core::Model> model, core::BuildModel(config.model()));
    targets = model->MakeTargetGenerator();
  }
  std::vector<const core::Augmentation*> pointers;
  for (const auto& a : augmentations) pointers.push_back(a.get());
  // The order one process of a training run sees.
  distributed::sampler::DistributedSamplerOptions so;
  so.dataset_size = dataset->Size();
  so.shuffle = train && data.loader().shuffle();
  so.seed = config.seed();
  VISION_ASSIGN_OR_RETURN(distributed::sampler::DistributedSampler sampler,
                          distributed::sampler::DistributedSampler::Create(so));
  const std::vector<int64_t> order = sampler.Indices(absl::GetFlag(FLAGS_epoch));
  fs::create_directories(output_dir);
  const int n = std::min<int>(absl::GetFlag(FLAGS_num), static_cast<int>(order.size()));
  for (int i = 0; i < n; ++i) {
    VISION_ASSIGN_OR_RETURN(core::Sample sample,
                            data::LoadSample(*dataset, pointers, targets.get(), order[i],
                                             config.seed(), absl::GetFlag(FLAGS_epoch)));
    const std::string name = fs::path(sample.image_path).stem().string();
    const std::string path =
        (fs::path(output_dir) / absl::StrFormat("%03d_%s.png", i, name)).string();
    if (!cv::imwrite(path, Draw(sample))) return absl::InternalError(absl::StrCat("cannot write ", path));
    std::printf("%s: %zu texts, %zu objects, %zu targets\n", path.c_str(), sample.texts.size(),
                sample.objects.size(), sample.targets.size());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace vision::tools

int main(int argc, char** argv) {
  return vision::tools::RunDriver(
      argc, argv,
      "Writes augmented samples with annotations and training targets drawn: inspect_data "
      "--config=FILE --output_dir=DIR [--split=train|eval] [--num=N] [--override='TEXT' ...]",
      vision::tools::Run);
}
