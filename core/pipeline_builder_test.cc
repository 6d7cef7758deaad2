// BuildPipeline's check that datasets, model and evaluator agree on the data, and the metadata
// lines of DescribePipeline, with fake plugins registered here that state whatever metadata
// and requirements a test's config gives them.
#include "core/pipeline_builder.h"

#include <cstdlib>
#include <memory>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <utility>
#include <vector>

#include <torch/optim/sgd.h>

#include "absl/strings/str_cat.h"
#include "core/data_agreement.h"
#include "core/dataset.h"
#include "core/evaluator.h"
#include "core/image_io.h"
#include "core/lr_schedule.h"
#include "core/model.h"
#include "core/optimizer.h"
#include "core/pipeline_builder_test.pb.h"
#include "core/task_metadata.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace vision::core {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::FakeAnnotationKind;
using testing::FakeDatasetOptions;
using testing::FakeNeedsOptions;
using testing::FakeNoOptions;

AnnotationKind KindOf(FakeAnnotationKind kind) {
  switch (kind) {
    case testing::TEXT_POLYGONS:
      return AnnotationKind::kTextPolygons;
    case testing::OBJECT_INSTANCES:
      return AnnotationKind::kObjectInstances;
    case testing::LABEL_MAPS:
      return AnnotationKind::kLabelMaps;
  }
  return AnnotationKind::kTextPolygons;
}

std::optional<TaskRequirements> NeedsOf(const FakeNeedsOptions& o) {
  if (!o.states_requirements()) return std::nullopt;
  TaskRequirements needs;
  needs.annotation_kind = KindOf(o.annotation_kind());
  if (o.has_num_classes()) needs.num_classes = o.num_classes();
  needs.num_classes_option = o.num_classes_option();
  return needs;
}

class FakeDataset : public Dataset {
 public:
  explicit FakeDataset(const FakeDatasetOptions& o) : o_(o) {}
  static absl::StatusOr<std::unique_ptr<FakeDataset>> Create(const FakeDatasetOptions& o) {
    return std::make_unique<FakeDataset>(o);
  }
  int64_t Size() const override { return 1; }
  absl::StatusOr<Sample> Load(int64_t) const override {
    Sample sample;
    if (o_.has_image_path()) {
      absl::StatusOr<cv::Mat> image = ReadImage(o_.image_path());
      if (!image.ok()) return image.status();
      sample.image = *std::move(image);
    }
    return sample;
  }
  std::string Describe() const override { return o_.name(); }
  // Not the default (the loaded sample): what a dataset that clamps for training gives.
  absl::StatusOr<Sample> GroundTruth(int64_t index, const Sample&) const override {
    Sample truth;
    truth.id = absl::StrCat("the file's annotations of sample ", index);
    return truth;
  }
  // Without an image, a size the dataset states (Dataset's default decodes the image).
  absl::StatusOr<cv::Size> ImageSize(int64_t index) const override {
    if (!o_.has_image_path()) return cv::Size(5, 7);
    return Dataset::ImageSize(index);
  }
  std::optional<DatasetMetadata> Metadata() const override {
    if (!o_.states_metadata()) return std::nullopt;
    DatasetMetadata metadata;
    metadata.annotation_kind = KindOf(o_.annotation_kind());
    metadata.class_names.assign(o_.class_names().begin(), o_.class_names().end());
    metadata.source_ids.assign(o_.source_ids().begin(), o_.source_ids().end());
    metadata.source_id_name = o_.source_id_name();
    if (o_.has_ignore_label()) metadata.ignore_label = o_.ignore_label();
    return metadata;
  }

 private:
  const FakeDatasetOptions o_;
};

class FakeModel : public Model {
 public:
  explicit FakeModel(const FakeNeedsOptions& o) : o_(o) {
    weight_ = register_parameter("weight", at::zeros({1}));
  }
  static absl::StatusOr<std::unique_ptr<FakeModel>> Create(const FakeNeedsOptions& o) {
    return std::make_unique<FakeModel>(o);
  }
  std::map<std::string, at::Tensor> Losses(const Batch&) override { return {}; }
  std::vector<Sample> Predict(const Batch&) override { return {}; }
  std::optional<TaskRequirements> DataRequirements() const override { return NeedsOf(o_); }

 private:
  const FakeNeedsOptions o_;
  at::Tensor weight_;
};

class FakeEvaluator : public Evaluator {
 public:
  explicit FakeEvaluator(const FakeNeedsOptions& o) : o_(o) {}
  static absl::StatusOr<std::unique_ptr<FakeEvaluator>> Create(const FakeNeedsOptions& o) {
    return std::make_unique<FakeEvaluator>(o);
  }
  void Reset() override {}
  absl::Status Add(const Sample&, const Sample&) override { return absl::OkStatus(); }
  std::map<std::string, double> Compute() const override { return {}; }
  std::string MainMetric() const override { return "score"; }
  std::string SerializeState() const override { return ""; }
  absl::Status MergeState(const std::string&) override { return absl::OkStatus(); }
  std::optional<TaskRequirements> DataRequirements() const override { return NeedsOf(o_); }
  absl::Status SetDatasetMetadata(const DatasetMetadata& metadata) override {
    received_class_names = metadata.class_names;
    return absl::OkStatus();
  }

  std::vector<std::string> received_class_names;

 private:
  const FakeNeedsOptions o_;
};

class FakeSgd : public Optimizer {
 public:
  explicit FakeSgd(const OptimizerSpec& spec)
      : implementation(spec.implementation), device_type(spec.device_type) {
    std::vector<torch::optim::OptimizerParamGroup> torch_groups;
    for (const ParamGroupSpec& group : spec.groups) {
      torch_groups.emplace_back(group.params,
                                std::make_unique<torch::optim::SGDOptions>(group.lr));
      base_lrs_.push_back(group.lr);
    }
    sgd_ = std::make_unique<torch::optim::SGD>(std::move(torch_groups),
                                               torch::optim::SGDOptions(0.1));
  }
  static absl::StatusOr<std::unique_ptr<FakeSgd>> Create(const FakeNoOptions&,
                                                         const OptimizerSpec& spec) {
    return std::make_unique<FakeSgd>(spec);
  }
  torch::optim::Optimizer& torch_optimizer() override { return *sgd_; }

  const OptimizerConfig::Implementation implementation;
  const c10::DeviceType device_type;

 private:
  std::unique_ptr<torch::optim::SGD> sgd_;
};

class FakeConstant : public LrSchedule {
 public:
  static absl::StatusOr<std::unique_ptr<FakeConstant>> Create(const FakeNoOptions&) {
    return std::make_unique<FakeConstant>();
  }
  double Factor(int64_t, int64_t) const override { return 1; }
};

VISION_REGISTER_PLUGIN(DatasetRegistry, "FakeDataset", FakeDataset, FakeDatasetOptions);
VISION_REGISTER_PLUGIN(ModelRegistry, "FakeModel", FakeModel, FakeNeedsOptions);
VISION_REGISTER_PLUGIN(EvaluatorRegistry, "FakeEvaluator", FakeEvaluator, FakeNeedsOptions);
VISION_REGISTER_PLUGIN(OptimizerRegistry, "FakeSgd", FakeSgd, FakeNoOptions);
VISION_REGISTER_PLUGIN(LrScheduleRegistry, "FakeConstant", FakeConstant, FakeNoOptions);

// COCO's layout: ids with gaps, as in testdata/coco's instances_tiny.json.
constexpr char kShapes[] = R"pb(
  annotation_kind: OBJECT_INSTANCES
  class_names: [ "circle", "rectangle", "triangle", "star" ]
  source_ids: [ 1, 3, 7, 12 ]
  source_id_name: "category id"
)pb";

// A config with the fake model and datasets; an empty `evaluator` leaves evaluation out.
TrainPipelineConfig Config(const std::string& model, const std::string& train,
                           const std::string& eval, const std::string& evaluator = "") {
  auto spec = [](const char* type, const char* options, const std::string& fields) {
    return absl::StrCat("type: \"", type, "\" options { [type.googleapis.com/vision.core.testing.",
                        options, "] { ", fields, " } }");
  };
  std::string text = absl::StrCat(
      "model { ", spec("FakeModel", "FakeNeedsOptions", model), " }\n",
      "train_data { dataset { ", spec("FakeDataset", "FakeDatasetOptions", train),
      " } loader { batch_size: 2 } }\n",
      "optimizer { type: \"FakeSgd\" lr: 0.1 }\n", "lr_schedule { type: \"FakeConstant\" }\n");
  if (!eval.empty()) {
    absl::StrAppend(&text, "eval_data { dataset { ", spec("FakeDataset", "FakeDatasetOptions", eval),
                    " } loader { batch_size: 1 } }\n");
  }
  if (!evaluator.empty()) {
    absl::StrAppend(&text, "evaluation { evaluator { ",
                    spec("FakeEvaluator", "FakeNeedsOptions", evaluator), " } }\n");
  }
  TrainPipelineConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config;
}

absl::Status BuildStatus(const TrainPipelineConfig& config) {
  return BuildPipeline(config, /*world_size=*/1).status();
}

TEST(PipelineBuilderTest, AgreeingComponentsBuildAndDescribeTheirMetadata) {
  const TrainPipelineConfig config =
      Config(R"pb(annotation_kind: OBJECT_INSTANCES num_classes: 4 num_classes_option: "num_classes")pb",
             absl::StrCat("name: \"instances_train.json\" ", kShapes),
             absl::StrCat("name: \"instances_val.json\" ", kShapes),
             "annotation_kind: OBJECT_INSTANCES num_classes: 4");
  absl::StatusOr<Pipeline> pipeline = BuildPipeline(config, 1);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  const std::string description = DescribePipeline(config, *pipeline);
  EXPECT_THAT(description,
              HasSubstr("model:          FakeModel (0.00M parameters; trains on object instances, "
                        "4 classes (option num_classes))\n"));
  EXPECT_THAT(description,
              HasSubstr("\ntrain data annotations: object instances, 4 classes: circle (category "
                        "id 1), rectangle (category id 3), triangle (category id 7), star "
                        "(category id 12)\n"));
  EXPECT_THAT(description, HasSubstr("\neval data annotations: object instances, 4 classes: "));
  EXPECT_THAT(description,
              HasSubstr("evaluator:      FakeEvaluator (main metric score; scores object "
                        "instances, 4 classes)\n"));
  // The evaluator was given the evaluation dataset's class table.
  EXPECT_THAT(static_cast<FakeEvaluator&>(*pipeline->evaluator).received_class_names,
              ElementsAre("circle", "rectangle", "triangle", "star"));
}

// The optimizer is built while the model is still on the CPU; it is told the configured
// device, by which it checks its implementation.
TEST(PipelineBuilderTest, OptimizerIsGivenItsImplementationAndTheConfiguredDevice) {
  TrainPipelineConfig config = Config("", "name: \"train\"", "");
  config.mutable_optimizer()->set_implementation(OptimizerConfig::FUSED);
  for (const auto& [device, expected] :
       {std::pair<const char*, c10::DeviceType>{"cpu", c10::kCPU}, {"cuda", c10::kCUDA},
        {"cuda:1", c10::kCUDA}}) {
    config.set_device(device);
    absl::StatusOr<Pipeline> pipeline = BuildPipeline(config, 1);
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    const auto& optimizer = static_cast<const FakeSgd&>(*pipeline->optimizer);
    EXPECT_EQ(optimizer.implementation, OptimizerConfig::FUSED) << "device " << device;
    EXPECT_EQ(optimizer.device_type, expected)
        << "device " << device << ": expected " << c10::DeviceTypeName(expected) << ", got "
        << c10::DeviceTypeName(optimizer.device_type);
    EXPECT_THAT(DescribePipeline(config, *pipeline),
                HasSubstr("optimizer:      FakeSgd (FUSED implementation), base lr 0.1"));
  }
}

TEST(PipelineBuilderTest, LabelMapsDescribeTheirIgnoreLabel) {
  const TrainPipelineConfig config =
      Config("annotation_kind: LABEL_MAPS num_classes: 2",
             R"pb(name: "city" annotation_kind: LABEL_MAPS class_names: [ "road", "sky" ]
                  source_ids: [ 7, 23 ] source_id_name: "label id" ignore_label: 255)pb",
             "");
  absl::StatusOr<Pipeline> pipeline = BuildPipeline(config, 1);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  EXPECT_THAT(DescribePipeline(config, *pipeline),
              HasSubstr("\ntrain data annotations: label maps, 2 classes: road (label id 7), sky "
                        "(label id 23); ignore label 255\n"));
}

// Multi-scale segmentation inference needs class scores per pixel: a model without them stops
// the pipeline when it is built, not at the first evaluation hours into training.
TEST(PipelineBuilderTest, SegmentationInferenceNeedsASegmentationModel) {
  TrainPipelineConfig config = Config("", "name: \"train\"", "");
  config.mutable_evaluation()->mutable_segmentation_inference()->set_flip(true);
  const absl::Status status = BuildStatus(config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("evaluation.segmentation_inference is set, but the model ("));
  EXPECT_THAT(status.message(), HasSubstr("FakeModel) is not a semantic segmentation model"));
  config.mutable_evaluation()->clear_segmentation_inference();
  EXPECT_TRUE(BuildStatus(config).ok()) << BuildStatus(config);
}

TEST(PipelineBuilderTest, ModelClassCountMismatchNamesTheOptionAndTheDatasetsClasses) {
  const absl::Status status = BuildStatus(
      Config(R"pb(annotation_kind: OBJECT_INSTANCES num_classes: 5 num_classes_option: "num_classes")pb",
             absl::StrCat("name: \"instances_train.json\" ", kShapes), ""));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "model.options.num_classes is 5 but train_data.dataset (instances_train.json) has 4 "
            "classes: circle, rectangle, triangle, star; set model.options.num_classes: 4");
}

TEST(PipelineBuilderTest, ModelAnnotationKindMismatchNamesBothKinds) {
  const absl::Status status =
      BuildStatus(Config("annotation_kind: TEXT_POLYGONS",
                         absl::StrCat("name: \"instances_train.json\" ", kShapes), ""));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "model (FakeModel) trains on text polygons but train_data.dataset "
            "(instances_train.json) carries object instances; use a dataset with text polygons, "
            "or a model that trains on object instances");
}

TEST(PipelineBuilderTest, TheModelsMismatchIsReportedBeforeTheSplits) {
  const absl::Status status =
      BuildStatus(Config("annotation_kind: TEXT_POLYGONS",
                         absl::StrCat("name: \"instances_train.json\" ", kShapes),
                         R"pb(name: "icdar" annotation_kind: TEXT_POLYGONS)pb"));
  EXPECT_THAT(status.message(), HasSubstr("model (FakeModel) trains on text polygons but "
                                          "train_data.dataset (instances_train.json) carries"));
}

TEST(PipelineBuilderTest, ModelIsCheckedAgainstTheEvalDatasetToo) {
  const absl::Status status = BuildStatus(
      Config("annotation_kind: OBJECT_INSTANCES num_classes: 4",
             R"pb(name: "unstated" states_metadata: false)pb",
             absl::StrCat("name: \"instances_val.json\" ", kShapes,
                          " class_names: \"hexagon\" source_ids: 13")));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "model (FakeModel) has 4 classes but eval_data.dataset (instances_val.json) has 5 "
            "classes: circle, rectangle, triangle, star, hexagon; use a dataset with 4 classes, "
            "or a model for 5");
}

TEST(PipelineBuilderTest, ClassesOnAClassAgnosticDatasetAskForAClassAgnosticModel) {
  const absl::Status status = BuildStatus(
      Config(R"pb(annotation_kind: TEXT_POLYGONS num_classes: 2 num_classes_option: "classes")pb",
             R"pb(name: "icdar" annotation_kind: TEXT_POLYGONS)pb", ""));
  EXPECT_EQ(status.message(),
            "model.options.classes is 2 but train_data.dataset (icdar) has no classes (its "
            "annotations are class-agnostic); use a dataset with 2 classes, or a model that is "
            "class-agnostic");
}

TEST(PipelineBuilderTest, LongClassTablesAreCutInMessages) {
  std::string classes;
  for (int i = 0; i < 12; ++i) absl::StrAppend(&classes, " class_names: \"c", i, "\"");
  const absl::Status status =
      BuildStatus(Config("annotation_kind: OBJECT_INSTANCES num_classes: 3",
                         absl::StrCat("name: \"many\" annotation_kind: OBJECT_INSTANCES", classes),
                         ""));
  EXPECT_THAT(status.message(),
              HasSubstr("has 12 classes: c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, ... (12 in all);"));
}

TEST(PipelineBuilderTest, EvaluatorIsCheckedAgainstTheEvalDataset) {
  const std::string train = absl::StrCat("name: \"instances_train.json\" ", kShapes);
  const std::string eval = absl::StrCat("name: \"instances_val.json\" ", kShapes);
  const absl::Status kind =
      BuildStatus(Config("annotation_kind: OBJECT_INSTANCES", train, eval,
                         "annotation_kind: LABEL_MAPS"));
  EXPECT_EQ(kind.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kind.message(),
            "evaluation.evaluator (FakeEvaluator) scores label maps but eval_data.dataset "
            "(instances_val.json) carries object instances; use a dataset with label maps, or an "
            "evaluator that scores object instances");
  const absl::Status count =
      BuildStatus(Config("annotation_kind: OBJECT_INSTANCES", train, eval,
                         R"pb(annotation_kind: OBJECT_INSTANCES num_classes: 80
                              num_classes_option: "num_classes")pb"));
  EXPECT_THAT(count.message(),
              HasSubstr("evaluation.evaluator.options.num_classes is 80 but eval_data.dataset "
                        "(instances_val.json) has 4 classes: "));
  EXPECT_THAT(count.message(), HasSubstr("; set evaluation.evaluator.options.num_classes: 4"));
}

TEST(PipelineBuilderTest, SplitsWithOtherClassNamesNameTheFirstDifferingLabel) {
  const absl::Status status = BuildStatus(Config(
      "annotation_kind: OBJECT_INSTANCES", absl::StrCat("name: \"train.json\" ", kShapes),
      R"pb(name: "val.json" annotation_kind: OBJECT_INSTANCES
           class_names: [ "circle", "rectangle", "star", "triangle" ] source_ids: [ 1, 3, 7, 12 ]
           source_id_name: "category id")pb"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "label 2 is 'triangle' in train_data.dataset (train.json) but 'star' in "
            "eval_data.dataset (val.json); both splits must list the same classes in the same "
            "order");
}

TEST(PipelineBuilderTest, SplitsWithOtherClassCountsListBothTables) {
  const absl::Status status = BuildStatus(
      Config("annotation_kind: OBJECT_INSTANCES", absl::StrCat("name: \"train.json\" ", kShapes),
             R"pb(name: "val.json" annotation_kind: OBJECT_INSTANCES
                  class_names: [ "circle", "rectangle" ])pb"));
  EXPECT_EQ(status.message(),
            "train_data.dataset (train.json) has 4 classes: circle, rectangle, triangle, star but "
            "eval_data.dataset (val.json) has 2 classes: circle, rectangle; both splits must list "
            "the same classes in the same order");
}

TEST(PipelineBuilderTest, SplitsWithOtherSourceIdsNameTheLabelAndBothIds) {
  const absl::Status status = BuildStatus(Config(
      "annotation_kind: OBJECT_INSTANCES", absl::StrCat("name: \"train.json\" ", kShapes),
      R"pb(name: "val.json" annotation_kind: OBJECT_INSTANCES
           class_names: [ "circle", "rectangle", "triangle", "star" ] source_ids: [ 1, 4, 7, 12 ]
           source_id_name: "category id")pb"));
  EXPECT_EQ(status.message(),
            "label 1 ('rectangle') is category id 3 in train_data.dataset (train.json) but "
            "category id 4 in eval_data.dataset (val.json); results would be written with the "
            "wrong ids; both splits must list the same classes in the same order");
}

TEST(PipelineBuilderTest, SplitsWithOtherKindsOrIgnoreLabelsDisagree) {
  auto maps = [](const char* name, int ignore_label) {
    return absl::StrCat("name: \"", name, "\" annotation_kind: LABEL_MAPS ",
                        "class_names: [ \"road\", \"sky\" ] ignore_label: ", ignore_label);
  };
  // The model states nothing, so the splits are compared with each other only.
  const absl::Status kind =
      BuildStatus(Config("states_requirements: false", maps("train", 255),
                         absl::StrCat("name: \"val\" ", kShapes)));
  EXPECT_EQ(kind.message(),
            "train_data.dataset (train) carries label maps but eval_data.dataset (val) carries "
            "object instances; evaluate on the kind of annotations the model trains on");
  const absl::Status ignore =
      BuildStatus(Config("annotation_kind: LABEL_MAPS", maps("train", 255), maps("val", 0)));
  EXPECT_EQ(ignore.message(),
            "train_data.dataset (train) has ignore label 255 but eval_data.dataset (val) has "
            "ignore label 0; pixels ignored in training would be scored in evaluation");
}

TEST(PipelineBuilderTest, UnstatedMetadataOrRequirementsAreNotChecked) {
  const std::string shapes = absl::StrCat("name: \"train.json\" ", kShapes);
  // A model that states nothing trains on anything.
  EXPECT_TRUE(BuildStatus(Config("states_requirements: false annotation_kind: LABEL_MAPS", shapes,
                                 ""))
                  .ok());
  // A dataset that states nothing is compared with neither the model nor the other split.
  EXPECT_TRUE(BuildStatus(Config("annotation_kind: LABEL_MAPS num_classes: 9",
                                 R"pb(name: "fake" states_metadata: false)pb", ""))
                  .ok());
  EXPECT_TRUE(BuildStatus(Config("annotation_kind: OBJECT_INSTANCES num_classes: 4",
                                 R"pb(name: "fake" states_metadata: false)pb", shapes))
                  .ok());
  // A class-agnostic model of the right kind trains on a dataset with classes.
  EXPECT_TRUE(BuildStatus(Config("annotation_kind: OBJECT_INSTANCES", shapes, shapes)).ok());
}

// Each split's DataConfig.max_image_pixels reaches the images its dataset reads, as a bad
// sample naming the file and the setting; outside Load the default applies again.
TEST(PipelineBuilderTest, EachSplitsMaxImagePixelsReachesItsDatasetsImageReads) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/96x64.png";
  ASSERT_TRUE(cv::imwrite(path, cv::Mat(64, 96, CV_8UC3, cv::Scalar(1, 2, 3))));
  const std::string image = absl::StrCat("name: \"fake\" image_path: \"", path, "\"");
  TrainPipelineConfig config = Config("", image, image);
  config.mutable_train_data()->set_max_image_pixels(96 * 64 - 1);
  config.mutable_eval_data()->set_max_image_pixels(96 * 64);
  absl::StatusOr<std::unique_ptr<Dataset>> train = BuildDataset(config.train_data(), "train_data");
  absl::StatusOr<std::unique_ptr<Dataset>> eval = BuildDataset(config.eval_data(), "eval_data");
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(eval.ok()) << eval.status();
  const absl::Status status = (*train)->Load(0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(status.message(),
            path +
                ": the image is 96 x 64 pixels (6144), more than the limit of 6143 pixels "
                "(train_data.max_image_pixels); raise train_data.max_image_pixels in the "
                "config if the file is meant to be this large");
  absl::StatusOr<Sample> sample = (*eval)->Load(0);
  ASSERT_TRUE(sample.ok()) << sample.status();
  EXPECT_EQ(sample->image.size(), cv::Size(96, 64));
  EXPECT_EQ(MaxImagePixels(), kDefaultMaxImagePixels);
  // The wrapper forwards what the plugin says.
  EXPECT_EQ((*train)->Describe(), "fake");
  EXPECT_EQ((*train)->Size(), 1);
  EXPECT_TRUE((*train)->Metadata().has_value());
  // Evaluators score GroundTruth(): once the wrapper's default, the clamped training boxes.
  absl::StatusOr<Sample> truth = (*eval)->GroundTruth(0, *sample);
  ASSERT_TRUE(truth.ok()) << truth.status();
  EXPECT_EQ(truth->id, "the file's annotations of sample 0");
  // ImageSize too, decoding under the split's limit where the dataset does not state sizes.
  EXPECT_EQ((*train)->ImageSize(0).status().code(), absl::StatusCode::kDataLoss);
  absl::StatusOr<cv::Size> size = (*eval)->ImageSize(0);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, cv::Size(96, 64));
  absl::StatusOr<std::unique_ptr<Dataset>> stated =
      BuildDataset(Config("", "name: \"fake\"", "").train_data(), "train_data");
  ASSERT_TRUE(stated.ok()) << stated.status();
  size = (*stated)->ImageSize(0);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, cv::Size(5, 7));
}

TEST(DataAgreementTest, EvaluationAloneChecksTheModelAndEvaluatorAgainstTheEvalDataset) {
  const TrainPipelineConfig config =
      Config("annotation_kind: OBJECT_INSTANCES num_classes: 4", R"pb(name: "unused")pb",
             absl::StrCat("name: \"val.json\" ", kShapes), "annotation_kind: TEXT_POLYGONS");
  FakeNeedsOptions model_options;
  model_options.set_annotation_kind(testing::OBJECT_INSTANCES);
  model_options.set_num_classes(4);
  FakeModel model(model_options);
  FakeDatasetOptions eval_options;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      absl::StrCat("name: \"val.json\" ", kShapes), &eval_options));
  FakeDataset eval(eval_options);
  FakeNeedsOptions evaluator_options;
  evaluator_options.set_annotation_kind(testing::OBJECT_INSTANCES);
  FakeEvaluator evaluator(evaluator_options);
  EXPECT_TRUE(CheckDataAgreement(config, &model, nullptr, &eval, &evaluator).ok());
  evaluator_options.set_annotation_kind(testing::TEXT_POLYGONS);
  FakeEvaluator text_evaluator(evaluator_options);
  EXPECT_THAT(CheckDataAgreement(config, &model, nullptr, &eval, &text_evaluator).message(),
              HasSubstr("evaluation.evaluator (FakeEvaluator) scores text polygons but "
                        "eval_data.dataset (val.json) carries object instances"));
}

}  // namespace
}  // namespace vision::core
