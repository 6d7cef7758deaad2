// The Cityscapes recipe's input path is the DANet authors' (models/danet/RECIPE.md, "Input
// path"): its training augmentations and its evaluation hold the values of their code
// (junfu1115/DANet at c7a2f60, the code behind the paper's numbers), so that an edit of the
// recipe that leaves the reference says which setting and what the reference is. How those
// evaluation settings behave is engine/segmentation_inference_test's golden test, made by
// their own MultiEvalModule.
#include <cmath>
#include <string>
#include <vector>

#include "core/config/loader.h"
#include "core/config/pipeline.pb.h"
#include "core/config/plugin_spec.pb.h"
#include "data/augmentations/augmentations.pb.h"
#include "engine/segmentation_inference.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::models::danet {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::Pointwise;

constexpr char kRecipe[] = "models/danet/configs/cityscapes_resnet101.pbtxt";
// torchvision's ImageNet statistics, their train.py/test.py Normalize and BaseNet's mean/std.
constexpr double kMean[3] = {0.485, 0.456, 0.406};
constexpr double kStd[3] = {0.229, 0.224, 0.225};

core::TrainPipelineConfig Recipe() {
  absl::StatusOr<core::TrainPipelineConfig> config = core::LoadPipelineConfig(kRecipe);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : core::TrainPipelineConfig();
}

std::vector<std::string> Types(
    const google::protobuf::RepeatedPtrField<core::PluginSpec>& augmentations) {
  std::vector<std::string> types;
  for (const core::PluginSpec& a : augmentations) types.push_back(a.type());
  return types;
}

template <typename Options>
Options Unpack(const core::PluginSpec& augmentation) {
  Options options;
  if (augmentation.has_options()) {
    EXPECT_TRUE(augmentation.options().UnpackTo(&options)) << augmentation.type();
  }
  return options;
}

// Their _sync_transform (encoding/datasets/base.py:70-110) with --base-size 1024 --crop-size
// 768 (README.md:76): flip with p 0.5, shorter side randint(768, 2048) (factors 0.75-2 of
// Cityscapes' 1024 rows), padding black / 255 below the crop (never at these scales), a
// uniform 768x768 crop, ToTensor + Normalize (danet/train.py:38-40).
TEST(RecipeTest, CityscapesTrainingInputIsTheAuthors) {
  const core::TrainPipelineConfig config = Recipe();
  const auto& augmentations = config.train_data().augmentations();
  ASSERT_THAT(Types(augmentations),
              ElementsAre("RandomScale", "RandomCrop", "HorizontalFlip", "Normalize"));
  const auto scale = Unpack<data::augmentations::RandomScaleOptions>(augmentations[0]);
  EXPECT_FLOAT_EQ(scale.min_scale(), 0.75f);
  EXPECT_FLOAT_EQ(scale.max_scale(), 2.0f);
  const auto crop = Unpack<data::augmentations::RandomCropOptions>(augmentations[1]);
  EXPECT_EQ(crop.width(), 768);
  EXPECT_EQ(crop.height(), 768);
  for (float fill : crop.image_fill()) EXPECT_EQ(fill, 0.0f) << "their image padding is black";
  EXPECT_FLOAT_EQ(Unpack<data::augmentations::HorizontalFlipOptions>(augmentations[2])
                      .probability(),
                  0.5f);
  const auto normalize = Unpack<data::augmentations::NormalizeOptions>(augmentations[3]);
  EXPECT_TRUE(normalize.mean().empty()) << "Normalize's default is their ImageNet mean";
  EXPECT_TRUE(normalize.std().empty()) << "Normalize's default is their ImageNet std";
}

// Their multi-scale test (README.md:50, --base-size 2048 --crop-size 1024 --multi-scales) as
// encoding/models/base.py's MultiEvalModule runs it: whole val images, normalised; scales
// 0.5-2.2 (:89), flip (:80), stride crop/2 (:118-121), windows hanging over the edge (:152-171)
// padded with -mean/std (:193-204), exp(logits + mirrored logits) (:182-188) averaged over
// windows and summed over scales (:172-177), align_corners resizes (:21).
TEST(RecipeTest, CityscapesEvaluationIsTheAuthorsMultiScaleTest) {
  const core::TrainPipelineConfig config = Recipe();
  EXPECT_THAT(Types(config.eval_data().augmentations()), ElementsAre("Normalize"));
  absl::StatusOr<engine::SegmentationInferenceOptions> options =
      engine::SegmentationInferenceOptionsFromProto(config.evaluation().segmentation_inference(),
                                                    1);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_THAT(options->scales,
              Pointwise(DoubleNear(1e-6), {0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.2}));
  EXPECT_TRUE(options->flip);
  EXPECT_EQ(options->crop_height, 1024);
  EXPECT_EQ(options->crop_width, 1024);
  EXPECT_EQ(options->stride_height, 512);
  EXPECT_EQ(options->stride_width, 512);
  EXPECT_EQ(options->window_placement, engine::WindowPlacement::kOverhang);
  EXPECT_EQ(options->fusion, engine::ScoreFusion::kSumExpLogits);
  EXPECT_TRUE(options->align_corners);
  ASSERT_EQ(options->pad_value.size(), 3u);
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(options->pad_value[c], -kMean[c] / kStd[c], 1e-6) << "channel " << c;
  }

  // Their sizes for a 2048x1024 image (base size 2048): longer side ceil(2048 s), shorter
  // int(1024 * longer / 2048 + 0.5) (:126-134); ours round each side. Equal at every scale.
  // The windows: 1, 2, 3, 8, 10, 18, 21, 32 (95, as the recipe's comment says).
  int64_t windows = 0;
  std::vector<int64_t> per_scale;
  for (double scale : options->scales) {
    const int64_t longer = static_cast<int64_t>(std::ceil(2048 * scale));
    const int64_t shorter = static_cast<int64_t>(1024.0 * longer / 2048 + 0.5);
    EXPECT_EQ(engine::ScaledSize(2048, scale), longer) << "scale " << scale;
    EXPECT_EQ(engine::ScaledSize(1024, scale), shorter) << "scale " << scale;
    const auto grid =
        engine::SlidingWindows(shorter, longer, options->crop_height, options->crop_width,
                               options->stride_height, options->stride_width,
                               options->window_placement);
    per_scale.push_back(static_cast<int64_t>(grid.size()));
    windows += static_cast<int64_t>(grid.size());
  }
  EXPECT_THAT(per_scale, ElementsAre(1, 2, 3, 8, 10, 18, 21, 32));
  EXPECT_EQ(windows, 95);
}

}  // namespace
}  // namespace vision::models::danet
