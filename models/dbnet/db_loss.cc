#include "models/dbnet/db_loss.h"

#include <algorithm>
#include <cstdint>

#include <ATen/ATen.h>
#include <ATen/core/Reduction.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

namespace vision::models::dbnet {

at::Tensor BalancedBCELoss(const at::Tensor& probability, const at::Tensor& gt,
                           const at::Tensor& mask, float negative_ratio, float eps) {
  const at::Tensor positive = gt * mask;
  const at::Tensor negative = (1 - gt) * mask;
  const int64_t positive_count = static_cast<int64_t>(positive.sum().item<double>());
  const int64_t negative_count =
      std::min(static_cast<int64_t>(negative.sum().item<double>()),
               static_cast<int64_t>(static_cast<double>(positive_count) * negative_ratio));
  // CUDA autocast refuses binary_cross_entropy (unsafe in half precision) and CPU autocast
  // runs it in float32: compute it in float32 outside autocast on every device, as the
  // reference trainers do.
  at::Tensor loss;
  {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    loss = at::binary_cross_entropy(probability.to(at::kFloat), gt.to(at::kFloat), /*weight=*/{},
                                    at::Reduction::None);
  }
  at::Tensor total = (loss * positive).sum();
  if (negative_count > 0) {
    total = total + std::get<0>(at::topk((loss * negative).reshape(-1), negative_count)).sum();
  }
  return total / (static_cast<double>(positive_count + negative_count) + eps);
}

at::Tensor MaskedL1Loss(const at::Tensor& prediction, const at::Tensor& target,
                        const at::Tensor& mask) {
  const at::Tensor mask_sum = mask.sum();
  if (mask_sum.item<double>() == 0.0) return mask_sum;
  return ((prediction - target).abs() * mask).sum() / mask_sum;
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
      {"loss_prob", BalancedBCELoss(probability, targets.gt, targets.mask,
                                    options.ohem_negative_ratio, options.eps)},
      {"loss_binary", options.alpha * DiceLoss(binary, targets.gt, targets.mask, options.eps)},
      {"loss_thresh",
       options.beta * MaskedL1Loss(threshold, targets.thresh_map, targets.thresh_mask)},
  };
}

}  // namespace vision::models::dbnet
