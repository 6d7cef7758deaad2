#include "engine/segmentation_inference.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
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

// OVERHANG windows keep the stride's origins: the 10x14 case with crop 8 and stride 5 written
// out (rows 0 and 5, the second 5 long; columns 0, 5 and 10, the last 4 long).
TEST(SegmentationInferenceTest, OverhangingWindowsKeepTheStridesOrigins) {
  const std::vector<Window> windows =
      SlidingWindows(10, 14, 8, 8, 5, 5, WindowPlacement::kOverhang);
  const int64_t expected[6][4] = {{0, 0, 8, 8},  {0, 5, 8, 8},  {0, 10, 8, 4},
                                  {5, 0, 5, 8},  {5, 5, 5, 8},  {5, 10, 5, 4}};
  ASSERT_EQ(windows.size(), 6u);
  for (size_t k = 0; k < windows.size(); ++k) {
    EXPECT_EQ(windows[k].y, expected[k][0]) << "window " << k;
    EXPECT_EQ(windows[k].x, expected[k][1]) << "window " << k;
    EXPECT_EQ(windows[k].height, expected[k][2]) << "window " << k;
    EXPECT_EQ(windows[k].width, expected[k][3]) << "window " << k;
  }
  // PyTorch-Encoding's grid: origins i * stride for i < ceil((size - crop) / stride) + 1, each
  // window the part of [origin, origin + crop) inside the image; every pixel covered.
  for (int64_t size = 1; size <= 23; ++size) {
    for (int64_t crop = 1; crop <= 9; ++crop) {
      for (int64_t stride = 1; stride <= crop; ++stride) {
        const std::vector<Window> ws =
            SlidingWindows(size, 5, crop, crop, stride, stride, WindowPlacement::kOverhang);
        const int64_t rows =
            size <= crop ? 1 : static_cast<int64_t>(std::ceil(
                                   static_cast<double>(size - crop) / static_cast<double>(stride))) +
                                   1;
        at::Tensor count = at::zeros({size}, at::kInt);
        int64_t row = 0;
        for (const Window& w : ws) {
          if (w.x != 0) continue;  // one column of windows
          ASSERT_EQ(w.y, row * stride) << "size " << size << " crop " << crop;
          ASSERT_EQ(w.height, std::min(crop, size - w.y));
          count.slice(0, w.y, w.y + w.height) += 1;
          ++row;
        }
        ASSERT_EQ(row, rows) << "size " << size << " crop " << crop << " stride " << stride;
        ASSERT_GE(count.min().item<int>(), 1)
            << "size " << size << " crop " << crop << " stride " << stride;
      }
    }
  }
}

// pytorch_encoding_golden.txt (testdata/make_pytorch_encoding_golden.py): blocks
// "<name> <ndim> <dims...> <values...>", '#' lines are comments.
std::map<std::string, at::Tensor> ReadGolden() {
  const std::string path = "engine/testdata/pytorch_encoding_golden.txt";
  std::ifstream file(path);
  TORCH_CHECK(file, "cannot open ", path);
  std::stringstream text;
  std::string line;
  while (std::getline(file, line)) {
    if (!line.empty() && line[0] != '#') text << line << '\n';
  }
  std::map<std::string, at::Tensor> golden;
  std::string name;
  while (text >> name) {
    int64_t ndim = 0;
    TORCH_CHECK(text >> ndim, path, ": block ", name, " has no dimension count");
    std::vector<int64_t> dims(static_cast<size_t>(ndim));
    int64_t numel = 1;
    for (int64_t& d : dims) {
      TORCH_CHECK(text >> d, path, ": block ", name, " is cut short");
      numel *= d;
    }
    std::vector<double> values(static_cast<size_t>(numel));
    for (double& v : values) TORCH_CHECK(text >> v, path, ": block ", name, " is cut short");
    golden[name] = at::tensor(values, at::kDouble).view(dims);
  }
  return golden;
}

at::Tensor Get(const std::map<std::string, at::Tensor>& golden, const std::string& name) {
  const auto it = golden.find(name);
  TORCH_CHECK(it != golden.end(), "pytorch_encoding_golden.txt has no '", name,
              "'; regenerate it with make_pytorch_encoding_golden.py");
  return it->second;
}

// The DANet authors' evaluation rules, set for the golden's cases: crop 8, windows hanging over
// the edge, padded black (-mean/std), exp(logits + mirrored logits) summed over scales,
// align_corners resizes.
SegmentationInferenceOptions PyTorchEncodingOptions(const std::map<std::string, at::Tensor>& golden,
                                                    const std::string& name, bool flip) {
  SegmentationInferenceOptions options;
  const at::Tensor scales = Get(golden, name + "/scales");
  options.scales.clear();
  for (int64_t i = 0; i < scales.numel(); ++i) options.scales.push_back(scales[i].item<double>());
  options.flip = flip;
  options.crop_height = options.crop_width = 8;
  options.stride_height = options.stride_width = Get(golden, name + "/stride")[0].item<int64_t>();
  options.max_batch_size = 3;
  options.window_placement = WindowPlacement::kOverhang;
  options.pad_value = {-0.485 / 0.229, -0.456 / 0.224, -0.406 / 0.225};
  options.fusion = ScoreFusion::kSumExpLogits;
  options.align_corners = true;
  return options;
}

core::Batch GoldenBatch(const std::map<std::string, at::Tensor>& golden) {
  core::Batch batch;
  batch.images = Get(golden, "input").to(at::kFloat).unsqueeze(0);
  batch.image_sizes = at::tensor({10, 14}, at::kLong).view({1, 2});
  batch.samples.resize(1);
  batch.samples[0].id = "golden";
  batch.samples[0].original_height = 10;
  batch.samples[0].original_width = 14;
  return batch;
}

double MaxDifference(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// The DANet authors' multi-scale evaluation run by their own code (junfu1115/DANet c7a2f60's
// MultiEvalModule) on a 10x14 image: multi-scale 0.5-2.2 with stride crop/2 and flip, single
// scale with stride int(crop * 2/3) (our default stride) and flip, multi-scale without flip.
// Ours with OVERHANG, pad_value -mean/std, SUM_EXP_LOGITS and align_corners gives the log of
// their scores within float32 rounding (their run is float64, ours float32 up to the sums) and
// the same label map; a window and its mirror split over forward passes of one change nothing.
TEST(SegmentationInferenceTest, PyTorchEncodingRulesEqualTheDanetAuthorsEvaluation) {
  const std::map<std::string, at::Tensor> golden = ReadGolden();
  const core::Batch batch = GoldenBatch(golden);
  struct Case {
    std::string name;
    bool flip;
  };
  for (const Case& c : {Case{"ms", true}, Case{"ss", true}, Case{"ms_noflip", false}}) {
    SegmentationInferenceOptions options = PyTorchEncodingOptions(golden, c.name, c.flip);
    if (c.name == "ss") {
      // Their single-scale stride is our default, int(8 * 2/3) = 5.
      core::SegmentationInferenceConfig config;
      config.set_crop_height(8);
      config.set_crop_width(8);
      absl::StatusOr<SegmentationInferenceOptions> defaults =
          SegmentationInferenceOptionsFromProto(config, 1);
      ASSERT_TRUE(defaults.ok()) << defaults.status();
      EXPECT_EQ(defaults->stride_height, options.stride_height);
      EXPECT_EQ(defaults->stride_width, options.stride_width);
    }
    const at::Tensor expected = Get(golden, c.name + "/log_scores");
    KnownModel model;
    const std::vector<at::Tensor> scores = SegmentationScores(model, batch, options);
    ASSERT_EQ(scores.size(), 1u);
    ASSERT_EQ(scores[0].sizes(), expected.sizes()) << c.name;
    EXPECT_EQ(scores[0].scalar_type(), at::kFloat);
    EXPECT_LT(MaxDifference(scores[0], expected), 1e-5) << c.name;
    const std::vector<core::Sample> labels = PredictSegmentation(model, batch, options);
    const at::Tensor expected_labels = expected.argmax(0).to(at::kByte).contiguous();
    const cv::Mat& map = labels[0].semantic;
    ASSERT_EQ(map.rows, 10);
    ASSERT_EQ(map.cols, 14);
    const at::Tensor got = at::from_blob(map.data, {map.rows, map.cols}, at::kByte).clone();
    EXPECT_TRUE(at::equal(got, expected_labels)) << c.name;
    // Not all one class, so the label maps compare something.
    EXPECT_GT(std::get<0>(at::_unique(expected_labels)).numel(), 1) << c.name;

    options.max_batch_size = 1;
    KnownModel one_at_a_time;
    EXPECT_LT(MaxDifference(SegmentationScores(one_at_a_time, batch, options)[0], scores[0]),
              1e-6)
        << c.name;
    EXPECT_TRUE(std::all_of(one_at_a_time.batch_sizes.begin(), one_at_a_time.batch_sizes.end(),
                            [](int64_t size) { return size == 1; }));
  }
}

// The authors' rules on a GPU (float64 sums on the device) give the golden too.
TEST(SegmentationInferenceTest, PyTorchEncodingRulesOnTheModelsDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible: GPU path not run";
  const std::map<std::string, at::Tensor> golden = ReadGolden();
  core::Batch batch = GoldenBatch(golden);
  batch.images = batch.images.to(at::kCUDA);
  batch.image_sizes = batch.image_sizes.to(at::kCUDA);
  KnownModel model;
  const at::Tensor scores =
      SegmentationScores(model, batch, PyTorchEncodingOptions(golden, "ms", true))[0];
  EXPECT_TRUE(scores.is_cuda());
  EXPECT_LT(MaxDifference(scores.cpu(), Get(golden, "ms/log_scores")), 1e-5);
}

// Each of the four settings, put back to mmsegmentation's alone, moves the scores away from the
// authors' (by far more than the tolerance above), so the golden test checks every one.
TEST(SegmentationInferenceTest, EveryPyTorchEncodingSettingMatters) {
  const std::map<std::string, at::Tensor> golden = ReadGolden();
  const core::Batch batch = GoldenBatch(golden);
  const at::Tensor expected = Get(golden, "ms/log_scores");
  const SegmentationInferenceOptions theirs = PyTorchEncodingOptions(golden, "ms", true);
  std::vector<std::pair<std::string, SegmentationInferenceOptions>> variants;
  variants.emplace_back("window_placement", theirs);
  variants.back().second.window_placement = WindowPlacement::kShiftInside;
  variants.emplace_back("pad_value", theirs);
  variants.back().second.pad_value.clear();
  variants.emplace_back("align_corners", theirs);
  variants.back().second.align_corners = false;
  variants.emplace_back("fusion", theirs);
  variants.back().second.fusion = ScoreFusion::kMeanProbabilities;
  for (const auto& [name, options] : variants) {
    KnownModel model;
    at::Tensor scores = SegmentationScores(model, batch, options)[0];
    // Mean probabilities are on another scale: compare the log of their normalised share.
    if (name == "fusion") {
      scores = at::log(scores);
      const at::Tensor normalised = expected - at::logsumexp(expected, 0, true);
      EXPECT_GT(MaxDifference(scores, normalised), 1e-3) << name;
    } else {
      EXPECT_GT(MaxDifference(scores, expected), 1e-3) << name;
    }
  }
}

// Logits of a confident model: 60 times KnownLogits, up to about 400.
class ConfidentModel : public KnownModel {
 public:
  at::Tensor SegmentationLogits(const at::Tensor& images) override {
    return KnownLogits(images) * 60;
  }
};

// exp(logits + mirrored logits) of a confident model is far beyond float32 (PyTorch-Encoding's
// own arithmetic gives inf there, and NaN where a resize weighs an inf by 0): the sums are
// made in float64, so the scores stay finite and, with one scale and one window, are exactly
// logits + mirrored logits.
TEST(SegmentationInferenceTest, SumExpLogitsOfLargeLogitsStayFinite) {
  at::manual_seed(13);
  core::Batch batch;
  batch.images = at::randn({1, 3, 6, 7});
  batch.image_sizes = at::tensor({6, 7}, at::kLong).view({1, 2});
  batch.samples.resize(1);
  batch.samples[0].original_height = 6;
  batch.samples[0].original_width = 7;
  SegmentationInferenceOptions options;
  options.flip = true;
  options.fusion = ScoreFusion::kSumExpLogits;
  options.max_batch_size = 2;
  ConfidentModel model;
  const at::Tensor scores = SegmentationScores(model, batch, options)[0];
  const at::Tensor image = batch.images[0];
  const at::Tensor expected = (model.SegmentationLogits(image.unsqueeze(0)) +
                               model.SegmentationLogits(image.flip({2}).unsqueeze(0)).flip({3}))[0];
  ASSERT_GT(expected.max().item<double>(), 89.0) << "exp would not overflow float32";
  EXPECT_TRUE(at::isfinite(scores).all().item<bool>());
  EXPECT_LT(MaxDifference(scores, expected), 1e-4 * expected.abs().max().item<double>());
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
  EXPECT_EQ(options->stride_height, 341);  // floor(2/3 * 512), PyTorch-Encoding's int()
  EXPECT_EQ(options->stride_width, 700);
  EXPECT_EQ(options->max_batch_size, 2);
  EXPECT_EQ(options->window_placement, WindowPlacement::kShiftInside);
  EXPECT_TRUE(options->pad_value.empty());
  EXPECT_EQ(options->fusion, ScoreFusion::kMeanProbabilities);
  EXPECT_FALSE(options->align_corners);

  config.set_window_placement(core::SegmentationInferenceConfig::OVERHANG);
  config.add_pad_value(-2.5f);
  config.set_fusion(core::SegmentationInferenceConfig::SUM_EXP_LOGITS);
  config.set_align_corners(true);
  options = SegmentationInferenceOptionsFromProto(config, 3);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->window_placement, WindowPlacement::kOverhang);
  EXPECT_THAT(options->pad_value, ElementsAre(-2.5));
  EXPECT_EQ(options->fusion, ScoreFusion::kSumExpLogits);
  EXPECT_TRUE(options->align_corners);
  // A crop of 1 still steps by 1.
  core::SegmentationInferenceConfig tiny;
  tiny.set_crop_height(1);
  tiny.set_crop_width(2);
  options = SegmentationInferenceOptionsFromProto(tiny, 1);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->stride_height, 1);
  EXPECT_EQ(options->stride_width, 1);
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
