// DBNet's network after the backbone: the FPN neck of the paper (Fig. 2) and the DB head.
//
// Neck: the generic FPN (models/necks/fpn.h) on the four backbone levels (strides 4, 8, 16,
// 32) with 1x1 laterals to inner_channels and 3x3 smoothing convs to inner_channels / 4, all
// without bias; then, DBNet's own part, every level upsampled to stride 4 and concatenated
// (coarse first, as MhLiao/DB's SegDetector) into one inner_channels feature F.
// Head: two branches of the same shape on F, 3x3 conv-BN-ReLU, 2x2 stride-2 transposed
// conv-BN-ReLU, 2x2 stride-2 transposed conv, sigmoid: the probability map P and the
// threshold map T at the input's resolution. The approximate binary map
// B = 1 / (1 + exp(-k (P - T))) only exists for training, like T (the paper drops the
// threshold branch at inference).
// Initialisation as MhLiao/DB: Kaiming-normal convolutions, BN weight 1 and bias 1e-4.
// How the transposed convolutions are computed is DBHeadOptions.implementation; parameters,
// their names and checkpoints are the same either way.
#ifndef VISION_MODELS_DBNET_DB_HEAD_H_
#define VISION_MODELS_DBNET_DB_HEAD_H_

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

#include "models/necks/fpn.h"

namespace vision::models::dbnet {

// The FPN as DBNet configures and initialises it, for `in_channels` at strides 4, 8, 16, 32
// (exactly four levels) and a positive multiple of 4 as `inner_channels`.
necks::Fpn MakeDBNeck(std::vector<int64_t> in_channels, int64_t inner_channels);

// The neck's levels (fine to coarse, [N, C, h_i, w_i]) -> [N, 4C, h_0, w_0]: each level
// upsampled to the finest one's exact size, concatenated coarse first.
at::Tensor FuseLevels(const std::vector<at::Tensor>& levels);

// How the branches compute their two 2x2 stride-2 transposed convolutions
// (DBNetOptions.head_implementation).
enum class DBHeadImplementation {
  // Each one as a matrix product per image: output position (2i + a, 2j + b) of channel o is
  // bias[o] + sum_c weight[c, o, a, b] x[c, i, j], so the weight as an [out * 4, in] matrix
  // times the image's [in, h * w] pixels gives the output in "phase" layout
  // [N, out, 2 * 2, h * w]. BatchNorm and ReLU see the same values per channel in that layout,
  // the second product works on it as on h * w * 4 pixels, and only the final one-channel map
  // is interleaved into [N, 1, 4h, 4w]: no pass re-orders the 64-channel [N, C, 2h, 2w]
  // tensor, where ATen's transposed convolution on the CPU copies its output once more. Same
  // sums in another order (models/dbnet/db_head_test.cc compares the two in double precision).
  kPhaseMatmul,
  // torch::nn::ConvTranspose2d, as the network is written.
  kModules,
};

struct DBHeadOptions {
  explicit DBHeadOptions(int64_t in_channels) : in_channels_(in_channels) {}
  // Channels of the fused feature; the branches' hidden width is in_channels / 4.
  TORCH_ARG(int64_t, in_channels);
  // Amplification factor of the approximate binarisation.
  TORCH_ARG(double, k) = 50.0;
  TORCH_ARG(DBHeadImplementation, implementation) = DBHeadImplementation::kPhaseMatmul;
};

// [N, 1, 4h, 4w] maps for an [N, C, h, w] feature; threshold and binary are undefined
// unless requested.
struct DBHeadOutput {
  at::Tensor probability;
  at::Tensor threshold;
  at::Tensor binary;
};

class DBHeadImpl : public torch::nn::Module {
 public:
  explicit DBHeadImpl(DBHeadOptions options);

  // Computes threshold and binary too iff the module is in training mode.
  DBHeadOutput forward(const at::Tensor& fused) { return forward(fused, is_training()); }
  // `with_threshold` also serves validation losses computed in eval mode.
  DBHeadOutput forward(const at::Tensor& fused, bool with_threshold);

 private:
  // One branch on the fused feature: [N, 1, 4h, 4w], by options_.implementation.
  at::Tensor Branch(torch::nn::Sequential& branch, const at::Tensor& fused);

  DBHeadOptions options_;
  torch::nn::Sequential probability_{nullptr};
  torch::nn::Sequential threshold_{nullptr};
};
TORCH_MODULE(DBHead);

// MhLiao/DB's weights_init over every submodule of `module` (not `module` itself).
void InitializeDBWeights(torch::nn::Module& module);

}  // namespace vision::models::dbnet

#endif  // VISION_MODELS_DBNET_DB_HEAD_H_
