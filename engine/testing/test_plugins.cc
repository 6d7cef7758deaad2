// Tiny plugins of every family the engine drives, for engine and distributed tests that must
// run in seconds: a dataset of random images, a two-layer conv regressor whose target map the
// loader's workers generate, and an evaluator with a mergeable state.
#include <csignal>
#include <cmath>
#include <cstdlib>
#include <string>
#include <random>

#include <ATen/ATen.h>
#include <opencv2/imgproc.hpp>
#include <torch/nn/modules/conv.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/dataset.h"
#include "core/evaluator.h"
#include "core/model.h"
#include "engine/testing/test_plugins.pb.h"

namespace vision::engine::testing {
namespace {

// Image i: uniform noise seeded by i; its texts[0].score holds the share of bright pixels.
class TestImages : public core::Dataset {
 public:
  explicit TestImages(const TestImagesOptions& o) : o_(o) {}
  static absl::StatusOr<std::unique_ptr<TestImages>> Create(const TestImagesOptions& o) {
    if (o.size() <= 0) return absl::InvalidArgumentError("size: must be > 0");
    return std::make_unique<TestImages>(o);
  }
  int64_t Size() const override { return o_.size(); }
  absl::StatusOr<core::Sample> Load(int64_t index) const override {
    core::Sample s;
    s.id = absl::StrCat("test_", index);
    s.image_path = s.id + ".png";
    s.image = cv::Mat(o_.height(), o_.width(), CV_8UC3);
    std::mt19937 rng(static_cast<uint32_t>(index));
    for (auto it = s.image.begin<cv::Vec3b>(); it != s.image.end<cv::Vec3b>(); ++it) {
      *it = cv::Vec3b(rng() % 256, rng() % 256, rng() % 256);
    }
    s.original_height = o_.height();
    s.original_width = o_.width();
    core::TextInstance summary;
    summary.score = static_cast<float>(BrightShare(s.image));
    s.texts.push_back(summary);
    return s;
  }
  std::string Describe() const override { return absl::StrCat(o_.size(), " random images"); }

  static cv::Mat Bright(const cv::Mat& image) {
    cv::Mat gray, bright;
    cv::cvtColor(image, gray, cv::COLOR_BGR2GRAY);
    cv::threshold(gray, bright, 127, 1.0, cv::THRESH_BINARY);
    bright.convertTo(bright, CV_32F);
    return bright;
  }
  static double BrightShare(const cv::Mat& image) { return cv::mean(Bright(image))[0]; }

 private:
  TestImagesOptions o_;
};

class BrightTarget : public core::TargetGenerator {
 public:
  absl::Status Generate(core::Sample* s) const override {
    s->targets["bright"] = TestImages::Bright(s->image);
    return absl::OkStatus();
  }
};

// Predicts the "bright" map with conv3x3 -> ReLU -> conv1x1 and an MSE loss.
class TestRegressor : public core::Model {
 public:
  explicit TestRegressor(const TestRegressorOptions& o) : multiplier_(o.loss_multiplier()) {
    conv1_ = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, o.channels(), 3).padding(1)));
    conv2_ = register_module("conv2", torch::nn::Conv2d(o.channels(), 1, 1));
    if (o.unused_parameter()) unused_ = register_parameter("unused", at::zeros({2}));
  }
  static absl::StatusOr<std::unique_ptr<TestRegressor>> Create(const TestRegressorOptions& o) {
    return std::make_unique<TestRegressor>(o);
  }
  at::Tensor Forward(const at::Tensor& images) {
    return conv2_->forward(at::relu(conv1_->forward(images))).squeeze(1);
  }
  std::map<std::string, at::Tensor> Losses(const core::Batch& batch) override {
    CrashIfAsked();
    at::Tensor prediction = Forward(batch.images);
    return {{"mse", (prediction.to(at::kFloat) - batch.targets.at("bright")).pow(2).mean() * multiplier_}};
  }
  std::vector<core::Sample> Predict(const core::Batch& batch) override {
    at::Tensor share = Forward(batch.images).to(at::kFloat).mean({1, 2}).cpu();
    std::vector<core::Sample> out(batch.samples.size());
    for (size_t i = 0; i < out.size(); ++i) {
      core::TextInstance t;
      t.score = share[i].item<float>();
      out[i].texts.push_back(t);
    }
    return out;
  }
  std::shared_ptr<const core::TargetGenerator> MakeTargetGenerator() const override {
    return std::make_shared<BrightTarget>();
  }

 private:
  // Fault injection for launcher tests: with VISION_TEST_KILL_RANK=r and
  // VISION_TEST_KILL_AT_CALL=n, rank r kills itself (SIGKILL, as the OOM killer would) in its
  // n-th Losses() call of the first attempt (TORCHELASTIC_RESTART_COUNT unset or 0).
  void CrashIfAsked() {
    ++calls_;
    const char* kill_rank = std::getenv("VISION_TEST_KILL_RANK");
    const char* kill_at = std::getenv("VISION_TEST_KILL_AT_CALL");
    const char* rank = std::getenv("RANK");
    const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
    if (kill_rank == nullptr || kill_at == nullptr || rank == nullptr) return;
    if (restarts != nullptr && std::string(restarts) != "0") return;
    if (std::string(rank) == kill_rank && calls_ == std::atoi(kill_at)) ::raise(SIGKILL);
  }

  int calls_ = 0;
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  at::Tensor unused_;
  double multiplier_;
};

// Mean absolute error of the predicted bright share, and the share of samples within 0.1.
class TestShareError : public core::Evaluator {
 public:
  static absl::StatusOr<std::unique_ptr<TestShareError>> Create(const Empty&) {
    return std::make_unique<TestShareError>();
  }
  void Reset() override { count_ = error_ = close_ = 0; }
  absl::Status Add(const core::Sample& prediction, const core::Sample& truth) override {
    if (prediction.texts.empty() || truth.texts.empty()) {
      return absl::InvalidArgumentError("missing share");
    }
    const double e = std::abs(prediction.texts[0].score - truth.texts[0].score);
    ++count_;
    error_ += e;
    close_ += e < 0.1 ? 1 : 0;
    return absl::OkStatus();
  }
  std::map<std::string, double> Compute() const override {
    if (count_ == 0) return {{"mae", 0}, {"close", 0}, {"count", 0}};
    return {{"mae", error_ / count_}, {"close", close_ / count_}, {"count", count_}};
  }
  std::string MainMetric() const override { return "close"; }
  std::string SerializeState() const override {
    return absl::StrFormat("%.17g %.17g %.17g", count_, error_, close_);
  }
  absl::Status MergeState(const std::string& state) override {
    double c, e, k;
    if (std::sscanf(state.c_str(), "%lf %lf %lf", &c, &e, &k) != 3) {
      return absl::InvalidArgumentError("bad state");
    }
    count_ += c;
    error_ += e;
    close_ += k;
    return absl::OkStatus();
  }

 private:
  double count_ = 0, error_ = 0, close_ = 0;
};

VISION_REGISTER_PLUGIN(core::DatasetRegistry, "TestImages", TestImages, TestImagesOptions);
VISION_REGISTER_PLUGIN(core::ModelRegistry, "TestRegressor", TestRegressor, TestRegressorOptions);
VISION_REGISTER_PLUGIN(core::EvaluatorRegistry, "TestShareError", TestShareError, Empty);

}  // namespace
}  // namespace vision::engine::testing
