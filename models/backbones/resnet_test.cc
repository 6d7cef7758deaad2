#include "models/backbones/resnet.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/utils.h>

#include "core/backbone.h"
#include "core/batch_norm.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/ops/deform_conv.h"
#include "models/backbones/frozen_batch_norm.h"
#include "models/backbones/resnet.pb.h"
#include "models/backbones/torch_save_writer_for_test.h"
#include "models/backbones/torchvision_import.h"

namespace vision::models::backbones {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<ResNet> Make(const ResNetConfig& config) {
  absl::StatusOr<std::unique_ptr<ResNet>> net = MakeResNet(config);
  EXPECT_TRUE(net.ok()) << net.status();
  return net.ok() ? *std::move(net) : nullptr;
}

std::vector<std::vector<int64_t>> OutputShapes(ResNet& net, int64_t height, int64_t width) {
  torch::NoGradGuard no_grad;
  net.eval();
  std::vector<std::vector<int64_t>> shapes;
  for (const at::Tensor& out : net.Forward(at::randn({1, 3, height, width}))) {
    shapes.push_back(out.sizes().vec());
  }
  return shapes;
}

std::vector<std::string> Keys(const torch::OrderedDict<std::string, at::Tensor>& dict) {
  return dict.keys();
}

// named_modules() without include_self: the module is not owned by a shared_ptr.
std::shared_ptr<torch::nn::Module> Submodule(ResNet& net, const std::string& name) {
  return net.named_modules("", /*include_self=*/false)[name];
}

torch::nn::Conv2dImpl& ConvAt(ResNet& net, const std::string& name) {
  return *Submodule(net, name)->as<torch::nn::Conv2dImpl>();
}

ops::DeformConv2dImpl* DeformAt(ResNet& net, const std::string& name) {
  return Submodule(net, name)->as<ops::DeformConv2dImpl>();
}

// DBNet's setting: DCN in layer2..layer4.
const std::vector<bool> kDcnStages2To4 = {false, true, true, true};

TEST(ResNetTest, ResNet18OutputShapesAndStrides) {
  std::unique_ptr<ResNet> net = Make(ResNetConfig(18));
  ASSERT_NE(net, nullptr);
  EXPECT_THAT(net->OutChannels(), ElementsAre(64, 128, 256, 512));
  EXPECT_THAT(net->Strides(), ElementsAre(4, 8, 16, 32));
  EXPECT_THAT(OutputShapes(*net, 64, 64),
              ElementsAre(ElementsAre(1, 64, 16, 16), ElementsAre(1, 128, 8, 8),
                          ElementsAre(1, 256, 4, 4), ElementsAre(1, 512, 2, 2)));
  EXPECT_THAT(OutputShapes(*net, 96, 128),
              ElementsAre(ElementsAre(1, 64, 24, 32), ElementsAre(1, 128, 12, 16),
                          ElementsAre(1, 256, 6, 8), ElementsAre(1, 512, 3, 4)));
}

TEST(ResNetTest, ActivationCheckpointingGivesTheSameGradients) {
  std::vector<std::vector<at::Tensor>> grads(2);
  std::vector<at::Tensor> outputs(2);
  for (int checkpoint = 0; checkpoint < 2; ++checkpoint) {
    torch::manual_seed(0);
    std::shared_ptr<ResNet> net = Make(ResNetConfig(18));
    if (checkpoint) {
      ASSERT_TRUE(net->EnableActivationCheckpointing({"layer2", "layer4"}).ok());
    }
    const at::Tensor x = at::randn({2, 3, 64, 64}, at::TensorOptions().dtype(at::kFloat));
    std::vector<at::Tensor> levels = net->Forward(x);
    at::Tensor loss = levels[0].mean() + levels[1].pow(2).mean() + levels[3].sum();
    loss.backward();
    outputs[checkpoint] = levels[3].detach();
    for (const at::Tensor& p : net->parameters()) grads[checkpoint].push_back(p.grad());
  }
  EXPECT_TRUE(at::equal(outputs[0], outputs[1]));
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) {
    ASSERT_TRUE(grads[1][i].defined()) << i;
    const double relative =
        ((grads[0][i] - grads[1][i]).norm() / grads[0][i].norm().clamp_min(1e-12)).item<double>();
    EXPECT_LT(relative, 1e-5) << "parameter " << i;
  }
  std::shared_ptr<ResNet> net = Make(ResNetConfig(18));
  EXPECT_THAT(net->EnableActivationCheckpointing({"layer5"}).message(), HasSubstr("no stage 'layer5'"));
}

// ResNet::Forward pools before the stem's ReLU (a quarter of the elements); torchvision's
// order, ReLU then pool, computed here from the same modules, gives the same bits: outputs,
// the input's gradient and every stem and layer1 parameter's. Random inputs leave some 3x3
// windows all negative (about 1 in 512), where neither order passes gradient.
TEST(ResNetTest, StemPoolsBeforeReLUAsTorchvisionOrderDoes) {
  torch::manual_seed(0);
  std::unique_ptr<ResNet> net = Make(ResNetConfig(18));
  ASSERT_NE(net, nullptr);
  net->train();
  const at::Tensor x = at::randn({2, 3, 64, 64}).requires_grad_();
  const at::Tensor weights = at::randn({2, 64, 16, 16});
  auto* bn1 = Submodule(*net, "bn1")->as<core::BatchNorm2dImpl>();
  auto* layer1 = Submodule(*net, "layer1")->as<torch::nn::SequentialImpl>();
  ASSERT_NE(bn1, nullptr);
  ASSERT_NE(layer1, nullptr);
  const std::vector<std::string> names = {"conv1.weight", "bn1.weight", "bn1.bias",
                                          "layer1.0.conv1.weight", "layer1.1.bn2.weight"};
  std::vector<at::Tensor> outputs, input_grads;
  std::vector<std::vector<at::Tensor>> grads(2);
  for (int torchvision_order = 0; torchvision_order < 2; ++torchvision_order) {
    net->zero_grad();
    x.mutable_grad() = at::Tensor();
    const at::Tensor out =
        torchvision_order
            ? layer1->forward(at::max_pool2d(
                  at::relu(bn1->forward(ConvAt(*net, "conv1").forward(x))), {3, 3}, {2, 2}, {1, 1}))
            : net->Forward(x)[0];
    (out * weights).sum().backward();
    outputs.push_back(out.detach());
    input_grads.push_back(x.grad().clone());
    const auto parameters = net->named_parameters();
    for (const std::string& name : names)
      grads[torchvision_order].push_back(parameters[name].grad().clone());
  }
  EXPECT_TRUE(at::equal(outputs[0], outputs[1]));
  EXPECT_TRUE(at::equal(input_grads[0], input_grads[1]));
  EXPECT_GT(input_grads[0].abs().max().item<float>(), 0.0f);
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_TRUE(at::equal(grads[0][i], grads[1][i]))
        << names[i] << ": max difference " << (grads[0][i] - grads[1][i]).abs().max().item<float>();
  }
}

TEST(ResNetTest, ResNet50OutputShapesAndStrides) {
  std::unique_ptr<ResNet> net = Make(ResNetConfig(50));
  ASSERT_NE(net, nullptr);
  EXPECT_THAT(net->OutChannels(), ElementsAre(256, 512, 1024, 2048));
  EXPECT_THAT(net->Strides(), ElementsAre(4, 8, 16, 32));
  EXPECT_THAT(OutputShapes(*net, 64, 64),
              ElementsAre(ElementsAre(1, 256, 16, 16), ElementsAre(1, 512, 8, 8),
                          ElementsAre(1, 1024, 4, 4), ElementsAre(1, 2048, 2, 2)));
  EXPECT_THAT(OutputShapes(*net, 96, 128),
              ElementsAre(ElementsAre(1, 256, 24, 32), ElementsAre(1, 512, 12, 16),
                          ElementsAre(1, 1024, 6, 8), ElementsAre(1, 2048, 3, 4)));
}

TEST(ResNetTest, OutputStride16DilatesLayer4AsTorchvision) {
  std::unique_ptr<ResNet> net = Make(ResNetConfig(50).output_stride(16));
  ASSERT_NE(net, nullptr);
  EXPECT_THAT(net->Strides(), ElementsAre(4, 8, 16, 16));
  EXPECT_THAT(OutputShapes(*net, 96, 128),
              ElementsAre(ElementsAre(1, 256, 24, 32), ElementsAre(1, 512, 12, 16),
                          ElementsAre(1, 1024, 6, 8), ElementsAre(1, 2048, 6, 8)));
  // torchvision: the first block of a dilated stage keeps the previous dilation, without
  // stride; the others use the new dilation.
  EXPECT_THAT(*ConvAt(*net, "layer4.0.conv2").options.stride(), ElementsAre(1, 1));
  EXPECT_THAT(*ConvAt(*net, "layer4.0.conv2").options.dilation(), ElementsAre(1, 1));
  EXPECT_THAT(*ConvAt(*net, "layer4.1.conv2").options.dilation(), ElementsAre(2, 2));
  EXPECT_THAT(*ConvAt(*net, "layer4.0.downsample.0").options.stride(), ElementsAre(1, 1));
  EXPECT_THAT(*ConvAt(*net, "layer3.0.conv2").options.stride(), ElementsAre(2, 2));
}

TEST(ResNetTest, OutputStride8DilatesLayer3And4) {
  std::unique_ptr<ResNet> net = Make(ResNetConfig(50).output_stride(8));
  ASSERT_NE(net, nullptr);
  EXPECT_THAT(net->Strides(), ElementsAre(4, 8, 8, 8));
  EXPECT_THAT(OutputShapes(*net, 64, 64),
              ElementsAre(ElementsAre(1, 256, 16, 16), ElementsAre(1, 512, 8, 8),
                          ElementsAre(1, 1024, 8, 8), ElementsAre(1, 2048, 8, 8)));
  EXPECT_THAT(*ConvAt(*net, "layer3.1.conv2").options.dilation(), ElementsAre(2, 2));
  EXPECT_THAT(*ConvAt(*net, "layer4.0.conv2").options.dilation(), ElementsAre(2, 2));
  EXPECT_THAT(*ConvAt(*net, "layer4.2.conv2").options.dilation(), ElementsAre(4, 4));
}

TEST(ResNetTest, StageWithDcnMakesEveryConv2OfThoseStagesDeformable) {
  std::unique_ptr<ResNet> net =
      Make(ResNetConfig(50).stage_with_dcn(kDcnStages2To4).output_stride(16));
  ASSERT_NE(net, nullptr);
  EXPECT_EQ(DeformAt(*net, "layer1.2.conv2"), nullptr);
  EXPECT_NE(Submodule(*net, "layer1.2.conv2")->as<torch::nn::Conv2dImpl>(), nullptr);
  for (const std::string stage : {"layer2.", "layer3.", "layer4."}) {
    for (const std::string block : {"0", "1", "2"}) {
      EXPECT_NE(DeformAt(*net, stage + block + ".conv2"), nullptr) << stage << block;
      EXPECT_NE(Submodule(*net, stage + block + ".conv1")->as<torch::nn::Conv2dImpl>(), nullptr);
    }
  }
  // Stride and dilation move over from the plain convolution, and into the offset branch.
  EXPECT_THAT(*DeformAt(*net, "layer2.0.conv2")->options.stride(), ElementsAre(2, 2));
  EXPECT_THAT(*DeformAt(*net, "layer2.0.conv2")->conv_offset->options.stride(), ElementsAre(2, 2));
  EXPECT_THAT(*DeformAt(*net, "layer4.1.conv2")->options.dilation(), ElementsAre(2, 2));
  EXPECT_THAT(*DeformAt(*net, "layer4.1.conv2")->options.padding(), ElementsAre(2, 2));
  EXPECT_THAT(*DeformAt(*net, "layer4.1.conv2")->conv_offset->options.dilation(),
              ElementsAre(2, 2));
  EXPECT_FALSE(DeformAt(*net, "layer4.1.conv2")->bias.defined());
  // 13 deformable blocks, each with conv_offset.weight and .bias on top of ResNet-50's 159.
  EXPECT_EQ(net->named_parameters().size(), 159u + 26u);
  EXPECT_EQ(ops::OffsetBranchParameterNames(*net).size(), 26u);
  // The Kaiming pass covers the deformable weight but leaves the offset branch at zero.
  const at::Tensor w = net->named_parameters()["layer3.0.conv2.weight"];
  const double kaiming_std = std::sqrt(2.0 / (256 * 9));
  EXPECT_NEAR(w.std().item<double>(), kaiming_std, 0.05 * kaiming_std);
  const at::Tensor offset_weight = net->named_parameters()["layer3.0.conv2.conv_offset.weight"];
  EXPECT_TRUE(offset_weight.eq(0).all().item<bool>());
  EXPECT_THAT(OutputShapes(*net, 96, 128),
              ElementsAre(ElementsAre(1, 256, 24, 32), ElementsAre(1, 512, 12, 16),
                          ElementsAre(1, 1024, 6, 8), ElementsAre(1, 2048, 6, 8)));
}

// With the plain network's weights and zero offset branches every DCN computes 0.5 times the
// plain convolution (sigmoid(0) masks), which the following BatchNorm undoes in training mode
// up to its eps. So the deformable network must reproduce the plain one: this checks that the
// right convolutions were replaced, with the right stride, padding and dilation.
TEST(ResNetTest, DeformableResNetWithPlainWeightsMatchesThePlainOneInTraining) {
  // Sizes leave BatchNorm at least 8 values per channel in layer4, so that eps stays small.
  struct Case {
    int64_t depth, output_stride, size;
  };
  for (const auto& [depth, output_stride, size] : std::vector<Case>{{18, 32, 64}, {50, 8, 32}}) {
    SCOPED_TRACE(::testing::Message() << "ResNet" << depth << " output stride " << output_stride);
    torch::manual_seed(5);
    std::unique_ptr<ResNet> plain = Make(ResNetConfig(depth).output_stride(output_stride));
    std::unique_ptr<ResNet> deformable =
        Make(ResNetConfig(depth).output_stride(output_stride).stage_with_dcn(kDcnStages2To4));
    ASSERT_NE(plain, nullptr);
    ASSERT_NE(deformable, nullptr);
    StateDict state;
    for (const auto& item : plain->named_parameters()) state.emplace_back(item.key(), item.value());
    for (const auto& item : plain->named_buffers()) state.emplace_back(item.key(), item.value());
    absl::StatusOr<ImportReport> report =
        LoadStateDict(state, *deformable, /*strict=*/true, "plain ResNet",
                      ops::OffsetBranchParameterNames(*deformable));
    ASSERT_TRUE(report.ok()) << report.status();

    torch::NoGradGuard no_grad;
    const at::Tensor images = at::randn({2, 3, size, size});
    const std::vector<at::Tensor> expected = plain->Forward(images);
    const std::vector<at::Tensor> actual = deformable->Forward(images);
    for (size_t i = 0; i < expected.size(); ++i) {
      const double relative =
          ((actual[i] - expected[i]).norm() / expected[i].norm()).item<double>();
      EXPECT_LT(relative, 1e-3) << "level " << i;
    }
    // layer1 has no DCN: identical.
    EXPECT_TRUE(at::equal(actual[0], expected[0]));
  }
}

TEST(ResNetTest, MultiGridScalesLayer4DilationsPerBlock) {
  std::unique_ptr<ResNet> net = Make(ResNetConfig(50).output_stride(8).multi_grid({1, 2, 4}));
  ASSERT_NE(net, nullptr);
  EXPECT_THAT(net->Strides(), ElementsAre(4, 8, 8, 8));
  // DANet's authors' layer4 at output stride 8: dilations 4, 8, 16 (the first block included),
  // padding equal to the dilation so the size is kept; layer3 is untouched.
  for (const auto& [block, dilation] : std::vector<std::pair<std::string, int64_t>>{
           {"layer4.0", 4}, {"layer4.1", 8}, {"layer4.2", 16}}) {
    EXPECT_THAT(*ConvAt(*net, block + ".conv2").options.dilation(), ElementsAre(dilation, dilation));
    EXPECT_THAT(*std::get<torch::ExpandingArray<2>>(ConvAt(*net, block + ".conv2").options.padding()),
                ElementsAre(dilation, dilation));
    EXPECT_THAT(*ConvAt(*net, block + ".conv2").options.stride(), ElementsAre(1, 1));
  }
  EXPECT_THAT(*ConvAt(*net, "layer3.1.conv2").options.dilation(), ElementsAre(2, 2));
  EXPECT_THAT(OutputShapes(*net, 64, 64).back(), ElementsAre(1, 2048, 8, 8));
  // At output stride 32 the multipliers apply to dilation 1; ResNet-18 has two blocks there.
  std::unique_ptr<ResNet> small = Make(ResNetConfig(18).multi_grid({1, 2}));
  ASSERT_NE(small, nullptr);
  EXPECT_THAT(*ConvAt(*small, "layer4.0.conv1").options.dilation(), ElementsAre(1, 1));
  EXPECT_THAT(*ConvAt(*small, "layer4.0.conv1").options.stride(), ElementsAre(2, 2));
  EXPECT_THAT(*ConvAt(*small, "layer4.1.conv1").options.dilation(), ElementsAre(2, 2));
  EXPECT_THAT(OutputShapes(*small, 64, 64).back(), ElementsAre(1, 512, 2, 2));
}

TEST(ResNetTest, ResNet18SupportsOutputStride8) {
  std::unique_ptr<ResNet> net = Make(ResNetConfig(18).output_stride(8));
  ASSERT_NE(net, nullptr);
  EXPECT_THAT(net->Strides(), ElementsAre(4, 8, 8, 8));
  EXPECT_THAT(OutputShapes(*net, 96, 128),
              ElementsAre(ElementsAre(1, 64, 24, 32), ElementsAre(1, 128, 12, 16),
                          ElementsAre(1, 256, 12, 16), ElementsAre(1, 512, 12, 16)));
}

// Keys of torchvision.models.resnet18().named_parameters()/named_buffers() without fc
// (torchvision 0.14: 62 parameters with fc.weight and fc.bias, 60 buffers, 122 state_dict
// entries).
TEST(ResNetTest, ResNet18NamesMatchTorchvisionStateDict) {
  std::unique_ptr<ResNet> net = Make(ResNetConfig(18));
  ASSERT_NE(net, nullptr);
  const std::vector<std::string> params = Keys(net->named_parameters());
  const std::vector<std::string> buffers = Keys(net->named_buffers());
  ASSERT_EQ(params.size(), 60u);
  ASSERT_EQ(buffers.size(), 60u);
  EXPECT_THAT(std::vector<std::string>(params.begin(), params.begin() + 5),
              ElementsAre("conv1.weight", "bn1.weight", "bn1.bias", "layer1.0.conv1.weight",
                          "layer1.0.bn1.weight"));
  EXPECT_THAT(std::vector<std::string>(params.end() - 4, params.end()),
              ElementsAre("layer4.1.bn1.bias", "layer4.1.conv2.weight", "layer4.1.bn2.weight",
                          "layer4.1.bn2.bias"));
  EXPECT_THAT(std::vector<std::string>(buffers.begin(), buffers.begin() + 4),
              ElementsAre("bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked",
                          "layer1.0.bn1.running_mean"));
  EXPECT_THAT(std::vector<std::string>(buffers.end() - 3, buffers.end()),
              ElementsAre("layer4.1.bn2.running_mean", "layer4.1.bn2.running_var",
                          "layer4.1.bn2.num_batches_tracked"));
  std::vector<std::string> downsample;
  for (const std::string& key : params) {
    if (key.find("downsample") != std::string::npos) downsample.push_back(key);
  }
  EXPECT_THAT(std::vector<std::string>(downsample.begin(), downsample.begin() + 4),
              ElementsAre("layer2.0.downsample.0.weight", "layer2.0.downsample.1.weight",
                          "layer2.0.downsample.1.bias", "layer3.0.downsample.0.weight"));
}

TEST(ResNetTest, ResNet50NamesMatchTorchvisionStateDict) {
  std::unique_ptr<ResNet> net = Make(ResNetConfig(50));
  ASSERT_NE(net, nullptr);
  const std::vector<std::string> params = Keys(net->named_parameters());
  const std::vector<std::string> buffers = Keys(net->named_buffers());
  ASSERT_EQ(params.size(), 159u);
  ASSERT_EQ(buffers.size(), 159u);
  EXPECT_THAT(std::vector<std::string>(params.end() - 4, params.end()),
              ElementsAre("layer4.2.bn2.bias", "layer4.2.conv3.weight", "layer4.2.bn3.weight",
                          "layer4.2.bn3.bias"));
  EXPECT_EQ(params[5], "layer1.0.bn1.bias");
  EXPECT_THAT(params, ::testing::Contains("layer1.0.downsample.0.weight"));
  EXPECT_EQ(net->named_parameters()["layer1.0.conv2.weight"].sizes(),
            at::IntArrayRef({64, 64, 3, 3}));
  EXPECT_EQ(net->named_parameters()["layer2.0.downsample.0.weight"].sizes(),
            at::IntArrayRef({512, 256, 1, 1}));
}

TEST(ResNetTest, FrozenBatchNormKeepsTorchvisionNamesAsBuffers) {
  std::unique_ptr<ResNet> net = Make(ResNetConfig(18).frozen_batchnorm(true));
  ASSERT_NE(net, nullptr);
  const std::vector<std::string> params = Keys(net->named_parameters());
  const std::vector<std::string> buffers = Keys(net->named_buffers());
  // Only the 20 convolutions are trainable; each of the 20 norms has 4 buffers.
  EXPECT_EQ(params.size(), 20u);
  EXPECT_EQ(buffers.size(), 80u);
  EXPECT_THAT(std::vector<std::string>(buffers.begin(), buffers.begin() + 4),
              ElementsAre("bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"));
}

TEST(ResNetTest, KaimingInitialisationAsTorchvision) {
  std::unique_ptr<ResNet> net = Make(ResNetConfig(18));
  ASSERT_NE(net, nullptr);
  // kaiming_normal_(mode="fan_out", nonlinearity="relu"): std = sqrt(2 / (out * k * k)).
  const at::Tensor w = net->named_parameters()["layer4.1.conv2.weight"];
  const double expected = std::sqrt(2.0 / (512 * 9));
  EXPECT_NEAR(w.std().item<double>(), expected, 0.02 * expected);
  EXPECT_NEAR(w.mean().item<double>(), 0.0, 0.02 * expected);
  EXPECT_TRUE(net->named_parameters()["layer4.1.bn2.weight"].eq(1).all().item<bool>());
  EXPECT_TRUE(net->named_parameters()["layer4.1.bn2.bias"].eq(0).all().item<bool>());
}

TEST(ResNetTest, FrozenStagesHaveNoGradAndKeepStatistics) {
  std::unique_ptr<ResNet> net = Make(ResNetConfig(18).frozen_stages(2));
  ASSERT_NE(net, nullptr);
  for (const auto& item : net->named_parameters()) {
    const bool frozen = item.key().rfind("conv1.", 0) == 0 || item.key().rfind("bn1.", 0) == 0 ||
                        item.key().rfind("layer1.", 0) == 0 || item.key().rfind("layer2.", 0) == 0;
    EXPECT_EQ(item.value().requires_grad(), !frozen) << item.key();
  }
  net->train();
  EXPECT_FALSE(Submodule(*net, "bn1")->is_training());
  EXPECT_FALSE(Submodule(*net, "layer2.1.bn2")->is_training());
  EXPECT_TRUE(Submodule(*net, "layer3.0.bn1")->is_training());

  const at::Tensor frozen_mean = net->named_buffers()["layer2.1.bn2.running_mean"].clone();
  const at::Tensor live_mean = net->named_buffers()["layer3.0.bn1.running_mean"].clone();
  std::vector<at::Tensor> outputs = net->Forward(at::randn({2, 3, 64, 64}));
  outputs.back().sum().backward();
  EXPECT_TRUE(at::equal(net->named_buffers()["layer2.1.bn2.running_mean"], frozen_mean));
  EXPECT_FALSE(at::equal(net->named_buffers()["layer3.0.bn1.running_mean"], live_mean));
  EXPECT_FALSE(net->named_parameters()["layer2.1.conv2.weight"].grad().defined());
  EXPECT_TRUE(net->named_parameters()["layer3.0.conv1.weight"].grad().defined());
}

TEST(ResNetTest, FrozenBatchNormIgnoresTrainMode) {
  std::unique_ptr<ResNet> net = Make(ResNetConfig(18).frozen_batchnorm(true));
  ASSERT_NE(net, nullptr);
  {
    torch::NoGradGuard no_grad;
    for (const auto& item : net->named_buffers()) {
      if (item.key().find("running_var") != std::string::npos) {
        item.value().uniform_(0.5, 2.0);
      } else {
        item.value().normal_(0.0, 0.1);
      }
    }
  }
  std::vector<at::Tensor> before;
  for (const auto& item : net->named_buffers()) before.push_back(item.value().clone());

  const at::Tensor images = at::randn({2, 3, 32, 32});
  net->train();
  const std::vector<at::Tensor> train_out = net->Forward(images);
  net->eval();
  const std::vector<at::Tensor> eval_out = net->Forward(images);
  for (size_t i = 0; i < train_out.size(); ++i) {
    EXPECT_TRUE(at::equal(train_out[i], eval_out[i])) << "output " << i;
  }
  size_t i = 0;
  for (const auto& item : net->named_buffers()) {
    EXPECT_TRUE(at::equal(item.value(), before[i++])) << item.key();
  }
}

TEST(FrozenBatchNorm2dTest, MatchesBatchNormInEvalMode) {
  FrozenBatchNorm2d frozen(5);
  torch::nn::BatchNorm2d reference(5);
  {
    torch::NoGradGuard no_grad;
    for (at::Tensor* t : {&frozen->weight, &frozen->bias, &frozen->running_mean}) t->normal_();
    frozen->running_var.uniform_(0.5, 2.0);
    reference->weight.copy_(frozen->weight);
    reference->bias.copy_(frozen->bias);
    reference->running_mean.copy_(frozen->running_mean);
    reference->running_var.copy_(frozen->running_var);
  }
  reference->eval();
  const at::Tensor x = at::randn({2, 5, 4, 3});
  EXPECT_TRUE(at::allclose(frozen->forward(x), reference->forward(x), 1e-5, 1e-5));
}

TEST(ResNetTest, InvalidConfigsAreErrors) {
  absl::StatusOr<std::unique_ptr<ResNet>> net = MakeResNet(ResNetConfig(20));
  EXPECT_EQ(net.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(net.status().message(), HasSubstr("18, 34, 50 or 101"));
  net = MakeResNet(ResNetConfig(18).output_stride(4));
  EXPECT_THAT(net.status().message(), HasSubstr("output_stride"));
  net = MakeResNet(ResNetConfig(18).frozen_stages(5));
  EXPECT_THAT(net.status().message(), HasSubstr("frozen_stages"));
  net = MakeResNet(ResNetConfig(50).stage_with_dcn({true, true, true}));
  EXPECT_THAT(net.status().message(), HasSubstr("stage_with_dcn: has 3 entries"));
  net = MakeResNet(ResNetConfig(18).multi_grid({1, 2, 4}));
  EXPECT_THAT(net.status().message(),
              HasSubstr("multi_grid: has 3 entries but ResNet18's layer4 has 2 blocks"));
  net = MakeResNet(ResNetConfig(50).multi_grid({1, 0, 4}));
  EXPECT_THAT(net.status().message(), HasSubstr("multi_grid[1]: 0"));
}

google::protobuf::Any Pack(const ResNetOptions& options) {
  google::protobuf::Any any;
  any.PackFrom(options);
  return any;
}

TEST(ResNetRegistryTest, CreatesEveryDepthByName) {
  for (const auto& [name, channels] : std::vector<std::pair<std::string, int64_t>>{
           {"ResNet18", 512}, {"ResNet34", 512}, {"ResNet50", 2048}, {"ResNet101", 2048}}) {
    absl::StatusOr<std::unique_ptr<core::Backbone>> backbone =
        core::BackboneRegistry::Get().Create(name, google::protobuf::Any());
    ASSERT_TRUE(backbone.ok()) << name << ": " << backbone.status();
    EXPECT_EQ((*backbone)->OutChannels().back(), channels) << name;
    EXPECT_THAT((*backbone)->Strides(), ElementsAre(4, 8, 16, 32)) << name;
    if (name == "ResNet101") {
      // layer3 has 23 blocks.
      EXPECT_TRUE((*backbone)->named_parameters().contains("layer3.22.bn3.bias"));
      EXPECT_FALSE((*backbone)->named_parameters().contains("layer3.23.bn3.bias"));
    }
  }
}

TEST(ResNetRegistryTest, AppliesOptions) {
  ResNetOptions options;
  options.set_output_stride(16);
  options.set_frozen_stages(1);
  options.set_frozen_batchnorm(true);
  options.add_multi_grid(1);
  options.add_multi_grid(3);
  absl::StatusOr<std::unique_ptr<core::Backbone>> backbone =
      core::BackboneRegistry::Get().Create("ResNet18", Pack(options));
  ASSERT_TRUE(backbone.ok()) << backbone.status();
  EXPECT_THAT(dynamic_cast<ResNet&>(**backbone).config().multi_grid(), ElementsAre(1, 3));
  EXPECT_THAT((*backbone)->Strides(), ElementsAre(4, 8, 16, 16));
  EXPECT_FALSE((*backbone)->named_parameters()["layer1.0.conv1.weight"].requires_grad());
  EXPECT_TRUE((*backbone)->named_parameters()["layer2.0.conv1.weight"].requires_grad());
  EXPECT_EQ((*backbone)->named_parameters().size(), 20u);
}

TEST(ResNetRegistryTest, BadOptionsNameThePlugin) {
  ResNetOptions options;
  options.set_output_stride(12);
  absl::StatusOr<std::unique_ptr<core::Backbone>> backbone =
      core::BackboneRegistry::Get().Create("ResNet50", Pack(options));
  EXPECT_EQ(backbone.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(backbone.status().message(), HasSubstr("ResNet50 options: output_stride: 12"));
}

TEST(ResNetRegistryTest, LoadsWeightsFromOptions) {
  // A complete ResNet18 state dict written in torchvision's format.
  std::unique_ptr<ResNet> source = Make(ResNetConfig(18));
  ASSERT_NE(source, nullptr);
  std::vector<std::pair<std::string, at::Tensor>> state;
  for (const auto& item : source->named_parameters()) state.emplace_back(item.key(), item.value());
  for (const auto& item : source->named_buffers()) state.emplace_back(item.key(), item.value());
  // torchvision's checkpoints carry the classifier, which the backbone drops even when strict.
  state.emplace_back("fc.weight", at::randn({10, 512}));
  state.emplace_back("fc.bias", at::randn({10}));
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/resnet18.pth";
  testing::WriteTorchSave(path, state);

  ResNetOptions options;
  options.set_weights_path(path);
  options.set_strict_weights(true);
  absl::StatusOr<std::unique_ptr<core::Backbone>> backbone =
      core::BackboneRegistry::Get().Create("ResNet18", Pack(options));
  ASSERT_TRUE(backbone.ok()) << backbone.status();
  EXPECT_TRUE(at::equal((*backbone)->named_parameters()["layer3.1.conv2.weight"],
                        source->named_parameters()["layer3.1.conv2.weight"]));

  // The same file is incomplete for ResNet34: strict loading fails and says why.
  absl::StatusOr<std::unique_ptr<core::Backbone>> resnet34 =
      core::BackboneRegistry::Get().Create("ResNet34", Pack(options));
  EXPECT_EQ(resnet34.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(resnet34.status().message(), HasSubstr("ResNet34 weights_path"));
  EXPECT_THAT(resnet34.status().message(), HasSubstr("layer1.2.conv1.weight"));
  EXPECT_THAT(resnet34.status().message(), ::testing::Not(HasSubstr("fc.weight")));

  // Deformable stages: the offset branches are new, not missing, even for strict loading.
  for (bool dcn : {false, true, true, true}) options.add_stage_with_dcn(dcn);
  absl::StatusOr<std::unique_ptr<core::Backbone>> deformable =
      core::BackboneRegistry::Get().Create("ResNet18", Pack(options));
  ASSERT_TRUE(deformable.ok()) << deformable.status();
  EXPECT_TRUE(at::equal((*deformable)->named_parameters()["layer3.1.conv2.weight"],
                        source->named_parameters()["layer3.1.conv2.weight"]));
  EXPECT_TRUE((*deformable)->named_parameters()["layer3.1.conv2.conv_offset.bias"].eq(0).all()
                  .item<bool>());
  options.clear_stage_with_dcn();

  options.set_weights_path(path + ".missing");
  absl::StatusOr<std::unique_ptr<core::Backbone>> missing =
      core::BackboneRegistry::Get().Create("ResNet18", Pack(options));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(path + ".missing"));
}

}  // namespace
}  // namespace vision::models::backbones
