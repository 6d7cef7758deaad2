#include "core/config/loader.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/config/test_options.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::core {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const char kDir[] = "testdata/configs/";

std::string Path(const char* name) { return std::string(kDir) + name; }

TEST(LoaderTest, LoadsValidConfig) {
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(Path("valid.pbtxt"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model().type(), "FooModel");
  testing::FooOptions options;
  ASSERT_TRUE(c->model().options().UnpackTo(&options));
  EXPECT_EQ(options.size(), 7);
  EXPECT_EQ(c->train_data().augmentations_size(), 2);
  EXPECT_EQ(c->train_data().loader().batch_size(), 4);
  EXPECT_DOUBLE_EQ(c->optimizer().lr(), 0.007);
  EXPECT_EQ(c->lr_schedule().warmup_steps(), 10);
  EXPECT_EQ(c->train().max_steps(), 100);
  EXPECT_EQ(c->seed(), 42u);  // default
  EXPECT_EQ(c->device(), "cpu");
}

TEST(LoaderTest, OverridesMergeInOrder) {
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(
      Path("valid.pbtxt"),
      {"optimizer { lr: 0.01 }", "optimizer { lr: 0.02 } seed: 7",
       "train_data { augmentations { type: \"Normalize\" } }"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->optimizer().lr(), 0.02);
  EXPECT_DOUBLE_EQ(c->optimizer().weight_decay(), 0.0001);  // untouched siblings stay
  EXPECT_EQ(c->optimizer().type(), "SGD");
  EXPECT_EQ(c->seed(), 7u);
  ASSERT_EQ(c->train_data().augmentations_size(), 3);  // repeated fields append
  EXPECT_EQ(c->train_data().augmentations(2).type(), "Normalize");
}

TEST(LoaderTest, OverrideMergesInsidePluginOptions) {
  // Protobuf's own merge would replace the whole Any; ours merges its payload.
  absl::StatusOr<TrainPipelineConfig> base = LoadPipelineConfig(Path("valid.pbtxt"));
  ASSERT_TRUE(base.ok());
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(
      Path("valid.pbtxt"),
      {"model { options { [type.googleapis.com/vision.core.testing.FooOptions] { } } }"});
  ASSERT_TRUE(c.ok()) << c.status();
  testing::FooOptions options;
  ASSERT_TRUE(c->model().options().UnpackTo(&options));
  EXPECT_EQ(options.size(), 7);  // kept, not reset to the default 3
  c = LoadPipelineConfig(Path("valid.pbtxt"), {"model { options { "
                                               "[type.googleapis.com/vision.core.testing.FooOptions]"
                                               " { size: 9 } } }"});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->model().options().UnpackTo(&options));
  EXPECT_EQ(options.size(), 9);
  // Another options type replaces the payload (and the plugin will reject it by type).
  c = LoadPipelineConfig(Path("valid.pbtxt"),
                         {"model { options { [type.googleapis.com/vision.core.testing.BarOptions]"
                          " { label: \"x\" } } }"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->model().options().Is<testing::BarOptions>());
}

TEST(LoaderTest, BaseIsLoadedFirstAndTheFileLaidOverIt) {
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(Path("bases/derived.pbtxt"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->has_base()) << "the loaded config has its base resolved";
  EXPECT_EQ(c->name(), "derived");
  EXPECT_DOUBLE_EQ(c->optimizer().lr(), 0.01);
  EXPECT_DOUBLE_EQ(c->optimizer().weight_decay(), 0.0001);  // merged, not replaced
  EXPECT_EQ(c->optimizer().type(), "SGD");
  // A repeated field the recipe sets replaces the base's list.
  ASSERT_EQ(c->train_data().augmentations_size(), 1);
  EXPECT_EQ(c->train_data().augmentations(0).type(), "Normalize");
  EXPECT_EQ(c->train_data().loader().batch_size(), 4);
  // What the recipe does not name is the base's, plugin options included.
  testing::FooOptions options;
  ASSERT_TRUE(c->model().options().UnpackTo(&options));
  EXPECT_EQ(options.size(), 7);
  EXPECT_EQ(c->train().max_steps(), 100);
}

TEST(LoaderTest, BasesChainAndOverridesStillAppend) {
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(
      Path("bases/derived_twice.pbtxt"), {"train_data { augmentations { type: \"Flip\" } }"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->seed(), 3u);
  EXPECT_EQ(c->name(), "derived");
  EXPECT_DOUBLE_EQ(c->optimizer().lr(), 0.01);
  ASSERT_EQ(c->train_data().augmentations_size(), 2);
  EXPECT_EQ(c->train_data().augmentations(1).type(), "Flip");
}

TEST(LoaderTest, BaseCycleIsAnErrorNamingTheChain) {
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(Path("bases/cycle_a.pbtxt"));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(),
              HasSubstr("base chain is a cycle: testdata/configs/bases/cycle_a.pbtxt -> "
                        "testdata/configs/bases/cycle_b.pbtxt -> "
                        "testdata/configs/bases/cycle_a.pbtxt"));
}

TEST(LoaderTest, MissingBaseNamesTheFileTheBaseAndWhereItLooked) {
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(Path("bases/missing_base.pbtxt"));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(),
              HasSubstr("testdata/configs/bases/missing_base.pbtxt: base: \"no_such_recipe.pbtxt\" "
                        "(testdata/configs/bases/no_such_recipe.pbtxt): "));
}

TEST(LoaderTest, BaseInAnOverrideIsRefused) {
  absl::StatusOr<TrainPipelineConfig> c =
      LoadPipelineConfig(Path("valid.pbtxt"), {"base: \"bases/derived.pbtxt\""});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("base: is read in config files only"));
}

TEST(LoaderTest, MalformedFileNamesFileLineColumnAndReason) {
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(Path("malformed.pbtxt"));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("testdata/configs/malformed.pbtxt:6:6: "));
  EXPECT_THAT(c.status().message(), HasSubstr("Expected \":\""));
}

TEST(LoaderTest, UnknownFieldIsReportedWithItsPosition) {
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(Path("unknown_field.pbtxt"));
  EXPECT_THAT(c.status().message(), HasSubstr("unknown_field.pbtxt:2:"));
  EXPECT_THAT(c.status().message(), HasSubstr("optimiser"));
}

TEST(LoaderTest, UnknownOptionsTypeIsReported) {
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(Path("unknown_options_type.pbtxt"));
  EXPECT_THAT(c.status().message(), HasSubstr("unknown_options_type.pbtxt:4:"));
  EXPECT_THAT(c.status().message(), HasSubstr("vision.NoSuchOptions"));
}

TEST(LoaderTest, MalformedOverrideIsNamed) {
  absl::StatusOr<TrainPipelineConfig> c =
      LoadPipelineConfig(Path("valid.pbtxt"), {"seed: 1", "optimizer { lr: }"});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("--override #2 'optimizer { lr: }':1:17: "));
}

// protobuf's text-format parser recursed once per Any inside an Any and once per nested
// google.protobuf.Struct value, with no limit there: 10,000 levels (a few hundred kilobytes)
// killed the process with SIGSEGV. Both are refused before parsing, naming the place, in a
// file and in an override; the depth of a real config is still accepted.
TEST(LoaderTest, DeepNestingIsAnErrorNotACrash) {
  auto repeat = [](const std::string& text, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += text;
    return out;
  };
  const int n = 10000;
  const std::string any =
      "model { type: \"FooModel\" options { " +
      repeat("[type.googleapis.com/google.protobuf.Any] { ", n) + repeat("}", n) + " } }";
  const std::string value =
      "model { type: \"FooModel\" options { [type.googleapis.com/google.protobuf.Struct] { "
      "fields { key: \"a\" value { " +
      repeat("list_value { values { ", n) + repeat("} }", n) + " } } } } }";
  for (const std::string& text : {any, value}) {
    TrainPipelineConfig config;
    const absl::Status status = MergeConfigText(text, "deep.pbtxt", &config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("deep.pbtxt: line 1, column "));
    EXPECT_THAT(status.message(), HasSubstr("brackets nest more than 100 deep"));
  }
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(Path("valid.pbtxt"), {any});
  EXPECT_THAT(c.status().message(), HasSubstr("--override #1 "));
  EXPECT_THAT(c.status().message(), HasSubstr("brackets nest more than 100 deep"));
  // 30 levels of Any parse (and are rejected for what they hold, not for their depth).
  TrainPipelineConfig config;
  const absl::Status shallow = MergeConfigText(
      "model { type: \"FooModel\" options { " +
          repeat("[type.googleapis.com/google.protobuf.Any] { ", 30) + repeat("}", 30) + " } }",
      "shallow.pbtxt", &config);
  EXPECT_THAT(shallow.message(), Not(HasSubstr("nest more than"))) << shallow;
}

TEST(LoaderTest, MissingFileIsNotFound) {
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(Path("no_such.pbtxt"));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("cannot open config file 'testdata/configs/no_such.pbtxt'"));
  EXPECT_THAT(c.status().message(), HasSubstr("No such file or directory"));
}

TEST(LoaderTest, DirectoryIsNotAConfig) {
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig("testdata/configs");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("is not a regular file"));
}

TEST(LoaderTest, InvalidValuesNameEveryFieldPath) {
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(Path("invalid_values.pbtxt"));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(c.status().message());
  EXPECT_THAT(message, HasSubstr("invalid_values.pbtxt: invalid config"));
  EXPECT_THAT(message, HasSubstr("model.type: required"));
  EXPECT_THAT(message, HasSubstr("train_data.loader.batch_size: must be > 0"));
  EXPECT_THAT(message, HasSubstr("optimizer.lr: must be > 0, got -0.1"));
  EXPECT_THAT(message, HasSubstr("train: set exactly one of max_steps or max_epochs"));
}

TEST(LoaderTest, MissingRequiredFieldsAreListed) {
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(Path("missing_required.pbtxt"));
  const std::string message(c.status().message());
  EXPECT_THAT(message, HasSubstr("model.type: required"));
  EXPECT_THAT(message, HasSubstr("train_data: required"));
  EXPECT_THAT(message, HasSubstr("optimizer.type: required"));
  EXPECT_THAT(message, HasSubstr("optimizer.lr: required"));
  EXPECT_THAT(message, HasSubstr("checkpoint.output_dir: required"));
}

TEST(LoaderTest, DataOnlyUseNeedsOnlyData) {
  const std::string data =
      R"(train_data { dataset { type: "FooDataset" } loader { batch_size: 2 } })";
  absl::StatusOr<TrainPipelineConfig> c =
      LoadPipelineConfig(Path("missing_required.pbtxt"), {data}, ConfigUse::kDataOnly);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->has_model());
  // Without data there is nothing to look at; a bad dataset entry is still reported.
  c = LoadPipelineConfig(Path("missing_required.pbtxt"), {}, ConfigUse::kDataOnly);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("train_data: required (or eval_data)"));
  EXPECT_THAT(std::string(c.status().message()), Not(HasSubstr("optimizer")));
  c = LoadPipelineConfig(Path("missing_required.pbtxt"), {"eval_data { }"}, ConfigUse::kDataOnly);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("eval_data.dataset.type: required"));
}

TEST(LoaderTest, OverrideCanFixAnInvalidValue) {
  absl::StatusOr<TrainPipelineConfig> c =
      LoadPipelineConfig(Path("valid.pbtxt"), {"optimizer { lr: -1 }"});
  EXPECT_THAT(c.status().message(), HasSubstr("optimizer.lr: must be > 0, got -1"));
  c = LoadPipelineConfig(Path("valid.pbtxt"), {"optimizer { lr: -1 }", "optimizer { lr: 1 }"});
  EXPECT_TRUE(c.ok()) << c.status();
}

TEST(LoaderTest, AspectRatioGroupFactorIsOffOrAFactorForTrainingOnly) {
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(Path("valid.pbtxt"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->train_data().loader().aspect_ratio_group_factor(), -1);  // off by default
  for (const char* value : {"-1", "0", "3", "1000"}) {
    c = LoadPipelineConfig(
        Path("valid.pbtxt"),
        {absl::StrCat("train_data { loader { aspect_ratio_group_factor: ", value, " } }")});
    EXPECT_TRUE(c.ok()) << value << ": " << c.status();
  }
  for (const char* value : {"-2", "1001"}) {
    c = LoadPipelineConfig(
        Path("valid.pbtxt"),
        {absl::StrCat("train_data { loader { aspect_ratio_group_factor: ", value, " } }")});
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << value;
    EXPECT_THAT(c.status().message(),
                HasSubstr(absl::StrCat("train_data.loader.aspect_ratio_group_factor: must be -1 "
                                       "(off) or a factor in [0, 1000] (torchvision's detection "
                                       "recipes use 3), got ",
                                       value)));
  }
  c = LoadPipelineConfig(Path("valid.pbtxt"),
                         {"eval_data { loader { batch_size: 1 aspect_ratio_group_factor: 3 } }"});
  EXPECT_THAT(c.status().message(),
              HasSubstr("eval_data.loader.aspect_ratio_group_factor: groups training batches "
                        "only"));
}

TEST(LoaderTest, MaxImagePixelsMustBeAPixelCountOpenCvDecodes) {
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(Path("valid.pbtxt"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->train_data().max_image_pixels(), int64_t{1} << 28);  // the default
  for (const char* value : {"1", "1073741824"}) {
    c = LoadPipelineConfig(Path("valid.pbtxt"),
                           {absl::StrCat("train_data { max_image_pixels: ", value, " }")});
    EXPECT_TRUE(c.ok()) << value << ": " << c.status();
  }
  c = LoadPipelineConfig(Path("valid.pbtxt"), {"train_data { max_image_pixels: 0 }"});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              HasSubstr("train_data.max_image_pixels: must be a pixel count in [1, 2^30 = "
                        "1073741824] (OpenCV decodes no more), got 0"));
  c = LoadPipelineConfig(Path("valid.pbtxt"), {"eval_data { max_image_pixels: 1073741825 }"});
  EXPECT_THAT(c.status().message(), HasSubstr("eval_data.max_image_pixels: must be a pixel count"));
}

TEST(LoaderTest, SharedMemoryBackendNeedsTheCpu) {
  absl::StatusOr<TrainPipelineConfig> c =
      LoadPipelineConfig(Path("valid.pbtxt"), {"distributed { backend: SHM }"});
  EXPECT_TRUE(c.ok()) << c.status();
  c = LoadPipelineConfig(Path("valid.pbtxt"),
                         {"distributed { backend: SHM }", "device: \"cuda\""});
  EXPECT_THAT(c.status().message(), HasSubstr("distributed.backend: SHM reduces CPU tensors"));
}

TEST(LoaderTest, SegmentationInferenceOptionsAreChecked) {
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(
      Path("valid.pbtxt"),
      {"evaluation { segmentation_inference { scales: 1 scales: -0.5 crop_height: 64 "
       "stride_height: 80 stride_width: 3 max_batch_size: -1 } }"});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(c.status().message());
  EXPECT_THAT(message, HasSubstr("evaluation.segmentation_inference.scales[1]: must be a finite "
                                 "number > 0 (a factor of the image as fed), got -0.5"));
  EXPECT_THAT(message, HasSubstr("evaluation.segmentation_inference.crop_height: crop_height and "
                                 "crop_width must both be > 0 for sliding windows (or both 0 for "
                                 "whole images), got 64 x 0"));
  EXPECT_THAT(message, HasSubstr("evaluation.segmentation_inference.stride_height: must be in "
                                 "[1, 64]"));
  EXPECT_THAT(message, HasSubstr("got 80"));
  EXPECT_THAT(message, HasSubstr("evaluation.segmentation_inference.max_batch_size: must be >= 0"));

  c = LoadPipelineConfig(Path("valid.pbtxt"),
                         {"evaluation { segmentation_inference { stride_width: 8 } }"});
  EXPECT_THAT(c.status().message(),
              HasSubstr("evaluation.segmentation_inference.stride_width: is 8 but there is no "
                        "crop: set crop_height and crop_width"));

  c = LoadPipelineConfig(Path("valid.pbtxt"),
                         {"evaluation { segmentation_inference { scales: 0.5 scales: 1.75 "
                          "flip: true crop_height: 64 crop_width: 128 stride_width: 128 } }"});
  EXPECT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(ValidateSegmentationInferenceConfig(SegmentationInferenceConfig()).ok());
}

TEST(LoaderTest, SegmentationInferenceWindowSettingsNeedWindows) {
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(
      Path("valid.pbtxt"),
      {"evaluation { segmentation_inference { window_placement: OVERHANG pad_value: -2 } }"});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  std::string message(c.status().message());
  EXPECT_THAT(message, HasSubstr("evaluation.segmentation_inference.window_placement: is set but "
                                 "there is no crop"));
  EXPECT_THAT(message, HasSubstr("evaluation.segmentation_inference.pad_value: is set but there "
                                 "is no crop (only windows are padded)"));

  c = LoadPipelineConfig(Path("valid.pbtxt"),
                         {"evaluation { segmentation_inference { crop_height: 8 crop_width: 8 "
                          "pad_value: [1, 2] } }"});
  EXPECT_THAT(c.status().message(),
              HasSubstr("evaluation.segmentation_inference.pad_value: give one value for every "
                        "channel or one per channel (3), got 2 values"));
  c = LoadPipelineConfig(Path("valid.pbtxt"),
                         {"evaluation { segmentation_inference { crop_height: 8 crop_width: 8 "
                          "pad_value: [0, nan, 0] } }"});
  EXPECT_THAT(c.status().message(),
              HasSubstr("evaluation.segmentation_inference.pad_value[1]: must be finite, got nan"));

  c = LoadPipelineConfig(
      Path("valid.pbtxt"),
      {"evaluation { segmentation_inference { crop_height: 8 crop_width: 8 window_placement: "
       "OVERHANG pad_value: [-2.1179039, -2.0357143, -1.8044444] fusion: SUM_EXP_LOGITS "
       "align_corners: true } }"});
  EXPECT_TRUE(c.ok()) << c.status();
}

TEST(LoaderTest, FingerprintIsStableAndSensitive) {
  absl::StatusOr<TrainPipelineConfig> a = LoadPipelineConfig(Path("valid.pbtxt"));
  absl::StatusOr<TrainPipelineConfig> b = LoadPipelineConfig(Path("valid.pbtxt"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(ConfigFingerprint(*a), ConfigFingerprint(*b));
  EXPECT_EQ(ConfigFingerprint(*a).size(), 16u);
  // The same content written in another field order gives the same fingerprint.
  TrainPipelineConfig reordered;
  ASSERT_TRUE(MergeConfigText("seed: 42 name: \"x\"", "inline", &reordered).ok());
  TrainPipelineConfig ordered;
  ASSERT_TRUE(MergeConfigText("name: \"x\" seed: 42", "inline", &ordered).ok());
  EXPECT_EQ(ConfigFingerprint(reordered), ConfigFingerprint(ordered));
  absl::StatusOr<TrainPipelineConfig> changed =
      LoadPipelineConfig(Path("valid.pbtxt"), {"optimizer { lr: 0.0071 }"});
  ASSERT_TRUE(changed.ok());
  EXPECT_NE(ConfigFingerprint(*a), ConfigFingerprint(*changed));
  // Plugin options count too.
  changed = LoadPipelineConfig(
      Path("valid.pbtxt"),
      {"model { options { [type.googleapis.com/vision.core.testing.FooOptions] { size: 8 } } }"});
  ASSERT_TRUE(changed.ok());
  EXPECT_NE(ConfigFingerprint(*a), ConfigFingerprint(*changed));
}

TEST(LoaderTest, CanonicalTextExpandsOptions) {
  absl::StatusOr<TrainPipelineConfig> c = LoadPipelineConfig(Path("valid.pbtxt"));
  ASSERT_TRUE(c.ok());
  const std::string text = ConfigToText(*c);
  EXPECT_THAT(text, HasSubstr("[type.googleapis.com/vision.core.testing.FooOptions]"));
  EXPECT_THAT(text, HasSubstr("size: 7"));
  EXPECT_THAT(text, Not(HasSubstr("value: \"")));  // no opaque Any bytes
  TrainPipelineConfig round_trip;
  ASSERT_TRUE(MergeConfigText(text, "round trip", &round_trip).ok());
  EXPECT_EQ(ConfigFingerprint(round_trip), ConfigFingerprint(*c));
}

}  // namespace
}  // namespace vision::core
