#include "models/ops/boxes.h"

#include <functional>
#include <string>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/ops/golden_for_test.h"

namespace vision::models::ops {
namespace {

constexpr char kGolden[] = "models/ops/testdata/ops_golden2.pth";

// Equal shapes, NaN where expected is NaN, the same infinities, finite values within 1e-5.
void ExpectClose(const at::Tensor& actual, const at::Tensor& expected) {
  ASSERT_EQ(actual.sizes(), expected.sizes());
  const at::Tensor a = actual.detach().cpu().to(at::kDouble);
  const at::Tensor e = expected.cpu().to(at::kDouble);
  EXPECT_TRUE(at::equal(at::isnan(a), at::isnan(e)));
  EXPECT_TRUE(at::equal(at::isposinf(a), at::isposinf(e)));
  EXPECT_TRUE(at::equal(at::isneginf(a), at::isneginf(e)));
  const at::Tensor finite = at::isfinite(e);
  if (finite.any().item<bool>()) {
    EXPECT_LT((a.masked_select(finite) - e.masked_select(finite)).abs().max().item<double>(), 1e-5);
  }
}

BoxCoder CoderFromWeights(const at::Tensor& weights) {
  const at::Tensor w = weights.to(at::kDouble);
  return BoxCoder(BoxCoderOptions().weights(
      {w[0].item<double>(), w[1].item<double>(), w[2].item<double>(), w[3].item<double>()}));
}

TEST(BoxIouTest, MatchesTorchvision) {
  for (const auto& [name, t] : LoadGoldenCases("box_iou", kGolden)) {
    SCOPED_TRACE(name);
    ExpectClose(BoxIou(t.at("boxes1"), t.at("boxes2")), t.at("iou"));
  }
}

TEST(BoxIouTest, HandComputed) {
  const at::Tensor a = at::tensor({0., 0., 2., 2.}, at::kDouble).view({1, 4});
  const at::Tensor b = at::tensor({1., 1., 3., 3., 2., 0., 4., 2.}, at::kDouble).view({2, 4});
  // Overlap 1 of union 7; touching edges overlap 0.
  ExpectClose(BoxIou(a, b), at::tensor({1.0 / 7.0, 0.0}, at::kDouble).view({1, 2}));
}

TEST(BoxCoderTest, MatchesTorchvisionEncodeAndDecode) {
  for (const auto& [name, t] : LoadGoldenCases("box_coder", kGolden)) {
    SCOPED_TRACE(name);
    const BoxCoder coder = CoderFromWeights(t.at("weights"));
    ExpectClose(coder.Encode(t.at("reference_boxes"), t.at("proposals")), t.at("encoded"));
    ExpectClose(coder.Decode(t.at("rel_codes"), t.at("boxes")), t.at("decoded"));
  }
}

TEST(BoxCoderTest, DecodeInvertsEncode) {
  const BoxCoder coder(BoxCoderOptions().weights({10.0, 10.0, 5.0, 5.0}));
  const at::Tensor proposals =
      at::tensor({0., 0., 10., 20., 5., 5., 6., 9.}, at::kDouble).view({2, 4});
  const at::Tensor reference =
      at::tensor({1., -2., 12., 17., 4., 4.5, 8., 11.}, at::kDouble).view({2, 4});
  ExpectClose(coder.Decode(coder.Encode(reference, proposals), proposals), reference);
}

TEST(BoxCoderTest, DecodeClipsLogScale) {
  const BoxCoder coder;
  const at::Tensor boxes = at::tensor({0., 0., 16., 16.}, at::kDouble).view({1, 4});
  const at::Tensor codes = at::tensor({0., 0., 50., 50.}, at::kDouble).view({1, 4});
  // exp(log(1000 / 16)) * 16 = 1000 around the centre (8, 8).
  ExpectClose(coder.Decode(codes, boxes),
              at::tensor({-492., -492., 508., 508.}, at::kDouble).view({1, 4}));
}

// The box utilities are ATen expressions, so autograd's gradients are those of the formulas:
// check them against central differences in double.
void ExpectGradientMatchesFiniteDifferences(const std::function<at::Tensor(const at::Tensor&)>& f,
                                            const at::Tensor& x0) {
  const at::Tensor x = x0.clone().requires_grad_(true);
  const at::Tensor probe = at::randn_like(f(x0));
  const at::Tensor grad = torch::autograd::grad({(f(x) * probe).sum()}, {x})[0];
  const double h = 1e-6;
  at::Tensor numeric = at::zeros_like(x0);
  for (int64_t i = 0; i < x0.numel(); ++i) {
    at::Tensor plus = x0.clone(), minus = x0.clone();
    plus.view(-1)[i] += h;
    minus.view(-1)[i] -= h;
    numeric.view(-1)[i] = ((f(plus) - f(minus)) * probe).sum() / (2 * h);
  }
  EXPECT_LT((grad - numeric).abs().max().item<double>(), 1e-6);
}

TEST(BoxesTest, GradientsMatchFiniteDifferences) {
  at::manual_seed(3);
  const at::Tensor xy = at::rand({5, 2}, at::kDouble) * 10;
  const at::Tensor boxes = at::cat({xy, xy + 1 + at::rand({5, 2}, at::kDouble) * 8}, 1);
  const at::Tensor others = boxes.flip(0) + 0.7;
  ExpectGradientMatchesFiniteDifferences([&](const at::Tensor& b) { return BoxIou(b, others); },
                                         boxes);
  const BoxCoder coder(BoxCoderOptions().weights({10.0, 10.0, 5.0, 5.0}));
  ExpectGradientMatchesFiniteDifferences(
      [&](const at::Tensor& b) { return coder.Encode(b, others); }, boxes);
  ExpectGradientMatchesFiniteDifferences(
      [&](const at::Tensor& codes) { return coder.Decode(codes, boxes); },
      at::randn({5, 8}, at::kDouble));
}

TEST(ClipBoxesToImageTest, MatchesTorchvision) {
  for (const auto& [name, t] : LoadGoldenCases("clip_boxes", kGolden)) {
    SCOPED_TRACE(name);
    const at::Tensor size = t.at("size");
    ExpectClose(ClipBoxesToImage(t.at("boxes"), size[0].item<int64_t>(), size[1].item<int64_t>()),
                t.at("clipped"));
  }
}

TEST(RemoveSmallBoxesTest, MatchesTorchvisionKeepLists) {
  for (const auto& [name, t] : LoadGoldenCases("remove_small_boxes", kGolden)) {
    SCOPED_TRACE(name);
    const at::Tensor keep = RemoveSmallBoxes(t.at("boxes"), t.at("min_size").item<double>());
    EXPECT_TRUE(at::equal(keep, t.at("keep"))) << keep << "\nexpected\n" << t.at("keep");
  }
}

TEST(BoxesTest, BadInputIsAnErrorNamingTheArgument) {
  const at::Tensor good = at::tensor({0.f, 0.f, 1.f, 1.f}).view({1, 4});
  const at::Tensor nan = at::tensor({0.f, NAN, 1.f, 1.f}).view({1, 4});
  const at::Tensor inf = at::tensor({0.f, 0.f, INFINITY, 1.f}).view({1, 4});
  ExpectError([&] { BoxIou(good, nan); }, "BoxIou: boxes2 contain NaN or infinite");
  ExpectError([&] { BoxIou(inf, good); }, "BoxIou: boxes1 contain NaN or infinite");
  ExpectError([&] { BoxIou(good.view({2, 2}), good); }, "BoxIou: boxes1 must be [N, 4]");
  ExpectError([&] { BoxIou(good, good.to(at::kDouble)); }, "boxes1 is Float but boxes2 is Double");
  const BoxCoder coder;
  ExpectError([&] { coder.Encode(nan, good); }, "reference_boxes contain NaN");
  ExpectError(
      [&] {
        coder.Encode(good, at::cat({good, good}));
      },
      "reference_boxes has 1 boxes but proposals 2");
  ExpectError([&] { coder.Decode(at::zeros({1, 5}), good); }, "rel_codes must be [N, 4K]");
  ExpectError([&] { coder.Decode(at::full({1, 4}, NAN), good); }, "rel_codes contain NaN");
  ExpectError([&] { coder.Decode(at::zeros({1, 4}), inf); }, "Decode: boxes contain NaN");
  ExpectError(
      [&] {
        BoxCoder(BoxCoderOptions().weights({1.0, 0.0, 1.0, 1.0}));
      },
      "weights must be positive");
  ExpectError([&] { ClipBoxesToImage(inf, 5, 5); }, "ClipBoxesToImage: boxes contain NaN");
  ExpectError([&] { ClipBoxesToImage(at::zeros({2, 3}), 5, 5); }, "boxes must be [..., 4K]");
  ExpectError([&] { RemoveSmallBoxes(nan, 1.0); }, "RemoveSmallBoxes: boxes contain NaN");
  ExpectError([&] { RemoveSmallBoxes(at::zeros({4}), 1.0); }, "boxes must be [N, 4]");
}

TEST(BoxesTest, CudaMatchesCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  for (const auto& [name, t] : LoadGoldenCases("box_coder", kGolden)) {
    SCOPED_TRACE(name);
    const BoxCoder coder = CoderFromWeights(t.at("weights"));
    ExpectClose(coder.Encode(t.at("reference_boxes").cuda(), t.at("proposals").cuda()),
                t.at("encoded"));
    ExpectClose(coder.Decode(t.at("rel_codes").cuda(), t.at("boxes").cuda()), t.at("decoded"));
  }
  for (const auto& [name, t] : LoadGoldenCases("box_iou", kGolden)) {
    SCOPED_TRACE(name);
    ExpectClose(BoxIou(t.at("boxes1").cuda(), t.at("boxes2").cuda()), t.at("iou"));
  }
  for (const auto& [name, t] : LoadGoldenCases("remove_small_boxes", kGolden)) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(
        at::equal(RemoveSmallBoxes(t.at("boxes").cuda(), t.at("min_size").item<double>()).cpu(),
                  t.at("keep")));
  }
}

}  // namespace
}  // namespace vision::models::ops
