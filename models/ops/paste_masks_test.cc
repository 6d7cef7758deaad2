#include "models/ops/paste_masks.h"

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

PasteMasksOptions OptionsFor(const at::Tensor& size) {
  return PasteMasksOptions(size[0].item<int64_t>(), size[1].item<int64_t>());
}

TEST(PasteMasksTest, MatchesTorchvision) {
  for (const auto& [name, t] :
       LoadGoldenCases("paste_masks", "models/ops/testdata/ops_golden2.pth")) {
    SCOPED_TRACE(name);
    const at::Tensor expected = t.at("pasted");
    EXPECT_LT(MaxDiff(PasteMasks(t.at("masks"), t.at("boxes"), OptionsFor(t.at("size"))), expected),
              1e-5);
    // The same pixels above 0.5, except any within rounding of it.
    const at::Tensor binary =
        PasteMasks(t.at("masks"), t.at("boxes"), OptionsFor(t.at("size")).threshold(0.5));
    ASSERT_EQ(binary.scalar_type(), at::kBool);
    const at::Tensor clear = (expected - 0.5).abs() > 1e-5;
    EXPECT_TRUE(at::equal(binary.masked_select(clear), (expected > 0.5).masked_select(clear)));
  }
}

// A 2 x 2 mask of ones with padding 1 is [0, 1, 1, 0] along each axis, over a box grown by
// 4 / 2: box (2, 1)-(4, 3) grows to (1, 0)-(5, 4), a 5-pixel patch from (1, 0). Resizing 4 to 5
// samples at max(0.8 (i + 0.5) - 0.5, 0) = 0, 0.7, 1.5, 2.3, 3.1 gives 0, 0.7, 1, 0.7, 0 (the
// last clamps to the final zero), and the 2-D patch is the outer product.
TEST(PasteMasksTest, HandComputedPlacement) {
  const at::Tensor mask = at::ones({1, 1, 2, 2}, at::kDouble);
  const at::Tensor box = at::tensor({2., 1., 4., 3.}, at::kDouble).view({1, 4});
  const at::Tensor profile = at::tensor({0.0, 0.7, 1.0, 0.7, 0.0}, at::kDouble);
  at::Tensor expected = at::zeros({1, 1, 7, 8}, at::kDouble);
  expected[0][0].slice(0, 0, 5).slice(1, 1, 6).copy_(at::outer(profile, profile));
  EXPECT_LT(MaxDiff(PasteMasks(mask, box, PasteMasksOptions(7, 8)), expected), 1e-12);
}

TEST(PasteMasksTest, BoxesOutsideTheImagePasteNothing) {
  const at::Tensor masks = at::rand({3, 1, 4, 4});
  const at::Tensor boxes =
      at::tensor({-30.f, 2.f, -10.f, 8.f, 3.f, -40.f, 9.f, -20.f, 25.f, 3.f, 40.f, 9.f})
          .view({3, 4});
  EXPECT_EQ(PasteMasks(masks, boxes, PasteMasksOptions(12, 20)).abs().sum().item<double>(), 0);
}

// The paste is linear in the masks, so central differences are exact up to rounding.
TEST(PasteMasksTest, GradientMatchesFiniteDifferences) {
  at::manual_seed(11);
  const at::Tensor masks = at::rand({2, 1, 3, 3}, at::kDouble);
  const at::Tensor boxes =
      at::tensor({1.5, 0.5, 7.2, 5.9, -2., 3., 5., 12.}, at::kDouble).view({2, 4});
  const PasteMasksOptions options(10, 9);
  const at::Tensor x = masks.clone().requires_grad_(true);
  const at::Tensor out = PasteMasks(x, boxes, options);
  const at::Tensor probe = at::randn_like(out);
  const at::Tensor grad = torch::autograd::grad({(out * probe).sum()}, {x})[0];
  at::Tensor numeric = at::zeros_like(masks);
  for (int64_t i = 0; i < masks.numel(); ++i) {
    at::Tensor plus = masks.clone(), minus = masks.clone();
    plus.view(-1)[i] += 1e-3;
    minus.view(-1)[i] -= 1e-3;
    numeric.view(-1)[i] =
        ((PasteMasks(plus, boxes, options) - PasteMasks(minus, boxes, options)) * probe).sum() /
        2e-3;
  }
  EXPECT_GT(grad.abs().sum().item<double>(), 0);
  EXPECT_LT(MaxDiff(grad, numeric), 1e-9);
}

TEST(PasteMasksTest, BadInputIsAnErrorNamingTheArgument) {
  const at::Tensor masks = at::rand({1, 1, 4, 4});
  const at::Tensor box = at::tensor({0.f, 0.f, 4.f, 4.f}).view({1, 4});
  const PasteMasksOptions options(8, 8);
  ExpectError(
      [&] {
        PasteMasks(masks, at::full({1, 4}, NAN), options);
      },
      "PasteMasks: boxes contain NaN or infinite");
  ExpectError(
      [&] {
        PasteMasks(masks, at::full({1, 4}, INFINITY), options);
      },
      "PasteMasks: boxes contain NaN or infinite");
  ExpectError(
      [&] {
        PasteMasks(at::full({1, 1, 4, 4}, NAN), box, options);
      },
      "PasteMasks: masks contain NaN");
  ExpectError(
      [&] {
        PasteMasks(at::rand({1, 2, 4, 4}), box, options);
      },
      "masks must be [N, 1, M, M]");
  ExpectError([&] { PasteMasks(at::rand({1, 1, 4, 5}), box, options); }, "masks must be square");
  ExpectError(
      [&] {
        PasteMasks(masks, at::cat({box, box}), options);
      },
      "masks has 1 masks but boxes 2");
  ExpectError([&] { PasteMasks(masks, box.view({2, 2}), options); }, "boxes must be [N, 4]");
  ExpectError([&] { PasteMasks(masks, box, PasteMasksOptions(-1, 8)); },
              "image size must be non-negative");
}

TEST(PasteMasksTest, CudaMatchesTorchvision) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  for (const auto& [name, t] :
       LoadGoldenCases("paste_masks", "models/ops/testdata/ops_golden2.pth")) {
    SCOPED_TRACE(name);
    EXPECT_LT(
        MaxDiff(PasteMasks(t.at("masks").cuda(), t.at("boxes").cuda(), OptionsFor(t.at("size"))),
                t.at("pasted")),
        1e-5);
  }
}

}  // namespace
}  // namespace vision::models::ops
