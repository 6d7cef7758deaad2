#include "evaluation/coco/coco_protocol.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace vision::evaluation::coco {
namespace {

constexpr int kNumIouThresholds = 10;
constexpr int kNumRecallThresholds = 101;
constexpr int kNumAreaRanges = 4;  // all, small, medium, large

// numpy.linspace(start, stop, num): i * ((stop - start) / (num - 1)) + start, the last one
// set to stop. Summarize() finds 0.5 and 0.75 among them by exact equality, so the doubles
// must be numpy's.
template <int N>
std::array<double, N> Linspace(double start, double stop) {
  std::array<double, N> values;
  const double step = (stop - start) / (N - 1);
  for (int i = 0; i < N; ++i) values[i] = i * step + start;
  values[N - 1] = stop;
  return values;
}

const std::array<double, kNumIouThresholds>& IouThresholds() {
  static const auto* thresholds =
      new std::array<double, kNumIouThresholds>(Linspace<kNumIouThresholds>(0.5, 0.95));
  return *thresholds;
}

const std::array<double, kNumRecallThresholds>& RecallThresholds() {
  static const auto* thresholds =
      new std::array<double, kNumRecallThresholds>(Linspace<kNumRecallThresholds>(0.0, 1.0));
  return *thresholds;
}

// pycocotools' areaRng: all, small, medium, large, both ends inclusive.
constexpr double kAreaRanges[kNumAreaRanges][2] = {
    {0, 1e5 * 1e5}, {0, 32 * 32}, {32 * 32, 96 * 96}, {96 * 96, 1e5 * 1e5}};

// What evaluateImg returns for one (image, category, area range): the detections (score
// order, at most max_dets[2]) with their match and ignore flags per IoU threshold.
struct ImageEval {
  std::vector<double> scores;
  // [threshold][detection]
  std::vector<std::vector<bool>> matched;
  std::vector<std::vector<bool>> ignored;
  int64_t num_counted_truths = 0;  // ground truths not ignored
};

bool OutsideRange(double area, int range) {
  return area < kAreaRanges[range][0] || area > kAreaRanges[range][1];
}

// COCOeval.computeIoU then evaluateImg for every area range, for the instances of one
// category in one image. `dts` and `gts` are in the image's order.
absl::Status EvaluateImage(const std::vector<const Instance*>& dts_in,
                           const std::vector<const Instance*>& gts, IouType iou_type, int max_det,
                           std::array<ImageEval, kNumAreaRanges>* out) {
  std::vector<const Instance*> dts = dts_in;
  std::stable_sort(dts.begin(), dts.end(),
                   [](const Instance* a, const Instance* b) { return a->score > b->score; });
  if (static_cast<int>(dts.size()) > max_det) dts.resize(max_det);
  const size_t num_dt = dts.size(), num_gt = gts.size();

  std::vector<std::vector<double>> ious(num_dt, std::vector<double>(num_gt));
  for (size_t d = 0; d < num_dt; ++d) {
    for (size_t g = 0; g < num_gt; ++g) {
      if (iou_type == IouType::kBbox) {
        ious[d][g] = BoxIoU(dts[d]->box, gts[g]->box, gts[g]->crowd);
      } else {
        if (dts[d]->mask.height != gts[g]->mask.height ||
            dts[d]->mask.width != gts[g]->mask.width) {
          return absl::InvalidArgumentError(absl::StrCat(
              "a detection's mask is ", dts[d]->mask.width, "x", dts[d]->mask.height,
              " but the ground truth's is ", gts[g]->mask.width, "x", gts[g]->mask.height));
        }
        ious[d][g] = RleIoU(dts[d]->mask, gts[g]->mask, gts[g]->crowd);
      }
    }
  }

  const auto& thresholds = IouThresholds();
  for (int range = 0; range < kNumAreaRanges; ++range) {
    std::vector<bool> gt_ignore(num_gt);
    for (size_t g = 0; g < num_gt; ++g) {
      gt_ignore[g] = gts[g]->crowd || OutsideRange(gts[g]->area, range);
    }
    // Counted ground truths first, so that a match to an ignored one is only a fallback.
    std::vector<size_t> gt_order(num_gt);
    std::iota(gt_order.begin(), gt_order.end(), 0);
    std::stable_sort(gt_order.begin(), gt_order.end(),
                     [&](size_t a, size_t b) { return !gt_ignore[a] && gt_ignore[b]; });

    ImageEval& eval = (*out)[range];
    eval.scores.resize(num_dt);
    for (size_t d = 0; d < num_dt; ++d) eval.scores[d] = dts[d]->score;
    eval.matched.assign(kNumIouThresholds, std::vector<bool>(num_dt, false));
    eval.ignored.assign(kNumIouThresholds, std::vector<bool>(num_dt, false));
    eval.num_counted_truths = std::count(gt_ignore.begin(), gt_ignore.end(), false);
    for (int t = 0; t < kNumIouThresholds; ++t) {
      std::vector<bool> gt_matched(num_gt, false);
      for (size_t d = 0; d < num_dt; ++d) {
        double best = std::min(thresholds[t], 1 - 1e-10);
        int match = -1;  // position in gt_order
        for (size_t j = 0; j < num_gt; ++j) {
          const size_t g = gt_order[j];
          // A crowd region may absorb any number of detections.
          if (gt_matched[g] && !gts[g]->crowd) continue;
          // Counted ground truths come first: once one matched, an ignored one cannot win.
          if (match > -1 && !gt_ignore[gt_order[match]] && gt_ignore[g]) break;
          if (ious[d][g] < best) continue;
          best = ious[d][g];
          match = static_cast<int>(j);
        }
        if (match == -1) continue;
        const size_t g = gt_order[match];
        eval.ignored[t][d] = gt_ignore[g];
        eval.matched[t][d] = true;
        gt_matched[g] = true;
      }
      // An unmatched detection outside the area range is neither hit nor false positive.
      for (size_t d = 0; d < num_dt; ++d) {
        if (!eval.matched[t][d] && OutsideRange(dts[d]->area, range)) eval.ignored[t][d] = true;
      }
    }
  }
  return absl::OkStatus();
}

// Mean of the entries > -1, or -1 without any (summarize()'s rule).
double MeanOfMeasured(const std::vector<double>& values) {
  double sum = 0;
  int64_t n = 0;
  for (double v : values) {
    if (v > -1) {
      sum += v;
      ++n;
    }
  }
  return n == 0 ? -1 : sum / static_cast<double>(n);
}

}  // namespace

double RleIoU(const core::RunLengthMask& detection, const core::RunLengthMask& truth,
              bool truth_is_crowd) {
  if (detection.counts.empty() || truth.counts.empty()) return 0;
  // maskApi.c's rleIou: pixels in either mask and in both.
  uint64_t intersection = 0, uni = 0;
  core::WalkRunPairs(detection.counts, truth.counts,
                     [&](uint64_t length, bool in_detection, bool in_truth) {
                       if (in_detection || in_truth) uni += length;
                       if (in_detection && in_truth) intersection += length;
                     });
  if (intersection == 0) return 0;
  const double denominator =
      truth_is_crowd ? static_cast<double>(core::RleArea(detection)) : static_cast<double>(uni);
  return static_cast<double>(intersection) / denominator;
}

double BoxIoU(const std::array<double, 4>& d, const std::array<double, 4>& g, bool truth_is_crowd) {
  const double w = std::fmin(d[2] + d[0], g[2] + g[0]) - std::fmax(d[0], g[0]);
  if (w <= 0) return 0;
  const double h = std::fmin(d[3] + d[1], g[3] + g[1]) - std::fmax(d[1], g[1]);
  if (h <= 0) return 0;
  const double intersection = w * h;
  const double detection_area = d[2] * d[3];
  const double uni = truth_is_crowd ? detection_area : detection_area + g[2] * g[3] - intersection;
  return intersection / uni;
}

std::array<std::string, kNumStats> StatNames(const std::array<int, 3>& max_dets) {
  return {"AP",
          "AP50",
          "AP75",
          "APs",
          "APm",
          "APl",
          absl::StrCat("AR", max_dets[0]),
          absl::StrCat("AR", max_dets[1]),
          absl::StrCat("AR", max_dets[2]),
          "ARs",
          "ARm",
          "ARl"};
}

absl::StatusOr<CocoResult> EvaluateCoco(const std::vector<const ImageRecord*>& images,
                                        int num_labels, IouType iou_type,
                                        const std::array<int, 3>& max_dets) {
  constexpr int T = kNumIouThresholds, R = kNumRecallThresholds, A = kNumAreaRanges, M = 3;
  // evaluate(): per category, per image (ascending id), per area range; an image with
  // neither ground truth nor detections of the category contributes nothing.
  std::vector<std::vector<std::array<ImageEval, A>>> evals(num_labels);
  for (const ImageRecord* image : images) {
    std::vector<std::vector<const Instance*>> dts(num_labels), gts(num_labels);
    for (const Instance& d : image->detections) dts[d.label].push_back(&d);
    for (const Instance& g : image->truths) gts[g.label].push_back(&g);
    for (int k = 0; k < num_labels; ++k) {
      if (dts[k].empty() && gts[k].empty()) continue;
      std::array<ImageEval, A>& eval = evals[k].emplace_back();
      if (absl::Status status = EvaluateImage(dts[k], gts[k], iou_type, max_dets[M - 1], &eval);
          !status.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("image id ", image->image_id, ", label ", k, ": ", status.message()));
      }
    }
  }

  // accumulate(): precision[t][r] and recall[t] per (label, area, max_dets), -1 where the
  // category has no counted ground truth.
  const auto& recall_thresholds = RecallThresholds();
  // [k][a][m] -> T * R precisions, T recalls
  std::vector<double> precision(static_cast<size_t>(num_labels) * A * M * T * R, -1);
  std::vector<double> recall(static_cast<size_t>(num_labels) * A * M * T, -1);
  auto p_at = [&](int k, int a, int m, int t, int r) -> double& {
    return precision[((((static_cast<size_t>(k) * A + a) * M + m) * T + t) * R) + r];
  };
  auto r_at = [&](int k, int a, int m, int t) -> double& {
    return recall[((static_cast<size_t>(k) * A + a) * M + m) * T + t];
  };
  struct Entry {
    double score;
    const ImageEval* eval;
    size_t index;
  };
  for (int k = 0; k < num_labels; ++k) {
    for (int a = 0; a < A; ++a) {
      for (int m = 0; m < M; ++m) {
        std::vector<Entry> entries;
        int64_t num_counted = 0;
        for (const auto& per_range : evals[k]) {
          const ImageEval& e = per_range[a];
          const size_t n = std::min(e.scores.size(), static_cast<size_t>(max_dets[m]));
          for (size_t d = 0; d < n; ++d) entries.push_back({e.scores[d], &e, d});
          num_counted += e.num_counted_truths;
        }
        if (evals[k].empty() || num_counted == 0) continue;
        std::stable_sort(entries.begin(), entries.end(),
                         [](const Entry& x, const Entry& y) { return x.score > y.score; });
        const size_t nd = entries.size();
        std::vector<double> rc(nd), pr(nd);
        for (int t = 0; t < T; ++t) {
          double tp = 0, fp = 0;
          for (size_t i = 0; i < nd; ++i) {
            const Entry& entry = entries[i];
            if (!entry.eval->ignored[t][entry.index]) {
              (entry.eval->matched[t][entry.index] ? tp : fp) += 1;
            }
            rc[i] = tp / static_cast<double>(num_counted);
            pr[i] = tp / (fp + tp + DBL_EPSILON);
          }
          r_at(k, a, m, t) = nd > 0 ? rc[nd - 1] : 0;
          // The precision envelope: best precision at any higher recall.
          for (size_t i = nd; i-- > 1;) {
            if (pr[i] > pr[i - 1]) pr[i - 1] = pr[i];
          }
          for (int r = 0; r < R; ++r) {
            const size_t at =
                std::lower_bound(rc.begin(), rc.end(), recall_thresholds[r]) - rc.begin();
            // Recall levels never reached keep precision 0.
            p_at(k, a, m, t, r) = at < nd ? pr[at] : 0;
          }
        }
      }
    }
  }

  // summarize().
  const auto& iou_thresholds = IouThresholds();
  auto ap = [&](int a, int m, double only_iou) {
    std::vector<double> values;
    for (int t = 0; t < T; ++t) {
      if (only_iou >= 0 && iou_thresholds[t] != only_iou) continue;
      for (int r = 0; r < R; ++r) {
        for (int k = 0; k < num_labels; ++k) values.push_back(p_at(k, a, m, t, r));
      }
    }
    return MeanOfMeasured(values);
  };
  auto ar = [&](int a, int m) {
    std::vector<double> values;
    for (int t = 0; t < T; ++t) {
      for (int k = 0; k < num_labels; ++k) values.push_back(r_at(k, a, m, t));
    }
    return MeanOfMeasured(values);
  };
  CocoResult result;
  result.stats = {ap(0, 2, -1), ap(0, 2, 0.5), ap(0, 2, 0.75), ap(1, 2, -1),
                  ap(2, 2, -1), ap(3, 2, -1),  ar(0, 0),       ar(0, 1),
                  ar(0, 2),     ar(1, 2),      ar(2, 2),       ar(3, 2)};
  result.class_ap.resize(num_labels);
  for (int k = 0; k < num_labels; ++k) {
    std::vector<double> values;
    for (int t = 0; t < T; ++t) {
      for (int r = 0; r < R; ++r) values.push_back(p_at(k, 0, 2, t, r));
    }
    result.class_ap[k] = MeanOfMeasured(values);
  }
  return result;
}

}  // namespace vision::evaluation::coco
