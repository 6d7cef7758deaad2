// Exponential moving average of a model's parameters (buffers are copied), used for
// evaluation when enabled: ema = decay * ema + (1 - decay) * current after every step.
#ifndef VISION_ENGINE_EMA_H_
#define VISION_ENGINE_EMA_H_

#include <map>
#include <string>

#include <torch/nn/module.h>

namespace vision::engine {

class ModelEma {
 public:
  ModelEma(const torch::nn::Module& model, double decay);

  void Update(const torch::nn::Module& model);
  // Update, except that nothing changes where `skip` (a 0-dim tensor, on the model's device)
  // holds 1: decided on the device, for a step the optimizer may have skipped there
  // (core::Optimizer::StepUnless). Equal to Update up to float rounding where it is 0.
  void UpdateUnless(const torch::nn::Module& model, const at::Tensor& skip);

  // Swaps the averaged values into `model` (and back on the second call), so evaluation
  // can run on the EMA weights without a second copy of the network.
  void Swap(torch::nn::Module& model);

  double decay() const { return decay_; }
  const std::map<std::string, at::Tensor>& values() const { return values_; }
  std::map<std::string, at::Tensor>& mutable_values() { return values_; }

 private:
  double decay_;
  std::map<std::string, at::Tensor> values_;  // parameters and buffers by name
};

}  // namespace vision::engine

#endif  // VISION_ENGINE_EMA_H_
