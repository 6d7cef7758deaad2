// Where a process computes: the config's `device` resolved against this build and machine.
#ifndef VISION_ENGINE_DEVICE_H_
#define VISION_ENGINE_DEVICE_H_

#include <optional>
#include <string>

#include <c10/core/Device.h>

#include "absl/status/statusor.h"
#include "core/config/pipeline.pb.h"

namespace vision::engine {

// "cpu", "cuda" (cuda:local_rank, one GPU per process of a node) or "cuda:N". A CUDA device is
// checked at start-up, not at the first kernel: a build without CUDA, a machine without a
// visible GPU, or an index past the GPUs present is an error that says which build and which
// device was asked for. On success a CUDA device becomes this process's current device (NCCL
// and the caching allocator use it).
absl::StatusOr<c10::Device> ResolveDevice(const std::string& name, int local_rank);

// Process-wide switches from `config` for `device`: cuDNN's algorithm search for convolutions
// when config.cudnn_benchmark (fastest for fixed input sizes; off gives run-to-run identical
// results), and the CPU convolution algorithm, config.cpu_convolution (core/cpu_convolution.h).
void ConfigureDevice(const c10::Device& device, const core::TrainPipelineConfig& config);

// The CUDA caching allocator's peak of allocated memory on `device` since the process started,
// in MiB (torch.cuda.max_memory_allocated, what detection trainers log as "memory"); nullopt
// for the CPU or a build without CUDA.
std::optional<double> PeakDeviceMemoryMiB(const c10::Device& device);

// "LibTorch 2.11.0 with CUDA 13.0" or "LibTorch 2.11.0, CPU only": what this binary links.
std::string BuildDescription();

}  // namespace vision::engine

#endif  // VISION_ENGINE_DEVICE_H_
