// Runs a trained model on images and reports what it finds, whatever the task:
//   infer --config=models/dbnet/configs/quickstart.pbtxt --checkpoint=runs/quickstart/best.pt
//         --images=path/to/folder_or_image --output_dir=out
// The images are read by the "ImageFolder" dataset plugin and go through the config's
// eval_data augmentations (resize, pad, normalise), like evaluation. For each image,
// out/<name>.png shows the predictions drawn; when the config names an evaluator, its result
// files in the format's own layout go to out/ as well (ICDAR2015: res_<name>.txt). A summary
// of what was found (texts, objects per class, label-map class shares) ends the output.
// Under the launcher or torchrun the images are sharded over the processes (process r takes
// every world_size-th image from the r-th, in the folder's sorted order: each image exactly
// once), every process writes its images' files into the one output directory, and rank 0
// prints the summary over all of them. --benchmark adds images/s and per-image latency.
#include <algorithm>
#include <array>
#include <chrono>
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
#include "absl/strings/str_split.h"
#include "absl/strings/numbers.h"
#include "core/atomic_output.h"
#include "core/collectives.h"
#include "core/config/loader.h"
#include "core/pipeline_builder.h"
#include "core/status_macros.h"
#include "data/datasets/image_folder/image_folder.pb.h"
#include "distributed/env/distributed_env.h"
#include "distributed/runtime/runtime.h"
#include "engine/device.h"
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
ABSL_FLAG(bool, benchmark, false,
          "Also print images/s over all processes and the latency per image (median and p95 of "
          "moving a batch to the device and predicting, over its images), leaving out each "
          "process's first batch as a warm-up.");

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

  // As text another rank's Merge() reads: "images texts labelled o<label>=n... p<label>=n...".
  std::string Serialize() const {
    std::vector<std::string> parts = {absl::StrCat(images), absl::StrCat(texts),
                                      absl::StrCat(labelled_pixels)};
    for (const auto& [label, n] : objects_per_label) parts.push_back(absl::StrCat("o", label, "=", n));
    for (const auto& [label, n] : pixels_per_label) parts.push_back(absl::StrCat("p", label, "=", n));
    return absl::StrJoin(parts, " ");
  }
  absl::Status Merge(const std::string& text) {
    const std::vector<std::string> parts = absl::StrSplit(text, ' ');
    int64_t counts[3];
    if (parts.size() < 3) return absl::DataLossError(absl::StrCat("findings '", text, "'"));
    for (int i = 0; i < 3; ++i) {
      if (!absl::SimpleAtoi(parts[i], &counts[i])) {
        return absl::DataLossError(absl::StrCat("findings '", text, "'"));
      }
    }
    images += counts[0];
    texts += counts[1];
    labelled_pixels += counts[2];
    for (size_t i = 3; i < parts.size(); ++i) {
      const std::vector<std::string> kv = absl::StrSplit(parts[i].substr(1), '=');
      int label = 0;
      int64_t n = 0;
      if (kv.size() != 2 || !absl::SimpleAtoi(kv[0], &label) || !absl::SimpleAtoi(kv[1], &n)) {
        return absl::DataLossError(absl::StrCat("findings '", text, "'"));
      }
      (parts[i][0] == 'o' ? objects_per_label : pixels_per_label)[label] += n;
    }
    return absl::OkStatus();
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
  VISION_ASSIGN_OR_RETURN(distributed::env::DistributedEnv env,
                          distributed::env::ReadDistributedEnv());
  // Before joining: NCCL binds to the current device, and a device this machine lacks stops
  // every rank at once.
  VISION_RETURN_IF_ERROR(engine::ResolveDevice(config.device(), env.local_rank).status());
  VISION_ASSIGN_OR_RETURN(std::unique_ptr<core::Collectives> collectives,
                          distributed::runtime::JoinJob(env, config));
  VISION_ASSIGN_OR_RETURN(
      engine::InferenceModel loaded,
      engine::LoadModelForInference(config, absl::GetFlag(FLAGS_checkpoint), env.local_rank));
  // Drawings and result files appear when this process's images are done (README, "Data
  // policies"); each process commits its own into the one output directory.
  VISION_ASSIGN_OR_RETURN(std::unique_ptr<core::StagedDirectory> staged,
                          core::StagedDirectory::Create(output_dir));
  // As the trainer evaluates (eval_data.loader.batch_size images at a time), every rank its
  // share, except that images of different sizes are never predicted together: a folder's
  // images have any size, and one padded to another's would see the padding in its features.
  engine::EvaluationJob job = engine::EvaluationJobFromConfig(
      config, loaded.model.get(), images.get(), augmentations, /*evaluator=*/nullptr,
      loaded.device, collectives.get());
  job.split_by_size = true;
  Findings findings;
  job.on_prediction = [&](const core::Sample& prediction, const core::Sample& input) {
    findings.Add(prediction);
    // The image has no ground truth: the evaluator only writes the prediction's result files.
    if (evaluator != nullptr) {
      VISION_RETURN_IF_ERROR(evaluator->WriteResult(prediction, input, staged->path()));
    }
    return engine::WriteDrawing(staged->path(), prediction, input);
  };
  // --benchmark: per-image predict times (a batch's time over its images) and the wall time
  // after each process's first batch.
  const bool benchmark = absl::GetFlag(FLAGS_benchmark);
  std::vector<double> latencies;
  std::chrono::steady_clock::time_point timed_from;
  if (benchmark) {
    job.on_batch_predicted = [&](const core::Batch& batch, double seconds) {
      if (timed_from == std::chrono::steady_clock::time_point()) {
        timed_from = std::chrono::steady_clock::now();  // the warm-up batch ends here
        return;
      }
      for (size_t i = 0; i < batch.samples.size(); ++i) latencies.push_back(seconds / batch.samples.size());
    };
  }
  absl::Status status = engine::RunEvaluation(job).status();
  if (status.ok()) status = staged->Commit();
  const double timed_seconds =
      timed_from == std::chrono::steady_clock::time_point()
          ? 0
          : std::chrono::duration<double>(std::chrono::steady_clock::now() - timed_from).count();
  // Every rank reaches the gather, also after a local error (an empty share marks it), so no
  // peer waits for it until the timeout.
  std::string share;
  if (status.ok()) {
    share = absl::StrCat(findings.Serialize(), ";", absl::StrFormat("%.9g", timed_seconds));
    for (double l : latencies) absl::StrAppend(&share, absl::StrFormat(" %.9g", l));
  }
  VISION_ASSIGN_OR_RETURN(std::vector<std::string> shares, collectives->AllGather(share));
  VISION_RETURN_IF_ERROR(status);
  if (collectives->rank() != 0) return absl::OkStatus();
  Findings all;
  std::vector<double> all_latencies;
  double slowest_seconds = 0;
  for (size_t r = 0; r < shares.size(); ++r) {
    if (shares[r].empty()) {
      return absl::AbortedError(absl::StrCat("inference failed on rank ", r, "; see its log"));
    }
    const std::vector<std::string> halves = absl::StrSplit(shares[r], ';');
    if (halves.size() != 2) return absl::DataLossError(absl::StrCat("rank ", r, "'s share"));
    VISION_RETURN_IF_ERROR(all.Merge(halves[0]));
    const std::vector<std::string> times = absl::StrSplit(halves[1], ' ', absl::SkipEmpty());
    for (size_t i = 0; i < times.size(); ++i) {
      double value = 0;
      if (!absl::SimpleAtod(times[i], &value)) {
        return absl::DataLossError(absl::StrCat("rank ", r, "'s times"));
      }
      if (i == 0) {
        slowest_seconds = std::max(slowest_seconds, value);
      } else {
        all_latencies.push_back(value);
      }
    }
  }
  std::printf("%s\n  %s\nresults and drawings in %s (%d process%s)\n", images->Describe().c_str(),
              all.Describe().c_str(), output_dir.c_str(), collectives->world_size(),
              collectives->world_size() == 1 ? "" : "es");
  if (benchmark) {
    if (all_latencies.empty()) {
      std::printf("benchmark: no image after the warm-up (each process times its second batch on)\n");
    } else {
      std::sort(all_latencies.begin(), all_latencies.end());
      const auto at = [&](double q) {
        return all_latencies[std::min(all_latencies.size() - 1,
                                      static_cast<size_t>(q * (all_latencies.size() - 1) + 0.5))];
      };
      std::printf(
          "benchmark: %zu images after a warm-up batch per process, %.2f images/s over %d "
          "process%s (%.2f per process), latency per image median %.1f ms, p95 %.1f ms\n",
          all_latencies.size(), all_latencies.size() / std::max(slowest_seconds, 1e-9),
          collectives->world_size(), collectives->world_size() == 1 ? "" : "es",
          all_latencies.size() / std::max(slowest_seconds, 1e-9) / collectives->world_size(),
          1e3 * at(0.5), 1e3 * at(0.95));
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace vision::tools

int main(int argc, char** argv) {
  return vision::tools::RunDriver(
      argc, argv,
      "Runs a model on images: infer --config=FILE [--checkpoint=FILE] --images=PATH "
      "--output_dir=DIR [--benchmark] [--override='TEXT' ...]; under the launcher the images "
      "are sharded over the processes",
      vision::tools::Run);
}
