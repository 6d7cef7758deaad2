// Runs a trained model on images and writes what it finds:
//   infer --config=models/dbnet/configs/quickstart.pbtxt --checkpoint=runs/quickstart/best.pt
//         --images=path/to/folder_or_image --output_dir=out
// The images go through the config's eval_data augmentations (resize, pad, normalise); for
// each image, out/res_<name>.txt holds one detection per line (x1,y1,...,xn,yn, the ICDAR
// result format) and out/<name>.png the image with the detections drawn.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <opencv2/imgcodecs.hpp>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/collectives.h"
#include "core/config/loader.h"
#include "core/pipeline_builder.h"
#include "core/status_macros.h"
#include "engine/checkpoint.h"
#include "engine/device.h"
#include "engine/ema.h"
#include "engine/evaluation.h"
#include "engine/visualize.h"
#include "tools/flags_util.h"

ABSL_FLAG(std::string, config, "", "Path of the pipeline config (.pbtxt).");
ABSL_FLAG(std::string, checkpoint, "", "Checkpoint with the trained weights.");
ABSL_FLAG(std::string, images, "", "An image file, or a folder of .jpg/.jpeg/.png images.");
ABSL_FLAG(std::string, output_dir, "", "Where result files and drawn images go.");

namespace vision::tools {
namespace {

namespace fs = std::filesystem;

// The images of a folder (sorted) or a single image, without annotations.
class ImageFiles : public core::Dataset {
 public:
  explicit ImageFiles(std::vector<std::string> paths) : paths_(std::move(paths)) {}
  int64_t Size() const override { return static_cast<int64_t>(paths_.size()); }
  absl::StatusOr<core::Sample> Load(int64_t index) const override {
    core::Sample s;
    s.image_path = paths_[index];
    s.id = fs::path(s.image_path).stem().string();
    s.image = cv::imread(s.image_path, cv::IMREAD_COLOR);
    if (s.image.empty()) {
      return absl::DataLossError(absl::StrCat(s.image_path, ": not a decodable image"));
    }
    s.original_height = s.image.rows;
    s.original_width = s.image.cols;
    return s;
  }
  std::string Describe() const override { return absl::StrCat(paths_.size(), " images"); }

 private:
  std::vector<std::string> paths_;
};

absl::StatusOr<std::vector<std::string>> ListImages(const std::string& where) {
  std::error_code ec;
  if (fs::is_regular_file(where, ec)) return std::vector<std::string>{where};
  if (!fs::is_directory(where, ec)) {
    return absl::NotFoundError(absl::StrCat("--images: '", where, "' is neither a file nor a folder"));
  }
  std::vector<std::string> paths;
  for (const auto& entry : fs::directory_iterator(where, ec)) {
    const std::string ext = absl::AsciiStrToLower(entry.path().extension().string());
    if (ext == ".jpg" || ext == ".jpeg" || ext == ".png") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) return absl::NotFoundError(absl::StrCat("--images: no .jpg or .png in '", where, "'"));
  return paths;
}

absl::Status Run(const std::vector<std::string>& overrides) {
  const std::string output_dir = absl::GetFlag(FLAGS_output_dir);
  if (absl::GetFlag(FLAGS_config).empty() || absl::GetFlag(FLAGS_checkpoint).empty() ||
      absl::GetFlag(FLAGS_images).empty() || output_dir.empty()) {
    return absl::InvalidArgumentError("--config, --checkpoint, --images and --output_dir are required");
  }
  VISION_ASSIGN_OR_RETURN(core::TrainPipelineConfig config,
                          core::LoadPipelineConfig(absl::GetFlag(FLAGS_config), overrides));
  VISION_ASSIGN_OR_RETURN(std::vector<std::string> paths, ListImages(absl::GetFlag(FLAGS_images)));
  VISION_ASSIGN_OR_RETURN(const c10::Device device, engine::ResolveDevice(config.device(), 0));
  engine::ConfigureDevice(device, config.cudnn_benchmark());
  VISION_ASSIGN_OR_RETURN(std::shared_ptr<core::Model> model, core::BuildModel(config.model()));
  std::vector<std::unique_ptr<core::Augmentation>> augmentations;
  if (config.has_eval_data()) {
    VISION_ASSIGN_OR_RETURN(augmentations, core::BuildAugmentations(config.eval_data(), "eval_data"));
  }
  std::unique_ptr<engine::ModelEma> ema;
  if (config.train().ema_decay() > 0) {
    ema = std::make_unique<engine::ModelEma>(*model, config.train().ema_decay());
  }
  VISION_RETURN_IF_ERROR(engine::LoadCheckpoint(absl::GetFlag(FLAGS_checkpoint),
                                                engine::TrainingState{model.get(), nullptr, ema.get()},
                                                nullptr));
  if (ema) ema->Swap(*model);
  model->to(device);
  fs::create_directories(output_dir);
  ImageFiles images(std::move(paths));
  core::SingleProcess single;
  engine::EvaluationJob job;
  job.model = model.get();
  job.dataset = &images;
  for (const auto& a : augmentations) job.augmentations.push_back(a.get());
  job.loader.batch_size = 1;
  job.loader.num_workers = 1;
  job.loader.pin_memory = device.is_cuda();
  job.device = device;
  job.collectives = &single;
  int64_t detections = 0;
  job.on_prediction = [&](const core::Sample& prediction, const core::Sample& input) {
    detections += static_cast<int64_t>(prediction.texts.size());
    return engine::WritePrediction(output_dir, prediction, input, /*draw=*/true);
  };
  VISION_RETURN_IF_ERROR(engine::RunEvaluation(job).status());
  std::printf("%lld detections in %s; results and drawings in %s\n",
              static_cast<long long>(detections), images.Describe().c_str(), output_dir.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace vision::tools

int main(int argc, char** argv) {
  return vision::tools::RunDriver(
      argc, argv,
      "Detects text in images: infer --config=FILE --checkpoint=FILE --images=PATH "
      "--output_dir=DIR [--override='TEXT' ...]",
      vision::tools::Run);
}
