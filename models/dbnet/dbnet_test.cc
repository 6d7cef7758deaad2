#include "models/dbnet/dbnet.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <torch/utils.h>
#include <torch/nn/modules/conv.h>
#include <torch/optim/sgd.h>

#include "core/backbone.h"
#include "core/batch.h"
#include "core/model.h"
#include "gmock/gmock.h"
#include "google/protobuf/empty.pb.h"
#include "gtest/gtest.h"
#include "models/dbnet/dbnet.pb.h"
#include "models/dbnet/label_generator.h"

namespace vision::models::dbnet {
namespace {

using ::testing::HasSubstr;

// A test-only backbone: a stride-2 stem and four stride-2 3x3 convs, outputs at strides 4,
// 8, 16, 32 (the real ResNets live in models/backbones/, which this test does not use).
class TinyTestBackbone : public core::Backbone {
 public:
  TinyTestBackbone() {
    stem_ = register_module(
        "stem", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 16, 3).stride(2).padding(1)));
    int64_t in = 16;
    for (size_t i = 0; i < kChannels.size(); ++i) {
      stages_.push_back(register_module(
          "stage" + std::to_string(i),
          torch::nn::Conv2d(torch::nn::Conv2dOptions(in, kChannels[i], 3).stride(2).padding(1))));
      in = kChannels[i];
    }
  }
  static absl::StatusOr<std::unique_ptr<TinyTestBackbone>> Create(const google::protobuf::Empty&) {
    return std::make_unique<TinyTestBackbone>();
  }
  std::vector<at::Tensor> Forward(const at::Tensor& images) override {
    at::Tensor x = at::relu(stem_->forward(images));
    std::vector<at::Tensor> levels;
    for (torch::nn::Conv2d& stage : stages_) {
      x = at::relu(stage->forward(x));
      levels.push_back(x);
    }
    return levels;
  }
  std::vector<int64_t> OutChannels() const override { return kChannels; }
  std::vector<int64_t> Strides() const override { return {4, 8, 16, 32}; }

 private:
  const std::vector<int64_t> kChannels = {16, 16, 16, 16};
  torch::nn::Conv2d stem_{nullptr};
  std::vector<torch::nn::Conv2d> stages_;
};

// The same network, claiming strides DBNet's FPN cannot use.
class WrongStridesBackbone : public TinyTestBackbone {
 public:
  static absl::StatusOr<std::unique_ptr<WrongStridesBackbone>> Create(
      const google::protobuf::Empty&) {
    return std::make_unique<WrongStridesBackbone>();
  }
  std::vector<int64_t> Strides() const override { return {8, 16, 32, 64}; }
};

VISION_REGISTER_PLUGIN(core::BackboneRegistry, "TinyTestBackbone", TinyTestBackbone,
                       google::protobuf::Empty);
VISION_REGISTER_PLUGIN(core::BackboneRegistry, "WrongStridesBackbone", WrongStridesBackbone,
                       google::protobuf::Empty);

DBNetOptions TinyOptions() {
  DBNetOptions options;
  options.mutable_backbone()->set_type("TinyTestBackbone");
  options.set_inner_channels(16);
  return options;
}

absl::StatusOr<std::unique_ptr<core::Model>> CreateModel(const DBNetOptions& options) {
  google::protobuf::Any any;
  any.PackFrom(options);
  return core::ModelRegistry::Get().Create("DBNet", any);
}

std::unique_ptr<DBNet> CreateTiny() {
  absl::StatusOr<std::unique_ptr<core::Model>> model = CreateModel(TinyOptions());
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  return std::unique_ptr<DBNet>(dynamic_cast<DBNet*>(model->release()));
}

// HxWx3 8-bit image -> [1, 3, H, W] in [-1, 1].
at::Tensor ImageTensor(const cv::Mat& image) {
  cv::Mat as_float;
  image.convertTo(as_float, CV_32FC3, 1.0 / 127.5, -1.0);
  return at::from_blob(as_float.data, {1, image.rows, image.cols, 3}, at::kFloat)
      .permute({0, 3, 1, 2})
      .clone();
}

// A map as a [1, H, W] tensor of its own element type, as the loader's Collate stacks it: the
// binary maps stay bytes, so the loss must convert them.
at::Tensor MapTensor(const cv::Mat& map) {
  const at::ScalarType type = map.depth() == CV_8U ? at::kByte : at::kFloat;
  return at::from_blob(const_cast<uchar*>(map.data), {1, map.rows, map.cols}, type).clone();
}

// One 32 x 32 sample with a bright rotated 28 x 16 text bar, its targets made by the model's
// own generator, as a batch of one.
core::Batch TrainingBatch(const core::Model& model) {
  core::Sample sample;
  sample.id = "bar";
  sample.image = cv::Mat(32, 32, CV_8UC3, cv::Scalar(20, 20, 20));
  const cv::RotatedRect bar({16, 16}, {28, 16}, 20);
  cv::Point2f corners[4];
  bar.points(corners);
  std::vector<cv::Point> drawn(corners, corners + 4);
  cv::fillConvexPoly(sample.image, drawn, cv::Scalar(230, 230, 230));
  core::TextInstance text;
  text.polygon.assign(corners, corners + 4);
  sample.texts.push_back(text);
  EXPECT_TRUE(model.MakeTargetGenerator()->Generate(&sample).ok());

  core::Batch batch;
  batch.images = ImageTensor(sample.image);
  for (const auto& [name, map] : sample.targets) batch.targets[name] = MapTensor(map);
  sample.image.release();
  batch.samples.push_back(sample);
  return batch;
}

struct Size {
  int64_t height;
  int64_t width;
};

class DBNetShapeTest : public ::testing::TestWithParam<Size> {};

TEST_P(DBNetShapeTest, MapsAtInputResolutionInTrainAndEval) {
  const auto [height, width] = GetParam();
  std::unique_ptr<DBNet> model = CreateTiny();
  ASSERT_NE(model, nullptr);
  const at::Tensor images = at::randn({2, 3, height, width});
  const std::vector<int64_t> expected = {2, 1, height, width};

  model->train();
  const DBHeadOutput train = model->Forward(images, /*with_threshold=*/true);
  EXPECT_EQ(train.probability.sizes(), expected);
  EXPECT_EQ(train.threshold.sizes(), expected);
  EXPECT_EQ(train.binary.sizes(), expected);

  model->eval();
  torch::NoGradGuard no_grad;
  const DBHeadOutput eval = model->Forward(images, /*with_threshold=*/false);
  EXPECT_EQ(eval.probability.sizes(), expected);
  EXPECT_FALSE(eval.threshold.defined());
  EXPECT_FALSE(eval.binary.defined());
}

INSTANTIATE_TEST_SUITE_P(Sizes, DBNetShapeTest,
                         ::testing::Values(Size{64, 64}, Size{96, 64}, Size{128, 96}));

TEST(DBNetTest, OptionErrorsNameTheField) {
  DBNetOptions options = TinyOptions();
  options.set_inner_channels(18);
  absl::StatusOr<std::unique_ptr<core::Model>> model = CreateModel(options);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(), HasSubstr("DBNetOptions.inner_channels"));

  options = TinyOptions();
  options.mutable_labels()->set_thresh_min(0.8f);
  EXPECT_THAT(CreateModel(options).status().message(), HasSubstr("labels.thresh_min"));

  options = TinyOptions();
  options.mutable_backbone()->set_type("TinyTestBackbon");
  model = CreateModel(options);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(model.status().message(), HasSubstr("DBNetOptions.backbone"));
  EXPECT_THAT(model.status().message(), HasSubstr("did you mean 'TinyTestBackbone'"));

  options = TinyOptions();
  options.mutable_backbone()->set_type("WrongStridesBackbone");
  EXPECT_THAT(CreateModel(options).status().message(), HasSubstr("strides [8, 16, 32, 64]"));
}

TEST(DBNetTest, HardNegativeMiningOptionReachesTheLoss) {
  DBNetOptions options = TinyOptions();
  EXPECT_EQ(ConfigFromProto(options)->loss.hard_negative_mining, HardNegativeMining::kAuto);
  options.set_hard_negative_mining(DBNetOptions::TOPK);
  EXPECT_EQ(ConfigFromProto(options)->loss.hard_negative_mining, HardNegativeMining::kTopK);
  options.set_hard_negative_mining(DBNetOptions::SORTED);
  EXPECT_EQ(ConfigFromProto(options)->loss.hard_negative_mining, HardNegativeMining::kSorted);
}

TEST(DBNetTest, TargetGeneratorUsesTheLabelOptions) {
  DBNetOptions options = TinyOptions();
  options.mutable_labels()->set_shrink_ratio(0.5f);
  options.mutable_labels()->set_thresh_max(0.9f);
  absl::StatusOr<std::unique_ptr<core::Model>> model = CreateModel(options);
  ASSERT_TRUE(model.ok()) << model.status();
  // Keep the shared_ptr: a pointer taken from the temporary would dangle (ASan found it).
  const std::shared_ptr<const core::TargetGenerator> made = (*model)->MakeTargetGenerator();
  const auto* generator = dynamic_cast<const DBTargetGenerator*>(made.get());
  ASSERT_NE(generator, nullptr);
  EXPECT_FLOAT_EQ(generator->options().shrink_ratio, 0.5f);
  EXPECT_FLOAT_EQ(generator->options().thresh_max, 0.9f);
  EXPECT_FLOAT_EQ(generator->options().thresh_min, 0.3f);
}

TEST(DBNetTest, TrainsOnClassAgnosticTextPolygons) {
  absl::StatusOr<std::unique_ptr<core::Model>> model = CreateModel(TinyOptions());
  ASSERT_TRUE(model.ok()) << model.status();
  const std::optional<core::TaskRequirements> needs = (*model)->DataRequirements();
  ASSERT_TRUE(needs.has_value());
  EXPECT_EQ(needs->annotation_kind, core::AnnotationKind::kTextPolygons);
  EXPECT_EQ(needs->num_classes, std::nullopt);
}

TEST(DBNetTest, LossesNameAMissingTarget) {
  std::unique_ptr<DBNet> model = CreateTiny();
  ASSERT_NE(model, nullptr);
  core::Batch batch = TrainingBatch(*model);
  batch.targets.erase(kThreshMapTarget);
  try {
    model->Losses(batch);
    ADD_FAILURE() << "expected a c10::Error";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(), HasSubstr("no target 'thresh_map'"));
  }
}

// The whole model learns from its own targets: 30 SGD steps on one sample at least halve the
// total loss (to ~0.38 of the first with this seed; 0.33-0.46 over seeds 0-4 and two angles).
TEST(DBNetTest, ShortTrainingRunHalvesTheLoss) {
  at::manual_seed(0);
  std::unique_ptr<DBNet> model = CreateTiny();
  ASSERT_NE(model, nullptr);
  const core::Batch batch = TrainingBatch(*model);
  model->train();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.08).momentum(0.9));
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    const std::map<std::string, at::Tensor> losses = model->Losses(batch);
    ASSERT_EQ(losses.size(), 3u);
    // The engine's plain sum: alpha and beta are inside the terms.
    at::Tensor total = losses.at("loss_prob") + losses.at("loss_binary") + losses.at("loss_thresh");
    if (step == 0) first = total.item<double>();
    last = total.item<double>();
    optimizer.zero_grad();
    total.backward();
    optimizer.step();
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << ", last " << last;
}

TEST(DBNetTest, PredictMapsRegionsToTheOriginalImage) {
  std::unique_ptr<DBNet> model = CreateTiny();
  ASSERT_NE(model, nullptr);
  {
    // Probability sigmoid(10) everywhere: the whole image is one text region.
    torch::NoGradGuard no_grad;
    auto parameters = model->named_parameters();
    parameters["head.probability.6.weight"].zero_();
    parameters["head.probability.6.bias"].fill_(10.0);
  }
  model->eval();
  core::Batch batch;
  batch.images = at::randn({2, 3, 64, 96});
  core::Sample a;
  a.id = "a";
  a.original_width = 192;  // resized by 0.5 x 0.5
  a.original_height = 128;
  a.scale_x = 0.5;
  a.scale_y = 0.5;
  core::Sample b;
  b.id = "b";
  b.original_width = 96;  // unscaled: the 64 x 96 input is the original
  b.original_height = 64;
  batch.samples = {a, b};

  const std::vector<core::Sample> predictions = model->Predict(batch);
  ASSERT_EQ(predictions.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const core::Sample& prediction = predictions[i];
    EXPECT_EQ(prediction.id, batch.samples[i].id);
    EXPECT_EQ(prediction.original_width, batch.samples[i].original_width);
    ASSERT_EQ(prediction.texts.size(), 1u) << prediction.id;
    const core::TextInstance& region = prediction.texts[0];
    EXPECT_NEAR(region.score, 1.0f, 1e-3);
    // The region is the whole map, grown by unclip and clipped: the original's corners.
    const float right = static_cast<float>(prediction.original_width - 1);
    const float bottom = static_cast<float>(prediction.original_height - 1);
    ASSERT_EQ(region.polygon.size(), 4u);
    EXPECT_NEAR(region.polygon[0].x, 0.0f, 1e-4);
    EXPECT_NEAR(region.polygon[0].y, 0.0f, 1e-4);
    EXPECT_NEAR(region.polygon[2].x, right, 1e-4);
    EXPECT_NEAR(region.polygon[2].y, bottom, 1e-4);
  }
}

}  // namespace
}  // namespace vision::models::dbnet
