// What the whole-model device tests share (models/*/*_cuda_test.cc): a CUDA copy of a CPU
// model, one training step's losses and named gradients on each, their comparison with a
// report that names the worst entry, and a few autocast training steps with the trainer's
// loss scaling.
//
// The tests compare CUDA with the CPU in float32 and in float64. Their tolerances come from
// measured rounding noise: the CPU's float32 against float64 on the same model and batch (each
// test states the multiple it allows); a CPU-only test in each file checks those measurements,
// so the comparison code runs here even where no GPU is.
#ifndef VISION_MODELS_TESTING_DEVICE_PARITY_H_
#define VISION_MODELS_TESTING_DEVICE_PARITY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <torch/nn/module.h>

#include "core/batch.h"
#include "core/cpu_convolution.h"
#include "core/model.h"
#include "gtest/gtest.h"

namespace vision::models::testing {

// Float32 on CUDA as IEEE float32: TF32 off for cuDNN convolutions (on by default) and cuBLAS
// matrix products, cuDNN's deterministic algorithms without autotuning. Process-wide; a no-op
// for the CPU. Reads the setting back through LibTorch's float32-precision API and fails the
// test when it did not take.
void UseIeeeFloat32OnCuda();

// Fills every parameter and buffer of `to` from the parameter or buffer of the same name and
// shape in `from` (another instance built from the same options, or one whose normalisation
// layers keep more state), converting to `to`'s device and dtypes; fails naming an entry that
// `from` lacks or has in another shape.
::testing::AssertionResult CopyState(const torch::nn::Module& from, torch::nn::Module& to);

// `batch` with every tensor on `device` and the floating-point ones (images, float target
// maps, boxes) in `float_type`; uint8 maps and integer tensors keep their types, image_sizes
// stays on the host.
core::Batch BatchOn(const core::Batch& batch, const c10::Device& device, at::ScalarType float_type);

// TrainPipelineConfig.memory_format's CHANNELS_LAST as the trainer applies it
// (engine/memory_format.h): `model`'s 4-D weights and buffers and `batch`'s images in
// channels-last layout. Fails when the model has no tensor to convert or the images are not
// channels-last afterwards.
::testing::AssertionResult ToChannelsLast(torch::nn::Module& model, core::Batch* batch);

// One training step without the optimizer: train mode, gradients cleared, the losses, their
// plain sum backward. Losses as 0-d float64 CPU tensors; the gradient of every parameter that
// requires one, float64 on the CPU (a parameter that got none is listed in `without_gradient`).
struct StepResult {
  std::map<std::string, at::Tensor> losses;
  std::map<std::string, at::ScalarType> loss_types;  // as computed
  std::map<std::string, at::Tensor> gradients;
  std::vector<std::string> without_gradient;
};
// The losses that `losses` computes (e.g. a test's own float64 version of the model's losses).
StepResult GradientsOf(torch::nn::Module& model,
                       const std::function<std::map<std::string, at::Tensor>()>& losses);
// model.Losses(batch).
StepResult LossesAndGradients(core::Model& model, const core::Batch& batch);

// What a model's device test tells the checks that every model runs (below): its fixed
// weights and batch, how to copy the weights to a device and float type, how to compare two
// training steps at a float type's tolerances and two sets of predictions (the tolerances
// divided by `divisor`), and how to predict. `noise_margin` is the factor between a
// tolerance and the CPU's own float32 noise that the test measures.
template <typename Model, typename Predictions>
struct ModelChecks {
  const Model* reference = nullptr;
  const core::Batch* batch = nullptr;
  std::function<std::unique_ptr<Model>(const Model&, const c10::Device&, at::ScalarType)> copy_of;
  std::function<void(const StepResult& expected, const StepResult& seen, at::ScalarType dtype)>
      compare_steps;
  std::function<Predictions(Model&, const core::Batch&)> predict;
  std::function<void(const Predictions& expected, const Predictions& seen, double divisor)>
      compare_predictions;
  double noise_margin = 10;
};

// The CUDA cases: copies of the reference on the CPU and on `device` in `dtype` take one
// training step each, compared at `dtype`'s tolerances; in float32 they then make their
// predictions, compared at the full tolerances.
template <typename Model, typename Predictions>
void DeviceMatchesTheCpu(const ModelChecks<Model, Predictions>& checks, const c10::Device& device,
                         at::ScalarType dtype) {
  ASSERT_NE(checks.reference, nullptr);
  std::unique_ptr<Model> cpu = checks.copy_of(*checks.reference, at::kCPU, dtype);
  std::unique_ptr<Model> other = checks.copy_of(*checks.reference, device, dtype);
  ASSERT_TRUE(cpu && other);
  const core::Batch cpu_batch = BatchOn(*checks.batch, at::kCPU, dtype);
  const core::Batch device_batch = BatchOn(*checks.batch, device, dtype);
  checks.compare_steps(LossesAndGradients(*cpu, cpu_batch),
                       LossesAndGradients(*other, device_batch), dtype);
  if (dtype == at::kFloat) {
    checks.compare_predictions(checks.predict(*cpu, cpu_batch),
                               checks.predict(*other, device_batch), 1.0);
  }
}

// The ChannelsLast cases (TrainPipelineConfig.memory_format): a CPU float32 copy of the
// reference and a copy on `device` made channels-last with its batch (ToChannelsLast) take one
// training step each, then make their predictions, compared at the float32 tolerances.
template <typename Model, typename Predictions>
void ChannelsLastMatchesContiguous(const ModelChecks<Model, Predictions>& checks,
                                   const c10::Device& device) {
  ASSERT_NE(checks.reference, nullptr);
  std::unique_ptr<Model> plain = checks.copy_of(*checks.reference, at::kCPU, at::kFloat);
  std::unique_ptr<Model> nhwc = checks.copy_of(*checks.reference, device, at::kFloat);
  ASSERT_TRUE(plain && nhwc);
  core::Batch nhwc_batch = BatchOn(*checks.batch, device, at::kFloat);
  ASSERT_TRUE(ToChannelsLast(*nhwc, &nhwc_batch));
  checks.compare_steps(LossesAndGradients(*plain, *checks.batch),
                       LossesAndGradients(*nhwc, nhwc_batch), at::kFloat);
  checks.compare_predictions(checks.predict(*plain, *checks.batch),
                             checks.predict(*nhwc, nhwc_batch), 1.0);
}

// The Winograd cases (TrainPipelineConfig.cpu_convolution, models/ops/winograd_conv.h): two CPU
// copies of the reference in `dtype` take one training step each, one with ATen's convolutions
// and one with core::CpuConvolution::kWinograd, compared at `dtype`'s tolerances; then each
// makes its predictions under its own setting, compared at the full tolerances in float32 and
// at the noise margin's fraction of them in float64 (where the two differ by about 1e-13).
template <typename Model, typename Predictions>
void WinogradMatchesATen(const ModelChecks<Model, Predictions>& checks, at::ScalarType dtype) {
  ASSERT_NE(checks.reference, nullptr);
  std::unique_ptr<Model> aten = checks.copy_of(*checks.reference, at::kCPU, dtype);
  std::unique_ptr<Model> winograd = checks.copy_of(*checks.reference, at::kCPU, dtype);
  ASSERT_TRUE(aten && winograd);
  const core::Batch typed = BatchOn(*checks.batch, at::kCPU, dtype);
  const StepResult expected = LossesAndGradients(*aten, typed);
  const Predictions expected_predictions = checks.predict(*aten, typed);
  core::ScopedCpuConvolution algorithm(core::CpuConvolution::kWinograd);
  checks.compare_steps(expected, LossesAndGradients(*winograd, typed), dtype);
  checks.compare_predictions(expected_predictions, checks.predict(*winograd, typed),
                             dtype == at::kDouble ? checks.noise_margin : 1.0);
}

// Tolerances of a comparison, each relative to an entry's own scale (at least the
// comparison's floor): `max` bounds the largest elementwise difference against the largest
// |expected| element, `rms` the root-mean-square difference against the root-mean-square
// expected value. The first catches a local error, the second a small error spread over the
// entry, far below what one badly conditioned element (a sum that cancels) allows the first.
struct Tolerance {
  double max;
  double rms;
  Tolerance Divided(double divisor) const { return {max / divisor, rms / divisor}; }
};

// How far `seen` is from `expected` in one entry.
struct EntryDifference {
  std::string name;
  int64_t numel = 0;
  double relative_max = 0;  // +inf when seen has a NaN or infinity, or the shapes differ
  double relative_rms = 0;  // likewise
  double max_abs_difference = 0;
  double max_scale = 0;
  double rms_difference = 0;
  double rms_scale = 0;
  std::vector<int64_t> where;  // index of the largest difference
  double expected = 0;
  double seen = 0;
  std::string problem;  // set when the entry could not be compared
};

class Comparison {
 public:
  // Entries in both maps are compared; a name in only one of them is a problem entry.
  // `floor` keeps an entry whose expected values are all (nearly) zero from dividing by them.
  Comparison(const std::map<std::string, at::Tensor>& expected,
             const std::map<std::string, at::Tensor>& seen, double floor);

  const std::vector<EntryDifference>& entries() const { return entries_; }
  // The largest relative differences over the entries, and their names: what a noise
  // measurement records.
  std::string Summary() const;
  // The `top` entries that come nearest their tolerance, one a line, with expected and seen at
  // the largest difference.
  std::string Report(const Tolerance& tolerance, int top = 5) const;
  // Success when every entry is within `tolerance`; otherwise names the worst ones.
  ::testing::AssertionResult Within(const Tolerance& tolerance, const std::string& what) const;

 private:
  std::vector<EntryDifference> entries_;
};

// The largest max |t| over the tensors: the scale for a floor relative to the whole model.
double LargestMagnitude(const std::map<std::string, at::Tensor>& tensors);

// One training step's comparison (gtest expectations): `expected` has a gradient for every
// parameter, `loss_count` losses and a gradient for each of `required_gradients` (named
// parameters in every part of the network); losses within `loss_tolerance` (no floor) and
// gradients within `gradient_tolerance` with a floor of `gradient_floor` times the largest
// expected gradient. Prints both comparisons' summaries and reports.
void CompareSteps(const StepResult& expected, const StepResult& seen,
                  const Tolerance& loss_tolerance, const Tolerance& gradient_tolerance,
                  double gradient_floor, size_t loss_count,
                  const std::vector<std::string>& required_gradients);

// A ModelChecks::compare_steps: `compare` (a test's own CompareSteps with its floor and
// required gradients) at the float32 or the float64 tolerances, by the steps' float type.
using StepComparison = void (*)(const StepResult& expected, const StepResult& seen,
                                const Tolerance& loss_tolerance,
                                const Tolerance& gradient_tolerance);
std::function<void(const StepResult&, const StepResult&, at::ScalarType)> StepsWithin(
    StepComparison compare, const Tolerance& float32_loss, const Tolerance& float32_gradient,
    const Tolerance& float64_loss, const Tolerance& float64_gradient);

// Training steps under autocast as the trainer takes them (engine/trainer.cc): Losses under
// engine::AutocastScope, their float sum scaled by engine::LossScaler (enabled for float16,
// initial scale 65536; for bfloat16 it only checks finiteness), backward, unscale and check,
// then SGD (lr, no momentum) after clipping the gradient norm to `clip_grad_norm` when the
// gradients are finite; a non-finite step is skipped and the scale backs off.
struct MixedPrecisionOptions {
  at::ScalarType dtype = at::kHalf;
  int finite_steps = 3;  // steps to take
  int max_skipped = 24;  // non-finite steps allowed in all before giving up
  double lr = 1e-3;
  double clip_grad_norm = 10.0;
};
struct MixedPrecisionRun {
  int finite_steps = 0;
  int skipped_steps = 0;
  double final_scale = 1.0;
  // The unscaled gradients of the first finite step, before clipping (float64, CPU): taken at
  // the initial weights, as skipped steps change none.
  std::map<std::string, at::Tensor> first_gradients;
  // A line per step: scale, finite or not, loss terms.
  std::string log;
};
MixedPrecisionRun TrainWithAutocast(core::Model& model, const core::Batch& batch,
                                    const MixedPrecisionOptions& options);

// sum(a * b) / (|a| |b|) over all entries present in both maps, as one vector.
double CosineSimilarity(const std::map<std::string, at::Tensor>& a,
                        const std::map<std::string, at::Tensor>& b);

// The models' autocast case (gtest expectations): `dtype` autocast training steps of `model` on
// `batch` (both on the GPU) reach MixedPrecisionOptions' finite steps, and the first finite
// step's gradients point as float32's do (cosine > 0.9). Prints the log and the scale reached.
void ExpectFiniteAutocastSteps(core::Model& model, const core::Batch& batch, at::ScalarType dtype);

// The same for a float32 copy of the checks' reference on `device` and its batch.
template <typename Model, typename Predictions>
void ExpectFiniteAutocastSteps(const ModelChecks<Model, Predictions>& checks,
                               const c10::Device& device, at::ScalarType dtype) {
  ASSERT_NE(checks.reference, nullptr);
  std::unique_ptr<Model> model = checks.copy_of(*checks.reference, device, at::kFloat);
  ASSERT_NE(model, nullptr);
  ExpectFiniteAutocastSteps(*model, BatchOn(*checks.batch, device, at::kFloat), dtype);
}

}  // namespace vision::models::testing

#endif  // VISION_MODELS_TESTING_DEVICE_PARITY_H_
