#include "models/ops/max_pool.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace vision::models::ops {
namespace {

// StemMaxPool against ATen's max_pool2d_with_indices(3, 2, 1): outputs, the gradient that
// flows through the indices, bit for bit. Inputs with many ties (small integers, and ReLU-like
// zeros) exercise the first-maximum rule; NaN and -inf the comparison's edge cases.
void ExpectSameAsATen(const at::Tensor& input) {
  SCOPED_TRACE(::testing::Message() << "input " << input.sizes() << " " << input.scalar_type());
  const at::Tensor ours_in = input.clone().requires_grad_();
  const at::Tensor aten_in = input.clone().requires_grad_();
  const at::Tensor ours = StemMaxPool(ours_in);
  const auto [aten, indices] =
      at::max_pool2d_with_indices(aten_in, {3, 3}, {2, 2}, {1, 1}, {1, 1}, /*ceil_mode=*/false);
  ASSERT_EQ(ours.sizes(), aten.sizes());
  EXPECT_TRUE(at::equal(ours.isnan(), aten.isnan()));
  EXPECT_TRUE(at::equal(at::nan_to_num(ours, 7.0), at::nan_to_num(aten, 7.0)));
  const at::Tensor weights = at::randn(ours.sizes(), input.options());
  (ours * weights).sum().backward();
  (aten * weights).sum().backward();
  EXPECT_TRUE(at::equal(ours_in.grad(), aten_in.grad()));
}

TEST(StemMaxPoolTest, EqualsATenOnEverySizeUpToNine) {
  at::manual_seed(0);
  for (int64_t h = 1; h <= 9; ++h) {
    for (int64_t w = 1; w <= 9; ++w) {
      ExpectSameAsATen(at::randn({2, 3, h, w}));
      // Ties everywhere: values in {-1, 0, 1, 2}.
      ExpectSameAsATen(at::randint(-1, 3, {1, 2, h, w}).to(at::kFloat));
    }
  }
}

TEST(StemMaxPoolTest, EqualsATenOnAStemSizedInputAfterReLU) {
  at::manual_seed(1);
  // The stem's BatchNorm output shape at a 160 x 120 input, with the zeros ReLU would leave:
  // whole windows of zeros and of equal values.
  ExpectSameAsATen(at::relu(at::randn({2, 8, 80, 60})));
  ExpectSameAsATen(at::randn({2, 8, 81, 61}, at::kDouble));
  ExpectSameAsATen(at::randn({4, 33, 17}));  // [C, H, W]
}

TEST(StemMaxPoolTest, NaNAndInfinitiesAsATen) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  at::manual_seed(2);
  at::Tensor x = at::randn({1, 2, 11, 10});
  x.index_put_({0, 0, 3, 4}, nan);
  x.index_put_({0, 0, 3, 5}, nan);  // two NaNs in a window: ATen keeps the last
  x.index_put_({0, 1, 0, 0}, nan);  // a NaN in a border window
  x.index_put_({0, 1, 6, 6}, inf);
  x.index_put_({0, 1, 8, 0}, -inf);
  x.index_put_({0, 0, 9, 9}, -inf);
  x.index_put_({0, 0, 10, 9}, -inf);  // with 9, 8 and 10, 8 left: a border window
  x.index_put_({0, 0, 9, 8}, -inf);
  x.index_put_({0, 0, 10, 8}, -inf);
  ExpectSameAsATen(x);
  // A window of -inf only: the index is the window's first element, the output -inf.
  ExpectSameAsATen(at::full({1, 1, 5, 5}, -inf));
}

TEST(StemMaxPoolTest, OtherLayoutsAndTypesGoToATen) {
  at::manual_seed(3);
  const at::Tensor nhwc = at::randn({2, 4, 9, 8}).contiguous(at::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(at::equal(StemMaxPool(nhwc), at::max_pool2d(nhwc, {3, 3}, {2, 2}, {1, 1})));
  const at::Tensor bf16 = at::randn({1, 2, 7, 7}).to(at::kBFloat16);
  EXPECT_TRUE(at::equal(StemMaxPool(bf16), at::max_pool2d(bf16, {3, 3}, {2, 2}, {1, 1})));
  const at::Tensor strided = at::randn({2, 3, 10, 12}).transpose(2, 3);
  EXPECT_TRUE(at::equal(StemMaxPool(strided), at::max_pool2d(strided, {3, 3}, {2, 2}, {1, 1})));
  EXPECT_THROW(StemMaxPool(at::randn({5, 5})), c10::Error);
}

}  // namespace
}  // namespace vision::models::ops
