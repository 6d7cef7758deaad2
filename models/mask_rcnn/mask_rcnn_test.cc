// The MaskRCNN plugin around its components (whose equality with torchvision the component and
// parity tests show): options, weight import with another class count, the mapping of
// predictions back to original pixels, the batch's instance targets, activation checkpointing.
#include "models/mask_rcnn/mask_rcnn.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/utils.h>

#include <algorithm>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "core/model.h"
#include "core/run_length_mask.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/backbones/resnet.pb.h"

namespace vision::models::mask_rcnn {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

MaskRCNNOptions TinyOptions(int num_classes) {
  MaskRCNNOptions options;
  options.set_num_classes(num_classes);
  options.mutable_backbone()->set_type("ResNet18");
  backbones::ResNetOptions resnet;
  resnet.set_frozen_batchnorm(true);
  options.mutable_backbone()->mutable_options()->PackFrom(resnet);
  options.set_fpn_channels(16);
  options.mutable_roi_heads()->set_representation_size(32);
  options.mutable_roi_heads()->add_mask_head_channels(8);
  return options;
}

std::unique_ptr<MaskRCNN> Tiny(int num_classes) {
  auto model = MaskRCNN::Create(TinyOptions(num_classes));
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(*model);
}

// Our key -> torchvision 0.26's, the inverse of FromTorchvisionKey for this model's layout.
std::string ToTorchvisionKey(const std::string& key) {
  const auto replace = [&](const std::string& from, const std::string& to) -> std::string {
    return key.substr(0, from.size()) == from ? to + key.substr(from.size()) : "";
  };
  for (int i = 0; i < 4; ++i) {
    for (const auto& [ours, theirs] :
         {std::pair{"backbone.fpn.lateral" + std::to_string(i) + ".",
                    "backbone.fpn.inner_blocks." + std::to_string(i) + ".0."},
          std::pair{"backbone.fpn.smooth" + std::to_string(i) + ".",
                    "backbone.fpn.layer_blocks." + std::to_string(i) + ".0."},
          std::pair{"roi_heads.mask_head.mask_fcn" + std::to_string(i + 1) + ".",
                    "roi_heads.mask_head." + std::to_string(i) + ".0."}}) {
      const std::string mapped = replace(ours, theirs);
      if (!mapped.empty()) return mapped;
    }
  }
  const std::string head = replace("rpn.head.conv.", "rpn.head.conv.0.0.");
  return head.empty() ? key : head;
}

TEST(MaskRcnnTest, OptionsAreCheckedNamingTheField) {
  MaskRCNNOptions options = TinyOptions(3);
  options.clear_num_classes();
  EXPECT_THAT(MaskRCNN::Create(options).status().message(),
              HasSubstr("MaskRCNNOptions.num_classes"));
  options = TinyOptions(3);
  options.mutable_rpn()->add_anchor_sizes(32);
  EXPECT_THAT(MaskRCNN::Create(options).status().message(),
              HasSubstr("rpn.anchor_sizes: needs one size per FPN level P2..P6 (5), got 1"));
  options = TinyOptions(3);
  options.mutable_roi_heads()->set_fg_iou_threshold(0.3);
  options.mutable_roi_heads()->set_bg_iou_threshold(0.6);
  EXPECT_THAT(MaskRCNN::Create(options).status().message(), HasSubstr("need 0 <= bg <= fg <= 1"));
  options = TinyOptions(3);
  options.set_mask_threshold(1.5);
  EXPECT_THAT(MaskRCNN::Create(options).status().message(), HasSubstr("mask_threshold"));
}

TEST(MaskRcnnTest, StatesWhatItTrainsOnAndMakesInstanceTargets) {
  std::unique_ptr<MaskRCNN> model = Tiny(5);
  const auto requirements = model->DataRequirements();
  ASSERT_TRUE(requirements.has_value());
  EXPECT_EQ(requirements->annotation_kind, core::AnnotationKind::kObjectInstances);
  EXPECT_EQ(requirements->num_classes, 5);
  EXPECT_EQ(requirements->num_classes_option, "num_classes");
  // 5 classes + background in the predictors.
  std::map<std::string, at::Tensor> params;
  for (const auto& p : model->named_parameters()) params[p.key()] = p.value();
  EXPECT_EQ(params.at("roi_heads.box_predictor.cls_score.weight").size(0), 6);
  EXPECT_EQ(params.at("roi_heads.box_predictor.bbox_pred.weight").size(0), 24);
  EXPECT_EQ(params.at("roi_heads.mask_predictor.mask_fcn_logits.weight").size(0), 6);

  core::Sample sample;
  sample.image = cv::Mat(20, 30, CV_8UC3, cv::Scalar::all(0));
  core::ObjectInstance object;
  object.box = cv::Rect2f(2, 3, 10, 8);
  object.label = 4;
  object.polygons = {{{2, 3}, {12, 3}, {12, 11}, {2, 11}}};
  sample.objects.push_back(object);
  object.is_crowd = true;
  sample.objects.push_back(object);
  std::map<std::string, at::Tensor> instances;
  ASSERT_TRUE(model->MakeTargetGenerator()->GenerateInstances(sample, &instances).ok());
  // The crowd region is left out; the mask is rasterised at the image's size.
  EXPECT_EQ(instances.at("boxes").size(0), 1);
  EXPECT_EQ(instances.at("masks").sizes(), (std::vector<int64_t>{1, 20, 30}));
}

// The batch's masks are rasterised at the padded sample's size; the losses read the image's
// pixels only, as torchvision's masks are the image's size: an object cut by the right border
// of a 40x50 image padded to 64x64 gives the losses of its masks cropped to 40x50.
TEST(MaskRcnnTest, LossesReadMasksWithinTheImageOnly) {
  torch::manual_seed(5);
  std::unique_ptr<MaskRCNN> model = Tiny(3);
  model->train();
  core::Batch batch;
  batch.images = at::zeros({1, 3, 64, 64});
  batch.images.slice(2, 0, 40).slice(3, 0, 50).normal_();
  batch.image_sizes = at::tensor({40, 50}, at::kLong).view({1, 2});
  batch.samples.resize(1);
  at::Tensor masks = at::zeros({2, 64, 64}, at::kByte);
  masks[0].slice(0, 5, 25).slice(1, 30, 50).fill_(1);  // reaches the image's last column
  masks[1].slice(0, 10, 40).slice(1, 2, 20).fill_(1);  // reaches its last row
  batch.instances = {
      {{"boxes", at::tensor({30.f, 5.f, 50.f, 25.f, 2.f, 10.f, 20.f, 40.f}).view({2, 4})},
       {"labels", at::tensor({0, 2}, at::kLong)},
       {"masks", masks}}};
  InstanceTargets cropped;
  cropped.boxes = batch.instances[0].at("boxes");
  cropped.labels = batch.instances[0].at("labels") + 1;
  cropped.masks = masks.slice(1, 0, 40).slice(2, 0, 50);
  // The same sampler draws on both sides.
  torch::manual_seed(7);
  const std::map<std::string, at::Tensor> ours = model->Losses(batch);
  torch::manual_seed(7);
  const std::map<std::string, at::Tensor> expected =
      model->LossesFor(batch.images, {{40, 50}}, {cropped});
  ASSERT_EQ(ours.size(), expected.size());
  for (const auto& [name, value] : expected) {
    SCOPED_TRACE(name);
    EXPECT_EQ(ours.at(name).item<double>(), value.item<double>());
  }
  // The padded masks themselves would give other mask targets.
  InstanceTargets padded = cropped;
  padded.masks = masks;
  torch::manual_seed(7);
  EXPECT_NE(model->LossesFor(batch.images, {{40, 50}}, {padded}).at("loss_mask").item<double>(),
            expected.at("loss_mask").item<double>());
}

// Collects the warnings TORCH_WARN raises while it is installed.
class WarningCollector : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override { messages.push_back(warning.msg()); }
  std::vector<std::string> messages;
};

// A frozen backbone without weights stays at its initial values: said at creation, not left
// for the user to discover from a bad run.
TEST(MaskRcnnTest, FrozenBackboneWithoutWeightsIsWarnedAbout) {
  WarningCollector frozen;
  {
    c10::WarningUtils::WarningHandlerGuard guard(&frozen);
    Tiny(3);
  }
  ASSERT_EQ(frozen.messages.size(), 1u);
  EXPECT_THAT(frozen.messages[0], HasSubstr("backbone (ResNet18) has frozen BatchNorm but loads "
                                            "no weights"));
  EXPECT_THAT(frozen.messages[0], HasSubstr("weights_path"));

  MaskRCNNOptions trained = TinyOptions(3);
  backbones::ResNetOptions resnet;
  resnet.set_frozen_batchnorm(false);
  trained.mutable_backbone()->mutable_options()->PackFrom(resnet);
  WarningCollector none;
  {
    c10::WarningUtils::WarningHandlerGuard guard(&none);
    EXPECT_TRUE(MaskRCNN::Create(trained).ok());
  }
  EXPECT_THAT(none.messages, ::testing::IsEmpty());
}

TEST(MaskRcnnTest, TorchvisionWeightsWithAnotherClassCountLeaveThePredictorsNew) {
  // A "COCO" checkpoint of the same architecture with 91 classes, in torchvision's key names.
  torch::manual_seed(1);
  std::unique_ptr<MaskRCNN> coco = Tiny(90);
  backbones::StateDict state;
  for (const auto& p : coco->named_parameters())
    state.emplace_back(ToTorchvisionKey(p.key()), p.value().detach().clone());
  for (const auto& b : coco->named_buffers())
    state.emplace_back(ToTorchvisionKey(b.key()), b.value().clone());
  for (const auto& [key, tensor] : state)
    EXPECT_EQ(FromTorchvisionKey(key).find(".0.0."), std::string::npos) << key;

  torch::manual_seed(2);
  std::unique_ptr<MaskRCNN> mine = Tiny(3);
  std::map<std::string, at::Tensor> before;
  for (const auto& p : mine->named_parameters()) before[p.key()] = p.value().detach().clone();
  auto report = ImportTorchvisionMaskRcnn(state, *mine, /*strict=*/true, "coco.pth");
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->complete()) << report->ToString();
  EXPECT_THAT(report->added, UnorderedElementsAre("roi_heads.box_predictor.cls_score.weight",
                                                  "roi_heads.box_predictor.cls_score.bias",
                                                  "roi_heads.box_predictor.bbox_pred.weight",
                                                  "roi_heads.box_predictor.bbox_pred.bias",
                                                  "roi_heads.mask_predictor.mask_fcn_logits.weight",
                                                  "roi_heads.mask_predictor.mask_fcn_logits.bias"));
  std::map<std::string, at::Tensor> theirs;
  for (const auto& p : coco->named_parameters()) theirs[p.key()] = p.value();
  for (const auto& p : mine->named_parameters()) {
    const bool predictor =
        std::find(report->added.begin(), report->added.end(), p.key()) != report->added.end();
    EXPECT_TRUE(at::equal(p.value(), predictor ? before.at(p.key()) : theirs.at(p.key())))
        << p.key();
  }

  // Any other mismatch is an error with strict loading, and the model stays as it was.
  backbones::StateDict broken = state;
  for (auto& [key, tensor] : broken) {
    if (key == "rpn.head.cls_logits.weight") tensor = at::zeros({7, 16, 1, 1});
  }
  const at::Tensor fc6 = mine->named_parameters()["roi_heads.box_head.fc6.weight"].clone();
  auto refused = ImportTorchvisionMaskRcnn(broken, *mine, /*strict=*/true, "broken.pth");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("rpn.head.cls_logits.weight"));
  EXPECT_THAT(refused.status().message(), HasSubstr("broken.pth"));
  EXPECT_TRUE(at::equal(mine->named_parameters()["roi_heads.box_head.fc6.weight"], fc6));
}

TEST(MaskRcnnTest, PredictionsAreInOriginalPixelsWithPastedMasks) {
  torch::manual_seed(3);
  std::unique_ptr<MaskRCNN> model = Tiny(3);
  model->eval();
  // An image shown at 1.5x its original 40x60 size, padded to 64x96.
  core::Batch batch;
  batch.images = at::randn({1, 3, 64, 96});
  batch.image_sizes = at::tensor({60, 90}, at::kLong).view({1, 2});
  core::Sample sample;
  sample.id = "a";
  sample.original_height = 40;
  sample.original_width = 60;
  sample.scale_x = sample.scale_y = 1.5;
  batch.samples.push_back(sample);
  std::vector<Detections> detections;
  {
    torch::NoGradGuard no_grad;
    detections = model->Detect(batch.images, {{60, 90}});
  }
  const std::vector<core::Sample> predictions = model->Predict(batch);
  ASSERT_EQ(predictions.size(), 1u);
  const auto& objects = predictions[0].objects;
  ASSERT_EQ(objects.size(), static_cast<size_t>(detections[0].boxes.size(0)));
  ASSERT_GT(objects.size(), 0u) << "random weights give detections above 0.05 with 4 classes";
  EXPECT_EQ(predictions[0].original_height, 40);
  for (size_t k = 0; k < objects.size(); ++k) {
    const at::Tensor box = detections[0].boxes[static_cast<int64_t>(k)] / 1.5;
    EXPECT_NEAR(objects[k].box.x, box[0].item<float>(), 1e-4);
    EXPECT_NEAR(objects[k].box.y, box[1].item<float>(), 1e-4);
    EXPECT_NEAR(objects[k].box.br().x, box[2].item<float>(), 1e-4);
    EXPECT_NEAR(objects[k].box.br().y, box[3].item<float>(), 1e-4);
    EXPECT_EQ(objects[k].label, detections[0].labels[static_cast<int64_t>(k)].item<int64_t>() - 1);
    EXPECT_FLOAT_EQ(objects[k].score, detections[0].scores[static_cast<int64_t>(k)].item<float>());
    EXPECT_EQ(objects[k].rle.height, 40);
    EXPECT_EQ(objects[k].rle.width, 60);
    // A pasted mask lies within its box grown by the paste's one-pixel padding.
    auto mask = core::DecodeRle(objects[k].rle);
    ASSERT_TRUE(mask.ok());
    if (cv::countNonZero(*mask) > 0) {
      const cv::Rect extent = cv::boundingRect(*mask);
      EXPECT_GE(extent.x, std::floor(objects[k].box.x) - 2);
      EXPECT_LE(extent.br().x, std::ceil(objects[k].box.br().x) + 2);
    }
  }
}

TEST(MaskRcnnTest, ActivationCheckpointingNamesBackboneStages) {
  std::unique_ptr<MaskRCNN> model = Tiny(3);
  EXPECT_TRUE(model->EnableActivationCheckpointing({"backbone.body.layer3"}).ok());
  EXPECT_THAT(model->EnableActivationCheckpointing({"roi_heads.box_head"}).message(),
              HasSubstr("backbone stages only"));
}

}  // namespace
}  // namespace vision::models::mask_rcnn
