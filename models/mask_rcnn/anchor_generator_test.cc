#include "models/mask_rcnn/anchor_generator.h"

#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include "gtest/gtest.h"
#include "models/ops/golden_for_test.h"

namespace vision::models::mask_rcnn {
namespace {

at::Tensor Boxes(const std::vector<float>& values) {
  return at::tensor(values, at::kFloat).view({-1, 4});
}

std::vector<double> ToVector(const at::Tensor& t) {
  const at::Tensor d = t.to(at::kDouble).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

TEST(AnchorGeneratorTest, CellAnchorsHandComputed) {
  const AnchorGenerator generator(
      AnchorGeneratorOptions().sizes({{32}, {33, 8}}).aspect_ratios({{0.5, 1.0, 2.0}, {1.0}}));
  ASSERT_EQ(generator.NumLevels(), 2);
  EXPECT_EQ(generator.NumAnchorsPerLocation(0), 3);
  EXPECT_EQ(generator.NumAnchorsPerLocation(1), 2);
  // Ratio 0.5 (h / w): w = 32 * sqrt(2) = 45.25, h = 32 / sqrt(2) = 22.63; halves 22.63 and 11.31
  // round to 23 and 11. Size 33: halves of 16.5 round to even, 16.
  EXPECT_TRUE(at::equal(generator.CellAnchors(0), Boxes({-23, -11, 23, 11,  //
                                                         -16, -16, 16, 16,  //
                                                         -11, -23, 11, 23})));
  EXPECT_TRUE(at::equal(generator.CellAnchors(1), Boxes({-16, -16, 16, 16, -4, -4, 4, 4})));
}

TEST(AnchorGeneratorTest, DefaultsAreMaskRcnnsFpnAnchors) {
  const AnchorGenerator generator;
  ASSERT_EQ(generator.NumLevels(), 5);
  for (int64_t level = 0; level < 5; ++level) {
    EXPECT_EQ(generator.NumAnchorsPerLocation(level), 3);
    // The square anchor of level l has side 32 * 2^l.
    const double half = 16 << level;
    EXPECT_TRUE(at::equal(generator.CellAnchors(level)[1],
                          at::tensor({-half, -half, half, half}, at::kDouble).to(at::kFloat)));
  }
}

TEST(AnchorGeneratorTest, ShiftsAreRowMajorWithEachLocationsAnchorsTogether) {
  // Batch 10x13 over a 3x4 map: strides 10 / 3 = 3 and 13 / 4 = 3. A second level 1x2: strides
  // 10 and 6.
  const AnchorGenerator generator(
      AnchorGeneratorOptions().sizes({{8, 16}, {4}}).aspect_ratios({{1.0}}));
  const at::Tensor anchors =
      generator.Anchors(10, 13, {at::zeros({2, 5, 3, 4}), at::zeros({2, 5, 1, 2})});
  ASSERT_EQ(anchors.sizes(), (at::IntArrayRef{3 * 4 * 2 + 2, 4}));
  EXPECT_EQ(anchors.scalar_type(), at::kFloat);
  std::vector<float> expected;
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 4; ++x) {
      for (const float half : {4.0f, 8.0f}) {
        expected.insert(expected.end(), {3 * x - half, 3 * y - half, 3 * x + half, 3 * y + half});
      }
    }
  }
  expected.insert(expected.end(), {-2, -2, 2, 2, 4, -2, 8, 2});
  EXPECT_TRUE(at::equal(anchors, Boxes(expected))) << anchors;
  // Double features get double anchors (as in torchvision), half ones float.
  EXPECT_TRUE(at::equal(
      generator.Anchors(10, 13, {at::zeros({1, 1, 3, 4}, at::kDouble), at::zeros({1, 1, 1, 2})}),
      Boxes(expected).to(at::kDouble)));
  EXPECT_TRUE(at::equal(
      generator.Anchors(10, 13, {at::zeros({1, 1, 3, 4}, at::kHalf), at::zeros({1, 1, 1, 2})}),
      Boxes(expected)));
}

TEST(AnchorGeneratorTest, MatchesTorchvision) {
  for (const auto& [name, t] :
       ops::LoadGoldenCases("anchors", "models/mask_rcnn/testdata/rpn_golden.pth")) {
    SCOPED_TRACE(name);
    std::vector<std::vector<double>> sizes;
    std::vector<std::vector<double>> ratios;
    std::vector<at::Tensor> features;
    for (int l = 0; t.count("sizes" + std::to_string(l)); ++l) {
      sizes.push_back(ToVector(t.at("sizes" + std::to_string(l))));
      ratios.push_back(ToVector(t.at("ratios" + std::to_string(l))));
      const at::Tensor hw = t.at("feature_hw" + std::to_string(l));
      features.push_back(at::zeros({1, 4, hw[0].item<int64_t>(), hw[1].item<int64_t>()}));
    }
    const AnchorGenerator generator(AnchorGeneratorOptions().sizes(sizes).aspect_ratios(ratios));
    for (size_t l = 0; l < sizes.size(); ++l) {
      EXPECT_TRUE(at::equal(generator.CellAnchors(l), t.at("cell" + std::to_string(l))));
    }
    const at::Tensor batch_hw = t.at("batch_hw");
    // Integer-valued floats on both sides: exactly equal.
    EXPECT_TRUE(at::equal(generator.Anchors(batch_hw[0].item<int64_t>(),
                                            batch_hw[1].item<int64_t>(), features),
                          t.at("anchors")));
  }
}

TEST(AnchorGeneratorTest, CudaMatchesCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  const AnchorGenerator generator;
  std::vector<at::Tensor> cpu;
  std::vector<at::Tensor> cuda;
  for (int64_t l = 0; l < 5; ++l) {
    cpu.push_back(at::zeros({1, 1, 25 >> l, 33 >> l}));
    cuda.push_back(cpu.back().cuda());
  }
  const at::Tensor on_cuda = generator.Anchors(100, 130, cuda);
  EXPECT_TRUE(on_cuda.is_cuda());
  EXPECT_TRUE(at::equal(on_cuda.cpu(), generator.Anchors(100, 130, cpu)));
}

TEST(AnchorGeneratorTest, RejectsMismatchedLevels) {
  ops::ExpectError(
      [] {
        AnchorGenerator(AnchorGeneratorOptions().sizes({{8}, {16}, {32}}).aspect_ratios({{1}, {2}}));
      },
      "aspect_ratios must have one entry (for every level) or one per level (3), got 2");
  const AnchorGenerator generator;
  ops::ExpectError([&] { generator.Anchors(64, 64, {at::zeros({1, 1, 16, 16})}); },
                   "1 feature maps for 5 anchor levels");
  ops::ExpectError([&] { generator.CellAnchors(5); }, "level 5 out of range [0, 5)");
}

}  // namespace
}  // namespace vision::models::mask_rcnn
