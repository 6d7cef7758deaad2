#include "tools/export/export.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "core/config/loader.h"
#include "core/pipeline_builder.h"
#include "engine/checkpoint.h"
#include "engine/ema.h"
#include "models/backbones/torch_save_writer.h"
#include "models/backbones/torchvision_import.h"
#include "models/mask_rcnn/mask_rcnn.h"

namespace vision::tools::export_tool {
namespace {

namespace fs = std::filesystem;
using models::backbones::StateDict;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kTinyMaskRcnn[] = "tools/export/testdata/mask_rcnn_tiny.pbtxt";
constexpr char kTinyDbnet[] = "tools/export/testdata/dbnet_tiny.pbtxt";
constexpr char kTinyDbnetDcn[] = "tools/export/testdata/dbnet_dcn_tiny.pbtxt";
constexpr char kTinyDanet[] = "tools/export/testdata/danet_tiny.pbtxt";

std::string TempPath(const std::string& name) {
  return (fs::path(std::getenv("TEST_TMPDIR")) / name).string();
}

std::shared_ptr<core::Model> Build(const std::string& config_path, int seed,
                                   const std::vector<std::string>& overrides = {}) {
  auto config = core::LoadPipelineConfig(config_path, overrides);
  EXPECT_TRUE(config.ok()) << config.status();
  torch::manual_seed(seed);
  auto model = core::BuildModel(config->model());
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

// Every tensor random, buffers included (FrozenBatchNorm's statistics start as 0 and 1 in any
// model), so that equal tensors after a round trip mean they travelled.
void Randomise(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (auto& [key, tensor] : ModuleStateDict(model)) {
    if (tensor.is_floating_point()) tensor.copy_(torch::randn_like(tensor));
  }
}

std::map<std::string, at::Tensor> AsMap(const StateDict& state) {
  return std::map<std::string, at::Tensor>(state.begin(), state.end());
}

TEST(ExportTest, StateDictIsPyTorchsOrder) {
  std::shared_ptr<core::Model> model = Build(kTinyMaskRcnn, 1);
  const StateDict state = ModuleStateDict(*model);
  ASSERT_GE(state.size(), 4u);
  // A module's parameters, then its buffers, then its children: the stem's BatchNorm buffers
  // come before layer1's.
  EXPECT_EQ(state[0].first, "backbone.body.conv1.weight");
  EXPECT_EQ(state[1].first, "backbone.body.bn1.weight");
  EXPECT_EQ(state[4].first, "backbone.body.bn1.running_var");
  EXPECT_EQ(state.size(), model->named_parameters().size() + model->named_buffers().size());
}

TEST(ExportTest, TorchvisionLayoutRoundTripsBitIdenticalThroughTheImporter) {
  std::shared_ptr<core::Model> source = Build(kTinyMaskRcnn, 1);
  Randomise(*source);
  const StateDict ours = ModuleStateDict(*source);
  auto exported = ToLayout("MaskRCNN", "torchvision", ours);
  ASSERT_TRUE(exported.ok()) << exported.status();
  const std::map<std::string, at::Tensor> file_keys = AsMap(exported->state);
  // torchvision's names for the renamed modules, and BatchNorm2d's counter beside each
  // FrozenBatchNorm.
  for (const char* key :
       {"backbone.fpn.inner_blocks.0.0.weight", "backbone.fpn.layer_blocks.3.0.bias",
        "rpn.head.conv.0.0.weight", "roi_heads.mask_head.0.0.weight",
        "backbone.body.layer1.0.bn1.num_batches_tracked", "roi_heads.box_head.fc6.weight"}) {
    EXPECT_EQ(file_keys.count(key), 1u) << key;
  }
  EXPECT_EQ(file_keys.count("backbone.fpn.lateral0.weight"), 0u);
  const std::string path = TempPath("tiny_torchvision.pth");
  ASSERT_TRUE(models::backbones::WriteTorchStateDict(exported->state, path).ok());

  auto read = models::backbones::ReadTorchStateDict(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), exported->state.size());
  std::shared_ptr<core::Model> target = Build(kTinyMaskRcnn, 2);
  auto* mask_rcnn = dynamic_cast<models::mask_rcnn::MaskRCNN*>(target.get());
  ASSERT_NE(mask_rcnn, nullptr);
  auto report =
      models::mask_rcnn::ImportTorchvisionMaskRcnn(*read, *mask_rcnn, /*strict=*/true, path);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->complete()) << report->ToString();
  EXPECT_TRUE(report->added.empty()) << report->ToString();
  EXPECT_EQ(report->loaded.size(), ours.size());
  const std::map<std::string, at::Tensor> imported = AsMap(ModuleStateDict(*target));
  ASSERT_EQ(imported.size(), ours.size());
  for (const auto& [key, tensor] : ours) {
    ASSERT_EQ(imported.count(key), 1u) << key;
    EXPECT_EQ(imported.at(key).scalar_type(), tensor.scalar_type()) << key;
    EXPECT_TRUE(at::equal(imported.at(key), tensor)) << key << " differs after the round trip";
  }
}

TEST(ExportTest, TorchvisionResNetLayoutIsTheBackboneAlone) {
  std::shared_ptr<core::Model> model = Build(kTinyMaskRcnn, 1);
  Randomise(*model);
  const std::map<std::string, at::Tensor> ours = AsMap(ModuleStateDict(*model));
  auto exported = ToLayout("MaskRCNN", "torchvision_resnet", ModuleStateDict(*model));
  ASSERT_TRUE(exported.ok()) << exported.status();
  const std::string path = TempPath("tiny_resnet.pth");
  ASSERT_TRUE(models::backbones::WriteTorchStateDict(exported->state, path).ok());
  auto read = models::backbones::ReadTorchStateDict(path);
  ASSERT_TRUE(read.ok()) << read.status();
  size_t body = 0;
  for (const auto& [key, tensor] : ours) body += key.rfind("backbone.body.", 0) == 0;
  size_t counters = 0;
  for (const auto& [key, tensor] : *read) {
    EXPECT_EQ(key.rfind("backbone", 0), std::string::npos) << key;
    if (key.find("num_batches_tracked") != std::string::npos) {
      ++counters;
      EXPECT_EQ(tensor.item<int64_t>(), 0) << key;
      continue;
    }
    ASSERT_EQ(ours.count("backbone.body." + key), 1u) << key;
    EXPECT_TRUE(at::equal(tensor, ours.at("backbone.body." + key))) << key;
  }
  // ResNet-18: stem 1 + 8 blocks x 2 + 3 downsample BatchNorms.
  EXPECT_EQ(counters, 20u);
  EXPECT_EQ(read->size(), body + counters);
  EXPECT_THAT(absl::StrJoin(exported->notes, "\n"), HasSubstr("fc.weight and fc.bias"));
}

TEST(ExportTest, LayoutsAModelDoesNotSupportAreRefusedNamingTheValidOnes) {
  const StateDict dbnet = ModuleStateDict(*Build(kTinyDbnet, 1));
  auto refused = ToLayout("DBNet", "torchvision", dbnet);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("--layout=torchvision is not supported for DBNet; DBNet can be exported "
                        "as: native, mhliao_db, torchvision_resnet"));
  auto unknown = ToLayout("MaskRCNN", "detectron2", {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(),
              HasSubstr("unknown --layout 'detectron2'; MaskRCNN can be exported as: native, "
                        "torchvision, torchvision_resnet"));
  // DBNet's ResNet sits directly under "backbone.".
  auto resnet = ToLayout("DBNet", "torchvision_resnet", dbnet);
  ASSERT_TRUE(resnet.ok()) << resnet.status();
  EXPECT_EQ(AsMap(resnet->state).count("layer4.1.bn2.running_mean"), 1u);
}

// MhLiao/DB's names and shapes, from its decoders/seg_detector.py and backbones/resnet.py
// (SegDetector(inner_channels=16, adaptive=True) on resnet18 / deformable_resnet18 under
// DataParallel); export_authors_interop_test loads whole files into its modules and runs them.
TEST(ExportTest, MhLiaoDbLayoutNamesTheDecoderAndDeformableOffsetsAsItsModelDoes) {
  for (const bool dcn : {false, true}) {
    SCOPED_TRACE(dcn ? "deformable ResNet-18" : "ResNet-18");
    std::shared_ptr<core::Model> model = Build(dcn ? kTinyDbnetDcn : kTinyDbnet, 1);
    Randomise(*model);
    const std::map<std::string, at::Tensor> ours = AsMap(ModuleStateDict(*model));
    auto exported = ToLayout("DBNet", "mhliao_db", ModuleStateDict(*model));
    ASSERT_TRUE(exported.ok()) << exported.status();
    const std::map<std::string, at::Tensor> theirs = AsMap(exported->state);
    EXPECT_EQ(theirs.size(), dcn ? 170u : 158u);
    EXPECT_EQ(theirs.size(), ours.size());
    const std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>> expected = {
        {"model.module.decoder.in5.weight", "neck.lateral3.weight", {16, 512, 1, 1}},
        {"model.module.decoder.in2.weight", "neck.lateral0.weight", {16, 64, 1, 1}},
        {"model.module.decoder.out5.0.weight", "neck.smooth3.weight", {4, 16, 3, 3}},
        {"model.module.decoder.out2.weight", "neck.smooth0.weight", {4, 16, 3, 3}},
        {"model.module.decoder.binarize.3.weight", "head.probability.3.weight", {4, 4, 2, 2}},
        {"model.module.decoder.binarize.6.bias", "head.probability.6.bias", {1}},
        {"model.module.decoder.thresh.4.running_var", "head.threshold.4.running_var", {4}},
        {"model.module.backbone.layer4.1.bn2.num_batches_tracked",
         "backbone.layer4.1.bn2.num_batches_tracked",
         {}},
    };
    for (const auto& [key, our_key, shape] : expected) {
      ASSERT_EQ(theirs.count(key), 1u) << key;
      EXPECT_EQ(theirs.at(key).sizes(), at::IntArrayRef(shape)) << key;
      EXPECT_TRUE(at::equal(theirs.at(key), ours.at(our_key))) << key;
    }
    const std::string offset = "model.module.backbone.layer2.0.conv2_offset.weight";
    EXPECT_EQ(theirs.count(offset), dcn ? 1u : 0u);
    if (dcn) {
      // 18 offsets and 9 mask logits per position, from the 128 channels of layer2.
      EXPECT_EQ(theirs.at(offset).sizes(), at::IntArrayRef({27, 128, 3, 3}));
      EXPECT_TRUE(
          at::equal(theirs.at(offset), ours.at("backbone.layer2.0.conv2.conv_offset.weight")));
      EXPECT_EQ(theirs.count("model.module.backbone.layer2.0.conv2.weight"), 1u);
    }
    for (const auto& [key, tensor] : theirs) {
      EXPECT_EQ(key.find("conv_offset"), std::string::npos) << key;
      EXPECT_EQ(key.rfind("model.module.", 0), 0u) << key;
    }
  }
}

// MhLiao/DB's ResNet gives every block of layer2..layer4 a deformable convolution or none: a
// model with another pattern is refused (loaded with strict=False, the blocks it lacks would keep
// zero offsets silently), and a deformable Bottleneck is told about DB's stride-1 offsets.
TEST(ExportTest, MhLiaoDbLayoutRefusesDeformableStagesItsResNetCannotBuild) {
  const std::string dcn_options =
      "model { options { [type.googleapis.com/vision.models.dbnet.DBNetOptions] { backbone { "
      "options { [type.googleapis.com/vision.models.backbones.ResNetOptions] { ";
  std::shared_ptr<core::Model> partial = Build(
      kTinyDbnet, 1, {dcn_options + "stage_with_dcn: [false, false, true, true] } } } } } }"});
  auto refused = ToLayout("DBNet", "mhliao_db", ModuleStateDict(*partial));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("in every block of layer2..layer4 or in none, and this model has them in "
                        "layer3.0, layer3.1, layer4.0, layer4.1: train with "
                        "ResNetOptions.stage_with_dcn [false, true, true, true]"));

  auto basic = ToLayout("DBNet", "mhliao_db", ModuleStateDict(*Build(kTinyDbnetDcn, 1)));
  ASSERT_TRUE(basic.ok()) << basic.status();
  EXPECT_THAT(absl::StrJoin(basic->notes, "\n"), Not(HasSubstr("issue #250")));
  std::shared_ptr<core::Model> bottleneck = Build(
      kTinyDbnetDcn, 1,
      {"model { options { [type.googleapis.com/vision.models.dbnet.DBNetOptions] { backbone { "
       "type: \"ResNet50\" } } } }"});
  auto noted = ToLayout("DBNet", "mhliao_db", ModuleStateDict(*bottleneck));
  ASSERT_TRUE(noted.ok()) << noted.status();
  EXPECT_THAT(absl::StrJoin(noted->notes, "\n"),
              HasSubstr("blocks (layer2.0, layer3.0, layer4.0), whose CUDA kernel then reads the "
                        "first rows of them (its issue #250)"));
}

// The DANet authors' names (junfu1115/DANet c7a2f60: BaseNet's "pretrained" ResNet, DANetHead
// "head"); export_authors_interop_test loads whole files into its modules and runs them.
TEST(ExportTest, Junfu1115DanetLayoutIsPretrainedAndHead) {
  std::shared_ptr<core::Model> model = Build(kTinyDanet, 1);
  Randomise(*model);
  const std::map<std::string, at::Tensor> ours = AsMap(ModuleStateDict(*model));
  auto exported = ToLayout("DANet", "junfu1115_danet", ModuleStateDict(*model));
  ASSERT_TRUE(exported.ok()) << exported.status();
  const std::map<std::string, at::Tensor> theirs = AsMap(exported->state);
  EXPECT_EQ(theirs.size(), ours.size());
  for (const auto& [key, our_key] : std::vector<std::pair<std::string, std::string>>{
           {"pretrained.conv1.weight", "backbone.conv1.weight"},
           {"pretrained.layer4.1.bn2.running_var", "backbone.layer4.1.bn2.running_var"},
           {"head.conv5a.0.weight", "head.conv5a.0.weight"},
           {"head.sa.query_conv.bias", "head.sa.query_conv.bias"},
           {"head.sc.gamma", "head.sc.gamma"},
           {"head.conv8.1.weight", "head.conv8.1.weight"}}) {
    ASSERT_EQ(theirs.count(key), 1u) << key;
    EXPECT_TRUE(at::equal(theirs.at(key), ours.at(our_key))) << key;
  }
  const std::string notes = absl::StrJoin(exported->notes, "\n");
  EXPECT_THAT(notes, HasSubstr("pretrained.fc.weight"));
  EXPECT_THAT(notes, HasSubstr("multi_dilation=[4a, 4b, 4c]"));
  // A ResNet-18 with a 32-channel head: the authors build neither.
  EXPECT_THAT(notes, HasSubstr("the BasicBlock of their dilated resnet18/34 dilates conv2"));
  EXPECT_THAT(notes, HasSubstr("this head takes 512 channels to 32: DANetHead takes "
                               "in_channels / 4, so none of its instances can hold it (train "
                               "with head_channels 128, or 0)"));
  EXPECT_THAT(notes, Not(HasSubstr("PAM_Module")));

  // The authors' DANet has no auxiliary head: a model with one is refused, naming it.
  std::shared_ptr<core::Model> with_aux =
      Build(kTinyDanet, 1,
            {"model { options { [type.googleapis.com/vision.models.danet.DANetOptions] { aux: true "
             "} } }"});
  auto refused = ToLayout("DANet", "junfu1115_danet", ModuleStateDict(*with_aux));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("auxlayer."));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("DANetOptions.aux false"));
}

TEST(ExportTest, CheckpointsEmaWeightsAreTheDefaultAndLiveOnesOnRequest) {
  std::shared_ptr<core::Model> trained = Build(kTinyMaskRcnn, 1);
  engine::ModelEma ema(*trained, 0.9);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : trained->parameters()) p.add_(torch::randn_like(p));
  }
  const std::map<std::string, at::Tensor> live = AsMap(ModuleStateDict(*trained));
  const std::string path = TempPath("ema.pt");
  engine::CheckpointMeta meta;
  meta.step = 5;
  ASSERT_TRUE(engine::SaveCheckpoint(path, {trained.get(), nullptr, &ema}, meta).ok());

  std::shared_ptr<core::Model> model = Build(kTinyMaskRcnn, 2);
  auto loaded = LoadCheckpointWeights(path, *model, "MaskRCNN", WeightsChoice::kDefault);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->ema);
  EXPECT_TRUE(loaded->checkpoint_has_ema);
  EXPECT_EQ(loaded->step, 5);
  for (const auto& [key, tensor] : ModuleStateDict(*model)) {
    EXPECT_TRUE(at::equal(tensor, ema.values().at(key))) << key;
  }
  loaded = LoadCheckpointWeights(path, *model, "MaskRCNN", WeightsChoice::kModel);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->ema);
  for (const auto& [key, tensor] : ModuleStateDict(*model)) {
    EXPECT_TRUE(at::equal(tensor, live.at(key))) << key;
  }

  const std::string no_ema = TempPath("no_ema.pt");
  ASSERT_TRUE(engine::SaveCheckpoint(no_ema, {trained.get(), nullptr, nullptr}, meta).ok());
  auto refused = LoadCheckpointWeights(no_ema, *model, "MaskRCNN", WeightsChoice::kEma);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("holds no EMA weights"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--weights=model"));
}

TEST(ExportTest, CheckpointOfAnotherModelIsRefusedNamingWhatDiffers) {
  std::shared_ptr<core::Model> dbnet = Build(kTinyDbnet, 1);
  const std::string path = TempPath("dbnet.pt");
  engine::CheckpointMeta meta;  // no recorded config: the tensors must tell
  ASSERT_TRUE(engine::SaveCheckpoint(path, {dbnet.get(), nullptr, nullptr}, meta).ok());
  std::shared_ptr<core::Model> model = Build(kTinyMaskRcnn, 2);
  const at::Tensor before = ModuleStateDict(*model)[0].second.clone();
  auto refused = LoadCheckpointWeights(path, *model, "MaskRCNN", WeightsChoice::kDefault);
  ASSERT_FALSE(refused.ok());
  const std::string message(refused.status().message());
  EXPECT_THAT(message, HasSubstr("does not hold the config's model (MaskRCNN): 136 of its 136 "
                                 "tensors missing, 0 of another shape"));
  EXPECT_THAT(message, HasSubstr("backbone.body.conv1.weight: not in the checkpoint"));
  EXPECT_THAT(message, HasSubstr("trained with"));
  EXPECT_TRUE(at::equal(ModuleStateDict(*model)[0].second, before));

  // Same model type, another number of classes: the predictor's shapes differ.
  std::shared_ptr<core::Model> five = Build(kTinyMaskRcnn, 1,
                                            {"model { options { [type.googleapis.com/"
                                             "vision.models.mask_rcnn.MaskRCNNOptions] { "
                                             "num_classes: 5 } } }"});
  const std::string five_path = TempPath("five.pt");
  ASSERT_TRUE(engine::SaveCheckpoint(five_path, {five.get(), nullptr, nullptr}, meta).ok());
  refused = LoadCheckpointWeights(five_path, *model, "MaskRCNN", WeightsChoice::kDefault);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("roi_heads.box_predictor.cls_score.weight: checkpoint [6, 32], model "
                        "[4, 32]"));
}

TEST(ExportTest, WriterLeavesNothingWhenThePathCannotBeWritten) {
  const std::string path = TempPath("missing_dir/out.pth");
  const absl::Status status = models::backbones::WriteTorchStateDict({{"w", at::ones({2})}}, path);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_FALSE(fs::exists(TempPath("missing_dir")));
}

}  // namespace
}  // namespace vision::tools::export_tool
