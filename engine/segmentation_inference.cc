#include "engine/segmentation_inference.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "core/config/loader.h"
#include "core/status_macros.h"

namespace vision::engine {
namespace {

// One model input of one scale: an image's scaled valid region, flipped or not, the windows
// the model sees of it and the sums of their logits and of their coverage.
struct Pass {
  int64_t image = 0;
  bool flipped = false;
  at::Tensor pixels;  // [3, h, w]
  std::vector<Window> windows;
  at::Tensor logits;  // [C, h, w], float
  at::Tensor counts;  // [1, h, w], float
};

int64_t ScaledSize(int64_t size, double scale) {
  return std::max<int64_t>(1, std::llround(static_cast<double>(size) * scale));
}

// Bilinear resize of [C, h, w] (align_corners false, as F.interpolate and mmseg's resize).
at::Tensor Resize(const at::Tensor& x, int64_t height, int64_t width) {
  if (x.size(1) == height && x.size(2) == width) return x;
  return at::upsample_bilinear2d(x.unsqueeze(0), {height, width}, /*align_corners=*/false)[0];
}

// Runs every window of `passes` through the model and adds its logits and coverage into its
// pass. Windows of one shape (with sliding windows: all, padded to the crop) are stacked, at
// most max_batch_size per forward pass.
void RunWindows(core::SegmentationModel& model, const SegmentationInferenceOptions& options,
                std::vector<Pass>& passes) {
  const bool slide = options.crop_height > 0;
  struct Piece {
    size_t pass;
    Window window;
  };
  std::map<std::pair<int64_t, int64_t>, std::vector<Piece>> by_shape;
  for (size_t p = 0; p < passes.size(); ++p) {
    for (const Window& w : passes[p].windows) {
      const std::pair<int64_t, int64_t> shape =
          slide ? std::make_pair(options.crop_height, options.crop_width)
                : std::make_pair(w.height, w.width);
      by_shape[shape].push_back({p, w});
    }
  }
  const int64_t num_classes = model.NumClasses();
  for (const auto& [shape, pieces] : by_shape) {
    const auto [height, width] = shape;
    for (size_t start = 0; start < pieces.size();
         start += static_cast<size_t>(options.max_batch_size)) {
      const size_t end =
          std::min(pieces.size(), start + static_cast<size_t>(options.max_batch_size));
      std::vector<at::Tensor> inputs;
      for (size_t k = start; k < end; ++k) {
        const Window& w = pieces[k].window;
        at::Tensor crop = passes[pieces[k].pass]
                              .pixels.slice(1, w.y, w.y + w.height)
                              .slice(2, w.x, w.x + w.width);
        if (w.height != height || w.width != width) {
          // Zeros are the mean colour after normalisation, as the collate pads.
          crop = at::constant_pad_nd(crop, {0, width - w.width, 0, height - w.height}, 0);
        }
        inputs.push_back(crop);
      }
      const at::Tensor logits = model.SegmentationLogits(at::stack(inputs));
      TORCH_CHECK(logits.dim() == 4 && logits.size(0) == static_cast<int64_t>(inputs.size()) &&
                      logits.size(1) == num_classes && logits.size(2) == height &&
                      logits.size(3) == width,
                  model.name(), "::SegmentationLogits must return [N, NumClasses() = ", num_classes,
                  ", H, W] logits at the input's size; for input ",
                  at::IntArrayRef({static_cast<int64_t>(inputs.size()), 3, height, width}),
                  " it returned ", logits.sizes());
      for (size_t k = start; k < end; ++k) {
        const Window& w = pieces[k].window;
        Pass& pass = passes[pieces[k].pass];
        pass.logits.slice(1, w.y, w.y + w.height)
            .slice(2, w.x, w.x + w.width)
            .add_(logits[static_cast<int64_t>(k - start)]
                      .slice(1, 0, w.height)
                      .slice(2, 0, w.width)
                      .to(at::kFloat));
        pass.counts.slice(1, w.y, w.y + w.height).slice(2, w.x, w.x + w.width).add_(1);
      }
    }
  }
}

void CheckOptions(const SegmentationInferenceOptions& o) {
  TORCH_CHECK(!o.scales.empty(), "segmentation inference: scales must not be empty");
  for (double scale : o.scales) {
    TORCH_CHECK(scale > 0 && std::isfinite(scale),
                "segmentation inference: scales must be finite and > 0, got ", scale);
  }
  TORCH_CHECK((o.crop_height == 0 && o.crop_width == 0) ||
                  (o.crop_height > 0 && o.crop_width > 0 && o.stride_height >= 1 &&
                   o.stride_height <= o.crop_height && o.stride_width >= 1 &&
                   o.stride_width <= o.crop_width),
              "segmentation inference: crop ", o.crop_height, " x ", o.crop_width, " and stride ",
              o.stride_height, " x ", o.stride_width,
              ": the crop must be both 0 (whole images) or both > 0 with 1 <= stride <= crop");
  TORCH_CHECK(o.max_batch_size >= 1, "segmentation inference: max_batch_size must be >= 1, got ",
              o.max_batch_size);
}

}  // namespace

absl::StatusOr<SegmentationInferenceOptions> SegmentationInferenceOptionsFromProto(
    const core::SegmentationInferenceConfig& config, int64_t default_max_batch_size) {
  VISION_RETURN_IF_ERROR(core::ValidateSegmentationInferenceConfig(config));
  SegmentationInferenceOptions options;
  if (config.scales_size() > 0) {
    options.scales.assign(config.scales().begin(), config.scales().end());
  }
  options.flip = config.flip();
  options.crop_height = config.crop_height();
  options.crop_width = config.crop_width();
  // Two thirds of the crop, rounded up: windows overlap by about a third.
  const auto default_stride = [](int64_t crop) { return (2 * crop + 2) / 3; };
  if (options.crop_height > 0) {
    options.stride_height =
        config.stride_height() > 0 ? config.stride_height() : default_stride(options.crop_height);
    options.stride_width =
        config.stride_width() > 0 ? config.stride_width() : default_stride(options.crop_width);
  }
  options.max_batch_size =
      config.max_batch_size() > 0 ? config.max_batch_size() : default_max_batch_size;
  if (options.max_batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "evaluation.segmentation_inference.max_batch_size: 0 means the eval loader's batch size, "
        "which is ",
        default_max_batch_size, "; set max_batch_size >= 1 or eval_data.loader.batch_size"));
  }
  return options;
}

std::vector<Window> SlidingWindows(int64_t height, int64_t width, int64_t crop_height,
                                   int64_t crop_width, int64_t stride_height,
                                   int64_t stride_width) {
  TORCH_CHECK(height > 0 && width > 0 && crop_height > 0 && crop_width > 0 && stride_height > 0 &&
                  stride_width > 0,
              "SlidingWindows: sizes, crop and stride must be > 0, got image ", height, " x ",
              width, ", crop ", crop_height, " x ", crop_width, ", stride ", stride_height, " x ",
              stride_width);
  // Window starts along one axis, mmsegmentation's slide_inference rule.
  const auto starts = [](int64_t size, int64_t crop, int64_t stride) {
    const int64_t grids = std::max<int64_t>(size - crop + stride - 1, 0) / stride + 1;
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (int64_t i = 0; i < grids; ++i) {
      const int64_t end = std::min(i * stride + crop, size);
      const int64_t begin = std::max<int64_t>(end - crop, 0);
      spans.emplace_back(begin, end - begin);
    }
    return spans;
  };
  std::vector<Window> windows;
  for (const auto& [y, h] : starts(height, crop_height, stride_height)) {
    for (const auto& [x, w] : starts(width, crop_width, stride_width)) {
      windows.push_back({y, x, h, w});
    }
  }
  return windows;
}

std::vector<at::Tensor> SegmentationScores(core::SegmentationModel& model, const core::Batch& batch,
                                           const SegmentationInferenceOptions& options) {
  CheckOptions(options);
  const int64_t n = static_cast<int64_t>(batch.samples.size());
  TORCH_CHECK(batch.images.dim() == 4 && batch.images.size(0) == n,
              "segmentation inference: images must be [N, 3, H, W] for the batch's ", n,
              " samples, got ", batch.images.sizes());
  const bool slide = options.crop_height > 0;
  const std::vector<bool> flips =
      options.flip ? std::vector<bool>{false, true} : std::vector<bool>{false};
  const int64_t num_passes = static_cast<int64_t>(options.scales.size() * flips.size());
  // Images are done a few at a time, so that the logits kept for them stay about one forward
  // pass's worth: windows image by image (there are many at large scales), whole images as
  // many as fill a forward pass with their flips, so that images of one size share it.
  const int64_t images_per_unit =
      slide ? 1
            : std::max<int64_t>(1, options.max_batch_size / static_cast<int64_t>(flips.size()));
  std::vector<std::vector<int64_t>> units;
  for (int64_t i = 0; i < n; ++i) {
    if (i % images_per_unit == 0) units.emplace_back();
    units.back().push_back(i);
  }
  // Read once: image_sizes may live on the GPU, where each read waits for the device.
  std::vector<std::vector<int64_t>> regions;
  for (int64_t i = 0; i < n; ++i) regions.push_back(core::OriginalRegion(batch, i));
  std::vector<at::Tensor> scores(static_cast<size_t>(n));
  for (const std::vector<int64_t>& unit : units) {
    for (double scale : options.scales) {
      std::vector<Pass> passes;
      for (int64_t i : unit) {
        const std::vector<int64_t>& region = regions[static_cast<size_t>(i)];
        const at::Tensor scaled =
            Resize(batch.images[i].slice(1, 0, region[0]).slice(2, 0, region[1]),
                   ScaledSize(region[0], scale), ScaledSize(region[1], scale));
        const int64_t height = scaled.size(1), width = scaled.size(2);
        for (bool flipped : flips) {
          Pass pass;
          pass.image = i;
          pass.flipped = flipped;
          pass.pixels = flipped ? scaled.flip({2}) : scaled;
          pass.windows =
              slide ? SlidingWindows(height, width, options.crop_height, options.crop_width,
                                     options.stride_height, options.stride_width)
                    : std::vector<Window>{{0, 0, height, width}};
          const at::TensorOptions float_options = scaled.options().dtype(at::kFloat);
          pass.logits = at::zeros({model.NumClasses(), height, width}, float_options);
          pass.counts = at::zeros({1, height, width}, float_options);
          passes.push_back(std::move(pass));
        }
      }
      RunWindows(model, options, passes);
      for (Pass& pass : passes) {
        at::Tensor logits = pass.logits / pass.counts;
        if (pass.flipped) logits = logits.flip({2});
        const core::Sample& sample = batch.samples[static_cast<size_t>(pass.image)];
        const std::vector<int64_t>& region = regions[static_cast<size_t>(pass.image)];
        const int64_t out_h = sample.original_height > 0 ? sample.original_height : region[0];
        const int64_t out_w = sample.original_width > 0 ? sample.original_width : region[1];
        // Probabilities average across passes; a single pass keeps its logits, so that its
        // label map is exactly that of core::LabelMapsFromScores (Predict).
        const at::Tensor term =
            Resize(num_passes > 1 ? at::softmax(logits, 0) : logits, out_h, out_w);
        at::Tensor& sum = scores[static_cast<size_t>(pass.image)];
        sum = sum.defined() ? sum + term : term;
      }
    }
  }
  if (num_passes > 1) {
    for (at::Tensor& s : scores) s = s / static_cast<double>(num_passes);
  }
  return scores;
}

std::vector<core::Sample> PredictSegmentation(core::SegmentationModel& model,
                                              const core::Batch& batch,
                                              const SegmentationInferenceOptions& options) {
  const std::vector<at::Tensor> scores = SegmentationScores(model, batch, options);
  std::vector<core::Sample> predictions;
  predictions.reserve(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    predictions.push_back(core::LabelMapFromScores(batch.samples[i], scores[i]));
  }
  return predictions;
}

}  // namespace vision::engine
