// RAII mixed-precision scope: autocast on for the device type while alive. CPU supports
// bfloat16; CUDA float16 or bfloat16.
#ifndef VISION_ENGINE_AUTOCAST_H_
#define VISION_ENGINE_AUTOCAST_H_

#include <ATen/autocast_mode.h>
#include <c10/core/Device.h>

namespace vision::engine {

class AutocastScope {
 public:
  AutocastScope(bool enabled, c10::DeviceType device, at::ScalarType dtype)
      : enabled_(enabled), device_(device) {
    if (!enabled_) return;
    at::autocast::set_autocast_dtype(device_, dtype);
    at::autocast::set_autocast_enabled(device_, true);
  }
  ~AutocastScope() {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(device_, false);
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
