// SGD, Adam and AdamW whose step() can update a whole parameter group at once: with ATen's
// _foreach_* operators (torch.optim's foreach=True: a few kernels per group on CUDA), with its
// fused kernels (fused=True: one kernel per group), or with LibTorch's per-tensor loop.
//
// They are torch::optim::SGD, Adam and AdamW with step() overridden. Parameter groups, their
// options (which LR schedules change between steps), the per-parameter state (momentum_buffer;
// step, exp_avg, exp_avg_sq, max_exp_avg_sq) and save()/load() are the base class's, so a
// checkpoint is the same whichever implementation wrote it and resumes with any other.
// Parameters without a gradient are skipped, gradients are left as they are, and the results
// equal the loop's up to float rounding (see multi_tensor_test.cc for how closely).
#ifndef VISION_ENGINE_OPTIM_MULTI_TENSOR_H_
#define VISION_ENGINE_OPTIM_MULTI_TENSOR_H_

#include <string>
#include <vector>

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

namespace vision::engine::optim {

// OptimizerConfig.implementation (core/config/pipeline.proto) says what each one does.
enum class Implementation { kAuto, kForLoop, kForeach, kFused };
enum class Algorithm { kSgd, kAdam, kAdamW };

// "AUTO", "FOR_LOOP", "FOREACH", "FUSED": the config's names.
const char* ImplementationName(Implementation implementation);

// Empty when `implementation` steps `algorithm` correctly for parameters of `dtype` on
// `device_type`; otherwise what is wrong and what to use instead. FUSED runs on CPU and CUDA
// floating-point parameters, except SGD on float16/bfloat16 ones on the CPU, which torch
// 2.11's _fused_sgd_ leaves unchanged.
std::string UnsupportedReason(Algorithm algorithm, Implementation implementation,
                              c10::DeviceType device_type, c10::ScalarType dtype);

// kAuto resolved for these parameters where they are now: when all are on CUDA, kFused for SGD
// (one kernel per group, and a step skipped on the device: MultiTensorSGD::StepUnless) and
// kForeach for Adam and AdamW (whose fused kernels would read the step counts, kept on the host,
// from a copy made at every step); kForLoop otherwise. Other implementations are returned as
// they are.
Implementation Resolve(Implementation implementation, Algorithm algorithm,
                       const std::vector<torch::optim::OptimizerParamGroup>& groups);

class MultiTensorSGD : public torch::optim::SGD {
 public:
  MultiTensorSGD(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                 torch::optim::SGDOptions defaults, Implementation implementation);

  // Throws c10::Error when a parameter's device and dtype are ones UnsupportedReason refuses
  // (moved there after construction) or a gradient is sparse (FOREACH and FUSED).
  at::Tensor step(LossClosure closure = nullptr) override;

  // Whether StepUnless works here: the implementation resolves to kFused (the kernel takes the
  // flag) and every group's dampening is 0 (see FusedSgd in multi_tensor.cc).
  bool SkipsOnDevice() const;
  // step(), except that nothing changes (parameters, momentum buffers) where `skip`, a 0-dim
  // float32 tensor on the parameters' device, holds 1: the kernels read it on the device, so
  // the host never waits for it. Throws unless SkipsOnDevice().
  void StepUnless(const at::Tensor& skip);

  Implementation implementation() const { return implementation_; }

 private:
  const Implementation implementation_;
  at::Tensor skip_;  // set during StepUnless only
};

// Adam (Base = torch::optim::Adam) and AdamW (torch::optim::AdamW); defined for these two.
template <typename Base, typename BaseOptions>
class MultiTensorAdamT : public Base {
 public:
  using LossClosure = torch::optim::Optimizer::LossClosure;

  MultiTensorAdamT(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                   BaseOptions defaults, Implementation implementation);

  // Throws as MultiTensorSGD::step does.
  at::Tensor step(LossClosure closure = nullptr) override;

  Implementation implementation() const { return implementation_; }

 private:
  const Implementation implementation_;
};

using MultiTensorAdam = MultiTensorAdamT<torch::optim::Adam, torch::optim::AdamOptions>;
using MultiTensorAdamW = MultiTensorAdamT<torch::optim::AdamW, torch::optim::AdamWOptions>;
extern template class MultiTensorAdamT<torch::optim::Adam, torch::optim::AdamOptions>;
extern template class MultiTensorAdamT<torch::optim::AdamW, torch::optim::AdamWOptions>;

}  // namespace vision::engine::optim

#endif  // VISION_ENGINE_OPTIM_MULTI_TENSOR_H_
