#include "models/ops/nms.h"

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/nonzero.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/unique_consecutive.h>
#include <ATen/ops/zeros.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#include "models/ops/nms_threshold.h"

#ifdef VISION_WITH_CUDA
#include "models/ops/nms_cuda.h"
#endif

namespace vision::models::ops {
namespace {

// The suppression sweep of one kept box over the boxes ranked below it is split across threads
// only when it is this long. Vectorised, a sweep of 10^5 boxes takes tens of microseconds, and
// shorter ones gain less than waking the pool costs (measured on a busy 2-core machine: splitting
// sweeps from 3*10^4 boxes on made NMS of 5*10^4 boxes slower on 2 threads; of 2*10^5 boxes, 25%
// faster).
constexpr int64_t kSweepGrain = 1 << 17;

// torchvision's batched_nms runs one Nms per category instead of the coordinate-offset trick when
// boxes.numel() exceeds this (4000 on CPU, 100000 on other devices): the per-category sweeps skip
// the pairs of different categories that the trick compares in vain (the RPN's ~7000 boxes per
// image in 5 levels: about a quarter of the pairs).
int64_t PerCategoryAbove(const at::Tensor& boxes) { return boxes.is_cpu() ? 4000 : 100000; }

at::Tensor ComputableType(const at::Tensor& t) {
  const bool reduced = t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
  return reduced ? t.to(at::kFloat) : t;
}

void CheckBoxesAndScores(const char* op, const at::Tensor& boxes, const at::Tensor& scores) {
  TORCH_CHECK(boxes.dim() == 2 && boxes.size(1) == 4, op,
              ": boxes must be [N, 4] (x1, y1, x2, y2), got ", boxes.sizes());
  TORCH_CHECK(scores.dim() == 1 && scores.size(0) == boxes.size(0), op,
              ": scores must be [N] with N = ", boxes.size(0), " (one per box), got ",
              scores.sizes());
  TORCH_CHECK(boxes.device() == scores.device(), op, ": boxes are on ", boxes.device(),
              " but scores on ", scores.device());
  TORCH_CHECK(at::isFloatingType(boxes.scalar_type()), op, ": boxes must be floating point, got ",
              boxes.scalar_type());
  TORCH_CHECK(at::isFloatingType(scores.scalar_type()), op, ": scores must be floating point, got ",
              scores.scalar_type());
  if (boxes.numel() == 0) return;
  // One device-to-host copy for both checks.
  const at::Tensor bad =
      at::stack({at::isfinite(boxes).all().logical_not(), at::isnan(scores).any()}).cpu();
  TORCH_CHECK(!bad[0].item<bool>(), op, ": boxes contain NaN or infinite coordinates");
  TORCH_CHECK(!bad[1].item<bool>(), op, ": scores contain NaN, which has no rank");
}

// Marks boxes [begin, end) that overlap box (x1, y1, x2, y2) of the given area by more than the
// threshold. torchvision's arithmetic, operand order included, so NaN IoUs (0 / 0) compare false
// as there. Arguments by value: with the box in locals the compiler need not reload it after each
// store to `suppressed` (uint8_t may alias anything) and vectorises the loop.
template <typename T>
void Sweep(int64_t begin, int64_t end, T x1, T y1, T x2, T y2, T area, const T* xs1, const T* ys1,
           const T* xs2, const T* ys2, const T* areas, T threshold, uint8_t* suppressed) {
  for (int64_t j = begin; j < end; ++j) {
    const T w = std::max(static_cast<T>(0), std::min(x2, xs2[j]) - std::max(x1, xs1[j]));
    const T h = std::max(static_cast<T>(0), std::min(y2, ys2[j]) - std::max(y1, ys1[j]));
    const T inter = w * h;
    suppressed[j] |= inter / (area + areas[j] - inter) > threshold;
  }
}

template <typename T>
at::Tensor NmsCpu(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold) {
  const int64_t n = boxes.size(0);
  const at::Tensor order =
      std::get<1>(scores.sort(/*stable=*/true, /*dim=*/0, /*descending=*/true));
  // Coordinates as separate arrays in rank order, so the sweep reads memory front to back.
  const at::Tensor sorted = boxes.index_select(0, order).t().contiguous();
  const T* x1 = sorted.data_ptr<T>();
  const T* y1 = x1 + n;
  const T* x2 = y1 + n;
  const T* y2 = x2 + n;
  std::vector<T> area(n);
  for (int64_t i = 0; i < n; ++i) area[i] = (x2[i] - x1[i]) * (y2[i] - y1[i]);
  const T threshold = LargestNotAbove<T>(iou_threshold);

  const int64_t* rank_to_index = order.data_ptr<int64_t>();
  std::vector<uint8_t> suppressed(n, 0);
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < n; ++i) {
    if (suppressed[i]) continue;
    keep.push_back(rank_to_index[i]);
    at::parallel_for(i + 1, n, kSweepGrain, [&](int64_t begin, int64_t end) {
      Sweep(begin, end, x1[i], y1[i], x2[i], y2[i], area[i], x1, y1, x2, y2, area.data(), threshold,
            suppressed.data());
    });
  }
  at::Tensor result = at::empty({static_cast<int64_t>(keep.size())}, at::kLong);
  std::copy(keep.begin(), keep.end(), result.data_ptr<int64_t>());
  return result;
}

// Nms of validated, non-empty boxes and scores of a computable type.
at::Tensor NmsChecked(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold) {
  // A profiler range (Kineto, torch.profiler) named as torchvision's operator.
  RECORD_FUNCTION("vision::nms", std::vector<c10::IValue>({boxes, scores}));
#ifdef VISION_WITH_CUDA
  if (boxes.is_cuda()) return NmsCuda(boxes.contiguous(), scores, iou_threshold);
#endif
  TORCH_CHECK(boxes.is_cpu(), "Nms: boxes on ", boxes.device(),
              " are not supported: CPU, and CUDA in a CUDA build, are");
  return AT_DISPATCH_FLOATING_TYPES(boxes.scalar_type(), "Nms", [&] {
    return NmsCpu<scalar_t>(boxes.contiguous(), scores, iou_threshold);
  });
}

at::Tensor NoBoxes(const at::Tensor& boxes) {
  return at::empty({0}, boxes.options().dtype(at::kLong));
}

}  // namespace

at::Tensor Nms(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold) {
  CheckBoxesAndScores("Nms", boxes, scores);
  if (boxes.numel() == 0) return NoBoxes(boxes);
  return NmsChecked(ComputableType(boxes), ComputableType(scores), iou_threshold);
}

at::Tensor BatchedNms(const at::Tensor& boxes, const at::Tensor& scores, const at::Tensor& idxs,
                      double iou_threshold) {
  CheckBoxesAndScores("BatchedNms", boxes, scores);
  TORCH_CHECK(idxs.dim() == 1 && idxs.size(0) == boxes.size(0),
              "BatchedNms: idxs must be [N] with N = ", boxes.size(0), " (one per box), got ",
              idxs.sizes());
  TORCH_CHECK(at::isIntegralType(idxs.scalar_type(), /*includeBool=*/false),
              "BatchedNms: idxs must hold integer category indices, got ", idxs.scalar_type());
  TORCH_CHECK(idxs.device() == boxes.device(), "BatchedNms: boxes are on ", boxes.device(),
              " but idxs on ", idxs.device());
  if (boxes.numel() == 0) return NoBoxes(boxes);
  const at::Tensor computable = ComputableType(boxes);
  if (boxes.numel() > PerCategoryAbove(boxes)) {
    // torchvision's _batched_nms_vanilla: Nms of each category's boxes (in input order), the
    // survivors of all categories (in input order) ranked by score with ATen's sort without
    // stable=True, the call torchvision makes (`scores[keep].sort(descending=True)`), so that
    // equal scores come in its order: not input order, but the same for the same input. Near
    // initialisation the RPN's scores tie often, and the RoI sampler's draws pick proposals by
    // their rank.
    RECORD_FUNCTION("vision::batched_nms_per_category", std::vector<c10::IValue>({boxes}));
    const at::Tensor computable_scores = ComputableType(scores);
    const auto [sorted_idxs, by_category] =
        idxs.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false);
    const at::Tensor counts =
        std::get<2>(at::unique_consecutive(sorted_idxs, /*return_inverse=*/false,
                                           /*return_counts=*/true))
            .cpu();
    at::Tensor kept = at::zeros({boxes.size(0)}, boxes.options().dtype(at::kBool));
    int64_t offset = 0;
    for (const int64_t count : c10::ArrayRef<int64_t>(counts.data_ptr<int64_t>(), counts.numel())) {
      const at::Tensor members = by_category.slice(0, offset, offset + count);
      const at::Tensor keep = NmsChecked(computable.index_select(0, members),
                                         computable_scores.index_select(0, members), iou_threshold);
      kept.index_fill_(0, members.index_select(0, keep), true);
      offset += count;
    }
    const at::Tensor survivors = at::nonzero(kept).select(1, 0);
    const at::Tensor rank = std::get<1>(computable_scores.index_select(0, survivors)
                                            .sort(/*stable=*/false, /*dim=*/0, /*descending=*/true));
    return survivors.index_select(0, rank);
  }
  // torchvision's expression, so the shifted coordinates round exactly as there.
  const at::Tensor offsets = idxs.to(computable.scalar_type()) * (computable.max() + 1);
  return NmsChecked(computable + offsets.unsqueeze(1), ComputableType(scores), iou_threshold);
}

}  // namespace vision::models::ops
