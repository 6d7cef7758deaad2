#include "models/ops/winograd_conv.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>

#include "core/cpu_convolution.h"

namespace vision::models::ops {
namespace {

// F(4x4, 3x3) with interpolation points 0, 1, -1, 2, -2 and infinity (Lavin and Gray, 2016).
constexpr int64_t kTile = 4;   // output tile side
constexpr int64_t kAlpha = 6;  // transformed tile side: kTile + 3 - 1
constexpr int64_t kPoints = kAlpha * kAlpha;

// The 1-D transforms, each applied to whole rows of tiles at once (n elements per row) so the
// compiler vectorises them; `__restrict__` promises the rows do not overlap.
//
// B^T d: the input transform.
template <typename T>
void InputTransform(const T* __restrict__ d0, const T* __restrict__ d1, const T* __restrict__ d2,
                    const T* __restrict__ d3, const T* __restrict__ d4, const T* __restrict__ d5,
                    T* __restrict__ o0, T* __restrict__ o1, T* __restrict__ o2, T* __restrict__ o3,
                    T* __restrict__ o4, T* __restrict__ o5, int64_t n) {
  for (int64_t x = 0; x < n; ++x) {
    const T a = d1[x], b = d2[x], c = d3[x], e = d4[x];
    o0[x] = T(4) * d0[x] - T(5) * b + e;
    o1[x] = e + c - T(4) * (a + b);
    o2[x] = e - c + T(4) * (a - b);
    o3[x] = e - b + T(2) * (c - a);
    o4[x] = e - b - T(2) * (c - a);
    o5[x] = T(4) * a - T(5) * c + d5[x];
  }
}

// A^T m: the output transform, 6 rows in, 4 out.
template <typename T>
void OutputTransform(const T* __restrict__ m0, const T* __restrict__ m1, const T* __restrict__ m2,
                     const T* __restrict__ m3, const T* __restrict__ m4, const T* __restrict__ m5,
                     T* __restrict__ o0, T* __restrict__ o1, T* __restrict__ o2, T* __restrict__ o3,
                     int64_t n) {
  for (int64_t x = 0; x < n; ++x) {
    const T sum12 = m1[x] + m2[x], diff12 = m1[x] - m2[x];
    const T sum34 = m3[x] + m4[x], diff34 = m3[x] - m4[x];
    o0[x] = m0[x] + sum12 + sum34;
    o1[x] = diff12 + T(2) * diff34;
    o2[x] = sum12 + T(4) * sum34;
    o3[x] = diff12 + T(8) * diff34 + m5[x];
  }
}

// A o: the adjoint of the output transform, 4 rows in, 6 out.
template <typename T>
void OutputTransformAdjoint(const T* __restrict__ d0, const T* __restrict__ d1,
                            const T* __restrict__ d2, const T* __restrict__ d3, T* __restrict__ o0,
                            T* __restrict__ o1, T* __restrict__ o2, T* __restrict__ o3,
                            T* __restrict__ o4, T* __restrict__ o5, int64_t n) {
  for (int64_t x = 0; x < n; ++x) {
    const T even = d0[x] + d2[x], odd = d1[x] + d3[x];
    const T even4 = d0[x] + T(4) * d2[x], odd8 = T(2) * d1[x] + T(8) * d3[x];
    o0[x] = d0[x];
    o1[x] = even + odd;
    o2[x] = even - odd;
    o3[x] = even4 + odd8;
    o4[x] = even4 - odd8;
    o5[x] = d3[x];
  }
}

// The tiling of an [N, C, H, W] layer: tile (n, ty, tx) covers output rows 4 ty .. 4 ty + 3 and
// columns 4 tx .. 4 tx + 3 and is column n * rows * cols + ty * cols + tx of the transformed
// matrices.
struct Tiling {
  int64_t batch, height, width, rows, cols;
  int64_t tiles() const { return batch * rows * cols; }
};

Tiling TilingOf(const at::Tensor& t) {
  const int64_t height = t.size(2), width = t.size(3);
  return {t.size(0), height, width, (height + kTile - 1) / kTile, (width + kTile - 1) / kTile};
}

// The 36 matrices of a transformed layer, [36, rows, tiles], each contiguous, placed 64 bytes
// past a multiple of 4 KiB apart: with power-of-two channel counts the 36 rows a transform
// reads or writes at once would otherwise fall in the same L1 cache sets (4K aliasing), which
// made the transforms several times slower.
at::Tensor PointMatrices(int64_t rows, int64_t tiles, const at::TensorOptions& options) {
  const int64_t matrix = rows * tiles;
  const int64_t stride = (matrix + 1023) / 1024 * 1024 + 16;  // in elements; 16 floats = 64 B
  return at::empty({kPoints * stride}, options)
      .as_strided({kPoints, rows, tiles}, {stride, tiles, 1});
}

// out[p] = a[p] b[p] for the 36 points, each product into its own matrix of `out`.
void PointProducts(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  for (int64_t p = 0; p < kPoints; ++p) {
    at::Tensor o = out.select(0, p);
    at::mm_out(o, a.select(0, p), b.select(0, p));
  }
}

// V[36, C, tiles] = B^T d B for every 6x6 input patch d (padding 1 read as zeros).
template <typename T>
at::Tensor TransformInput(const at::Tensor& input, const Tiling& g) {
  const int64_t channels = input.size(1);
  const int64_t tiles = g.tiles();
  at::Tensor v = PointMatrices(channels, tiles, input.options());
  const T* in = input.data_ptr<T>();
  T* out = v.data_ptr<T>();
  const int64_t point_stride = v.stride(0);
  // Columns in phase layout: the padded column 4 tx + p (input column 4 tx + p - 1) is at
  // p * len + tx, so the 6 columns of tile tx are phases 0..3 at tx and phases 0..1 at tx + 1.
  const int64_t len = g.cols + 1;
  at::parallel_for(0, g.batch * channels, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> rows(kAlpha * kTile * len, T(0));  // 6 input rows in phase layout
    std::vector<T> half(kAlpha * kTile * len, T(0));  // B^T applied down the columns
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t n = plane / channels, c = plane % channels;
      const T* src = in + plane * g.height * g.width;
      for (int64_t ty = 0; ty < g.rows; ++ty) {
        for (int64_t k = 0; k < kAlpha; ++k) {
          T* row = rows.data() + k * kTile * len;
          const int64_t y = ty * kTile + k - 1;
          if (y < 0 || y >= g.height) {
            std::fill(row, row + kTile * len, T(0));
            continue;
          }
          const T* line = src + y * g.width;
          const int64_t padded = kTile * g.cols + 2;
          for (int64_t xp = 0; xp < padded; ++xp) {
            const int64_t x = xp - 1;
            row[(xp & 3) * len + (xp >> 2)] = (x >= 0 && x < g.width) ? line[x] : T(0);
          }
        }
        const int64_t w = kTile * len;
        const T* r = rows.data();
        T* h = half.data();
        InputTransform(r, r + w, r + 2 * w, r + 3 * w, r + 4 * w, r + 5 * w, h, h + w, h + 2 * w,
                       h + 3 * w, h + 4 * w, h + 5 * w, w);
        T* dst = out + c * tiles + (n * g.rows + ty) * g.cols;
        for (int64_t i = 0; i < kAlpha; ++i) {
          const T* s = half.data() + i * w;
          T* o = dst + i * kAlpha * point_stride;
          InputTransform(s, s + len, s + 2 * len, s + 3 * len, s + 1, s + len + 1, o,
                         o + point_stride, o + 2 * point_stride, o + 3 * point_stride,
                         o + 4 * point_stride, o + 5 * point_stride, g.cols);
        }
      }
    }
  });
  return v;
}

// Y[N, K, H, W] from M[36, K, tiles]: A^T m A for every tile, cropped to H x W.
template <typename T>
at::Tensor TransformOutput(const at::Tensor& m, const Tiling& g) {
  const int64_t channels = m.size(1);
  const int64_t tiles = g.tiles();
  at::Tensor y = at::empty({g.batch, channels, g.height, g.width}, m.options());
  const T* in = m.data_ptr<T>();
  T* out = y.data_ptr<T>();
  const int64_t point_stride = m.stride(0);
  const int64_t len = g.cols;
  at::parallel_for(0, g.batch * channels, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> half(kAlpha * kTile * len);  // [i][q][tx]: A^T applied along the rows
    std::vector<T> tile(kTile * kTile * len);   // [p][q][tx]
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t n = plane / channels, k = plane % channels;
      T* dst = out + plane * g.height * g.width;
      for (int64_t ty = 0; ty < g.rows; ++ty) {
        const T* src = in + k * tiles + (n * g.rows + ty) * g.cols;
        for (int64_t i = 0; i < kAlpha; ++i) {
          const T* s = src + i * kAlpha * point_stride;
          T* h = half.data() + i * kTile * len;
          OutputTransform(s, s + point_stride, s + 2 * point_stride, s + 3 * point_stride,
                          s + 4 * point_stride, s + 5 * point_stride, h, h + len, h + 2 * len,
                          h + 3 * len, len);
        }
        const int64_t w = kTile * len;
        const T* h = half.data();
        T* t = tile.data();
        OutputTransform(h, h + w, h + 2 * w, h + 3 * w, h + 4 * w, h + 5 * w, t, t + w, t + 2 * w,
                        t + 3 * w, w);
        for (int64_t p = 0; p < kTile && ty * kTile + p < g.height; ++p) {
          T* line = dst + (ty * kTile + p) * g.width;
          const T* row = tile.data() + p * w;
          for (int64_t x = 0; x < g.width; ++x) line[x] = row[(x & 3) * len + (x >> 2)];
        }
      }
    }
  });
  return y;
}

// dM[36, K, tiles] = A dY A^T for every 4x4 tile of dY[N, K, H, W] (zero beyond H x W): the
// adjoint of TransformOutput.
template <typename T>
at::Tensor TransformOutputAdjoint(const at::Tensor& grad, const Tiling& g) {
  const int64_t channels = grad.size(1);
  const int64_t tiles = g.tiles();
  at::Tensor dm = PointMatrices(channels, tiles, grad.options());
  const T* in = grad.data_ptr<T>();
  T* out = dm.data_ptr<T>();
  const int64_t point_stride = dm.stride(0);
  const int64_t len = g.cols;
  at::parallel_for(0, g.batch * channels, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> tile(kTile * kTile * len);   // [p][q][tx]
    std::vector<T> half(kAlpha * kTile * len);  // [i][q][tx]
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t n = plane / channels, k = plane % channels;
      const T* src = in + plane * g.height * g.width;
      for (int64_t ty = 0; ty < g.rows; ++ty) {
        const int64_t w = kTile * len;
        std::fill(tile.begin(), tile.end(), T(0));
        for (int64_t p = 0; p < kTile && ty * kTile + p < g.height; ++p) {
          const T* line = src + (ty * kTile + p) * g.width;
          T* row = tile.data() + p * w;
          for (int64_t x = 0; x < g.width; ++x) row[(x & 3) * len + (x >> 2)] = line[x];
        }
        const T* t = tile.data();
        T* h = half.data();
        OutputTransformAdjoint(t, t + w, t + 2 * w, t + 3 * w, h, h + w, h + 2 * w, h + 3 * w,
                               h + 4 * w, h + 5 * w, w);
        T* dst = out + k * tiles + (n * g.rows + ty) * g.cols;
        for (int64_t i = 0; i < kAlpha; ++i) {
          const T* s = half.data() + i * w;
          T* o = dst + i * kAlpha * point_stride;
          OutputTransformAdjoint(s, s + len, s + 2 * len, s + 3 * len, o, o + point_stride,
                                 o + 2 * point_stride, o + 3 * point_stride, o + 4 * point_stride,
                                 o + 5 * point_stride, len);
        }
      }
    }
  });
  return dm;
}

// G (x) G [36, 9], G [6, 3] the filter transform's matrix: U = G g G^T is, for every filter
// flattened to 9 values, (G (x) G) g; one matrix product transforms a whole layer's filters.
at::Tensor FilterTransformMatrix(at::ScalarType type) {
  static const double kG[kAlpha][3] = {
      {1.0 / 4, 0.0, 0.0},           {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
      {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0.0, 0.0, 1.0}};
  at::Tensor kron = at::empty({kPoints, 9}, at::kDouble);
  double* k = kron.data_ptr<double>();
  for (int i = 0; i < kAlpha; ++i) {
    for (int j = 0; j < kAlpha; ++j) {
      for (int a = 0; a < 3; ++a) {
        for (int b = 0; b < 3; ++b) k[(i * kAlpha + j) * 9 + a * 3 + b] = kG[i][a] * kG[j][b];
      }
    }
  }
  return kron.to(type);
}

// U[36, K, C] = G g G^T for weight g [K, C, 3, 3].
at::Tensor TransformFilter(const at::Tensor& weight) {
  const int64_t out_channels = weight.size(0), in_channels = weight.size(1);
  return at::mm(FilterTransformMatrix(weight.scalar_type()),
                weight.reshape({out_channels * in_channels, 9}).t())
      .view({kPoints, out_channels, in_channels});
}

// dg[K, C, 3, 3] = G^T dU G for dU [36, K, C]: the adjoint of TransformFilter.
at::Tensor TransformFilterAdjoint(const at::Tensor& du) {
  const int64_t out_channels = du.size(1), in_channels = du.size(2);
  // [9, 36] x [36, K C] keeps the product wide (MKL is slow on [K C, 36] x [36, 9]).
  return at::mm(FilterTransformMatrix(du.scalar_type()).t(),
                du.reshape({kPoints, out_channels * in_channels}))
      .t()
      .contiguous()
      .view({out_channels, in_channels, 3, 3});
}

// The convolution itself, on contiguous input and weight of one floating type.
at::Tensor Convolve(const at::Tensor& input, const at::Tensor& weight) {
  const Tiling g = TilingOf(input);
  at::Tensor v, y;
  at::Tensor m = PointMatrices(weight.size(0), g.tiles(), input.options());
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "WinogradConvolve", [&] {
    v = TransformInput<scalar_t>(input, g);
    PointProducts(TransformFilter(weight), v, m);  // [36, K, tiles]
    y = TransformOutput<scalar_t>(m, g);
  });
  return y;
}

at::Tensor FilterGradient(const at::Tensor& input, const at::Tensor& grad) {
  const Tiling g = TilingOf(input);
  at::Tensor du = at::empty({kPoints, grad.size(1), input.size(1)}, input.options());
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "WinogradFilterGradient", [&] {
    const at::Tensor v = TransformInput<scalar_t>(input, g);
    const at::Tensor dm = TransformOutputAdjoint<scalar_t>(grad, g);
    PointProducts(dm, v.transpose(1, 2), du);  // [36, K, C]
  });
  return TransformFilterAdjoint(du);
}

// A 3x3 convolution dilated by (dh, dw) with padding (dh, dw) reads, for an output at row
// dh i + a, only input rows dh (i - 1) + a, dh i + a and dh (i + 1) + a: the input's row phase a
// alone, read as an undilated 3x3 convolution with padding 1. So the dilated layer is dh x dw
// undilated ones over the input's polyphase components, batched: Polyphase pads the input with
// zeros to whole multiples of the dilation (rows the convolution reads as padding anyway) and
// moves phase (a, b) to batch entry (n dh + a) dw + b; Unphase puts the results back and crops.
// The GEMMs see as many tiles as the undilated layer of the same size would.
at::Tensor Polyphase(const at::Tensor& x, int64_t dh, int64_t dw) {
  if (dh == 1 && dw == 1) return x;
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t hp = (h + dh - 1) / dh, wp = (w + dw - 1) / dw;
  const at::Tensor padded =
      hp * dh == h && wp * dw == w ? x : at::constant_pad_nd(x, {0, wp * dw - w, 0, hp * dh - h});
  return padded.view({n, c, hp, dh, wp, dw})
      .permute({0, 3, 5, 1, 2, 4})
      .contiguous()
      .view({n * dh * dw, c, hp, wp});
}

// The inverse of Polyphase for a [n dh dw, k, hp, wp] result, cropped to [n, k, h, w].
at::Tensor Unphase(const at::Tensor& y, int64_t dh, int64_t dw, int64_t h, int64_t w) {
  if (dh == 1 && dw == 1) return y;
  const int64_t k = y.size(1), hp = y.size(2), wp = y.size(3), n = y.size(0) / (dh * dw);
  return y.view({n, dh, dw, k, hp, wp})
      .permute({0, 3, 4, 1, 5, 2})
      .reshape({n, k, hp * dh, wp * dw})
      .slice(2, 0, h)
      .slice(3, 0, w)
      .contiguous();
}

// Saves the caller's input (not its polyphase copy, which backward rebuilds), so a dilated
// layer keeps no more activation memory than an undilated one.
class WinogradConv3x3Function : public torch::autograd::Function<WinogradConv3x3Function> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const at::Tensor& weight, int64_t dh, int64_t dw) {
    ctx->save_for_backward({input, weight});
    ctx->saved_data["dh"] = dh;
    ctx->saved_data["dw"] = dw;
    return Unphase(Convolve(Polyphase(input, dh, dw), weight), dh, dw, input.size(2),
                   input.size(3));
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& weight = saved[1];
    const int64_t dh = ctx->saved_data["dh"].toInt(), dw = ctx->saved_data["dw"].toInt();
    // Outputs in the padding Polyphase adds are cropped away, so their gradient is zero.
    const at::Tensor grad = Polyphase(grads[0].contiguous(), dh, dw);
    at::Tensor grad_input, grad_weight;
    if (ctx->needs_input_grad(0)) {
      // Correlating dY with the flipped, transposed filters is the transposed convolution.
      grad_input = Unphase(Convolve(grad, weight.flip({2, 3}).transpose(0, 1).contiguous()), dh, dw,
                           input.size(2), input.size(3));
    }
    if (ctx->needs_input_grad(1)) grad_weight = FilterGradient(Polyphase(input, dh, dw), grad);
    return {grad_input, grad_weight, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor WinogradConv3x3(const at::Tensor& input, const at::Tensor& weight,
                           std::array<int64_t, 2> dilation) {
  TORCH_CHECK(input.dim() == 4 && input.device().is_cpu() && input.is_contiguous(),
              "WinogradConv3x3: needs a contiguous CPU [N, C, H, W] input, got ", input.sizes(),
              " on ", input.device());
  TORCH_CHECK(input.scalar_type() == at::kFloat || input.scalar_type() == at::kDouble,
              "WinogradConv3x3: needs float or double input, got ", input.scalar_type());
  TORCH_CHECK(weight.dim() == 4 && weight.size(1) == input.size(1) && weight.size(2) == 3 &&
                  weight.size(3) == 3 && weight.scalar_type() == input.scalar_type() &&
                  weight.device().is_cpu(),
              "WinogradConv3x3: needs a [K, ", input.size(1), ", 3, 3] ", input.scalar_type(),
              " CPU weight, got ", weight.sizes(), " ", weight.scalar_type());
  TORCH_CHECK(dilation[0] >= 1 && dilation[1] >= 1, "WinogradConv3x3: dilation must be >= 1, got ",
              dilation[0], " x ", dilation[1]);
  return WinogradConv3x3Function::apply(input, weight.contiguous(), dilation[0], dilation[1]);
}

bool WinogradConv3x3Applies(const at::Tensor& input, const at::Tensor& weight, bool has_bias,
                            const torch::nn::detail::ConvNdOptions<2>& options) {
  const auto& kernel = *options.kernel_size();
  const auto& stride = *options.stride();
  const auto& dilation = *options.dilation();
  const auto* padding = std::get_if<torch::ExpandingArray<2>>(&options.padding());
  return !has_bias && options.groups() == 1 && kernel[0] == 3 && kernel[1] == 3 && stride[0] == 1 &&
         stride[1] == 1 && dilation[0] >= 1 && dilation[1] >= 1 && padding != nullptr &&
         (**padding)[0] == dilation[0] && (**padding)[1] == dilation[1] &&
         std::holds_alternative<torch::enumtype::kZeros>(options.padding_mode()) &&
         input.dim() == 4 && input.device().is_cpu() &&
         (input.scalar_type() == at::kFloat || input.scalar_type() == at::kDouble) &&
         input.is_contiguous() && input.numel() > 0 &&
         weight.scalar_type() == input.scalar_type() &&
         !at::autocast::is_autocast_enabled(at::kCPU);
}

double WinogradTileCoverage(int64_t height, int64_t width, std::array<int64_t, 2> dilation) {
  const int64_t hp = (height + dilation[0] - 1) / dilation[0];
  const int64_t wp = (width + dilation[1] - 1) / dilation[1];
  const auto whole_tiles = [](int64_t n) { return (n + kTile - 1) / kTile * kTile; };
  return static_cast<double>(hp * wp) / static_cast<double>(whole_tiles(hp) * whole_tiles(wp));
}

at::Tensor Conv2dImpl::forward(const at::Tensor& input) {
  if (core::GetCpuConvolution() == core::CpuConvolution::kWinograd &&
      WinogradConv3x3Applies(input, weight, bias.defined(), options)) {
    const auto& d = *options.dilation();
    if (WinogradTileCoverage(input.size(2), input.size(3), {d[0], d[1]}) >= kMinTileCoverage) {
      return WinogradConv3x3(input, weight, {d[0], d[1]});
    }
  }
  return torch::nn::Conv2dImpl::forward(input);
}

}  // namespace vision::models::ops
