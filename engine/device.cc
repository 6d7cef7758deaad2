#include "engine/device.h"

#include <ATen/Context.h>
#include <torch/cuda.h>
#include <torch/version.h>

#ifdef VISION_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/cpu_convolution.h"

namespace vision::engine {

std::optional<double> PeakDeviceMemoryMiB(const c10::Device& device) {
#ifdef VISION_WITH_CUDA
  if (device.is_cuda()) {
    const c10::DeviceIndex index =
        device.has_index() ? device.index() : c10::cuda::current_device();
    const c10::CachingDeviceAllocator::DeviceStats stats =
        c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    const size_t aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    return static_cast<double>(stats.allocated_bytes[aggregate].peak) / (1 << 20);
  }
#endif
  (void)device;
  return std::nullopt;
}

std::string BuildDescription() {
#ifdef VISION_WITH_CUDA
  return absl::StrCat("LibTorch ", TORCH_VERSION, " with CUDA ", CUDART_VERSION / 1000, ".",
                      CUDART_VERSION % 1000 / 10);
#else
  return absl::StrCat("LibTorch ", TORCH_VERSION, ", CPU only");
#endif
}

absl::StatusOr<c10::Device> ResolveDevice(const std::string& name, int local_rank) {
  if (name == "cpu") return c10::Device(c10::DeviceType::CPU);
  int index = local_rank;
  if (name != "cuda") {
    if (name.rfind("cuda:", 0) != 0 || !absl::SimpleAtoi(name.substr(5), &index) || index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("device \"", name, "\": use \"cpu\", \"cuda\" or \"cuda:N\""));
    }
  }
#ifdef VISION_WITH_CUDA
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  if (count == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device \"", name, "\": this build (", BuildDescription(),
        ") can use CUDA, but no CUDA device is visible on this machine (no GPU, no driver, or "
        "CUDA_VISIBLE_DEVICES hides them). Use device: \"cpu\" (--override='device: \"cpu\"')"));
  }
  if (index >= count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device \"", name, "\" means GPU ", index,
        name == "cuda" ? " (one GPU per process: LOCAL_RANK)" : "", ", but this machine shows ",
        count, " CUDA device(s). Start at most ", count,
        " processes per node (--nproc_per_node) or check CUDA_VISIBLE_DEVICES"));
  }
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
  return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
#else
  return absl::FailedPreconditionError(absl::StrCat(
      "device \"", name, "\": this build (", BuildDescription(),
      ") has no CUDA. Use device: \"cpu\", or build against a LibTorch with CUDA (the default "
      "torch wheel of tools/setup.sh, or --repo_env=LIBTORCH_HOME; see README)"));
#endif
}

void ConfigureDevice(const c10::Device& device, const core::TrainPipelineConfig& config) {
  if (device.is_cuda()) at::globalContext().setBenchmarkCuDNN(config.cudnn_benchmark());
  core::SetCpuConvolution(config.cpu_convolution() == core::TrainPipelineConfig::WINOGRAD
                              ? core::CpuConvolution::kWinograd
                              : core::CpuConvolution::kATen);
}

}  // namespace vision::engine
