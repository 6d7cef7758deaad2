// Runs a trained model on images and reports what it finds, whatever the task:
//   infer --config=models/dbnet/configs/quickstart.pbtxt --checkpoint=runs/quickstart/best.pt
//         --images=path/to/folder_or_image --output_dir=out
// The images are read by the "ImageFolder" dataset plugin and go through the config's
// eval_data augmentations (resize, pad, normalise), like evaluation. For each image,
// out/<name>.png shows the predictions drawn; when the config names an evaluator, its result
// files in the format's own layout go to out/ as well (ICDAR2015: res_<name>.txt). A summary
// of what was found (texts, objects per class, label-map class shares) ends the output.
#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/atomic_output.h"
#include "core/collectives.h"
#include "core/config/loader.h"
#include "core/pipeline_builder.h"
#include "core/status_macros.h"
#include "data/datasets/image_folder/image_folder.pb.h"
#include "engine/draw.h"
#include "engine/evaluation.h"
#include "engine/inference.h"
#include "tools/flags_util.h"

ABSL_FLAG(std::string, config, "", "Path of the pipeline config (.pbtxt).");
ABSL_FLAG(std::string, checkpoint, "",
          "Checkpoint with the trained weights; without it, the weights the config's model "
          "imports (e.g. MaskRCNNOptions.weights_path).");
ABSL_FLAG(std::string, images, "", "An image file, or a folder of .jpg/.jpeg/.png images.");
ABSL_FLAG(std::string, output_dir, "", "Where drawn images and result files go.");

namespace vision::tools {
namespace {

namespace fs = std::filesystem;

// What the model found over all images, for the closing summary.
struct Findings {
  int64_t images = 0;
  int64_t texts = 0;
  std::map<int, int64_t> objects_per_label;
  std::map<int, int64_t> pixels_per_label;
  int64_t labelled_pixels = 0;

  void Add(const core::Sample& prediction) {
    ++images;
    for (const core::TextInstance& t : prediction.texts) texts += t.ignore ? 0 : 1;
    for (const core::ObjectInstance& o : prediction.objects) ++objects_per_label[o.label];
    if (!prediction.semantic.empty()) {
      // One pass over the label map (ignored pixels, 255, count for no class).
      std::array<int64_t, 256> histogram{};
      for (int y = 0; y < prediction.semantic.rows; ++y) {
        const uint8_t* row = prediction.semantic.ptr<uint8_t>(y);
        for (int x = 0; x < prediction.semantic.cols; ++x) ++histogram[row[x]];
      }
      for (int label = 0; label < 255; ++label) {
        if (histogram[label] == 0) continue;
        pixels_per_label[label] += histogram[label];
        labelled_pixels += histogram[label];
      }
    }
  }

  std::string Describe() const {
    std::vector<std::string> lines = {absl::StrCat(images, " images")};
    if (texts > 0) lines.push_back(absl::StrCat("texts: ", texts));
    if (!objects_per_label.empty()) {
      std::vector<std::string> parts;
      for (const auto& [label, n] : objects_per_label) parts.push_back(absl::StrCat("class ", label, ": ", n));
      lines.push_back(absl::StrCat("objects: ", absl::StrJoin(parts, ", ")));
    }
    if (labelled_pixels > 0) {
      std::vector<std::string> parts;
      for (const auto& [label, n] : pixels_per_label) {
        parts.push_back(absl::StrFormat("class %d %.1f%%", label, 100.0 * n / labelled_pixels));
      }
      lines.push_back(absl::StrCat("label maps: ", absl::StrJoin(parts, ", ")));
    }
    if (lines.size() == 1) lines.push_back("nothing found");
    return absl::StrJoin(lines, "\n  ");
  }
};

absl::Status Run(const std::vector<std::string>& overrides) {
  const std::string output_dir = absl::GetFlag(FLAGS_output_dir);
  if (absl::GetFlag(FLAGS_config).empty() || absl::GetFlag(FLAGS_images).empty() ||
      output_dir.empty()) {
    return absl::InvalidArgumentError("--config, --images and --output_dir are required");
  }
  VISION_ASSIGN_OR_RETURN(core::TrainPipelineConfig config,
                          core::LoadPipelineConfig(absl::GetFlag(FLAGS_config), overrides));
  // The user's images through the registered dataset, with the evaluation's augmentations.
  core::DataConfig images_config;
  if (config.has_eval_data()) images_config = config.eval_data();
  images_config.mutable_dataset()->set_type("ImageFolder");
  data::datasets::image_folder::ImageFolderOptions folder;
  folder.set_path(absl::GetFlag(FLAGS_images));
  images_config.mutable_dataset()->mutable_options()->PackFrom(folder);
  VISION_ASSIGN_OR_RETURN(
      std::unique_ptr<core::Dataset> images,
      core::BuildDataset(images_config, "--images", "eval_data.max_image_pixels"));
  VISION_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<core::Augmentation>> augmentations,
                          core::BuildAugmentations(images_config, "eval_data"));
  std::unique_ptr<core::Evaluator> evaluator;
  if (config.evaluation().has_evaluator()) {
    VISION_ASSIGN_OR_RETURN(evaluator, core::BuildEvaluator(config.evaluation()));
  }
  VISION_ASSIGN_OR_RETURN(engine::InferenceModel loaded,
                          engine::LoadModelForInference(config, absl::GetFlag(FLAGS_checkpoint), 0));
  // Drawings and result files appear when every image is done (README, "Data policies").
  VISION_ASSIGN_OR_RETURN(std::unique_ptr<core::StagedDirectory> staged,
                          core::StagedDirectory::Create(output_dir));
  core::SingleProcess single;
  // As the trainer evaluates, with the images one at a time (a folder's images have any size,
  // and a batch's padding would reach every image's features).
  engine::EvaluationJob job = engine::EvaluationJobFromConfig(
      config, loaded.model.get(), images.get(), augmentations, /*evaluator=*/nullptr,
      loaded.device, &single);
  job.loader.batch_size = 1;
  Findings findings;
  job.on_prediction = [&](const core::Sample& prediction, const core::Sample& input) {
    findings.Add(prediction);
    // The image has no ground truth: the evaluator only writes the prediction's result files.
    if (evaluator != nullptr) {
      VISION_RETURN_IF_ERROR(evaluator->WriteResult(prediction, input, staged->path()));
    }
    return engine::WriteDrawing(staged->path(), prediction, input);
  };
  VISION_RETURN_IF_ERROR(engine::RunEvaluation(job).status());
  VISION_RETURN_IF_ERROR(staged->Commit());
  std::printf("%s\n  %s\nresults and drawings in %s\n", images->Describe().c_str(),
              findings.Describe().c_str(), output_dir.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace vision::tools

int main(int argc, char** argv) {
  return vision::tools::RunDriver(
      argc, argv,
      "Runs a model on images: infer --config=FILE [--checkpoint=FILE] --images=PATH "
      "--output_dir=DIR [--override='TEXT' ...]",
      vision::tools::Run);
}
