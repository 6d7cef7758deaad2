// The IoU threshold in the boxes' own type, shared by nms.cc and nms_cuda.cu.
#ifndef VISION_MODELS_OPS_NMS_THRESHOLD_H_
#define VISION_MODELS_OPS_NMS_THRESHOLD_H_

#include <cmath>
#include <limits>

namespace vision::models::ops {

// The largest T not above `threshold`: for any T value v, v > result exactly when
// double(v) > threshold. The IoU tests compare in T (four floats per SSE instruction on CPU,
// single precision on GPU) yet decide as torchvision's CPU kernel does, comparing float IoUs with
// the double threshold; CPU and CUDA then agree on every pair.
template <typename T>
T LargestNotAbove(double threshold) {
  if (threshold >= std::numeric_limits<T>::max()) return std::numeric_limits<T>::max();
  if (threshold < std::numeric_limits<T>::lowest()) return -std::numeric_limits<T>::infinity();
  const T t = static_cast<T>(threshold);
  return static_cast<double>(t) > threshold ? std::nextafter(t, std::numeric_limits<T>::lowest())
                                            : t;
}

}  // namespace vision::models::ops

#endif  // VISION_MODELS_OPS_NMS_THRESHOLD_H_
