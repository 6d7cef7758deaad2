// Cost per image of multi-scale + flip (+ sliding-window) segmentation inference
// (engine/segmentation_inference.h) against single-scale inference, for the segmentation model
// of any pipeline config, on one random normalised image; the two are timed in alternation
// within one process so that machine load hits both alike.
//   bazel run -c opt //tools:segmentation_inference_benchmark -- \
//     --config=$PWD/models/danet/configs/quickstart.pbtxt --height=512 --width=1024 --repeats=3
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/config/loader.h"
#include "core/pipeline_builder.h"
#include "core/segmentation_model.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "core/torch_guard.h"
#include "engine/segmentation_inference.h"
#include "tools/flags_util.h"

ABSL_FLAG(std::string, config, "", "Pipeline config whose model is benchmarked (random weights).");
ABSL_FLAG(int, height, 512, "Image height.");
ABSL_FLAG(int, width, 1024, "Image width.");
ABSL_FLAG(std::string, scales, "0.5,0.75,1,1.25,1.5,1.75", "Scales of the multi-scale side.");
ABSL_FLAG(bool, flip, true, "Flip on the multi-scale side.");
ABSL_FLAG(int, crop_height, 0, "Sliding-window crop on the multi-scale side (0: whole images).");
ABSL_FLAG(int, crop_width, 0, "Sliding-window crop on the multi-scale side (0: whole images).");
ABSL_FLAG(int, max_batch_size, 1, "Model inputs per forward pass on the multi-scale side.");
ABSL_FLAG(int, repeats, 3, "Timed runs of each side, after one untimed warm-up run each.");
ABSL_FLAG(int, threads, 2, "Intra-op threads.");

namespace vision::tools {
namespace {

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double RunMs(core::SegmentationModel& model, const core::Batch& batch,
             const engine::SegmentationInferenceOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<core::Sample> predictions = engine::PredictSegmentation(model, batch, options);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

absl::Status Run(const std::vector<std::string>& overrides) {
  VISION_ASSIGN_OR_RETURN(const core::TrainPipelineConfig config,
                          core::LoadPipelineConfig(absl::GetFlag(FLAGS_config), overrides));
  at::set_num_threads(absl::GetFlag(FLAGS_threads));
  at::manual_seed(0);
  VISION_ASSIGN_OR_RETURN(std::shared_ptr<core::Model> built, core::BuildModel(config.model()));
  VISION_ASSIGN_OR_RETURN(core::SegmentationModel * model,
                          core::SegmentationModelForInference(built.get()));
  model->eval();

  core::SegmentationInferenceConfig multi_config;
  for (absl::string_view text : absl::StrSplit(absl::GetFlag(FLAGS_scales), ',')) {
    float scale = 0;
    if (!absl::SimpleAtof(text, &scale)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--scales: '", text, "' is not a number; give factors like --scales=0.5,1,1.5"));
    }
    multi_config.add_scales(scale);
  }
  multi_config.set_flip(absl::GetFlag(FLAGS_flip));
  multi_config.set_crop_height(absl::GetFlag(FLAGS_crop_height));
  multi_config.set_crop_width(absl::GetFlag(FLAGS_crop_width));
  multi_config.set_max_batch_size(absl::GetFlag(FLAGS_max_batch_size));
  VISION_ASSIGN_OR_RETURN(
      const engine::SegmentationInferenceOptions multi,
      core::WithContext("command-line options",
                        engine::SegmentationInferenceOptionsFromProto(multi_config, 1)));
  const engine::SegmentationInferenceOptions single;

  const int height = absl::GetFlag(FLAGS_height), width = absl::GetFlag(FLAGS_width);
  core::Batch batch;
  batch.images = at::randn({1, 3, height, width});
  batch.image_sizes = at::tensor({height, width}, at::kLong).view({1, 2});
  batch.samples.resize(1);
  batch.samples[0].original_height = height;
  batch.samples[0].original_width = width;

  std::vector<double> single_ms, multi_ms;
  VISION_RETURN_IF_ERROR(core::GuardTorch("benchmark", [&]() -> absl::Status {
    at::NoGradGuard no_grad;
    RunMs(*model, batch, single);
    RunMs(*model, batch, multi);
    for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
      single_ms.push_back(RunMs(*model, batch, single));
      multi_ms.push_back(RunMs(*model, batch, multi));
    }
    return absl::OkStatus();
  }));
  // Model pixels per image relative to one scale-1 pass (windows' overlap and padding not
  // counted): what the ratio would be if cost were proportional to pixels.
  double pixels = 0;
  for (double s : multi.scales) pixels += s * s;
  if (multi.flip) pixels *= 2;
  const double a = Median(single_ms), b = Median(multi_ms);
  std::printf(
      "%s (%s), one %dx%d image, %d thread(s), median of %d runs:\n"
      "  single scale:                      %10.1f ms/image\n"
      "  scales %s%s%s: %10.1f ms/image  (%.2fx; %.2fx the pixels)\n",
      config.model().type().c_str(), absl::GetFlag(FLAGS_config).c_str(), height, width,
      absl::GetFlag(FLAGS_threads), absl::GetFlag(FLAGS_repeats), a,
      absl::StrJoin(multi.scales, ",").c_str(), multi.flip ? " + flip" : "",
      multi.crop_height > 0
          ? absl::StrCat(" + ", multi.crop_height, "x", multi.crop_width, " windows, stride ",
                         multi.stride_height, "x", multi.stride_width)
                .c_str()
          : "",
      b, b / a, pixels);
  return absl::OkStatus();
}

}  // namespace
}  // namespace vision::tools

int main(int argc, char** argv) {
  return vision::tools::RunDriver(
      argc, argv,
      "Times multi-scale + flip segmentation inference against single scale: "
      "segmentation_inference_benchmark --config=FILE [--height=512 --width=1024 --scales=... "
      "--flip --crop_height=0 --crop_width=0 --repeats=3]",
      vision::tools::Run);
}
