// RAII mixed-precision scope: autocast on for the device type while alive. CPU supports
// bfloat16; CUDA float16 or bfloat16. Isolates the LibTorch API change (2.4 moved to
// per-device-type setters).
#ifndef VISION_ENGINE_AUTOCAST_H_
#define VISION_ENGINE_AUTOCAST_H_

#include <ATen/autocast_mode.h>
#include <c10/core/Device.h>
#include <torch/version.h>

namespace vision::engine {

class AutocastScope {
 public:
  AutocastScope(bool enabled, c10::DeviceType device, at::ScalarType dtype)
      : enabled_(enabled), device_(device) {
    if (!enabled_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_dtype(device_, dtype);
    at::autocast::set_autocast_enabled(device_, true);
#else
    if (device_ == c10::DeviceType::CPU) {
      at::autocast::set_autocast_cpu_dtype(dtype);
      at::autocast::set_cpu_enabled(true);
    } else {
      at::autocast::set_autocast_gpu_dtype(dtype);
      at::autocast::set_enabled(true);
    }
#endif
  }
  ~AutocastScope() {
    if (!enabled_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(device_, false);
#else
    if (device_ == c10::DeviceType::CPU) {
      at::autocast::set_cpu_enabled(false);
    } else {
      at::autocast::set_enabled(false);
    }
#endif
    at::autocast::clear_cache();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool enabled_;
  c10::DeviceType device_;
};

}  // namespace vision::engine

#endif  // VISION_ENGINE_AUTOCAST_H_
