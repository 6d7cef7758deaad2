#include "core/cpu_convolution.h"

#include <atomic>

namespace vision::core {
namespace {

std::atomic<CpuConvolution>& Setting() {
  static std::atomic<CpuConvolution> setting{CpuConvolution::kATen};
  return setting;
}

}  // namespace

void SetCpuConvolution(CpuConvolution algorithm) {
  Setting().store(algorithm, std::memory_order_relaxed);
}

CpuConvolution GetCpuConvolution() { return Setting().load(std::memory_order_relaxed); }

}  // namespace vision::core
