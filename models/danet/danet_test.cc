#include "models/danet/danet.h"

#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/utils.h>

#include "core/backbone.h"
#include "core/batch.h"
#include "core/batch_norm.h"
#include "core/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/backbones/resnet.pb.h"
#include "models/danet/danet.pb.h"

namespace vision::models::danet {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A dilated ResNet-18 at output stride 8: 512 channels in the last level, 128 in the branches.
DANetOptions SmallOptions(int num_classes, bool aux) {
  DANetOptions options;
  options.set_num_classes(num_classes);
  options.set_aux(aux);
  options.mutable_backbone()->set_type("ResNet18");
  backbones::ResNetOptions resnet;
  resnet.set_output_stride(8);
  resnet.add_multi_grid(1);
  resnet.add_multi_grid(2);
  options.mutable_backbone()->mutable_options()->PackFrom(resnet);
  return options;
}

std::unique_ptr<DANet> Make(const DANetOptions& options) {
  absl::StatusOr<std::unique_ptr<DANet>> model = DANet::Create(options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

TEST(DANetTest, RegistersAsASegmentationModel) {
  google::protobuf::Any any;
  any.PackFrom(SmallOptions(3, false));
  absl::StatusOr<std::unique_ptr<core::Model>> model =
      core::ModelRegistry::Get().Create("DANet", any);
  ASSERT_TRUE(model.ok()) << model.status();
  auto* danet = dynamic_cast<core::SegmentationModel*>(model->get());
  ASSERT_NE(danet, nullptr);
  EXPECT_EQ(danet->NumClasses(), 3);
  const std::optional<core::TaskRequirements> requirements = danet->DataRequirements();
  ASSERT_TRUE(requirements.has_value());
  EXPECT_EQ(requirements->annotation_kind, core::AnnotationKind::kLabelMaps);
  EXPECT_EQ(requirements->num_classes, 3);
  EXPECT_EQ(requirements->num_classes_option, "num_classes");
}

TEST(DANetTest, OutputsAtTheInputSize) {
  std::unique_ptr<DANet> model = Make(SmallOptions(4, /*aux=*/true));
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->named_parameters()["head.conv5a.0.weight"].sizes(),
            (std::vector<int64_t>{128, 512, 3, 3}));
  EXPECT_EQ(model->named_parameters()["head.sa.query_conv.weight"].size(0), 16);
  EXPECT_EQ(model->named_parameters()["auxlayer.conv5.0.weight"].size(1), 256);  // layer3
  model->eval();
  torch::NoGradGuard no_grad;
  const DANetOutput out = model->Forward(at::randn({2, 3, 36, 44}), /*all_outputs=*/true);
  for (const at::Tensor& t : {out.fused, out.position, out.channel, out.aux}) {
    ASSERT_TRUE(t.defined());
    EXPECT_THAT(t.sizes(), ElementsAre(2, 4, 36, 44));
  }
}

// Cross-entropy of each output over the labelled pixels, by hand.
double HandCrossEntropy(const at::Tensor& logits, const at::Tensor& labels) {
  const at::Tensor log_p = at::log_softmax(logits.to(at::kDouble), 1);
  const at::Tensor valid = labels != core::kIgnoreLabel;
  const at::Tensor safe = labels.to(at::kLong).clamp_max(logits.size(1) - 1);
  const at::Tensor picked = log_p.gather(1, safe.unsqueeze(1)).squeeze(1);
  return (-(picked * valid).sum() / valid.sum()).item<double>();
}

TEST(DANetTest, LossesAreWeightedCrossEntropiesIgnoringLabel255) {
  DANetOptions options = SmallOptions(3, /*aux=*/true);
  options.set_position_loss_weight(0.5);
  options.set_channel_loss_weight(2.0);
  std::unique_ptr<DANet> model = Make(options);
  ASSERT_NE(model, nullptr);
  // Eval mode: no dropout, BatchNorm's running statistics, so Forward and Losses agree.
  model->eval();
  core::Batch batch;
  batch.images = at::randn({2, 3, 24, 32});
  at::Tensor labels = at::randint(0, 3, {2, 24, 32}, at::kLong).to(at::kByte);
  labels.slice(1, 0, 10).fill_(core::kIgnoreLabel);
  batch.targets["semantic"] = labels;
  const DANetOutput out = model->Forward(batch.images, true);
  const std::map<std::string, at::Tensor> losses = model->Losses(batch);
  ASSERT_EQ(losses.size(), 4u);
  EXPECT_NEAR(losses.at("loss_fused").item<double>(), HandCrossEntropy(out.fused, labels), 1e-5);
  EXPECT_NEAR(losses.at("loss_position").item<double>(),
              0.5 * HandCrossEntropy(out.position, labels), 1e-5);
  EXPECT_NEAR(losses.at("loss_channel").item<double>(),
              2.0 * HandCrossEntropy(out.channel, labels), 1e-5);
  EXPECT_NEAR(losses.at("loss_aux").item<double>(), 0.4 * HandCrossEntropy(out.aux, labels),
              1e-5);
  // Gradients reach the backbone's stem and both attention gammas.
  at::Tensor total = at::zeros({});
  for (const auto& [name, loss] : losses) total = total + loss;
  total.backward();
  for (const char* name : {"backbone.conv1.weight", "head.sa.gamma", "head.sc.gamma"}) {
    const at::Tensor grad = model->named_parameters()[name].grad();
    ASSERT_TRUE(grad.defined()) << name;
    EXPECT_GT(grad.abs().sum().item<double>(), 0) << name;
  }
}

TEST(DANetTest, MissingOrMisshapenLabelsAreErrors) {
  std::unique_ptr<DANet> model = Make(SmallOptions(3, false));
  ASSERT_NE(model, nullptr);
  core::Batch batch;
  batch.images = at::randn({1, 3, 16, 16});
  batch.targets["gt"] = at::zeros({1, 16, 16});
  try {
    model->Losses(batch);
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(), HasSubstr("no label maps"));
    EXPECT_THAT(e.what_without_backtrace(), HasSubstr("it has: gt"));
  }
  batch.targets["semantic"] = at::zeros({1, 8, 16}, at::kByte);
  EXPECT_THROW(model->Losses(batch), c10::Error);
}

TEST(DANetTest, PredictsLabelMapsFromTheFusedLogitsAtTheOriginalSize) {
  std::unique_ptr<DANet> model = Make(SmallOptions(5, false));
  ASSERT_NE(model, nullptr);
  model->eval();
  core::Batch batch;
  batch.images = at::randn({1, 3, 24, 32});
  batch.image_sizes = at::tensor({24, 32}, at::kLong).view({1, 2});
  batch.samples.resize(1);
  batch.samples[0].original_width = 16;
  batch.samples[0].original_height = 12;
  batch.samples[0].scale_x = batch.samples[0].scale_y = 2.0;
  const at::Tensor logits = model->SegmentationLogits(batch.images);
  EXPECT_FALSE(logits.requires_grad());
  {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(at::equal(logits, model->Forward(batch.images, true).fused));
  }
  const std::vector<core::Sample> predictions = model->Predict(batch);
  ASSERT_EQ(predictions.size(), 1u);
  EXPECT_EQ(predictions[0].semantic.size(), cv::Size(16, 12));
}

// SyncBatchNorm (distributed/sync_batchnorm) converts core::BatchNorm2d only.
TEST(DANetTest, EveryBatchNormIsOneSyncBatchNormConverts) {
  std::unique_ptr<DANet> model = Make(SmallOptions(3, true));
  ASSERT_NE(model, nullptr);
  int converted = 0;
  for (const auto& item : model->named_modules("", /*include_self=*/false)) {
    EXPECT_EQ(dynamic_cast<torch::nn::BatchNorm2dImpl*>(item.value().get()), nullptr) << item.key();
    if (dynamic_cast<core::BatchNorm2dImpl*>(item.value().get()) != nullptr) ++converted;
  }
  // ResNet-18: 20; head: conv5a, conv5c, conv51, conv52; auxiliary head: 1.
  EXPECT_EQ(converted, 25);
}

std::map<std::string, at::Tensor> Gradients(DANet& model, const core::Batch& batch) {
  model.zero_grad();
  at::Tensor total = at::zeros({});
  for (const auto& [name, loss] : model.Losses(batch)) total = total + loss;
  total.backward();
  std::map<std::string, at::Tensor> grads;
  for (const auto& item : model.named_parameters()) grads[item.key()] = item.value().grad().clone();
  return grads;
}

TEST(DANetTest, ActivationCheckpointingGivesTheSameGradients) {
  DANetOptions options = SmallOptions(3, true);
  options.set_dropout(0);  // dropout masks would differ between the two runs
  std::unique_ptr<DANet> plain = Make(options);
  std::unique_ptr<DANet> checkpointed = Make(options);
  ASSERT_TRUE(plain && checkpointed);
  {
    torch::NoGradGuard no_grad;
    for (const auto& item : plain->named_parameters()) {
      checkpointed->named_parameters()[item.key()].copy_(item.value());
    }
  }
  ASSERT_TRUE(checkpointed
                  ->EnableActivationCheckpointing(
                      {"backbone.layer3", "backbone.layer4", "head.sa", "head.sc"})
                  .ok());
  core::Batch batch;
  batch.images = at::randn({2, 3, 24, 24});
  batch.targets["semantic"] = at::randint(0, 3, {2, 24, 24}, at::kLong).to(at::kByte);
  const auto expected = Gradients(*plain, batch);
  const auto actual = Gradients(*checkpointed, batch);
  for (const auto& [name, grad] : expected) {
    EXPECT_TRUE(at::allclose(actual.at(name), grad, 1e-5, 1e-6)) << name;
  }
  // Running statistics were updated once, not twice.
  EXPECT_TRUE(at::allclose(checkpointed->named_buffers()["backbone.layer4.1.bn2.running_var"],
                           plain->named_buffers()["backbone.layer4.1.bn2.running_var"]));
  EXPECT_THAT(std::string(checkpointed->EnableActivationCheckpointing({"head.conv5a"}).message()),
              HasSubstr("'head.sa', 'head.sc'"));
  EXPECT_THAT(std::string(checkpointed->EnableActivationCheckpointing({"backbone.layer9"}).message()),
              HasSubstr("layer9"));
}

TEST(DANetTest, BadOptionsAreErrorsNamingTheField) {
  DANetOptions options = SmallOptions(3, false);
  options.clear_num_classes();
  EXPECT_THAT(std::string(DANet::Create(options).status().message()),
              HasSubstr("DANetOptions.num_classes: must be set"));
  options = SmallOptions(3, false);
  options.clear_backbone();
  EXPECT_THAT(std::string(DANet::Create(options).status().message()),
              HasSubstr("DANetOptions.backbone: required"));
  options = SmallOptions(3, false);
  options.set_head_channels(20);
  EXPECT_THAT(std::string(DANet::Create(options).status().message()),
              HasSubstr("multiple of attention_reduction 8"));
  options = SmallOptions(3, false);
  options.set_dropout(1.5);
  EXPECT_THAT(std::string(DANet::Create(options).status().message()),
              HasSubstr("DANetOptions.dropout"));
  options = SmallOptions(3, false);
  backbones::ResNetOptions resnet;
  resnet.add_multi_grid(1);
  options.mutable_backbone()->mutable_options()->PackFrom(resnet);
  EXPECT_THAT(std::string(DANet::Create(options).status().message()),
              HasSubstr("DANetOptions.backbone"));
}

}  // namespace
}  // namespace vision::models::danet
