#include "models/dbnet/db_loss.h"

#include <algorithm>
#include <cstdint>

#include <ATen/ATen.h>
#include <ATen/core/Reduction.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

namespace vision::models::dbnet {

at::Tensor BalancedBCELoss(const at::Tensor& probability, const at::Tensor& gt,
                           const at::Tensor& mask, float negative_ratio, float eps,
                           HardNegativeMining mining) {
  if (mining == HardNegativeMining::kAuto) {
    mining = probability.is_cuda() ? HardNegativeMining::kSorted : HardNegativeMining::kTopK;
  }
  const at::Tensor positive = gt * mask;
  const at::Tensor negative = (1 - gt) * mask;
  // CUDA autocast refuses binary_cross_entropy (unsafe in half precision) and CPU autocast
  // runs it in float32: compute it in float32 outside autocast on every device, as the
  // reference trainers do.
  at::Tensor loss;
  {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    loss = at::binary_cross_entropy(probability.to(at::kFloat), gt.to(at::kFloat), /*weight=*/{},
                                    at::Reduction::None);
  }
  const at::Tensor total = (loss * positive).sum();
  const at::Tensor negative_losses = (loss * negative).reshape(-1);
  // The counts are summed in double (exact for any map size) and truncated, as the references'
  // int(...) does.
  const at::Tensor positive_sum = positive.sum(at::kDouble);
  const at::Tensor negative_sum = negative.sum(at::kDouble);
  if (mining == HardNegativeMining::kTopK) {
    const int64_t positive_count = static_cast<int64_t>(positive_sum.item<double>());
    const int64_t negative_count =
        std::min(static_cast<int64_t>(negative_sum.item<double>()),
                 static_cast<int64_t>(static_cast<double>(positive_count) * negative_ratio));
    at::Tensor mined = total;
    if (negative_count > 0) {
      mined = total + std::get<0>(at::topk(negative_losses, negative_count)).sum();
    }
    return mined / (static_cast<double>(positive_count + negative_count) + eps);
  }
  const at::Tensor positive_count = at::trunc(positive_sum);
  const at::Tensor negative_count = at::minimum(
      at::trunc(negative_sum), at::trunc(positive_count * static_cast<double>(negative_ratio)));
  const at::Tensor descending = std::get<0>(at::sort(negative_losses, /*dim=*/0,
                                                     /*descending=*/true));
  const at::Tensor rank = at::arange(descending.numel(), negative_count.options());
  const at::Tensor mined = total + at::where(rank < negative_count, descending, 0).sum();
  return mined / (positive_count + negative_count + static_cast<double>(eps)).to(at::kFloat);
}

at::Tensor MaskedL1Loss(const at::Tensor& prediction, const at::Tensor& target,
                        const at::Tensor& mask) {
  // The references return mask.sum() (0, without a gradient) for an empty mask after reading it
  // on the host; dividing the masked sum (then 0, with zero gradients) by 1 gives the same
  // value and gradients without that synchronisation.
  const at::Tensor mask_sum = mask.sum();
  const at::Tensor divisor = at::where(mask_sum > 0, mask_sum, at::ones_like(mask_sum));
  return ((prediction - target).abs() * mask).sum() / divisor;
}

at::Tensor DiceLoss(const at::Tensor& prediction, const at::Tensor& gt, const at::Tensor& mask,
                    float eps) {
  const at::Tensor intersection = (prediction * gt * mask).sum();
  const at::Tensor union_ = (prediction * mask).sum() + (gt * mask).sum() + eps;
  return 1 - 2.0 * intersection / union_;
}

std::map<std::string, at::Tensor> DBLoss(const at::Tensor& probability, const at::Tensor& threshold,
                                         const at::Tensor& binary, const DBTargets& targets,
                                         const DBLossOptions& options) {
  return {
      {"loss_prob",
       BalancedBCELoss(probability, targets.gt, targets.mask, options.ohem_negative_ratio,
                       options.eps, options.hard_negative_mining)},
      {"loss_binary", options.alpha * DiceLoss(binary, targets.gt, targets.mask, options.eps)},
      {"loss_thresh",
       options.beta * MaskedL1Loss(threshold, targets.thresh_map, targets.thresh_mask)},
  };
}

}  // namespace vision::models::dbnet
