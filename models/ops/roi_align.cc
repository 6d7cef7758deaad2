#include "models/ops/roi_align.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>

#include "models/ops/roi_align_kernel.h"

#ifdef VISION_WITH_CUDA
#include "models/ops/roi_align_cuda.h"
#endif

namespace vision::models::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The taps of every in-map sample of one RoI, bin by bin: bin b's are
// taps[bin_begin[b]] .. taps[bin_begin[b + 1] - 1]. Computed once per RoI and reused for every
// channel, which is what makes the CPU loops cheap.
template <typename T>
struct RoITaps {
  RoIBins<T> bins;
  std::vector<BilinearTaps<T>> taps;
  std::vector<int64_t> bin_begin;
};

template <typename T>
void ComputeRoITaps(const T* roi, int64_t height, int64_t width, const RoIAlignGeometry& g,
                    RoITaps<T>* out) {
  out->bins = MakeRoIBins(roi, g);
  out->taps.clear();
  out->bin_begin.clear();
  BilinearTaps<T> taps;
  for (int64_t ph = 0; ph < g.output_height; ++ph) {
    for (int64_t pw = 0; pw < g.output_width; ++pw) {
      out->bin_begin.push_back(static_cast<int64_t>(out->taps.size()));
      for (int64_t iy = 0; iy < out->bins.grid_h; ++iy) {
        const T y = SampleY(out->bins, ph, iy);
        for (int64_t ix = 0; ix < out->bins.grid_w; ++ix) {
          if (ComputeBilinearTaps(y, SampleX(out->bins, pw, ix), height, width, &taps)) {
            out->taps.push_back(taps);
          }
        }
      }
    }
  }
  out->bin_begin.push_back(static_cast<int64_t>(out->taps.size()));
}

// The channels-last forward (and backward) pays off from this many channels and from this many
// output values per input value (below, the one conversion of the input to channels-last costs more
// than the vectorised sampling saves).
constexpr int64_t kChannelsLastMinChannels = 8;
constexpr double kChannelsLastMinOutputPerInput = 0.5;

// Whether the channels-last forward and backward pay off for an input of `input_sizes` [B, C, H, W]
// and `num_rois` RoIs of `num_bins` bins.
bool UseChannelsLast(at::IntArrayRef input_sizes, int64_t num_rois, int64_t num_bins) {
  return input_sizes[1] >= kChannelsLastMinChannels &&
         static_cast<double>(num_rois * num_bins) >=
             kChannelsLastMinOutputPerInput *
                 static_cast<double>(input_sizes[0] * input_sizes[2] * input_sizes[3]);
}

// The forward on a channels-last copy of the input: each tap reads the channels of a pixel as
// one contiguous row, so the loop over channels vectorises, where the channels-first loop
// gathers four scattered values per channel and tap. Every channel's sum takes the same
// operations in the same order as the channels-first loop (((w0 p0 + w1 p1) + w2 p2) + w3 p3 per
// tap, added tap by tap, then / count), so the results are identical. Parallel over RoIs.
template <typename T>
void ForwardCpuChannelsLast(const at::Tensor& input, const at::Tensor& rois,
                            const RoIAlignGeometry& g, T* output_data) {
  const int64_t channels = input.size(1);
  const int64_t height = input.size(2);
  const int64_t width = input.size(3);
  const int64_t num_bins = g.output_height * g.output_width;
  // [B, H, W, C], contiguous.
  const at::Tensor pixels = input.permute({0, 2, 3, 1}).contiguous();
  const T* pixel_data = pixels.data_ptr<T>();
  const T* rois_data = rois.data_ptr<T>();
  at::parallel_for(0, rois.size(0), /*grain_size=*/1, [&](int64_t begin, int64_t end) {
    RoITaps<T> roi;
    std::vector<T> sums(channels);
    T* __restrict sum = sums.data();
    for (int64_t k = begin; k < end; ++k) {
      ComputeRoITaps(rois_data + k * 5, height, width, g, &roi);
      const T* image = pixel_data + roi.bins.batch * height * width * channels;
      for (int64_t b = 0; b < num_bins; ++b) {
        std::fill(sums.begin(), sums.end(), static_cast<T>(0));
        for (int64_t t = roi.bin_begin[b]; t < roi.bin_begin[b + 1]; ++t) {
          const BilinearTaps<T>& tap = roi.taps[t];
          const T w0 = tap.weight[0], w1 = tap.weight[1], w2 = tap.weight[2], w3 = tap.weight[3];
          const T* __restrict p0 = image + tap.offset[0] * channels;
          const T* __restrict p1 = image + tap.offset[1] * channels;
          const T* __restrict p2 = image + tap.offset[2] * channels;
          const T* __restrict p3 = image + tap.offset[3] * channels;
          for (int64_t c = 0; c < channels; ++c) {
            sum[c] += w0 * p0[c] + w1 * p1[c] + w2 * p2[c] + w3 * p3[c];
          }
        }
        T* out = output_data + k * channels * num_bins + b;
        for (int64_t c = 0; c < channels; ++c) out[c * num_bins] = sum[c] / roi.bins.count;
      }
    }
  });
}

// Parallel over RoIs: each writes its own output rows.
template <typename T>
at::Tensor ForwardCpu(const at::Tensor& input, const at::Tensor& rois, const RoIAlignGeometry& g) {
  const int64_t channels = input.size(1);
  const int64_t height = input.size(2);
  const int64_t width = input.size(3);
  const int64_t num_bins = g.output_height * g.output_width;
  at::Tensor output =
      at::empty({rois.size(0), channels, g.output_height, g.output_width}, input.options());
  const T* input_data = input.data_ptr<T>();
  const T* rois_data = rois.data_ptr<T>();
  T* output_data = output.data_ptr<T>();
  // An input that is already channels-last (and so not contiguous) costs no conversion.
  if (!input.is_contiguous() || UseChannelsLast(input.sizes(), rois.size(0), num_bins)) {
    ForwardCpuChannelsLast<T>(input, rois, g, output_data);
    return output;
  }
  at::parallel_for(0, rois.size(0), /*grain_size=*/1, [&](int64_t begin, int64_t end) {
    RoITaps<T> roi;
    for (int64_t k = begin; k < end; ++k) {
      ComputeRoITaps(rois_data + k * 5, height, width, g, &roi);
      for (int64_t c = 0; c < channels; ++c) {
        const T* plane = input_data + (roi.bins.batch * channels + c) * height * width;
        T* out = output_data + (k * channels + c) * num_bins;
        for (int64_t b = 0; b < num_bins; ++b) {
          T sum = 0;
          for (int64_t t = roi.bin_begin[b]; t < roi.bin_begin[b + 1]; ++t) {
            const BilinearTaps<T>& tap = roi.taps[t];
            sum += tap.weight[0] * plane[tap.offset[0]] + tap.weight[1] * plane[tap.offset[1]] +
                   tap.weight[2] * plane[tap.offset[2]] + tap.weight[3] * plane[tap.offset[3]];
          }
          out[b] = sum / roi.bins.count;
        }
      }
    }
  });
  return output;
}

// The backward into a channels-last gradient, converted to channels-first at the end: each tap
// adds to the channels of a pixel as one contiguous row, so the loop over channels vectorises.
// Every gradient value receives the same terms, computed alike, in the same order (RoI, bin, tap,
// corner) as in the channels-first loop, so the results are identical. Parallel over channel
// ranges, as that loop.
template <typename T>
at::Tensor BackwardCpuChannelsLast(const at::Tensor& grad_output, const at::Tensor& rois,
                                   at::IntArrayRef input_sizes, const RoIAlignGeometry& g) {
  const int64_t channels = input_sizes[1];
  const int64_t height = input_sizes[2];
  const int64_t width = input_sizes[3];
  const int64_t num_rois = rois.size(0);
  const int64_t num_bins = g.output_height * g.output_width;
  // [B, H, W, C]
  at::Tensor grad_pixels =
      at::zeros({input_sizes[0], height, width, channels}, grad_output.options());
  // [K, bins, C]: the channels of one bin's gradient together.
  const at::Tensor grad_bins =
      grad_output.reshape({num_rois, channels, num_bins}).transpose(1, 2).contiguous();
  const T* grad_data = grad_bins.data_ptr<T>();
  const T* rois_data = rois.data_ptr<T>();
  T* grad_pixel_data = grad_pixels.data_ptr<T>();
  at::parallel_for(0, channels, /*grain_size=*/16, [&](int64_t begin, int64_t end) {
    RoITaps<T> roi;
    for (int64_t k = 0; k < num_rois; ++k) {
      ComputeRoITaps(rois_data + k * 5, height, width, g, &roi);
      T* image = grad_pixel_data + roi.bins.batch * height * width * channels;
      const T count = roi.bins.count;
      for (int64_t b = 0; b < num_bins; ++b) {
        const T* __restrict grad = grad_data + (k * num_bins + b) * channels;
        for (int64_t t = roi.bin_begin[b]; t < roi.bin_begin[b + 1]; ++t) {
          const BilinearTaps<T>& tap = roi.taps[t];
          for (int i = 0; i < 4; ++i) {
            T* __restrict pixel = image + tap.offset[i] * channels;
            const T weight = tap.weight[i];
            for (int64_t c = begin; c < end; ++c) pixel[c] += grad[c] * weight / count;
          }
        }
      }
    }
  });
  return grad_pixels.permute({0, 3, 1, 2}).contiguous();
}

// Parallel over channels, not RoIs: RoIs overlap in the input gradient, channels never do, so
// threads need neither locks nor atomics and the sums keep one order (deterministic results).
template <typename T>
at::Tensor BackwardCpu(const at::Tensor& grad_output, const at::Tensor& rois,
                       at::IntArrayRef input_sizes, const RoIAlignGeometry& g) {
  const int64_t channels = input_sizes[1];
  const int64_t height = input_sizes[2];
  const int64_t width = input_sizes[3];
  const int64_t num_bins = g.output_height * g.output_width;
  if (UseChannelsLast(input_sizes, rois.size(0), num_bins)) {
    return BackwardCpuChannelsLast<T>(grad_output, rois, input_sizes, g);
  }
  at::Tensor grad_input = at::zeros(input_sizes, grad_output.options());
  const T* grad_output_data = grad_output.data_ptr<T>();
  const T* rois_data = rois.data_ptr<T>();
  T* grad_input_data = grad_input.data_ptr<T>();
  at::parallel_for(0, channels, /*grain_size=*/1, [&](int64_t begin, int64_t end) {
    RoITaps<T> roi;
    for (int64_t k = 0; k < rois.size(0); ++k) {
      ComputeRoITaps(rois_data + k * 5, height, width, g, &roi);
      for (int64_t c = begin; c < end; ++c) {
        T* plane = grad_input_data + (roi.bins.batch * channels + c) * height * width;
        const T* grad = grad_output_data + (k * channels + c) * num_bins;
        for (int64_t b = 0; b < num_bins; ++b) {
          for (int64_t t = roi.bin_begin[b]; t < roi.bin_begin[b + 1]; ++t) {
            const BilinearTaps<T>& tap = roi.taps[t];
            for (int i = 0; i < 4; ++i)
              plane[tap.offset[i]] += grad[b] * tap.weight[i] / roi.bins.count;
          }
        }
      }
    }
  });
  return grad_input;
}

// The kernels are profiler ranges (Kineto, torch.profiler) named as torchvision's operators.
at::Tensor Forward(const at::Tensor& input, const at::Tensor& rois, const RoIAlignGeometry& g) {
  RECORD_FUNCTION("vision::roi_align", std::vector<c10::IValue>({input, rois}));
#ifdef VISION_WITH_CUDA
  if (input.is_cuda()) return RoIAlignForwardCuda(input, rois, g);
#endif
  return AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "RoIAlign",
                                    [&] { return ForwardCpu<scalar_t>(input, rois, g); });
}

at::Tensor Backward(const at::Tensor& grad_output, const at::Tensor& rois,
                    at::IntArrayRef input_sizes, const RoIAlignGeometry& g) {
  RECORD_FUNCTION("vision::_roi_align_backward", std::vector<c10::IValue>({grad_output, rois}));
#ifdef VISION_WITH_CUDA
  if (grad_output.is_cuda()) return RoIAlignBackwardCuda(grad_output, rois, input_sizes, g);
#endif
  return AT_DISPATCH_FLOATING_TYPES(grad_output.scalar_type(), "RoIAlignBackward", [&] {
    return BackwardCpu<scalar_t>(grad_output, rois, input_sizes, g);
  });
}

void SaveGeometry(AutogradContext* ctx, const RoIAlignGeometry& g) {
  ctx->saved_data["output_height"] = g.output_height;
  ctx->saved_data["output_width"] = g.output_width;
  ctx->saved_data["spatial_scale"] = g.spatial_scale;
  ctx->saved_data["sampling_ratio"] = g.sampling_ratio;
  ctx->saved_data["aligned"] = g.aligned;
}

RoIAlignGeometry LoadGeometry(AutogradContext* ctx) {
  return {ctx->saved_data["output_height"].toInt(), ctx->saved_data["output_width"].toInt(),
          ctx->saved_data["spatial_scale"].toDouble(), ctx->saved_data["sampling_ratio"].toInt(),
          ctx->saved_data["aligned"].toBool()};
}

// RoIAlign is linear in its input, so its backward is the adjoint map and the backward of that
// is RoIAlign again: double backward (gradient penalties, Hessian-vector products) stays exact.
class RoIAlignBackwardFunction : public torch::autograd::Function<RoIAlignBackwardFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& grad_output,
                            const at::Tensor& rois, std::vector<int64_t> input_sizes,
                            RoIAlignGeometry g);
  static variable_list backward(AutogradContext* ctx, variable_list grad_grad_input);
};

class RoIAlignFunction : public torch::autograd::Function<RoIAlignFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& rois,
                            RoIAlignGeometry g) {
    ctx->save_for_backward({rois});
    ctx->saved_data["input_sizes"] = input.sizes();
    SaveGeometry(ctx, g);
    return Forward(input, rois, g);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_output) {
    const at::Tensor rois = ctx->get_saved_variables()[0];
    const at::Tensor grad_input = RoIAlignBackwardFunction::apply(
        grad_output[0].contiguous(), rois, ctx->saved_data["input_sizes"].toIntVector(),
        LoadGeometry(ctx));
    return {grad_input, at::Tensor(), at::Tensor()};
  }
};

at::Tensor RoIAlignBackwardFunction::forward(AutogradContext* ctx, const at::Tensor& grad_output,
                                             const at::Tensor& rois,
                                             std::vector<int64_t> input_sizes, RoIAlignGeometry g) {
  ctx->save_for_backward({rois});
  SaveGeometry(ctx, g);
  return Backward(grad_output, rois, input_sizes, g);
}

variable_list RoIAlignBackwardFunction::backward(AutogradContext* ctx,
                                                 variable_list grad_grad_input) {
  const at::Tensor rois = ctx->get_saved_variables()[0];
  return {RoIAlignFunction::apply(grad_grad_input[0].contiguous(), rois, LoadGeometry(ctx)),
          at::Tensor(), at::Tensor(), at::Tensor()};
}

at::Tensor ComputableType(const at::Tensor& t) {
  const bool reduced = t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
  return reduced ? t.to(at::kFloat) : t;
}

void CheckArguments(const at::Tensor& input, const at::Tensor& rois,
                    const RoIAlignOptions& options) {
  TORCH_CHECK(input.dim() == 4, "RoIAlign: input must be [B, C, H, W], got ", input.sizes());
  TORCH_CHECK(input.size(2) > 0 && input.size(3) > 0,
              "RoIAlign: input must have a non-empty H x W map, got ", input.sizes());
  TORCH_CHECK(rois.dim() == 2 && rois.size(1) == 5,
              "RoIAlign: rois must be [K, 5] (batch index, x1, y1, x2, y2), got ", rois.sizes());
  TORCH_CHECK(input.device() == rois.device(), "RoIAlign: input is on ", input.device(),
              " but rois on ", rois.device());
  TORCH_CHECK(input.is_cpu() || input.is_cuda(), "RoIAlign: input on ", input.device(),
              " is not supported: CPU, and CUDA in a CUDA build, are");
  TORCH_CHECK(at::isFloatingType(input.scalar_type()),
              "RoIAlign: input must be floating point, got ", input.scalar_type());
  TORCH_CHECK(at::isFloatingType(rois.scalar_type()), "RoIAlign: rois must be floating point, got ",
              rois.scalar_type());
  TORCH_CHECK(options.output_height() > 0 && options.output_width() > 0,
              "RoIAlign: output size must be positive, got ", options.output_height(), "x",
              options.output_width());
  TORCH_CHECK(std::isfinite(options.spatial_scale()) && options.spatial_scale() > 0,
              "RoIAlign: spatial_scale must be positive and finite, got ", options.spatial_scale());
  if (rois.size(0) == 0) return;
  // One device-to-host copy for both checks; a bad batch index would read outside input.
  const at::Tensor batch = rois.select(1, 0);
  const at::Tensor bad = at::stack({at::isfinite(rois).all().logical_not(),
                                    ((batch < 0) | (batch >= input.size(0))).any()})
                             .cpu();
  TORCH_CHECK(!bad[0].item<bool>(), "RoIAlign: rois contain NaN or infinite values");
  TORCH_CHECK(!bad[1].item<bool>(), "RoIAlign: rois[:, 0] must hold batch indices in [0, ",
              input.size(0), ") (the batch size of input)");
}

}  // namespace

at::Tensor RoIAlign(const at::Tensor& input, const at::Tensor& rois,
                    const RoIAlignOptions& options) {
  CheckArguments(input, rois, options);
  const at::Tensor computable_input = ComputableType(input);
  const at::Tensor computable_rois = ComputableType(rois);
  TORCH_CHECK(computable_input.scalar_type() == computable_rois.scalar_type(),
              "RoIAlign: rois are ", rois.scalar_type(), " but input is ", input.scalar_type(),
              "; convert rois to the input's dtype");
  const RoIAlignGeometry geometry{options.output_height(), options.output_width(),
                                  options.spatial_scale(), options.sampling_ratio(),
                                  options.aligned()};
  // The CPU forward takes channels-last inputs as they are (e.g. a channels-last backbone's).
  const bool channels_last =
      computable_input.device().is_cpu() &&
      computable_input.is_contiguous(at::MemoryFormat::ChannelsLast);
  return RoIAlignFunction::apply(
             channels_last ? computable_input : computable_input.contiguous(),
             computable_rois.contiguous(), geometry)
      .to(input.scalar_type());
}

}  // namespace vision::models::ops
