#include "models/ops/roi_align.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/ops/golden_for_test.h"

namespace vision::models::ops {
namespace {

// [output_height, output_width, spatial_scale, sampling_ratio, aligned], as the golden file
// stores them.
RoIAlignOptions OptionsFromParams(const at::Tensor& params) {
  const at::Tensor p = params.to(at::kDouble);
  return RoIAlignOptions(p[0].item<int64_t>(), p[1].item<int64_t>())
      .spatial_scale(p[2].item<double>())
      .sampling_ratio(p[3].item<int64_t>())
      .aligned(p[4].item<double>() != 0);
}

struct Evaluation {
  at::Tensor output;
  at::Tensor grad_input;  // of sum(output * probe)
};

Evaluation Evaluate(const at::Tensor& input, const at::Tensor& rois, const at::Tensor& probe,
                    const RoIAlignOptions& options) {
  const at::Tensor x = input.detach().clone().requires_grad_(true);
  const at::Tensor output = RoIAlign(x, rois, options);
  (output * probe).sum().backward();
  return {output.detach(), x.grad()};
}

TEST(RoIAlignTest, MatchesTorchvisionOutputAndInputGradient) {
  for (const auto& [name, t] : LoadGoldenCases("roi_align")) {
    SCOPED_TRACE(name);
    const Evaluation e =
        Evaluate(t.at("input"), t.at("rois"), t.at("probe"), OptionsFromParams(t.at("params")));
    EXPECT_LT(MaxDiff(e.output, t.at("output")), 1e-5);
    EXPECT_LT(MaxDiff(e.grad_input, t.at("grad_input")), 1e-5);
  }
}

// Boxes inside, on the border of, larger than and outside a 5 x 6 map at spatial scale 0.5.
at::Tensor MixedRois() {
  return at::tensor({0., 1.2, 0.7, 7.9,  6.1,  1., 0., 0., 12., 10., 0., -3., -2., 14., 13.,
                     1., 9.5, 7.5, 12.5, 10.3, 0., 3., 3., 3.,  3.,  1., -9., -9., -4., -5.},
                    at::kDouble)
      .view({6, 5});
}

// RoIAlign is linear in its input, so central differences are exact up to rounding.
TEST(RoIAlignTest, GradientMatchesFiniteDifferences) {
  at::manual_seed(3);
  const at::Tensor input = at::randn({2, 2, 5, 6}, at::kDouble);
  const at::Tensor rois = MixedRois();
  for (const RoIAlignOptions& options :
       {RoIAlignOptions(2, 3).spatial_scale(0.5),
        RoIAlignOptions(3, 2).spatial_scale(0.5).sampling_ratio(2).aligned(true)}) {
    SCOPED_TRACE(::testing::Message() << "aligned " << options.aligned());
    const at::Tensor probe =
        at::randn({rois.size(0), 2, options.output_height(), options.output_width()}, at::kDouble);
    const at::Tensor analytic = Evaluate(input, rois, probe, options).grad_input;
    const double eps = 1e-6;
    at::Tensor numeric = at::empty_like(input);
    for (int64_t i = 0; i < input.numel(); ++i) {
      at::Tensor plus = input.clone();
      at::Tensor minus = input.clone();
      plus.view(-1)[i] += eps;
      minus.view(-1)[i] -= eps;
      numeric.view(-1)[i] =
          ((RoIAlign(plus, rois, options) - RoIAlign(minus, rois, options)) * probe).sum() /
          (2 * eps);
    }
    EXPECT_LT(MaxDiff(analytic, numeric), 1e-7);
    EXPECT_GT(analytic.abs().max().item<double>(), 0.1);
  }
}

// The backward of the backward is RoIAlign itself (see roi_align.cc).
TEST(RoIAlignTest, DoubleBackwardIsRoIAlign) {
  at::manual_seed(4);
  const RoIAlignOptions options = RoIAlignOptions(2, 2).spatial_scale(0.5).aligned(true);
  const at::Tensor x = at::randn({2, 2, 5, 6}, at::kDouble).requires_grad_(true);
  const at::Tensor rois = MixedRois();
  const at::Tensor out = RoIAlign(x, rois, options);
  const at::Tensor g = at::randn_like(out).requires_grad_(true);
  const at::Tensor grad_x = torch::autograd::grad({out}, {x}, {g}, /*retain_graph=*/true,
                                                  /*create_graph=*/true)[0];
  const at::Tensor v = at::randn_like(x);
  const at::Tensor grad_g = torch::autograd::grad({(grad_x * v).sum()}, {g})[0];
  EXPECT_LT(MaxDiff(grad_g, RoIAlign(v, rois, options)), 1e-12);
}

// Over input(y, x) = x each bin averages to its centre's x: 2.5 and 4.5 for bins of width 2
// starting at 2 - 0.5 (aligned), 3 and 5 starting at 2 (not aligned).
TEST(RoIAlignTest, AveragesARampToBinCentres) {
  const at::Tensor ramp = at::arange(10, at::kFloat).expand({1, 1, 8, 10}).contiguous();
  const at::Tensor roi = at::tensor({0.f, 2.f, 1.f, 6.f, 5.f}).view({1, 5});
  const RoIAlignOptions options = RoIAlignOptions(2, 2).sampling_ratio(2);
  const at::Tensor aligned = RoIAlign(ramp, roi, RoIAlignOptions(options).aligned(true));
  const at::Tensor plain = RoIAlign(ramp, roi, options);
  EXPECT_TRUE(at::equal(aligned, at::tensor({2.5f, 4.5f, 2.5f, 4.5f}).view({1, 1, 2, 2})))
      << aligned;
  EXPECT_TRUE(at::equal(plain, at::tensor({3.f, 5.f, 3.f, 5.f}).view({1, 1, 2, 2}))) << plain;
}

TEST(RoIAlignTest, HalfInputIsComputedInFloat) {
  at::manual_seed(5);
  const at::Tensor input = at::randn({2, 3, 6, 7}).to(at::kHalf);
  const at::Tensor rois = MixedRois().to(at::kHalf);
  const RoIAlignOptions options = RoIAlignOptions(2, 2).spatial_scale(0.5);
  const at::Tensor x = input.clone().requires_grad_(true);
  const at::Tensor out = RoIAlign(x, rois, options);
  EXPECT_EQ(out.scalar_type(), at::kHalf);
  EXPECT_TRUE(
      at::equal(out, RoIAlign(input.to(at::kFloat), rois.to(at::kFloat), options).to(at::kHalf)));
  out.sum().backward();
  EXPECT_EQ(x.grad().scalar_type(), at::kHalf);
}

// Forward splits RoIs, backward channels, across threads: both must equal one thread's result
// bit for bit.
TEST(RoIAlignTest, ThreadsDoNotChangeResults) {
  at::manual_seed(6);
  const at::Tensor input = at::randn({2, 16, 20, 20});
  const at::Tensor xy = at::rand({64, 2}) * 30;
  const at::Tensor rois =
      at::cat({at::randint(2, {64, 1}).to(at::kFloat), xy, xy + at::rand({64, 2}) * 15}, 1);
  const RoIAlignOptions options = RoIAlignOptions(7, 7).spatial_scale(0.5);
  const at::Tensor probe = at::randn({64, 16, 7, 7});
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const Evaluation serial = Evaluate(input, rois, probe, options);
  at::set_num_threads(std::max(threads, 2));
  const Evaluation parallel = Evaluate(input, rois, probe, options);
  at::set_num_threads(threads);
  EXPECT_TRUE(at::equal(parallel.output, serial.output));
  EXPECT_TRUE(at::equal(parallel.grad_input, serial.grad_input));
}

// Many RoIs on a many-channel map take the channels-last forward and backward; one channel at a
// time (fewer than 8 channels) the same RoIs take the channels-first loops. Per channel both do
// the same operations in the same order, so outputs and input gradients are equal bit for bit.
// RoIs partly outside the map, adaptive and fixed sampling, aligned or not, float and double.
TEST(RoIAlignTest, ChannelsLastEqualsChannelsFirst) {
  at::manual_seed(7);
  for (const at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    const int64_t channels = 24;
    const int64_t count = 40;
    const at::Tensor input = at::randn({2, channels, 20, 20}, dtype);
    const at::Tensor xy = at::rand({count, 2}, dtype) * 50 - 5;
    const at::Tensor rois =
        at::cat({at::randint(2, {count, 1}, dtype), xy, xy + at::rand({count, 2}, dtype) * 30}, 1);
    const at::Tensor probe = at::randn({count, channels, 7, 7}, dtype);
    for (const int64_t sampling_ratio : {0, 2}) {
      for (const bool aligned : {false, true}) {
        SCOPED_TRACE(testing::Message()
                     << dtype << " sampling_ratio " << sampling_ratio << " aligned " << aligned);
        const RoIAlignOptions options = RoIAlignOptions(7, 7)
                                            .spatial_scale(0.5)
                                            .sampling_ratio(sampling_ratio)
                                            .aligned(aligned);
        const Evaluation together = Evaluate(input, rois, probe, options);
        std::vector<at::Tensor> outputs, grads;
        for (int64_t c = 0; c < channels; ++c) {
          const Evaluation alone =
              Evaluate(input.narrow(1, c, 1), rois, probe.narrow(1, c, 1), options);
          outputs.push_back(alone.output);
          grads.push_back(alone.grad_input);
        }
        EXPECT_TRUE(at::equal(together.output, at::cat(outputs, 1)));
        EXPECT_TRUE(at::equal(together.grad_input, at::cat(grads, 1)));
      }
    }
  }
}

// A channels-last input (a channels-last backbone's map) goes to the channels-last forward as
// it is, whatever the RoI count; outputs and input gradients equal those of the NCHW input, with
// few RoIs (the NCHW input takes the channels-first loops) and many (both take channels-last).
TEST(RoIAlignTest, ChannelsLastInputEqualsContiguousInput) {
  at::manual_seed(8);
  for (const at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    const at::Tensor input = at::randn({2, 16, 30, 30}, dtype);
    const at::Tensor channels_last = input.contiguous(at::MemoryFormat::ChannelsLast);
    ASSERT_FALSE(channels_last.is_contiguous());
    for (const int64_t count : {3, 400}) {
      SCOPED_TRACE(testing::Message() << dtype << " " << count << " RoIs");
      const at::Tensor xy = at::rand({count, 2}, dtype) * 70 - 5;
      const at::Tensor rois = at::cat(
          {at::randint(2, {count, 1}, dtype), xy, xy + at::rand({count, 2}, dtype) * 30}, 1);
      const at::Tensor probe = at::randn({count, 16, 7, 7}, dtype);
      const RoIAlignOptions options = RoIAlignOptions(7, 7).spatial_scale(0.5).sampling_ratio(2);
      const Evaluation nchw = Evaluate(input, rois, probe, options);
      const Evaluation nhwc = Evaluate(channels_last, rois, probe, options);
      EXPECT_TRUE(at::equal(nchw.output, nhwc.output));
      EXPECT_TRUE(at::equal(nchw.grad_input, nhwc.grad_input));
    }
  }
}

TEST(RoIAlignTest, NoRoisGiveAnEmptyOutput) {
  const at::Tensor x = at::randn({2, 3, 4, 4}).requires_grad_(true);
  const at::Tensor out = RoIAlign(x, at::zeros({0, 5}), RoIAlignOptions(2, 2));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{0, 3, 2, 2}));
  out.sum().backward();
  EXPECT_TRUE(at::equal(x.grad(), at::zeros_like(x)));
}

void ExpectBadInputErrors(const at::Device& device) {
  const at::Tensor input = at::randn({2, 3, 5, 6}).to(device);
  const at::Tensor rois = MixedRois().to(at::kFloat).to(device);
  const RoIAlignOptions options(2, 2);
  ExpectError([&] { RoIAlign(input[0], rois, options); }, "input must be [B, C, H, W]");
  ExpectError([&] { RoIAlign(input.narrow(3, 0, 0), rois, options); },
              "input must have a non-empty H x W map");
  ExpectError([&] { RoIAlign(input.to(at::kInt), rois, options); }, "input must be floating point");
  ExpectError([&] { RoIAlign(input, rois.narrow(1, 1, 4), options); }, "rois must be [K, 5]");
  ExpectError([&] { RoIAlign(input, rois.to(at::kDouble), options); },
              "rois are Double but input is Float");
  ExpectError([&] { RoIAlign(input, rois, RoIAlignOptions(0, 2)); },
              "output size must be positive");
  for (double scale : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN()}) {
    ExpectError([&] { RoIAlign(input, rois, RoIAlignOptions(2, 2).spatial_scale(scale)); },
                "spatial_scale must be positive and finite");
  }
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    at::Tensor corrupt = rois.clone();
    corrupt[3][2] = bad;
    ExpectError([&] { RoIAlign(input, corrupt, options); }, "rois contain NaN or infinite values");
  }
  for (float index : {-1.f, 2.f, 7.f}) {
    at::Tensor corrupt = rois.clone();
    corrupt[4][0] = index;
    ExpectError([&] { RoIAlign(input, corrupt, options); },
                "rois[:, 0] must hold batch indices in [0, 2)");
  }
}

TEST(RoIAlignTest, BadInputIsAnErrorNamingTheArgument) { ExpectBadInputErrors(at::kCPU); }

TEST(RoIAlignCudaTest, MatchesCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: CUDA RoIAlign not run";
  for (const auto& [name, t] : LoadGoldenCases("roi_align")) {
    SCOPED_TRACE(name);
    const Evaluation e = Evaluate(t.at("input").cuda(), t.at("rois").cuda(), t.at("probe").cuda(),
                                  OptionsFromParams(t.at("params")));
    EXPECT_TRUE(e.output.is_cuda());
    EXPECT_LT(MaxDiff(e.output, t.at("output")), 1e-5);
    EXPECT_LT(MaxDiff(e.grad_input, t.at("grad_input")), 1e-5);
  }
  // Many overlapping RoIs: the backward's atomics collide.
  at::manual_seed(7);
  const at::Tensor input = at::randn({2, 8, 24, 24}, at::kDouble);
  const at::Tensor xy = at::rand({300, 2}, at::kDouble) * 40 - 4;
  const at::Tensor rois = at::cat(
      {at::randint(2, {300, 1}, at::kDouble), xy, xy + at::rand({300, 2}, at::kDouble) * 20}, 1);
  for (const RoIAlignOptions& options :
       {RoIAlignOptions(7, 7).spatial_scale(0.5),
        RoIAlignOptions(5, 3).spatial_scale(0.5).sampling_ratio(2).aligned(true)}) {
    const at::Tensor probe =
        at::randn({300, 8, options.output_height(), options.output_width()}, at::kDouble);
    const Evaluation cpu = Evaluate(input, rois, probe, options);
    const Evaluation cuda = Evaluate(input.cuda(), rois.cuda(), probe.cuda(), options);
    EXPECT_LT(MaxDiff(cuda.output, cpu.output), 1e-12);
    EXPECT_LT(MaxDiff(cuda.grad_input, cpu.grad_input), 1e-10);
    const Evaluation cuda_float = Evaluate(input.cuda().to(at::kFloat), rois.cuda().to(at::kFloat),
                                           probe.cuda().to(at::kFloat), options);
    EXPECT_LT(MaxDiff(cuda_float.output, cpu.output), 1e-5);
    EXPECT_LT(MaxDiff(cuda_float.grad_input, cpu.grad_input), 1e-4);
  }
}

TEST(RoIAlignCudaTest, BadInputIsAnErrorNamingTheArgument) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: CUDA RoIAlign not run";
  ExpectBadInputErrors(at::Device(at::kCUDA));
  ExpectError(
      [&] {
        RoIAlign(at::randn({1, 1, 4, 4}).cuda(), at::zeros({1, 5}), RoIAlignOptions(2, 2));
      },
      "input is on cuda:0 but rois on cpu");
}

}  // namespace
}  // namespace vision::models::ops
