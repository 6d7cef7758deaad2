#include "engine/segmentation_inference.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <utility>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "core/config/loader.h"
#include "core/status_macros.h"

namespace vision::engine {
namespace {

// The model inputs of one scale for one image: its scaled valid region, flipped or not, the
// windows the model sees of it and the sums of what they give and of their coverage. With
// kSumExpLogits a pass is never flipped: each window's mirror goes with it.
struct Pass {
  int64_t image = 0;
  bool flipped = false;
  at::Tensor pixels;  // [3, h, w]
  std::vector<Window> windows;
  at::Tensor sums;    // [C, h, w]: logits (float) or exp(logits) (double)
  at::Tensor counts;  // [1, h, w], float
};

// Bilinear resize of [C, h, w].
at::Tensor Resize(const at::Tensor& x, int64_t height, int64_t width, bool align_corners) {
  if (x.size(1) == height && x.size(2) == width) return x;
  return at::upsample_bilinear2d(x.unsqueeze(0), {height, width}, align_corners)[0];
}

// `crop` [3, h, w] at the top-left of a height x width input, the rest `fill` ([3 or 1, 1, 1]).
at::Tensor PadWindow(const at::Tensor& crop, int64_t height, int64_t width,
                     const at::Tensor& fill) {
  if (crop.size(1) == height && crop.size(2) == width) return crop;
  at::Tensor padded = fill.expand({crop.size(0), height, width}).clone();
  padded.slice(1, 0, crop.size(1)).slice(2, 0, crop.size(2)).copy_(crop);
  return padded;
}

// The model's logits for `inputs` (all of one shape), at most max_batch_size per forward pass.
at::Tensor Forward(core::SegmentationModel& model, const std::vector<at::Tensor>& inputs,
                   int64_t max_batch_size) {
  const int64_t num_classes = model.NumClasses();
  std::vector<at::Tensor> outputs;
  for (size_t start = 0; start < inputs.size(); start += static_cast<size_t>(max_batch_size)) {
    const size_t end = std::min(inputs.size(), start + static_cast<size_t>(max_batch_size));
    const at::Tensor batch =
        at::stack(std::vector<at::Tensor>(inputs.begin() + static_cast<std::ptrdiff_t>(start),
                                          inputs.begin() + static_cast<std::ptrdiff_t>(end)));
    at::Tensor logits = model.SegmentationLogits(batch);
    TORCH_CHECK(logits.dim() == 4 && logits.size(0) == batch.size(0) &&
                    logits.size(1) == num_classes && logits.size(2) == batch.size(2) &&
                    logits.size(3) == batch.size(3),
                model.name(), "::SegmentationLogits must return [N, NumClasses() = ", num_classes,
                ", H, W] logits at the input's size; for input ", batch.sizes(), " it returned ",
                logits.sizes());
    outputs.push_back(std::move(logits));
  }
  return outputs.size() == 1 ? outputs[0] : at::cat(outputs);
}

// Runs every window of `passes` through the model and adds what it gives (its logits, or with
// kSumExpLogits exp(logits + its mirror's logits mirrored back)) and its coverage into its
// pass. Windows of one shape (with sliding windows: all, padded to the crop) go together, at
// most max_batch_size inputs per forward pass; a window and its mirror share one where
// max_batch_size allows.
void RunWindows(core::SegmentationModel& model, const SegmentationInferenceOptions& options,
                std::vector<Pass>& passes) {
  const bool slide = options.crop_height > 0;
  const bool sum_exp = options.fusion == ScoreFusion::kSumExpLogits;
  const bool mirror = sum_exp && options.flip;
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
  if (by_shape.empty()) return;
  const at::Tensor& any_pixels = passes.front().pixels;
  const at::Tensor fill =
      options.pad_value.empty()
          ? at::zeros({1, 1, 1}, any_pixels.options())
          : at::tensor(options.pad_value, any_pixels.options().dtype(at::kDouble))
                .to(any_pixels.dtype())
                .view({-1, 1, 1});
  const size_t inputs_per_piece = mirror ? 2 : 1;
  const size_t pieces_per_chunk =
      std::max<size_t>(1, static_cast<size_t>(options.max_batch_size) / inputs_per_piece);
  for (const auto& [shape, pieces] : by_shape) {
    const auto [height, width] = shape;
    for (size_t start = 0; start < pieces.size(); start += pieces_per_chunk) {
      const size_t end = std::min(pieces.size(), start + pieces_per_chunk);
      std::vector<at::Tensor> inputs;
      for (size_t k = start; k < end; ++k) {
        const Window& w = pieces[k].window;
        const at::Tensor crop = passes[pieces[k].pass]
                                    .pixels.slice(1, w.y, w.y + w.height)
                                    .slice(2, w.x, w.x + w.width);
        inputs.push_back(PadWindow(crop, height, width, fill));
        // The padded window mirrored, padding and all, as PyTorch-Encoding's module_inference.
        if (mirror) inputs.push_back(inputs.back().flip({2}));
      }
      const at::Tensor logits = Forward(model, inputs, options.max_batch_size);
      for (size_t k = start; k < end; ++k) {
        const Window& w = pieces[k].window;
        Pass& pass = passes[pieces[k].pass];
        const int64_t row = static_cast<int64_t>((k - start) * inputs_per_piece);
        at::Tensor out = logits[row];
        if (mirror) out = out + logits[row + 1].flip({2});
        out = out.slice(1, 0, w.height).slice(2, 0, w.width);
        pass.sums.slice(1, w.y, w.y + w.height)
            .slice(2, w.x, w.x + w.width)
            .add_(sum_exp ? at::exp(out.to(at::kDouble)) : out.to(at::kFloat));
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
  // Two thirds of the crop, rounded down (PyTorch-Encoding's int(crop * 2/3)): windows overlap
  // by about a third.
  const auto default_stride = [](int64_t crop) { return std::max<int64_t>(1, 2 * crop / 3); };
  if (options.crop_height > 0) {
    options.stride_height =
        config.stride_height() > 0 ? config.stride_height() : default_stride(options.crop_height);
    options.stride_width =
        config.stride_width() > 0 ? config.stride_width() : default_stride(options.crop_width);
  }
  options.max_batch_size =
      config.max_batch_size() > 0 ? config.max_batch_size() : default_max_batch_size;
  options.window_placement =
      config.window_placement() == core::SegmentationInferenceConfig::OVERHANG
          ? WindowPlacement::kOverhang
          : WindowPlacement::kShiftInside;
  options.pad_value.assign(config.pad_value().begin(), config.pad_value().end());
  options.fusion = config.fusion() == core::SegmentationInferenceConfig::SUM_EXP_LOGITS
                       ? ScoreFusion::kSumExpLogits
                       : ScoreFusion::kMeanProbabilities;
  options.align_corners = config.align_corners();
  if (options.max_batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "evaluation.segmentation_inference.max_batch_size: 0 means the eval loader's batch size, "
        "which is ",
        default_max_batch_size, "; set max_batch_size >= 1 or eval_data.loader.batch_size"));
  }
  return options;
}

int64_t ScaledSize(int64_t size, double scale) {
  return std::max<int64_t>(1, std::llround(static_cast<double>(size) * scale));
}

std::vector<Window> SlidingWindows(int64_t height, int64_t width, int64_t crop_height,
                                   int64_t crop_width, int64_t stride_height, int64_t stride_width,
                                   WindowPlacement placement) {
  TORCH_CHECK(height > 0 && width > 0 && crop_height > 0 && crop_width > 0 && stride_height > 0 &&
                  stride_width > 0,
              "SlidingWindows: sizes, crop and stride must be > 0, got image ", height, " x ",
              width, ", crop ", crop_height, " x ", crop_width, ", stride ", stride_height, " x ",
              stride_width);
  const bool overhang = placement == WindowPlacement::kOverhang;
  // Window spans (begin, length) along one axis.
  const auto starts = [overhang](int64_t size, int64_t crop, int64_t stride) {
    const int64_t grids = std::max<int64_t>(size - crop + stride - 1, 0) / stride + 1;
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (int64_t i = 0; i < grids; ++i) {
      const int64_t end = std::min(i * stride + crop, size);
      const int64_t begin = overhang ? i * stride : std::max<int64_t>(end - crop, 0);
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
  TORCH_CHECK(options.pad_value.size() <= 1 ||
                  static_cast<int64_t>(options.pad_value.size()) == batch.images.size(1),
              "segmentation inference: pad_value has ", options.pad_value.size(),
              " values for images of ", batch.images.size(1),
              " channels; give one for every channel or one per channel");
  const bool slide = options.crop_height > 0;
  const bool sum_exp = options.fusion == ScoreFusion::kSumExpLogits;
  // Flipped images are passes of their own, except with kSumExpLogits, where each window's
  // mirror goes with the window (RunWindows).
  const std::vector<bool> flips =
      options.flip && !sum_exp ? std::vector<bool>{false, true} : std::vector<bool>{false};
  const int64_t num_passes = static_cast<int64_t>(options.scales.size() * flips.size());
  const int64_t inputs_per_image = options.flip ? 2 : 1;
  // Images are done a few at a time, so that the sums kept for them stay about one forward
  // pass's worth: windows image by image (there are many at large scales), whole images as
  // many as fill a forward pass with their flips, so that images of one size share it.
  const int64_t images_per_unit =
      slide ? 1 : std::max<int64_t>(1, options.max_batch_size / inputs_per_image);
  std::vector<std::vector<int64_t>> units;
  for (int64_t i = 0; i < n; ++i) {
    if (i % images_per_unit == 0) units.emplace_back();
    units.back().push_back(i);
  }
  // Read once: image_sizes may live on the GPU, where each read waits for the device.
  std::vector<std::vector<int64_t>> regions;
  for (int64_t i = 0; i < n; ++i) regions.push_back(core::OriginalRegion(batch, i));
  const WindowPlacement placement = options.window_placement;
  std::vector<at::Tensor> scores(static_cast<size_t>(n));
  for (const std::vector<int64_t>& unit : units) {
    for (double scale : options.scales) {
      std::vector<Pass> passes;
      for (int64_t i : unit) {
        const std::vector<int64_t>& region = regions[static_cast<size_t>(i)];
        const at::Tensor scaled =
            Resize(batch.images[i].slice(1, 0, region[0]).slice(2, 0, region[1]),
                   ScaledSize(region[0], scale), ScaledSize(region[1], scale),
                   options.align_corners);
        const int64_t height = scaled.size(1), width = scaled.size(2);
        for (bool flipped : flips) {
          Pass pass;
          pass.image = i;
          pass.flipped = flipped;
          pass.pixels = flipped ? scaled.flip({2}) : scaled;
          pass.windows = slide ? SlidingWindows(height, width, options.crop_height,
                                                options.crop_width, options.stride_height,
                                                options.stride_width, placement)
                               : std::vector<Window>{{0, 0, height, width}};
          const at::TensorOptions float_options = scaled.options().dtype(at::kFloat);
          pass.sums = at::zeros({model.NumClasses(), height, width},
                                sum_exp ? float_options.dtype(at::kDouble) : float_options);
          pass.counts = at::zeros({1, height, width}, float_options);
          passes.push_back(std::move(pass));
        }
      }
      RunWindows(model, options, passes);
      for (Pass& pass : passes) {
        at::Tensor mean = pass.sums / pass.counts;
        if (pass.flipped) mean = mean.flip({2});
        const core::Sample& sample = batch.samples[static_cast<size_t>(pass.image)];
        const std::vector<int64_t>& region = regions[static_cast<size_t>(pass.image)];
        const int64_t out_h = sample.original_height > 0 ? sample.original_height : region[0];
        const int64_t out_w = sample.original_width > 0 ? sample.original_width : region[1];
        // kMeanProbabilities: probabilities average across passes; a single pass keeps its
        // logits, so that its label map is exactly that of core::LabelMapsFromScores
        // (Predict). kSumExpLogits: the scores are summed as they are.
        const at::Tensor term =
            Resize(!sum_exp && num_passes > 1 ? at::softmax(mean, 0) : mean, out_h, out_w,
                   options.align_corners);
        at::Tensor& sum = scores[static_cast<size_t>(pass.image)];
        sum = sum.defined() ? sum + term : term;
      }
    }
  }
  if (sum_exp) {
    for (at::Tensor& s : scores) s = at::log(s).to(at::kFloat);
  } else if (num_passes > 1) {
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
