// The process-wide choice of CPU convolution algorithm (TrainPipelineConfig.cpu_convolution),
// a backend setting like PyTorch's torch.backends.cudnn.benchmark: the trainer, the evaluation
// job and inference set it once from the config; models read it when they convolve
// (models/ops/winograd_conv.h).
#ifndef VISION_CORE_CPU_CONVOLUTION_H_
#define VISION_CORE_CPU_CONVOLUTION_H_

namespace vision::core {

enum class CpuConvolution {
  kATen,      // ATen's choice (oneDNN, or im2col and GEMM): PyTorch's behaviour.
  kWinograd,  // 3x3 stride-1 float32 convolutions, dilated too, by Winograd F(4x4, 3x3) where
              // the maps fill its tiles (models/ops/winograd_conv.h); others as kATen.
};

void SetCpuConvolution(CpuConvolution algorithm);
CpuConvolution GetCpuConvolution();

// Sets the algorithm for its lifetime and restores the previous one (tests, benchmarks).
class ScopedCpuConvolution {
 public:
  explicit ScopedCpuConvolution(CpuConvolution algorithm) : previous_(GetCpuConvolution()) {
    SetCpuConvolution(algorithm);
  }
  ~ScopedCpuConvolution() { SetCpuConvolution(previous_); }
  ScopedCpuConvolution(const ScopedCpuConvolution&) = delete;
  ScopedCpuConvolution& operator=(const ScopedCpuConvolution&) = delete;

 private:
  CpuConvolution previous_;
};

}  // namespace vision::core

#endif  // VISION_CORE_CPU_CONVOLUTION_H_
