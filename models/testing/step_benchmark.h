// What the models' training-step benchmarks share (models/dbnet:activation_memory_benchmark,
// models/danet:danet_step_benchmark; their Python peers share benchmarks/peer_step.py): the
// --device and --amp flags' parsing, the trainer's SGD step, per-phase timing without
// synchronising the device inside the steps, the count of host-device synchronisations, the
// caching allocator's peaks, and the profile of the operations that took the most time. The
// flags are the same on both sides, and so are the "summary:" line's keys, which
// benchmarks/gpu/run.sh reads.
#ifndef VISION_MODELS_TESTING_STEP_BENCHMARK_H_
#define VISION_MODELS_TESTING_STEP_BENCHMARK_H_

#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>
#include <torch/nn/module.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/optimizer.h"
#include "engine/loss_scaler.h"

namespace at::cuda {
struct CUDAGraph;
}  // namespace at::cuda

namespace vision::models::testing {

struct AmpMode {
  bool enabled = false;
  at::ScalarType dtype = at::kFloat;
};

// "none", "bf16" or "fp16".
absl::StatusOr<AmpMode> ParseAmp(const std::string& name);

// A benchmark's forward phase: the model's losses (`losses` calls it) under autocast as `amp`
// says, summed in float32 (the trainer's total with every weight 1).
at::Tensor LossUnderAutocast(const AmpMode& amp, c10::DeviceType device_type,
                             const std::function<std::map<std::string, at::Tensor>()>& losses);

// --cpu_convolution: "aten" or "winograd" (TrainPipelineConfig.cpu_convolution) sets
// core::SetCpuConvolution for the process; anything else is an error naming both.
absl::Status SetCpuConvolution(const std::string& name);

// "cpu", "cuda" or "cuda:N", checked against the devices this process sees (a CUDA device
// without an index becomes cuda:0).
absl::StatusOr<c10::Device> ParseDevice(const std::string& name);

// Waits for the device's queued work (nothing on the CPU).
void Synchronize(const c10::Device& device);

// The trainer's SGD for `model`, built as core/pipeline_builder.cc builds it (parameter groups
// of core/param_groups.h: no weight decay on norms and biases), with `implementation` one of
// auto, for_loop, foreach or fused.
absl::StatusOr<std::unique_ptr<core::Optimizer>> MakeSgd(const torch::nn::Module& model, double lr,
                                                         double momentum, double weight_decay,
                                                         const std::string& implementation,
                                                         c10::DeviceType device_type);

// The time each phase of a step takes. CUDA kernels run asynchronously, so there the marks are
// events on the current stream, read once after the loop: the device's time per phase without a
// synchronisation inside the steps that would change what is measured. On the CPU a phase is
// done when its call returns, and the wall clock measures it.
class PhaseTimer {
 public:
  PhaseTimer(const c10::Device& device, int phases);

  // At the start of each step and at the end of each of its phases.
  void Mark();

  // Mean milliseconds of each phase over the steps marked so far.
  std::vector<double> MeanMs() const;

 private:
  c10::Device device_;
  int phases_;
  std::optional<c10::Stream> stream_;
  std::vector<c10::Event> events_;
  std::vector<std::chrono::steady_clock::time_point> times_;
};

// Counts the host-device synchronisations of CUDA work while it lives (CUDA's sync debug mode
// in its warning setting, as torch.cuda.set_sync_debug_mode("warn") does, with each warning
// counted instead of printed): every copy to the host, .item(), nonzero and stream or device
// synchronisation. Does nothing on the CPU. One at a time.
class SyncCounter {
 public:
  explicit SyncCounter(const c10::Device& device);
  ~SyncCounter();
  SyncCounter(const SyncCounter&) = delete;
  SyncCounter& operator=(const SyncCounter&) = delete;

  int64_t count() const;
  // How many synchronisations each call site made (SyncSite of the backtrace taken at each),
  // most first.
  std::vector<std::pair<std::string, int64_t>> sites() const;

 private:
  class Handler;
  std::unique_ptr<Handler> handler_;
  std::optional<c10::WarningUtils::WarningHandlerGuard> guard_;
};

// Names the call site of a synchronisation from a symbolised backtrace (c10::get_backtrace's
// "frame #N: function + 0xOFFSET (...)" lines, innermost first): the outermost ATen operator
// called below this project's first frame, and that frame's function, as "item in
// vision::engine::LossScaler::UnscaleAndCheckFinite". Frames of c10, of this file and of the
// benchmarks' own step code are not the site; a warning replayed by the autograd engine after
// backward names "backward". Our frames have names only in binaries linked with -rdynamic
// (the benchmarks are); otherwise the site is the operator alone.
std::string SyncSite(const std::string& backtrace);

// " peak_allocated_mib=A peak_reserved_mib=R" of LibTorch's caching allocator on a CUDA
// `device`; empty on the CPU.
std::string DeviceMemorySummary(const c10::Device& device);

// What one benchmark measured, for its "summary:" line.
struct StepFigures {
  std::string amp;  // the --amp flag
  double images_per_second = 0;
  // forward, backward and (with an optimizer) optimizer ms per step.
  std::vector<double> phase_ms;
  // The --optimizer_implementation flag; empty without an optimizer.
  std::string optimizer_implementation;
  // Its scale is printed when it is enabled (fp16); may be null.
  const engine::LossScaler* scaler = nullptr;
  // Replays of a CapturedStep: phase_ms then holds the whole step's ms only.
  bool cuda_graph = false;
};

// Counts the host-device synchronisations of `sync_steps` more calls of `step` (CUDA), prints
// the "summary:" line (device, amp, images/s, ms per phase, optimizer, loss scale,
// synchronisations per step, peak allocator memory), a "sync site:" line per call site that
// synchronised (per step, most first), and then, with `profile_steps`, the
// profile of that many more steps (a profiler that cannot start costs only its list).
void ReportSteps(const c10::Device& device, const StepFigures& figures, int sync_steps,
                 int profile_steps, double step_ms, const std::function<void()>& step);

// A training step captured in a CUDA graph and replayed (the step benchmarks' --cuda_graph): a
// graph launches the step's kernels at once, without the host's per-kernel launch cost, which
// bounds a step whose kernels are short. `step` runs the forward pass with the losses, backward
// and the optimizer phase (engine/optimizer_step.h, with an optimizer that skips on the device,
// so no host synchronisation, which capture refuses) and returns the loss; it must not zero the
// gradients. Capture follows PyTorch's recipe (torch.cuda.graph): `warmup` eager steps on a
// side stream, each followed by zero_grad, then the gradients set to none, so that the captured
// backward allocates them in the graph's memory pool and each replay writes them anew; the
// autocast weight cache is off while capturing (its casts would be freed after it). The inputs
// are the tensors `step` reads: a replay reads them again, so new data is copied into them.
class CapturedStep {
 public:
  static absl::StatusOr<std::unique_ptr<CapturedStep>> Capture(
      const c10::Device& device, const std::function<at::Tensor()>& step,
      core::Optimizer& optimizer, int warmup);
  ~CapturedStep();

  // One training step: the captured kernels, on the current stream. loss() holds its loss.
  void Replay();
  const at::Tensor& loss() const { return loss_; }

 private:
  CapturedStep();
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
  at::Tensor loss_;
};

// The tensors a training step changes: the model's parameters and buffers and the optimizer's
// per-parameter state (SGD's momentum buffers).
std::vector<at::Tensor> TrainingStateTensors(const torch::nn::Module& model,
                                             core::Optimizer& optimizer);

// One replay (`replay`: a CapturedStep's Replay, returning its loss()) against one eager `step`
// from the same state: `state` (TrainingStateTensors) is copied aside, the eager step runs (after
// zeroing the gradients in place: the graph's own tensors), its loss and parameter update are
// kept, `state` is restored in place (the graph reads and writes those very tensors) and the
// replay runs. Returns a line with both losses and the difference of the two updates relative
// to the eager update's norm; an error with that line when either differs by more than
// `tolerance` (a graph that misses, repeats or reuses stale work differs by about 1), or when
// the eager step changed nothing.
absl::StatusOr<std::string> CheckReplayAgainstEager(const std::function<at::Tensor()>& replay,
                                                    const std::function<at::Tensor()>& step,
                                                    core::Optimizer& optimizer,
                                                    const std::vector<at::Tensor>& params,
                                                    const std::vector<at::Tensor>& state,
                                                    double tolerance);

// The step benchmarks' --cuda_graph: captures `step` (CapturedStep::Capture with `warmup`
// eager steps), checks one replay against one eager step (CheckReplayAgainstEager, tolerance
// 1e-2), prints that line, times `steps` replays and reports them as ReportSteps does (the
// "summary:" line with step_ms and cuda_graph=1; synchronisations and the profile of replays).
// Returns the process's exit status: 1, with the reason printed, when capture or the check fails.
int RunCapturedSteps(const c10::Device& device, const std::function<at::Tensor()>& step,
                     const torch::nn::Module& model, core::Optimizer& optimizer, int batch,
                     int steps, int warmup, StepFigures figures, int sync_steps, int profile_steps);

// Runs `step` `steps` times under the profiler and prints the operations that took the most
// time: CUDA kernels and copies on a GPU (with the share of the `step_ms` step the device was
// busy, which tells launch-bound from compute-bound), operators on the CPU (inclusive of the
// operators they call).
void Profile(const c10::Device& device, int steps, double step_ms,
             const std::function<void()>& step);

}  // namespace vision::models::testing

#endif  // VISION_MODELS_TESTING_STEP_BENCHMARK_H_
