// DBNet's loss, L = Ls + alpha * Lb + beta * Lt (paper Eq. 4, alpha = 1, beta = 10):
//   Ls  balanced binary cross-entropy on the probability map P with online hard negative
//       mining: positives are gt & mask, negatives the hardest (highest-loss)
//       min(#negatives, ratio * #positives) pixels of (1 - gt) & mask (ratio 3);
//   Lb  Dice loss on the approximate binary map B over the training mask (as MhLiao/DB and
//       mmocr do; the paper's text says BCE, its code uses Dice);
//   Lt  L1 between the threshold map T and its target inside the dilated text region.
// Every term is a mean over the whole batch, as in the references.
//
// The weights alpha and beta are applied here: DBLoss returns
//   {"loss_prob": Ls, "loss_binary": alpha * Lb, "loss_thresh": beta * Lt},
// so the engine's plain sum (its per-term weights left at 1) is the paper's L and the logged
// terms are the ones that add up to it.
#ifndef VISION_MODELS_DBNET_DB_LOSS_H_
#define VISION_MODELS_DBNET_DB_LOSS_H_

#include <map>
#include <string>

#include <ATen/core/Tensor.h>

namespace vision::models::dbnet {

// How Ls picks its hardest negatives. Both keep the same pixels (up to ties between equal
// losses) and give the same loss up to float summation order.
enum class HardNegativeMining {
  // kSorted on CUDA, kTopK on the CPU (where reading a count costs nothing and topk is cheaper
  // than a full sort).
  kAuto,
  // The references' way: read the two pixel counts on the host, then topk of that many
  // (two host-device synchronisations per step on a GPU).
  kTopK,
  // No host synchronisation: sort all negative losses in descending order on the device and sum
  // those whose rank is below the count, which stays a device tensor.
  kSorted,
};

struct DBLossOptions {
  float alpha = 1.0f;
  float beta = 10.0f;
  float ohem_negative_ratio = 3.0f;
  HardNegativeMining hard_negative_mining = HardNegativeMining::kAuto;
  // Keeps the divisions finite when a batch has no text.
  float eps = 1e-6f;
};

// All maps are [N, H, W] float on one device; gt and the masks hold 0 or 1.
at::Tensor BalancedBCELoss(const at::Tensor& probability, const at::Tensor& gt,
                           const at::Tensor& mask, float negative_ratio, float eps,
                           HardNegativeMining mining = HardNegativeMining::kAuto);
// 0 when the mask is empty (with no host synchronisation: the sum is divided by the mask's
// pixel count, or by 1 when there are none).
at::Tensor MaskedL1Loss(const at::Tensor& prediction, const at::Tensor& target,
                        const at::Tensor& mask);
at::Tensor DiceLoss(const at::Tensor& prediction, const at::Tensor& gt, const at::Tensor& mask,
                    float eps);

struct DBTargets {
  at::Tensor gt;
  at::Tensor mask;
  at::Tensor thresh_map;
  at::Tensor thresh_mask;
};

// probability, threshold and binary are [N, H, W] (the head's maps without the channel).
std::map<std::string, at::Tensor> DBLoss(const at::Tensor& probability, const at::Tensor& threshold,
                                         const at::Tensor& binary, const DBTargets& targets,
                                         const DBLossOptions& options);

}  // namespace vision::models::dbnet

#endif  // VISION_MODELS_DBNET_DB_LOSS_H_
