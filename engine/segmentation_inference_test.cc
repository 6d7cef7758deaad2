#include "engine/segmentation_inference.h"

#include <algorithm>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include "core/batch.h"
#include "core/segmentation_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kClasses = 3;

// Logits that are a known function of the input [N, 3, H, W] -> [N, 3, H, W]: a fixed 1x1
// convolution of the pixels, plus a ramp over the columns (so flipping changes the result),
// plus each input's mean (so what a window sees, padding included, changes the result).
at::Tensor KnownLogits(const at::Tensor& images) {
  const at::TensorOptions on = images.options().dtype(at::kFloat);
  const at::Tensor weight =
      at::tensor({0.9, -0.4, 0.3, -0.2, 0.8, -0.5, 0.1, 0.2, 0.7}, on).view({3, 3});
  const at::Tensor bias = at::tensor({0.1, -0.2, 0.05}, on).view({1, 3, 1, 1});
  const at::Tensor ramp = at::tensor({0.15, -0.1, 0.02}, on).view({1, 3, 1, 1});
  const at::Tensor global = at::tensor({1.5, -1.0, 0.5}, on).view({1, 3, 1, 1});
  const int64_t width = images.size(3);
  const at::Tensor mixed = at::einsum("kc,nchw->nkhw", {weight, images}) + bias;
  const at::Tensor columns = at::arange(width, on).view({1, 1, 1, width}) * ramp;
  const at::Tensor mean = images.mean({1, 2, 3}).view({-1, 1, 1, 1}) * global;
  return mixed + columns + mean;
}

class KnownModel : public core::SegmentationModel {
 public:
  at::Tensor SegmentationLogits(const at::Tensor& images) override {
    batch_sizes.push_back(images.size(0));
    return KnownLogits(images);
  }
  int64_t NumClasses() const override { return kClasses; }
  std::map<std::string, at::Tensor> Losses(const core::Batch&) override {
    TORCH_CHECK(false, "KnownModel is for inference only");
  }

  std::vector<int64_t> batch_sizes;  // of every forward pass, in order
};

at::Tensor ResizeForTest(const at::Tensor& x, int64_t height, int64_t width) {
  return at::upsample_bilinear2d(x, {height, width}, /*align_corners=*/false);
}

// Two images in a batch padded to 8x10: image 0 shows a 3x5 original scaled by 2 (6x10),
// image 1 an 8x7 original as it is.
core::Batch TwoImages() {
  core::Batch batch;
  batch.images = at::randn({2, 3, 8, 10}, at::TensorOptions().dtype(at::kFloat));
  batch.image_sizes = at::tensor({6, 10, 8, 7}, at::kLong).view({2, 2});
  batch.samples.resize(2);
  batch.samples[0].id = "a";
  batch.samples[0].original_height = 3;
  batch.samples[0].original_width = 5;
  batch.samples[0].scale_x = batch.samples[0].scale_y = 2.0;
  batch.samples[1].id = "b";
  batch.samples[1].original_height = 8;
  batch.samples[1].original_width = 7;
  return batch;
}

// Scales 1 and 0.5, flip, 4x4 windows every 3 pixels, at most 4 windows per forward pass,
// against a hand computation: the windows of each scaled image written out, each padded to
// 4x4 with zeros, logits summed and divided by how often each pixel was covered, flipped
// back, softmax, resized to the original size, averaged over the four passes.
TEST(SegmentationInferenceTest, MultiScaleFlipSlidingWindowsEqualAHandComputation) {
  at::manual_seed(3);
  const core::Batch batch = TwoImages();
  SegmentationInferenceOptions options;
  options.scales = {1.0, 0.5};
  options.flip = true;
  options.crop_height = options.crop_width = 4;
  options.stride_height = options.stride_width = 3;
  options.max_batch_size = 4;
  KnownModel model;
  const std::vector<at::Tensor> scores = SegmentationScores(model, batch, options);
  const std::vector<core::Sample> labels = PredictSegmentation(model, batch, options);

  struct Case {
    int64_t image, region_h, region_w, out_h, out_w;
    double scale;
    int64_t scaled_h, scaled_w;
    std::vector<int64_t> ys, xs;  // window origins
  };
  // Rows: origins 0, 3, ... with the last moved back to end at the edge. Image 1 at 0.5:
  // 8x7 -> 4x4 (3.5 rounds up).
  const std::vector<Case> cases = {
      {0, 6, 10, 3, 5, 1.0, 6, 10, {0, 2}, {0, 3, 6}},
      {0, 6, 10, 3, 5, 0.5, 3, 5, {0}, {0, 1}},
      {1, 8, 7, 8, 7, 1.0, 8, 7, {0, 3, 4}, {0, 3}},
      {1, 8, 7, 8, 7, 0.5, 4, 4, {0}, {0}},
  };
  std::vector<at::Tensor> expected(2);
  for (int64_t i = 0; i < 2; ++i) {
    expected[i] = at::zeros({1, kClasses, i == 0 ? 3 : 8, i == 0 ? 5 : 7});
  }
  for (const Case& c : cases) {
    const at::Tensor region =
        batch.images.slice(0, c.image, c.image + 1).slice(2, 0, c.region_h).slice(3, 0, c.region_w);
    const at::Tensor scaled =
        c.scale == 1.0 ? region : ResizeForTest(region, c.scaled_h, c.scaled_w);
    for (bool flipped : {false, true}) {
      const at::Tensor input = flipped ? scaled.flip({3}) : scaled;
      at::Tensor sum = at::zeros({1, kClasses, c.scaled_h, c.scaled_w});
      at::Tensor count = at::zeros({1, 1, c.scaled_h, c.scaled_w});
      for (int64_t y : c.ys) {
        for (int64_t x : c.xs) {
          const int64_t h = std::min<int64_t>(4, c.scaled_h), w = std::min<int64_t>(4, c.scaled_w);
          at::Tensor window = at::zeros({1, 3, 4, 4});
          window.slice(2, 0, h).slice(3, 0, w).copy_(input.slice(2, y, y + h).slice(3, x, x + w));
          sum.slice(2, y, y + h).slice(3, x, x + w) +=
              KnownLogits(window).slice(2, 0, h).slice(3, 0, w);
          count.slice(2, y, y + h).slice(3, x, x + w) += 1;
        }
      }
      at::Tensor logits = sum / count;
      if (flipped) logits = logits.flip({3});
      at::Tensor probabilities = at::softmax(logits, 1);
      if (c.scaled_h != c.out_h || c.scaled_w != c.out_w) {
        probabilities = ResizeForTest(probabilities, c.out_h, c.out_w);
      }
      expected[c.image] += probabilities / 4.0;
    }
  }
  ASSERT_EQ(scores.size(), 2u);
  ASSERT_EQ(labels.size(), 2u);
  for (int64_t i = 0; i < 2; ++i) {
    ASSERT_EQ(scores[i].sizes(), expected[i][0].sizes());
    EXPECT_LT((scores[i] - expected[i][0]).abs().max().item<double>(), 1e-6) << "image " << i;
    const at::Tensor expected_labels = expected[i][0].argmax(0).to(at::kByte).contiguous();
    const cv::Mat& map = labels[i].semantic;
    ASSERT_EQ(map.rows, expected_labels.size(0));
    ASSERT_EQ(map.cols, expected_labels.size(1));
    const at::Tensor got = at::from_blob(map.data, {map.rows, map.cols}, at::kByte).clone();
    EXPECT_TRUE(at::equal(got, expected_labels)) << "image " << i;
    EXPECT_EQ(labels[i].id, batch.samples[i].id);
  }
  // The flips enter the model's input, not only its output: the two images' label maps are
  // not all one class, so the hand computation above compares something.
  EXPECT_GT(std::get<0>(at::_unique(expected[1][0].argmax(0))).numel(), 1);
  // Windows of one image and scale, both flips, share forward passes of at most 4: image 0
  // has 6 windows at scale 1 (12 with flips) and 2 at 0.5, image 1 has 6 and 1.
  // Two calls (scores and labels) make 16 passes.
  std::vector<int64_t> one_call = {4, 4, 4, 4, 4, 4, 4, 2};
  std::vector<int64_t> both = one_call;
  both.insert(both.end(), one_call.begin(), one_call.end());
  EXPECT_EQ(model.batch_sizes, both);
}

// One scale of 1, no flip, whole images: exactly the model's own single-scale Predict (the
// logits resized to the original size, then argmax), on a batch without padding.
TEST(SegmentationInferenceTest, SingleScaleWithoutFlipIsExactlyPredict) {
  at::manual_seed(5);
  core::Batch batch;
  batch.images = at::randn({2, 3, 10, 8});
  batch.image_sizes = at::tensor({10, 8, 10, 8}, at::kLong).view({2, 2});
  batch.samples.resize(2);
  // Image 0 was 5x4 scaled by 2 (labels resized back); image 1 is as it was.
  batch.samples[0].original_height = 5;
  batch.samples[0].original_width = 4;
  batch.samples[0].scale_x = batch.samples[0].scale_y = 2.0;
  batch.samples[1].original_height = 10;
  batch.samples[1].original_width = 8;
  KnownModel model;
  const std::vector<core::Sample> predicted = model.Predict(batch);
  SegmentationInferenceOptions options;
  options.max_batch_size = 2;
  const std::vector<core::Sample> ours = PredictSegmentation(model, batch, options);
  const std::vector<at::Tensor> scores = SegmentationScores(model, batch, options);
  ASSERT_EQ(ours.size(), 2u);
  const at::Tensor logits = KnownLogits(batch.images);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(ours[i].semantic.size(), predicted[i].semantic.size());
    EXPECT_EQ(cv::countNonZero(ours[i].semantic != predicted[i].semantic), 0) << "image " << i;
    const int64_t h = batch.samples[i].original_height, w = batch.samples[i].original_width;
    const at::Tensor own = logits.slice(0, i, i + 1);
    const at::Tensor reference = h == 10 ? own[0] : ResizeForTest(own, h, w)[0];
    EXPECT_TRUE(at::equal(scores[i], reference)) << "image " << i;
  }
  // Whole images of one size share a forward pass: Predict, then ours twice.
  EXPECT_THAT(model.batch_sizes, ElementsAre(2, 2, 2));
}

// Whole images (no crop) of different sizes go through the model separately, each unpadded;
// with a flip, each image and its mirror share a pass.
TEST(SegmentationInferenceTest, WholeImagesOfDifferentSizesRunUnpadded) {
  at::manual_seed(7);
  const core::Batch batch = TwoImages();
  SegmentationInferenceOptions options;
  options.flip = true;
  options.max_batch_size = 8;
  KnownModel model;
  const std::vector<at::Tensor> scores = SegmentationScores(model, batch, options);
  EXPECT_THAT(model.batch_sizes, ElementsAre(2, 2));
  // Image 1 (8x7, not resized): the mean of its and its mirror's probabilities.
  const at::Tensor image = batch.images.slice(0, 1, 2).slice(2, 0, 8).slice(3, 0, 7);
  const at::Tensor expected = (at::softmax(KnownLogits(image), 1) +
                               at::softmax(KnownLogits(image.flip({3})).flip({3}), 1)) /
                              2;
  EXPECT_LT((scores[1] - expected[0]).abs().max().item<double>(), 1e-6);
}

// The same inference with the batch and model on a GPU: nothing leaves the device on the way
// (scores come back on it) and the result is the CPU's.
TEST(SegmentationInferenceTest, RunsOnTheModelsDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible: GPU path not run";
  at::manual_seed(11);
  const core::Batch cpu = TwoImages();
  core::Batch gpu = cpu;
  gpu.images = cpu.images.to(at::kCUDA);
  gpu.image_sizes = cpu.image_sizes.to(at::kCUDA);
  SegmentationInferenceOptions options;
  options.scales = {0.75, 1.25};
  options.flip = true;
  options.crop_height = options.crop_width = 5;
  options.stride_height = options.stride_width = 4;
  options.max_batch_size = 3;
  KnownModel model;
  const std::vector<at::Tensor> on_cpu = SegmentationScores(model, cpu, options);
  const std::vector<at::Tensor> on_gpu = SegmentationScores(model, gpu, options);
  for (size_t i = 0; i < on_cpu.size(); ++i) {
    EXPECT_TRUE(on_gpu[i].is_cuda());
    EXPECT_LT((on_gpu[i].cpu() - on_cpu[i]).abs().max().item<double>(), 1e-5) << "image " << i;
  }
}

// Whole images are taken as many at a time as fill a forward pass with their flips: with at
// most 3 inputs per pass, 5 equal images with flips go 1 (2 inputs) at a time, without flips
// 3 and 2; the scores do not depend on the grouping.
TEST(SegmentationInferenceTest, WholeImagesFillForwardPassesOfMaxBatchSize) {
  at::manual_seed(9);
  core::Batch batch;
  batch.images = at::randn({5, 3, 6, 7});
  batch.image_sizes = at::tensor({6, 7}, at::kLong).repeat({5, 1});
  batch.samples.resize(5);
  SegmentationInferenceOptions options;
  options.max_batch_size = 3;
  KnownModel model;
  const std::vector<at::Tensor> grouped = SegmentationScores(model, batch, options);
  EXPECT_THAT(model.batch_sizes, ElementsAre(3, 2));
  options.max_batch_size = 8;
  const std::vector<at::Tensor> together = SegmentationScores(model, batch, options);
  for (size_t i = 0; i < grouped.size(); ++i) {
    EXPECT_LT((grouped[i] - together[i]).abs().max().item<double>(), 1e-6);
  }
  model.batch_sizes.clear();
  options.flip = true;
  options.max_batch_size = 3;
  SegmentationScores(model, batch, options);
  EXPECT_THAT(model.batch_sizes, ElementsAre(2, 2, 2, 2, 2));
}

TEST(SegmentationInferenceTest, SlidingWindowsCoverEveryPixel) {
  // The 6x10 case written out: rows 0 and 2, columns 0, 3 and 6, all 4x4.
  const std::vector<Window> windows = SlidingWindows(6, 10, 4, 4, 3, 3);
  ASSERT_EQ(windows.size(), 6u);
  const int64_t expected[6][2] = {{0, 0}, {0, 3}, {0, 6}, {2, 0}, {2, 3}, {2, 6}};
  for (size_t k = 0; k < windows.size(); ++k) {
    EXPECT_EQ(windows[k].y, expected[k][0]);
    EXPECT_EQ(windows[k].x, expected[k][1]);
    EXPECT_EQ(windows[k].height, 4);
    EXPECT_EQ(windows[k].width, 4);
  }
  for (int64_t size = 1; size <= 23; ++size) {
    for (int64_t crop = 1; crop <= 9; ++crop) {
      for (int64_t stride = 1; stride <= crop; ++stride) {
        const std::vector<Window> ws = SlidingWindows(size, size + 3, crop, crop, stride, stride);
        at::Tensor count = at::zeros({size, size + 3}, at::kInt);
        for (const Window& w : ws) {
          ASSERT_GE(w.y, 0);
          ASSERT_GE(w.x, 0);
          ASSERT_LE(w.y + w.height, size);
          ASSERT_LE(w.x + w.width, size + 3);
          ASSERT_EQ(w.height, std::min(crop, size));
          ASSERT_EQ(w.width, std::min(crop, size + 3));
          count.slice(0, w.y, w.y + w.height).slice(1, w.x, w.x + w.width) += 1;
        }
        ASSERT_GE(count.min().item<int>(), 1)
            << "size " << size << " crop " << crop << " stride " << stride;
        // No more windows than needed: rows = ceil((size - crop) / stride) + 1.
        const int64_t rows = std::max<int64_t>(0, (size - crop + stride - 1) / stride) + 1;
        const int64_t cols = std::max<int64_t>(0, (size + 3 - crop + stride - 1) / stride) + 1;
        ASSERT_EQ(static_cast<int64_t>(ws.size()), rows * cols);
      }
    }
  }
}

TEST(SegmentationInferenceTest, OptionsFromProtoResolveDefaults) {
  core::SegmentationInferenceConfig config;
  absl::StatusOr<SegmentationInferenceOptions> options =
      SegmentationInferenceOptionsFromProto(config, 3);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_THAT(options->scales, ElementsAre(1.0));
  EXPECT_FALSE(options->flip);
  EXPECT_EQ(options->crop_height, 0);
  EXPECT_EQ(options->max_batch_size, 3);

  config.add_scales(0.5f);
  config.add_scales(1.75f);
  config.set_flip(true);
  config.set_crop_height(512);
  config.set_crop_width(1024);
  config.set_stride_width(700);
  config.set_max_batch_size(2);
  options = SegmentationInferenceOptionsFromProto(config, 3);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_THAT(options->scales, ElementsAre(0.5, 1.75));
  EXPECT_TRUE(options->flip);
  EXPECT_EQ(options->stride_height, 342);  // ceil(2/3 * 512)
  EXPECT_EQ(options->stride_width, 700);
  EXPECT_EQ(options->max_batch_size, 2);
}

TEST(SegmentationInferenceTest, BadOptionsAreErrorsNamingTheField) {
  core::SegmentationInferenceConfig config;
  config.set_crop_height(8);
  config.set_crop_width(8);
  config.set_stride_width(9);
  absl::StatusOr<SegmentationInferenceOptions> options =
      SegmentationInferenceOptionsFromProto(config, 1);
  EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(options.status().message(),
              HasSubstr("evaluation.segmentation_inference.stride_width: must be in [1, 8]"));
  options = SegmentationInferenceOptionsFromProto(core::SegmentationInferenceConfig(), 0);
  EXPECT_THAT(options.status().message(), HasSubstr("set max_batch_size >= 1"));
}

// A model whose logits are not at the input's size is named in the error.
class WrongSizeModel : public KnownModel {
 public:
  at::Tensor SegmentationLogits(const at::Tensor& images) override {
    return KnownLogits(images).slice(3, 0, images.size(3) / 2);
  }
};

TEST(SegmentationInferenceTest, LogitsOfTheWrongSizeAreAnErrorNamingTheModel) {
  const core::Batch batch = TwoImages();
  WrongSizeModel model;
  try {
    SegmentationScores(model, batch, SegmentationInferenceOptions());
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(), HasSubstr("WrongSizeModel::SegmentationLogits must "
                                                      "return [N, NumClasses() = 3, H, W]"));
  }
}

}  // namespace
}  // namespace vision::engine
