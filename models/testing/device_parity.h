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

// The models' ChannelsLast cases: a CPU float32 copy of `reference` (made by `copy_of`) and a
// copy on `device` made channels-last with its batch (ToChannelsLast) take one training step
// each on `batch`, compared by `compare_steps`, then make predictions, compared by
// `compare_predictions` (expected model and batch first).
template <typename Model>
void CompareChannelsLast(
    const Model& reference, const core::Batch& batch, const c10::Device& device,
    const std::function<std::unique_ptr<Model>(const Model&, const c10::Device&, at::ScalarType)>&
        copy_of,
    const std::function<void(const StepResult&, const StepResult&)>& compare_steps,
    const std::function<void(Model&, const core::Batch&, Model&, const core::Batch&)>&
        compare_predictions) {
  std::unique_ptr<Model> plain = copy_of(reference, at::kCPU, at::kFloat);
  std::unique_ptr<Model> nhwc = copy_of(reference, device, at::kFloat);
  ASSERT_TRUE(plain && nhwc);
  core::Batch nhwc_batch = BatchOn(batch, device, at::kFloat);
  ASSERT_TRUE(ToChannelsLast(*nhwc, &nhwc_batch));
  compare_steps(LossesAndGradients(*plain, batch), LossesAndGradients(*nhwc, nhwc_batch));
  compare_predictions(*plain, batch, *nhwc, nhwc_batch);
}

// The models' Winograd cases (TrainPipelineConfig.cpu_convolution, models/ops/winograd_conv.h):
// two CPU copies of `reference` in `dtype` (made by `copy_of`) take one training step each on
// `batch`, one with ATen's convolutions and one with core::CpuConvolution::kWinograd, compared
// by `compare_steps`; then each makes its predictions under its own setting, compared by
// `compare_predictions` (ATen's first).
template <typename Model, typename Predictions>
void CompareWinograd(
    const Model& reference, const core::Batch& batch, at::ScalarType dtype,
    const std::function<std::unique_ptr<Model>(const Model&, const c10::Device&, at::ScalarType)>&
        copy_of,
    const std::function<void(const StepResult&, const StepResult&)>& compare_steps,
    const std::function<Predictions(Model&, const core::Batch&)>& predict,
    const std::function<void(const Predictions&, const Predictions&)>& compare_predictions) {
  std::unique_ptr<Model> aten = copy_of(reference, at::kCPU, dtype);
  std::unique_ptr<Model> winograd = copy_of(reference, at::kCPU, dtype);
  ASSERT_TRUE(aten && winograd);
  const core::Batch typed = BatchOn(batch, at::kCPU, dtype);
  const StepResult expected = LossesAndGradients(*aten, typed);
  const Predictions expected_predictions = predict(*aten, typed);
  core::ScopedCpuConvolution algorithm(core::CpuConvolution::kWinograd);
  compare_steps(expected, LossesAndGradients(*winograd, typed));
  compare_predictions(expected_predictions, predict(*winograd, typed));
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

}  // namespace vision::models::testing

#endif  // VISION_MODELS_TESTING_DEVICE_PARITY_H_
