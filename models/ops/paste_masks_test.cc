#include "models/ops/paste_masks.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include <algorithm>
#include <functional>
#include <iostream>
#include <string>

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

// Random boxes over a 37 x 53 image: inside, across each edge and corner, wholly outside on
// every side, larger than the image, degenerate (zero width or height, a point) and inverted.
at::Tensor AwkwardBoxes(at::ScalarType dtype) {
  const at::Tensor centre =
      at::rand({60, 2}, at::kDouble) * at::tensor({90., 70.}) - at::tensor({20., 15.});
  const at::Tensor size = at::rand({60, 2}, at::kDouble) * at::tensor({60., 45.});
  at::Tensor random = at::cat({centre - size / 2, centre + size / 2}, 1);
  const at::Tensor fixed =
      at::tensor({
                     -30., 2.,   -10., 8.,    // left of the image
                     3.,   -40., 9.,   -20.,  // above
                     60.,  3.,   80.,  9.,    // right
                     3.,   45.,  9.,   60.,   // below
                     -5.,  -7.,  4.,   5.,    // across the top-left corner
                     47.,  30.,  70.,  50.,   // across the bottom-right corner
                     -20., -20., 80.,  60.,   // larger than the image
                     10.,  10.,  10.,  20.,   // zero width
                     10.,  10.,  25.,  10.,   // zero height
                     12.5, 7.5,  12.5, 7.5,   // a point
                     30.,  20.,  10.,  5.,    // inverted
                     52.3, 36.2, 58.,  41.,   // a corner pixel at the last row and column
                 })
          .view({-1, 4});
  return at::cat({random, fixed}).to(dtype);
}

// torchvision's paste_mask_in_image box by box, as plainly as it can be written: expand_boxes in
// the boxes' dtype, the padded mask resized with F.interpolate's kernel (upsample_bilinear2d,
// align_corners false) to the integer box and copied into a zero image where it overlaps it.
at::Tensor ReferencePaste(const at::Tensor& masks, const at::Tensor& boxes, int64_t height,
                          int64_t width, int64_t padding) {
  const int64_t n = masks.size(0), m = masks.size(-1);
  const at::Tensor padded =
      at::constant_pad_nd(masks.view({n, 1, m, m}), {padding, padding, padding, padding});
  const double scale = static_cast<double>(m + 2 * padding) / static_cast<double>(m);
  at::Tensor out = at::zeros({n, 1, height, width}, masks.options());
  for (int64_t i = 0; i < n; ++i) {
    const at::Tensor b = boxes[i];
    const at::Tensor w_half = (b[2] - b[0]) * 0.5 * scale, h_half = (b[3] - b[1]) * 0.5 * scale;
    const at::Tensor x_c = (b[2] + b[0]) * 0.5, y_c = (b[3] + b[1]) * 0.5;
    const int64_t x0 = (x_c - w_half).item().toLong(), x1 = (x_c + w_half).item().toLong();
    const int64_t y0 = (y_c - h_half).item().toLong(), y1 = (y_c + h_half).item().toLong();
    const at::Tensor resized = at::upsample_bilinear2d(
        padded[i].unsqueeze(0),
        {std::max<int64_t>(y1 - y0 + 1, 1), std::max<int64_t>(x1 - x0 + 1, 1)},
        /*align_corners=*/false)[0][0];
    const int64_t xs = std::max<int64_t>(x0, 0), xe = std::min(x1 + 1, width);
    const int64_t ys = std::max<int64_t>(y0, 0), ye = std::min(y1 + 1, height);
    if (xs >= xe || ys >= ye) continue;
    out[i][0].slice(0, ys, ye).slice(1, xs, xe).copy_(
        resized.slice(0, ys - y0, ye - y0).slice(1, xs - x0, xe - x0));
  }
  return out;
}

// The CPU loop (float and double without autograd) against torchvision's algorithm box by box,
// and against the matrix products that autograd, CUDA and half precision use (and that the CPU
// used before the loop), which it reproduces operation for operation: on x86-64 with MKL's
// fused multiply-add kernels the two agree bit for bit (the test prints how many values differ);
// the assertion allows a last-bit difference for BLAS builds that round differently.
TEST(PasteMasksTest, CpuLoopMatchesReferenceAndMatrixProducts) {
  at::manual_seed(5);
  for (const at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    for (const int64_t padding : {0, 1, 3}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " padding " + std::to_string(padding));
      const at::Tensor boxes = AwkwardBoxes(dtype);
      const at::Tensor masks = at::rand({boxes.size(0), 1, 28, 28}, dtype);
      const PasteMasksOptions options = PasteMasksOptions(37, 53).padding(padding);
      const at::Tensor loop = PasteMasks(masks, boxes, options);
      ASSERT_EQ(loop.sizes(), (std::vector<int64_t>{boxes.size(0), 1, 37, 53}));
      ASSERT_EQ(loop.scalar_type(), dtype);
      EXPECT_LT(MaxDiff(loop, ReferencePaste(masks, boxes, 37, 53, padding)),
                dtype == at::kFloat ? 1e-5 : 1e-12);
      // With autograd recording, PasteMasks takes the matrix products.
      const at::Tensor matrix =
          PasteMasks(masks.clone().requires_grad_(true), boxes, options).detach();
      const int64_t differ = loop.ne(matrix).sum().item<int64_t>();
      std::cout << c10::toString(dtype) << " padding " << padding << ": " << differ << " of "
                << loop.numel() << " values differ from the matrix products\n";
      EXPECT_LE(MaxDiff(loop, matrix), dtype == at::kFloat ? 1e-6 : 1e-15);
      // Outside the boxes' pixels nothing is written: the zeros are where the matrices' are.
      EXPECT_TRUE(at::equal(loop.eq(0), matrix.eq(0)));
      for (const double threshold : {0.5, 0.3, -0.1}) {
        const at::Tensor binary =
            PasteMasks(masks, boxes, PasteMasksOptions(options).threshold(threshold));
        ASSERT_EQ(binary.scalar_type(), at::kBool);
        EXPECT_TRUE(at::equal(binary, loop > threshold)) << "threshold " << threshold;
        const at::Tensor clear = (matrix - threshold).abs() > 1e-6;
        EXPECT_TRUE(
            at::equal(binary.masked_select(clear), (matrix > threshold).masked_select(clear)))
            << "threshold " << threshold;
      }
    }
  }
}

TEST(PasteMasksTest, EmptyInputsAndImages) {
  const at::Tensor masks = at::rand({2, 1, 4, 4});
  const at::Tensor boxes = at::tensor({0.f, 0.f, 4.f, 4.f, 1.f, 1.f, 3.f, 3.f}).view({2, 4});
  EXPECT_EQ(PasteMasks(masks, boxes, PasteMasksOptions(0, 8)).sizes(),
            (std::vector<int64_t>{2, 1, 0, 8}));
  EXPECT_EQ(PasteMasks(masks, boxes, PasteMasksOptions(8, 0).threshold(0.5)).sizes(),
            (std::vector<int64_t>{2, 1, 8, 0}));
  EXPECT_EQ(PasteMasks(masks.slice(0, 0, 0), boxes.slice(0, 0, 0), PasteMasksOptions(8, 8)).sizes(),
            (std::vector<int64_t>{0, 1, 8, 8}));
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
