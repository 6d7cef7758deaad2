// RoIAlign's sampling arithmetic, shared by the CPU code (roi_align.cc) and the CUDA kernels
// (roi_align_cuda.cu) so both follow torchvision's expressions, operand order included, and agree
// with it to float rounding.
#ifndef VISION_MODELS_OPS_ROI_ALIGN_KERNEL_H_
#define VISION_MODELS_OPS_ROI_ALIGN_KERNEL_H_

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define VISION_HOST_DEVICE __host__ __device__
#else
#define VISION_HOST_DEVICE
#endif

namespace vision::models::ops {

// RoIAlignOptions as plain data that a kernel can take by value.
struct RoIAlignGeometry {
  int64_t output_height;
  int64_t output_width;
  double spatial_scale;
  int64_t sampling_ratio;
  bool aligned;
};

// One RoI's sampling grid: bin (ph, pw) averages grid_h x grid_w samples.
template <typename T>
struct RoIBins {
  int64_t batch;
  T start_y;
  T start_x;
  T bin_h;
  T bin_w;
  int64_t grid_h;
  int64_t grid_w;
  T count;
};

// roi: (batch index, x1, y1, x2, y2), finite, batch index already validated.
template <typename T>
VISION_HOST_DEVICE RoIBins<T> MakeRoIBins(const T* roi, const RoIAlignGeometry& g) {
  const T scale = static_cast<T>(g.spatial_scale);
  const T offset = g.aligned ? static_cast<T>(0.5) : static_cast<T>(0);
  RoIBins<T> bins;
  bins.batch = static_cast<int64_t>(roi[0]);
  bins.start_x = roi[1] * scale - offset;
  bins.start_y = roi[2] * scale - offset;
  T width = roi[3] * scale - offset - bins.start_x;
  T height = roi[4] * scale - offset - bins.start_y;
  // The original Mask R-CNN forces malformed RoIs to 1x1; aligned mode lets them be.
  if (!g.aligned) {
    if (width < 1) width = 1;
    if (height < 1) height = 1;
  }
  bins.bin_h = height / static_cast<T>(g.output_height);
  bins.bin_w = width / static_cast<T>(g.output_width);
  bins.grid_h = g.sampling_ratio > 0
                    ? g.sampling_ratio
                    : static_cast<int64_t>(ceil(height / static_cast<T>(g.output_height)));
  bins.grid_w = g.sampling_ratio > 0
                    ? g.sampling_ratio
                    : static_cast<int64_t>(ceil(width / static_cast<T>(g.output_width)));
  const int64_t samples = bins.grid_h * bins.grid_w;
  bins.count = static_cast<T>(samples > 1 ? samples : 1);
  return bins;
}

// Sample (iy, ix) of bin (ph, pw), in feature-map pixels.
template <typename T>
VISION_HOST_DEVICE T SampleY(const RoIBins<T>& bins, int64_t ph, int64_t iy) {
  return bins.start_y + ph * bins.bin_h +
         static_cast<T>(iy + .5f) * bins.bin_h / static_cast<T>(bins.grid_h);
}

template <typename T>
VISION_HOST_DEVICE T SampleX(const RoIBins<T>& bins, int64_t pw, int64_t ix) {
  return bins.start_x + pw * bins.bin_w +
         static_cast<T>(ix + .5f) * bins.bin_w / static_cast<T>(bins.grid_w);
}

// The four pixels (offsets into one H x W plane) a bilinear sample reads, and their weights.
template <typename T>
struct BilinearTaps {
  int64_t offset[4];
  T weight[4];
};

// False for a sample more than one pixel outside the map, which contributes zero; samples
// between -1 and 0 (or the last pixel and one beyond) clamp to the border pixel.
template <typename T>
VISION_HOST_DEVICE bool ComputeBilinearTaps(T y, T x, int64_t height, int64_t width,
                                            BilinearTaps<T>* taps) {
  if (y < -1.0 || y > height || x < -1.0 || x > width) return false;
  if (y <= 0) y = 0;
  if (x <= 0) x = 0;
  int64_t y_low = static_cast<int64_t>(y);
  int64_t x_low = static_cast<int64_t>(x);
  int64_t y_high;
  int64_t x_high;
  if (y_low >= height - 1) {
    y_high = y_low = height - 1;
    y = static_cast<T>(y_low);
  } else {
    y_high = y_low + 1;
  }
  if (x_low >= width - 1) {
    x_high = x_low = width - 1;
    x = static_cast<T>(x_low);
  } else {
    x_high = x_low + 1;
  }
  const T ly = y - y_low;
  const T lx = x - x_low;
  const T hy = static_cast<T>(1) - ly;
  const T hx = static_cast<T>(1) - lx;
  taps->offset[0] = y_low * width + x_low;
  taps->offset[1] = y_low * width + x_high;
  taps->offset[2] = y_high * width + x_low;
  taps->offset[3] = y_high * width + x_high;
  taps->weight[0] = hy * hx;
  taps->weight[1] = hy * lx;
  taps->weight[2] = ly * hx;
  taps->weight[3] = ly * lx;
  return true;
}

}  // namespace vision::models::ops

#endif  // VISION_MODELS_OPS_ROI_ALIGN_KERNEL_H_
