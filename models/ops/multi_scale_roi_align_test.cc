#include "models/ops/multi_scale_roi_align.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/ops/golden_for_test.h"
#include "models/ops/roi_align.h"

namespace vision::models::ops {
namespace {

struct Case {
  std::vector<at::Tensor> features;
  std::vector<at::Tensor> boxes;
  std::vector<std::pair<int64_t, int64_t>> image_sizes;
  MultiScaleRoIAlignOptions options{1, 1};
};

Case FromGolden(const std::map<std::string, at::Tensor>& t) {
  Case c;
  for (int l = 0; l < 3; ++l) c.features.push_back(t.at("feature" + std::to_string(l)));
  const at::Tensor sizes = t.at("image_sizes");
  for (int64_t i = 0; i < sizes.size(0); ++i) {
    c.boxes.push_back(t.at("boxes" + std::to_string(i)));
    c.image_sizes.emplace_back(sizes[i][0].item<int64_t>(), sizes[i][1].item<int64_t>());
  }
  const at::Tensor params = t.at("params");
  c.options = MultiScaleRoIAlignOptions(params[0].item<int64_t>(), params[0].item<int64_t>())
                  .sampling_ratio(params[1].item<int64_t>());
  return c;
}

TEST(MultiScaleRoIAlignTest, MatchesTorchvision) {
  for (const auto& [name, t] :
       LoadGoldenCases("multi_scale_roi_align", "models/ops/testdata/ops_golden2.pth")) {
    SCOPED_TRACE(name);
    const Case c = FromGolden(t);
    EXPECT_LT(
        MaxDiff(MultiScaleRoIAlign(c.features, c.boxes, c.image_sizes, c.options), t.at("output")),
        1e-5);
  }
}

// Levels 2..5 (strides 4..32) of a 256 x 256 image: sqrt(area) 224 is level 4 (the canonical
// rule), 112 level 3, 20 clamps to the finest, 2000 to the coarsest.
TEST(MultiScaleRoIAlignTest, AssignsCanonicalLevels) {
  at::manual_seed(5);
  std::vector<at::Tensor> features;
  for (int64_t stride : {4, 8, 16, 32}) {
    features.push_back(at::randn({1, 2, 256 / stride, 256 / stride}, at::kDouble));
  }
  const at::Tensor boxes = at::tensor({10., 10., 234., 234., 20., 30., 132., 142., 0., 0., 20., 20.,
                                       -800., -800., 1200., 1200.},
                                      at::kDouble)
                               .view({4, 4});
  const MultiScaleRoIAlignOptions options(3, 3);
  const at::Tensor out = MultiScaleRoIAlign(features, {boxes}, {{256, 256}}, options);
  const int expected_level[] = {2, 1, 0, 3};
  for (int64_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    const int level = expected_level[i];
    const at::Tensor roi = at::cat({at::zeros({1, 1}, at::kDouble), boxes.slice(0, i, i + 1)}, 1);
    const at::Tensor direct =
        RoIAlign(features[level], roi,
                 RoIAlignOptions(3, 3).spatial_scale(1.0 / (4 << level)).sampling_ratio(2));
    EXPECT_LT(MaxDiff(out.slice(0, i, i + 1), direct), 1e-12);
  }
}

// A box of negative area (x2 < x1 only) has a NaN level and matches none: its row is zeros, as
// in torchvision.
TEST(MultiScaleRoIAlignTest, BoxWithoutALevelGetsZeros) {
  at::manual_seed(6);
  std::vector<at::Tensor> features;
  for (int64_t stride : {4, 8}) features.push_back(at::randn({1, 2, 64 / stride, 64 / stride}));
  const at::Tensor boxes = at::tensor({0.f, 0.f, 20.f, 20.f, 30.f, 5.f, 10.f, 40.f}).view({2, 4});
  const MultiScaleRoIAlignOptions options(3, 3);
  const at::Tensor out = MultiScaleRoIAlign(features, {boxes}, {{64, 64}}, options);
  EXPECT_EQ(out[1].abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(at::equal(out.slice(0, 0, 1), MultiScaleRoIAlign(features, {boxes.slice(0, 0, 1)},
                                                               {{64, 64}}, options)));
}

// Every level gets a gradient, zeros where no box went (torchvision's behaviour), so callers
// that ask autograd for each level's gradient never meet an undefined one.
TEST(MultiScaleRoIAlignTest, LevelsWithoutBoxesGetZeroGradients) {
  std::vector<at::Tensor> features;
  for (int64_t stride : {4, 8}) {
    features.push_back(at::randn({1, 2, 64 / stride, 64 / stride}, at::kDouble).requires_grad_(true));
  }
  // A 20 px box goes to the finest level only.
  const at::Tensor boxes = at::tensor({0., 0., 20., 20.}, at::kDouble).view({1, 4});
  MultiScaleRoIAlign(features, {boxes}, {{64, 64}}, MultiScaleRoIAlignOptions(2, 2)).sum().backward();
  ASSERT_TRUE(features[0].grad().defined());
  EXPECT_GT(features[0].grad().abs().sum().item<double>(), 0.0);
  ASSERT_TRUE(features[1].grad().defined());
  EXPECT_EQ(features[1].grad().abs().sum().item<double>(), 0.0);
}

// MultiScaleRoIAlign is linear in the features, so central differences are exact up to rounding.
TEST(MultiScaleRoIAlignTest, GradientMatchesFiniteDifferences) {
  at::manual_seed(7);
  std::vector<at::Tensor> features = {at::randn({2, 1, 8, 8}, at::kDouble),
                                      at::randn({2, 1, 4, 4}, at::kDouble)};
  const std::vector<at::Tensor> boxes = {
      at::tensor({1., 2., 9., 12., 0., 0., 31., 30.}, at::kDouble).view({2, 4}),
      at::tensor({4., 4., 30., 22.}, at::kDouble).view({1, 4})};
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{32, 32}, {30, 28}};
  // canonical_scale 16 at level 3 spreads these boxes over both levels (2 and 3).
  const MultiScaleRoIAlignOptions options =
      MultiScaleRoIAlignOptions(2, 3).canonical_scale(16).canonical_level(3);
  std::vector<at::Tensor> leaves;
  for (const at::Tensor& f : features) leaves.push_back(f.clone().requires_grad_(true));
  const at::Tensor out = MultiScaleRoIAlign(leaves, boxes, sizes, options);
  const at::Tensor probe = at::randn_like(out);
  const auto grads = torch::autograd::grad({(out * probe).sum()}, leaves);
  for (size_t l = 0; l < features.size(); ++l) {
    SCOPED_TRACE(l);
    EXPECT_GT(grads[l].abs().sum().item<double>(), 0) << "no box pooled from level " << l;
    at::Tensor numeric = at::zeros_like(features[l]);
    for (int64_t i = 0; i < features[l].numel(); ++i) {
      std::vector<at::Tensor> plus = features, minus = features;
      plus[l] = features[l].clone();
      minus[l] = features[l].clone();
      plus[l].view(-1)[i] += 1e-3;
      minus[l].view(-1)[i] -= 1e-3;
      numeric.view(-1)[i] = ((MultiScaleRoIAlign(plus, boxes, sizes, options) -
                              MultiScaleRoIAlign(minus, boxes, sizes, options)) *
                             probe)
                                .sum() /
                            2e-3;
    }
    EXPECT_LT(MaxDiff(grads[l], numeric), 1e-9);
  }
}

TEST(MultiScaleRoIAlignTest, BadInputIsAnErrorNamingTheArgument) {
  const std::vector<at::Tensor> features = {at::zeros({1, 2, 8, 8}), at::zeros({1, 2, 4, 4})};
  const at::Tensor box = at::tensor({0.f, 0.f, 4.f, 4.f}).view({1, 4});
  const MultiScaleRoIAlignOptions options(2, 2);
  ExpectError([&] { MultiScaleRoIAlign({}, {box}, {{32, 32}}, options); }, "features is empty");
  ExpectError(
      [&] {
        MultiScaleRoIAlign(features, {box, box}, {{32, 32}}, options);
      },
      "boxes has 2 tensors but the features a batch of 1");
  ExpectError([&] { MultiScaleRoIAlign(features, {box}, {}, options); },
              "image_sizes has 0 entries but boxes 1");
  ExpectError(
      [&] {
        MultiScaleRoIAlign(features, {at::full({1, 4}, NAN)}, {{32, 32}}, options);
      },
      "MultiScaleRoIAlign: boxes[0] contain NaN or infinite");
  ExpectError(
      [&] {
        MultiScaleRoIAlign(features, {box.view({2, 2})}, {{32, 32}}, options);
      },
      "boxes[0] must be [N, 4]");
  ExpectError(
      [&] {
        MultiScaleRoIAlign({features[0], at::zeros({1, 3, 4, 4})}, {box}, {{32, 32}}, options);
      },
      "features[1] is [1, 3, 4, 4] but features[0] is [1, 2, 8, 8]");
  ExpectError(
      [&] {
        MultiScaleRoIAlign(features, {box.to(at::kDouble)}, {{32, 32}}, options);
      },
      "boxes[0] is Double on cpu but the features are Float");
  ExpectError(
      [&] {
        MultiScaleRoIAlign(features, {box}, {{0, 32}}, options);
      },
      "image_sizes[0] must be positive");
}

TEST(MultiScaleRoIAlignTest, CudaMatchesTorchvision) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  for (const auto& [name, t] :
       LoadGoldenCases("multi_scale_roi_align", "models/ops/testdata/ops_golden2.pth")) {
    SCOPED_TRACE(name);
    Case c = FromGolden(t);
    for (at::Tensor& f : c.features) f = f.cuda();
    for (at::Tensor& b : c.boxes) b = b.cuda();
    EXPECT_LT(
        MaxDiff(MultiScaleRoIAlign(c.features, c.boxes, c.image_sizes, c.options), t.at("output")),
        1e-5);
  }
}

}  // namespace
}  // namespace vision::models::ops
