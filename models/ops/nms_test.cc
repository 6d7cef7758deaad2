#include "models/ops/nms.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/ops/golden_for_test.h"

namespace vision::models::ops {
namespace {

using ::testing::ElementsAre;
std::vector<int64_t> ToVector(const at::Tensor& t) {
  const at::Tensor cpu = t.cpu().contiguous();
  EXPECT_EQ(cpu.scalar_type(), at::kLong);
  return std::vector<int64_t>(cpu.data_ptr<int64_t>(), cpu.data_ptr<int64_t>() + cpu.numel());
}

TEST(NmsTest, MatchesTorchvision) {
  for (const auto& [name, t] : LoadGoldenCases("nms")) {
    SCOPED_TRACE(name);
    const at::Tensor keep =
        Nms(t.at("boxes"), t.at("scores"), t.at("iou_threshold").item<double>());
    EXPECT_EQ(ToVector(keep), ToVector(t.at("keep")));
  }
}

TEST(NmsTest, BatchedMatchesTorchvision) {
  for (const auto& [name, t] : LoadGoldenCases("batched_nms")) {
    SCOPED_TRACE(name);
    const at::Tensor keep = BatchedNms(t.at("boxes"), t.at("scores"), t.at("idxs"),
                                       t.at("iou_threshold").item<double>());
    EXPECT_EQ(ToVector(keep), ToVector(t.at("keep")));
  }
}

// Above 4000 coordinates (1000 boxes) torchvision runs one nms per category. The "ties" case
// (20 score values among 5000 boxes) needs equal scores in torchvision's order: its unstable
// sort's, not input order (4144 of its 4163 survivors would be elsewhere in input order).
TEST(NmsTest, BatchedPerCategoryMatchesTorchvision) {
  for (const auto& [name, t] :
       LoadGoldenCases("batched_nms_large", "models/ops/testdata/batched_nms_large_golden.pth")) {
    SCOPED_TRACE(name);
    ASSERT_GT(t.at("boxes").numel(), 4000);
    const at::Tensor keep = BatchedNms(t.at("boxes"), t.at("scores"), t.at("idxs"),
                                       t.at("iou_threshold").item<double>());
    EXPECT_EQ(ToVector(keep), ToVector(t.at("keep")));
  }
}

// The per-category path on interleaved categories and tied scores: each category's Nms, the
// survivors (in input order) ranked by ATen's unstable sort, as torchvision's
// _batched_nms_vanilla ranks them (`scores[keep].sort(descending=True)`).
TEST(NmsTest, BatchedPerCategoryRanksTiesAsTorchvisionsSort) {
  at::manual_seed(3);
  const int64_t n = 3000;
  const at::Tensor xy = at::rand({n, 2}) * 300;
  const at::Tensor boxes = at::cat({xy, xy + 10 + at::rand({n, 2}) * 40}, 1);
  const at::Tensor scores = at::randint(0, 20, {n}).to(at::kFloat);
  const at::Tensor idxs = at::randint(0, 7, {n}, at::kLong);
  at::Tensor kept = at::zeros({n}, at::kBool);
  for (int64_t c = 0; c < 7; ++c) {
    const at::Tensor members = at::nonzero(idxs == c).select(1, 0);
    const at::Tensor keep =
        Nms(boxes.index_select(0, members), scores.index_select(0, members), 0.5);
    kept.index_fill_(0, members.index_select(0, keep), true);
  }
  const at::Tensor survivors = at::nonzero(kept).select(1, 0);
  const std::vector<int64_t> expected = ToVector(survivors.index_select(
      0, std::get<1>(scores.index_select(0, survivors).sort(/*stable=*/false, 0, true))));
  EXPECT_EQ(ToVector(BatchedNms(boxes, scores, idxs, 0.5)), expected);
  EXPECT_LT(expected.size(), static_cast<size_t>(n));  // something was suppressed
}

// A: [0, 10]^2. B: shifted by 1 (IoU 81 / 119 = 0.68). C: A's top half (IoU exactly 0.5).
// D: far away.
const at::Tensor kBoxes =
    at::tensor({0, 0, 10, 10, 1, 1, 11, 11, 0, 0, 10, 5, 50, 50, 60, 60}, at::kFloat).view({4, 4});
const at::Tensor kScores = at::tensor({0.9, 0.8, 0.7, 0.6}, at::kFloat);

TEST(NmsTest, SuppressesOnlyAboveTheThreshold) {
  EXPECT_THAT(ToVector(Nms(kBoxes, kScores, 0.5)), ElementsAre(0, 2, 3));
  EXPECT_THAT(ToVector(Nms(kBoxes, kScores, 0.7)), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(ToVector(Nms(kBoxes, kScores, 0.49)), ElementsAre(0, 3));
  // float(threshold) rounds up to 0.5, which C's IoU does not exceed; the double threshold it does.
  EXPECT_THAT(ToVector(Nms(kBoxes, kScores, 0.5 - 1e-12)), ElementsAre(0, 3));
  EXPECT_THAT(ToVector(Nms(kBoxes.to(at::kDouble), kScores, 0.5 - 1e-12)), ElementsAre(0, 3));
}

TEST(NmsTest, RanksByScoreAndKeepsInputOrderForTies) {
  const at::Tensor scores = at::tensor({0.5, 0.9, 0.5, 0.5}, at::kFloat);
  // B outranks A; C and D tie with A and follow it in input order. A overlaps B by 0.68, C
  // overlaps B by 0.32 and A by 0.5.
  EXPECT_THAT(ToVector(Nms(kBoxes, scores, 0.7)), ElementsAre(1, 0, 2, 3));
  EXPECT_THAT(ToVector(Nms(kBoxes, scores, 0.3)), ElementsAre(1, 3));
}

TEST(NmsTest, BatchedNmsKeepsOverlapsOfOtherCategories) {
  const at::Tensor idxs = at::tensor({0, 1, 0, 0}, at::kLong);
  EXPECT_THAT(ToVector(BatchedNms(kBoxes, kScores, idxs, 0.49)), ElementsAre(0, 1, 3));
}

TEST(NmsTest, DoubleAndHalfAgreeWithFloat) {
  at::manual_seed(0);
  const at::Tensor xy = at::rand({500, 2}) * 40;
  const at::Tensor boxes = at::cat({xy, xy + at::rand({500, 2}) * 30}, 1).round();
  const at::Tensor scores = at::rand({500});
  const std::vector<int64_t> expected = ToVector(Nms(boxes, scores, 0.5));
  EXPECT_EQ(ToVector(Nms(boxes.to(at::kDouble), scores.to(at::kDouble), 0.5)), expected);
  // Integer coordinates and the scores' order survive the round trip through half.
  const at::Tensor ranked = scores.argsort().argsort().to(at::kFloat) / 1000;
  EXPECT_EQ(ToVector(Nms(boxes.to(at::kHalf), ranked.to(at::kHalf), 0.5)),
            ToVector(Nms(boxes, ranked, 0.5)));
}

TEST(NmsTest, ParallelSweepMatchesOneThread) {
  // Long enough for the sweep to be split across threads; 20 clusters keep the kept set small.
  at::manual_seed(1);
  const int64_t n = 150000;
  const at::Tensor centres = at::rand({20, 2}) * 500;
  const at::Tensor xy = centres.index_select(0, at::randint(20, {n})) + at::randn({n, 2}) * 3;
  const at::Tensor boxes = at::cat({xy, xy + 20 + at::rand({n, 2}) * 5}, 1);
  const at::Tensor scores = at::rand({n});
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const std::vector<int64_t> serial = ToVector(Nms(boxes, scores, 0.5));
  at::set_num_threads(std::max(threads, 2));
  const std::vector<int64_t> parallel = ToVector(Nms(boxes, scores, 0.5));
  at::set_num_threads(threads);
  EXPECT_EQ(parallel, serial);
  EXPECT_GT(serial.size(), 20);
}

TEST(NmsTest, EmptyInputKeepsNothing) {
  const at::Tensor keep = Nms(at::zeros({0, 4}), at::zeros({0}), 0.5);
  EXPECT_EQ(keep.numel(), 0);
  EXPECT_EQ(keep.scalar_type(), at::kLong);
  EXPECT_EQ(BatchedNms(at::zeros({0, 4}), at::zeros({0}), at::zeros({0}, at::kLong), 0.5).numel(),
            0);
}

void ExpectBadInputErrors(const at::Device& device) {
  const at::TensorOptions on = at::TensorOptions().device(device);
  const at::Tensor boxes = kBoxes.to(device);
  const at::Tensor scores = kScores.to(device);
  const at::Tensor idxs = at::zeros({4}, on.dtype(at::kLong));
  ExpectError([&] { Nms(boxes.narrow(1, 0, 3), scores, 0.5); }, "boxes must be [N, 4]");
  ExpectError([&] { Nms(boxes, scores.narrow(0, 0, 3), 0.5); }, "scores must be [N] with N = 4");
  ExpectError([&] { Nms(boxes.to(at::kLong), scores, 0.5); }, "boxes must be floating point");
  const float kNan = std::numeric_limits<float>::quiet_NaN();
  const float kInf = std::numeric_limits<float>::infinity();
  for (float bad : {kNan, kInf, -kInf}) {
    at::Tensor corrupt = boxes.clone();
    corrupt[2][3] = bad;
    ExpectError([&] { Nms(corrupt, scores, 0.5); }, "Nms: boxes contain NaN or infinite");
    ExpectError([&] { BatchedNms(corrupt, scores, idxs, 0.5); },
                "BatchedNms: boxes contain NaN or infinite");
  }
  at::Tensor nan_scores = scores.clone();
  nan_scores[1] = kNan;
  ExpectError([&] { Nms(boxes, nan_scores, 0.5); }, "scores contain NaN");
  ExpectError([&] { BatchedNms(boxes, scores, idxs.narrow(0, 0, 2), 0.5); },
              "idxs must be [N] with N = 4");
  ExpectError([&] { BatchedNms(boxes, scores, idxs.to(at::kFloat), 0.5); },
              "idxs must hold integer category indices");
}

TEST(NmsTest, BadInputIsAnErrorNamingTheArgument) { ExpectBadInputErrors(at::kCPU); }

// CUDA against CPU: the goldens, and random cases of several 64-box blocks with many ties.
TEST(NmsCudaTest, MatchesCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: CUDA NMS not run";
  for (const auto& [name, t] : LoadGoldenCases("nms")) {
    SCOPED_TRACE(name);
    const double thr = t.at("iou_threshold").item<double>();
    EXPECT_EQ(ToVector(Nms(t.at("boxes").cuda(), t.at("scores").cuda(), thr)),
              ToVector(t.at("keep")));
  }
  for (const auto& [name, t] : LoadGoldenCases("batched_nms")) {
    SCOPED_TRACE("batched " + name);
    const double thr = t.at("iou_threshold").item<double>();
    EXPECT_EQ(
        ToVector(BatchedNms(t.at("boxes").cuda(), t.at("scores").cuda(), t.at("idxs").cuda(), thr)),
        ToVector(t.at("keep")));
  }
  EXPECT_THAT(ToVector(Nms(kBoxes.cuda(), kScores.cuda(), 0.5 - 1e-12)), ElementsAre(0, 3));
  at::manual_seed(2);
  for (int64_t n : {1, 63, 64, 65, 1000, 5000}) {
    SCOPED_TRACE(n);
    const at::Tensor xy = at::rand({n, 2}) * 200;
    const at::Tensor boxes = at::cat({xy, xy + at::rand({n, 2}) * 60}, 1);
    const at::Tensor scores = at::randint(0, 50, {n}).to(at::kFloat);
    for (double thr : {0.3, 0.7}) {
      EXPECT_EQ(ToVector(Nms(boxes.cuda(), scores.cuda(), thr)), ToVector(Nms(boxes, scores, thr)));
      EXPECT_EQ(ToVector(Nms(boxes.cuda().to(at::kDouble), scores.cuda(), thr)),
                ToVector(Nms(boxes.to(at::kDouble), scores, thr)));
    }
  }
}

TEST(NmsCudaTest, BadInputIsAnErrorNamingTheArgument) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: CUDA NMS not run";
  ExpectBadInputErrors(at::Device(at::kCUDA));
  ExpectError([&] { Nms(kBoxes.cuda(), kScores, 0.5); }, "boxes are on cuda:0 but scores on cpu");
}

}  // namespace
}  // namespace vision::models::ops
