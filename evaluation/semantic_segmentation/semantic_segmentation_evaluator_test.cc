#include "evaluation/semantic_segmentation/semantic_segmentation_evaluator.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "absl/strings/str_cat.h"
#include "core/dataset.h"
#include "data/datasets/cityscapes/cityscapes.pb.h"
#include "data/datasets/cityscapes/cityscapes_labels.h"
#include "gmock/gmock.h"
#include "google/protobuf/any.pb.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vision::evaluation::semantic_segmentation {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using Json = nlohmann::json;
using Metrics = std::map<std::string, double>;

constexpr char kTestdata[] = "evaluation/semantic_segmentation/testdata";
constexpr uint8_t kIgnore = 255;

std::unique_ptr<SemanticSegmentationEvaluator> MakeEvaluator(
    const SemanticSegmentationOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<SemanticSegmentationEvaluator>> evaluator =
      SemanticSegmentationEvaluator::Create(options);
  EXPECT_TRUE(evaluator.ok()) << evaluator.status();
  return evaluator.ok() ? std::move(evaluator).value() : nullptr;
}

core::DatasetMetadata TwoClasses() {
  core::DatasetMetadata metadata;
  metadata.annotation_kind = core::AnnotationKind::kLabelMaps;
  metadata.class_names = {"a", "b"};
  metadata.ignore_label = 255;
  return metadata;
}

// The metadata the real Cityscapes dataset plugin gives its evaluator.
core::DatasetMetadata CityscapesMetadata() {
  data::datasets::CityscapesOptions options;
  options.set_root("testdata/cityscapes");
  options.set_split("val");
  google::protobuf::Any any;
  any.PackFrom(options);
  absl::StatusOr<std::unique_ptr<core::Dataset>> dataset =
      core::DatasetRegistry::Get().Create("Cityscapes", any);
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  if (!dataset.ok()) return {};
  std::optional<core::DatasetMetadata> metadata = (*dataset)->Metadata();
  EXPECT_TRUE(metadata.has_value());
  return metadata.value_or(core::DatasetMetadata());
}

core::Sample LabelSample(const std::string& id, const cv::Mat& labels) {
  core::Sample sample;
  sample.id = id;
  sample.semantic = labels;
  return sample;
}

cv::Mat Map(int rows, int cols, std::initializer_list<int> values) {
  cv::Mat map(rows, cols, CV_8U);
  auto it = values.begin();
  for (int y = 0; y < rows; ++y) {
    for (int x = 0; x < cols; ++x) map.at<uint8_t>(y, x) = static_cast<uint8_t>(*it++);
  }
  return map;
}

// 2 classes, 4x4, two ignored ground-truth pixels and one prediction left at 255. The matrix is
// M[a] = {5, 1 | 0}, M[b] = {2, 5 | 1} (the last column: predicted as no class).
struct TwoClassCase {
  cv::Mat truth = Map(4, 4, {0, 0, 1, 1,  //
                             0, 0, 1, 1,  //
                             0, 0, 1, 1,  //
                             255, 255, 1, 1});
  cv::Mat predicted = Map(4, 4, {0, 1, 1, 1,  //
                                 0, 0, 1, 0,  //
                                 0, 0, 255, 1,  //
                                 1, 0, 0, 1});
};

TEST(SemanticSegmentationTest, HandComputedTwoClasses) {
  auto evaluator = MakeEvaluator();
  ASSERT_TRUE(evaluator->SetDatasetMetadata(TwoClasses()).ok());
  const TwoClassCase c;
  ASSERT_TRUE(evaluator->Add(LabelSample("x", c.predicted), LabelSample("x", c.truth)).ok());
  EXPECT_EQ(evaluator->confusion_matrix(), (std::vector<int64_t>{5, 1, 0, 2, 5, 1}));
  const Metrics m = evaluator->Compute();
  // a: TP 5, FN 1, FP 2 (b predicted as a); b: TP 5, FN 2 + 1 (the no-class pixel), FP 1.
  EXPECT_DOUBLE_EQ(m.at("IoU/a"), 5.0 / 8);
  EXPECT_DOUBLE_EQ(m.at("IoU/b"), 5.0 / 9);
  EXPECT_DOUBLE_EQ(m.at("mIoU"), (5.0 / 8 + 5.0 / 9) / 2);
  EXPECT_DOUBLE_EQ(m.at("aAcc"), 10.0 / 14);
  EXPECT_DOUBLE_EQ(m.at("mAcc"), (5.0 / 6 + 5.0 / 8) / 2);
  EXPECT_EQ(m.count("category_mIoU"), 0u) << "no categories in the metadata";
  EXPECT_EQ(m.size(), 5u);
  EXPECT_EQ(evaluator->MainMetric(), "mIoU");

  // Both classes in one category: TP 13 (every a/b confusion stays inside), FN 1, FP 0.
  core::DatasetMetadata grouped = TwoClasses();
  grouped.class_categories = {"g", "g"};
  ASSERT_TRUE(evaluator->SetDatasetMetadata(grouped).ok());
  ASSERT_TRUE(evaluator->Add(LabelSample("x", c.predicted), LabelSample("x", c.truth)).ok());
  EXPECT_DOUBLE_EQ(evaluator->Compute().at("category_IoU/g"), 13.0 / 14);
  EXPECT_DOUBLE_EQ(evaluator->Compute().at("category_mIoU"), 13.0 / 14);

  evaluator->Reset();
  EXPECT_EQ(evaluator->confusion_matrix(), std::vector<int64_t>(6, 0));
  const Metrics empty = evaluator->Compute();
  EXPECT_EQ(empty.at("mIoU"), 0);
  EXPECT_EQ(empty.at("aAcc"), 0);
  EXPECT_EQ(empty.count("IoU/a"), 0u);
}

// A class neither in the ground truth nor predicted on a scored pixel has no IoU and does not
// count in the mean, even when it is predicted on ignored pixels.
TEST(SemanticSegmentationTest, ClassesWithoutPixelsAreLeftOut) {
  core::DatasetMetadata metadata = TwoClasses();
  metadata.class_names.push_back("c");
  auto evaluator = MakeEvaluator();
  ASSERT_TRUE(evaluator->SetDatasetMetadata(metadata).ok());
  ASSERT_TRUE(evaluator
                  ->Add(LabelSample("x", Map(1, 4, {0, 1, 2, 2})),
                        LabelSample("x", Map(1, 4, {0, 0, 255, 255})))
                  .ok());
  const Metrics m = evaluator->Compute();
  EXPECT_DOUBLE_EQ(m.at("IoU/a"), 0.5);
  EXPECT_DOUBLE_EQ(m.at("IoU/b"), 0.0) << "predicted on a scored pixel, never right";
  EXPECT_EQ(m.count("IoU/c"), 0u);
  EXPECT_DOUBLE_EQ(m.at("mIoU"), 0.25);
  EXPECT_DOUBLE_EQ(m.at("mAcc"), 0.5) << "only a is in the ground truth";
}

// The matrix equals a plain count pixel by pixel, for widths around the counting loop's blocks
// of 16 (uniform blocks, mixed ones and the tail) and maps with runs and with noise.
TEST(SemanticSegmentationTest, MatrixEqualsAPixelByPixelCount) {
  core::DatasetMetadata metadata = TwoClasses();
  metadata.class_names.push_back("c");
  cv::RNG rng(14);
  for (int width : {1, 3, 15, 16, 17, 31, 32, 33, 64, 100}) {
    SCOPED_TRACE(width);
    auto evaluator = MakeEvaluator();
    ASSERT_TRUE(evaluator->SetDatasetMetadata(metadata).ok());
    std::vector<int64_t> expected(3 * 4, 0);
    const int values[] = {0, 1, 2, 255};
    for (int image = 0; image < 4; ++image) {
      cv::Mat truth(5, width, CV_8U), predicted(5, width, CV_8U);
      for (int y = 0; y < 5; ++y) {
        // Runs of 1 to 40 pixels of one pair, then noise in every other image.
        for (int x = 0; x < width;) {
          const int run = rng.uniform(1, 41);
          const uint8_t t = values[rng.uniform(0, 4)], p = values[rng.uniform(0, 4)];
          for (int i = x; i < std::min(width, x + run); ++i) {
            truth.at<uint8_t>(y, i) = t;
            predicted.at<uint8_t>(y, i) = p;
          }
          x += run;
        }
        for (int x = 0; image % 2 == 1 && x < width; ++x) {
          if (rng.uniform(0, 3) == 0) predicted.at<uint8_t>(y, x) = values[rng.uniform(0, 4)];
        }
        for (int x = 0; x < width; ++x) {
          const int t = truth.at<uint8_t>(y, x), p = predicted.at<uint8_t>(y, x);
          if (t != 255) ++expected[t * 4 + (p == 255 ? 3 : p)];
        }
      }
      ASSERT_TRUE(evaluator->Add(LabelSample("x", predicted), LabelSample("x", truth)).ok());
    }
    EXPECT_EQ(evaluator->confusion_matrix(), expected);
  }
}

// One golden case of testdata/make_miou_golden.py, as train-id samples converted the way the
// Cityscapes dataset converts labelIds PNGs.
struct GoldenCase {
  Json golden;
  std::vector<core::Sample> truths;
  std::vector<core::Sample> predictions;
};

GoldenCase LoadCase(const std::string& name) {
  GoldenCase c;
  std::ifstream in(absl::StrCat(kTestdata, "/golden_", name, ".json"));
  EXPECT_TRUE(in.good()) << name;
  c.golden = Json::parse(in);
  for (const Json& pair : c.golden.at("pairs")) {
    cv::Mat ids[2];
    for (int i = 0; i < 2; ++i) {
      const std::string path = absl::StrCat(kTestdata, "/", pair[i].get<std::string>());
      ids[i] = cv::imread(path, cv::IMREAD_UNCHANGED);
      EXPECT_EQ(ids[i].type(), CV_8UC1) << path;
      cv::LUT(ids[i], data::datasets::cityscapes::LabelIdToTrainIdLut(), ids[i]);
    }
    const std::string id = pair[0].get<std::string>();
    c.truths.push_back(LabelSample(id, ids[0]));
    c.predictions.push_back(LabelSample(id, ids[1]));
  }
  return c;
}

void ExpectMatchesGolden(const Metrics& m, const Json& golden) {
  for (const auto& [name, iou] : golden.at("class_iou").items()) {
    const std::string key = absl::StrCat("IoU/", name);
    if (iou.is_null()) {
      EXPECT_EQ(m.count(key), 0u) << key << " is NaN (not scored) in cityscapesScripts";
    } else {
      ASSERT_EQ(m.count(key), 1u) << key;
      EXPECT_NEAR(m.at(key), iou.get<double>(), 1e-6) << key;
    }
  }
  EXPECT_NEAR(m.at("mIoU"), golden.at("miou").get<double>(), 1e-6);
  for (const auto& [name, iou] : golden.at("category_iou").items()) {
    const std::string key = absl::StrCat("category_IoU/", name);
    if (iou.is_null()) {
      EXPECT_EQ(m.count(key), 0u) << key;
    } else {
      ASSERT_EQ(m.count(key), 1u) << key;
      EXPECT_NEAR(m.at(key), iou.get<double>(), 1e-6) << key;
    }
  }
  EXPECT_NEAR(m.at("category_mIoU"), golden.at("category_miou").get<double>(), 1e-6);
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, MatchesCityscapesScripts) {
  const GoldenCase c = LoadCase(GetParam());
  ASSERT_FALSE(c.truths.empty());
  auto evaluator = MakeEvaluator();
  ASSERT_TRUE(evaluator->SetDatasetMetadata(CityscapesMetadata()).ok());
  for (size_t i = 0; i < c.truths.size(); ++i) {
    ASSERT_TRUE(evaluator->Add(c.predictions[i], c.truths[i]).ok());
  }
  int64_t scored = 0;
  for (int64_t n : evaluator->confusion_matrix()) scored += n;
  EXPECT_EQ(scored, c.golden.at("pixels").get<int64_t>());
  ExpectMatchesGolden(evaluator->Compute(), c.golden);
}

// Each rank scores its share; merging the others' states gives every rank the one-process
// matrix and so exactly the same metrics.
TEST_P(GoldenTest, MergedRanksEqualOneEvaluator) {
  const GoldenCase c = LoadCase(GetParam());
  const core::DatasetMetadata metadata = CityscapesMetadata();
  auto whole = MakeEvaluator();
  ASSERT_TRUE(whole->SetDatasetMetadata(metadata).ok());
  std::unique_ptr<SemanticSegmentationEvaluator> ranks[2] = {MakeEvaluator(), MakeEvaluator()};
  for (auto& rank : ranks) ASSERT_TRUE(rank->SetDatasetMetadata(metadata).ok());
  for (size_t i = 0; i < c.truths.size(); ++i) {
    ASSERT_TRUE(whole->Add(c.predictions[i], c.truths[i]).ok());
    ASSERT_TRUE(ranks[i % 2]->Add(c.predictions[i], c.truths[i]).ok());
  }
  const std::string state0 = ranks[0]->SerializeState();
  ASSERT_TRUE(ranks[0]->MergeState(ranks[1]->SerializeState()).ok());
  ASSERT_TRUE(ranks[1]->MergeState(state0).ok());
  for (auto& rank : ranks) {
    EXPECT_EQ(rank->confusion_matrix(), whole->confusion_matrix());
    EXPECT_EQ(rank->Compute(), whole->Compute());
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenTest,
                         ::testing::Values("all_classes", "missing_classes", "random"));

TEST(SemanticSegmentationTest, StateRoundTrip) {
  const GoldenCase c = LoadCase("missing_classes");
  const core::DatasetMetadata metadata = CityscapesMetadata();
  auto evaluator = MakeEvaluator();
  auto restored = MakeEvaluator();
  ASSERT_TRUE(evaluator->SetDatasetMetadata(metadata).ok());
  ASSERT_TRUE(restored->SetDatasetMetadata(metadata).ok());
  for (size_t i = 0; i < c.truths.size(); ++i) {
    ASSERT_TRUE(evaluator->Add(c.predictions[i], c.truths[i]).ok());
  }
  ASSERT_TRUE(restored->MergeState(evaluator->SerializeState()).ok());
  EXPECT_EQ(restored->SerializeState(), evaluator->SerializeState());
  EXPECT_EQ(restored->Compute(), evaluator->Compute());
  // Merging a state into itself doubles every count and changes no ratio.
  ASSERT_TRUE(restored->MergeState(evaluator->SerializeState()).ok());
  for (size_t i = 0; i < evaluator->confusion_matrix().size(); ++i) {
    EXPECT_EQ(restored->confusion_matrix()[i], 2 * evaluator->confusion_matrix()[i]);
  }
  EXPECT_EQ(restored->Compute(), evaluator->Compute());
}

TEST(SemanticSegmentationTest, BadStatesAreRefused) {
  auto evaluator = MakeEvaluator();
  ASSERT_TRUE(evaluator->SetDatasetMetadata(TwoClasses()).ok());
  auto three = MakeEvaluator();
  core::DatasetMetadata metadata = TwoClasses();
  metadata.class_names.push_back("c");
  ASSERT_TRUE(three->SetDatasetMetadata(metadata).ok());
  EXPECT_THAT(evaluator->MergeState(three->SerializeState()).message(),
              HasSubstr("it has 3 classes but this evaluator 2"));
  EXPECT_THAT(evaluator->MergeState("ICDAR2015Hmean 1 2 3").message(),
              HasSubstr("not a SemanticSegmentation state"));
  EXPECT_THAT(evaluator->MergeState("SemanticSegmentation 2 1 2 3").message(),
              HasSubstr("3 counts for 2 classes"));
  EXPECT_THAT(evaluator->MergeState("SemanticSegmentation 2 1 2 3 4 -5 6").message(),
              HasSubstr("count 4 is '-5'"));
  EXPECT_EQ(evaluator->confusion_matrix(), std::vector<int64_t>(6, 0)) << "nothing half-merged";
}

TEST(SemanticSegmentationTest, BadInputsSayWhatWhereAndHow) {
  auto evaluator = MakeEvaluator();
  core::Sample truth = LabelSample("img_7.png", Map(1, 3, {0, 1, 255}));
  EXPECT_THAT(evaluator->Add(truth, truth).message(), HasSubstr("has no classes"));
  ASSERT_TRUE(evaluator->SetDatasetMetadata(TwoClasses()).ok());

  EXPECT_THAT(
      evaluator->Add(LabelSample("img_7.png", Map(1, 2, {0, 1})), truth).message(),
      AllOf(HasSubstr("img_7.png"), HasSubstr("prediction is 2x1 but the ground truth is 3x1"),
            HasSubstr("resized to the original image")));
  EXPECT_THAT(evaluator->Add(LabelSample("img_7.png", Map(1, 3, {0, 1, 1})),
                             LabelSample("img_7.png", Map(1, 3, {0, 7, 1})))
                  .message(),
              AllOf(HasSubstr("img_7.png"), HasSubstr("ground truth label map has value 7"),
                    HasSubstr("(x=1, y=0)"), HasSubstr("class (0..1)")));
  EXPECT_THAT(
      evaluator->Add(LabelSample("img_7.png", Map(1, 3, {0, 1, 2})), truth).message(),
      AllOf(HasSubstr("prediction label map has value 2 at (x=2, y=0)"),
            HasSubstr("model's num_classes")));
  // A bad value filling a whole block of the counting loop, in a wider map.
  EXPECT_THAT(evaluator->Add(LabelSample("img_9.png", cv::Mat(2, 20, CV_8U, cv::Scalar(1))),
                             LabelSample("img_9.png", cv::Mat(2, 20, CV_8U, cv::Scalar(9))))
                  .message(),
              HasSubstr("ground truth label map has value 9 at (x=0, y=0)"));
  EXPECT_THAT(evaluator->Add(LabelSample("img_9.png", cv::Mat(2, 20, CV_8U, cv::Scalar(3))),
                             LabelSample("img_9.png", cv::Mat(2, 20, CV_8U, cv::Scalar(255))))
                  .message(),
              HasSubstr("prediction label map has value 3 at (x=0, y=0)"))
      << "a bad prediction is refused on ignored pixels too";
  EXPECT_THAT(evaluator->Add(LabelSample("img_7.png", cv::Mat()), truth).message(),
              HasSubstr("the prediction has no label map"));
  EXPECT_THAT(
      evaluator->Add(LabelSample("img_7.png", cv::Mat(1, 3, CV_8UC3, cv::Scalar(0))), truth)
          .message(),
      HasSubstr("one 8-bit channel"));
  EXPECT_THAT(evaluator->Add(LabelSample("img_8.png", truth.semantic), truth).message(),
              HasSubstr("paired with the ground truth of 'img_7.png'"));
  EXPECT_EQ(evaluator->confusion_matrix(), std::vector<int64_t>(6, 0)) << "nothing half-added";

  // Options and metadata.
  SemanticSegmentationOptions options;
  options.set_num_classes(3);
  auto three = MakeEvaluator(options);
  EXPECT_EQ(three->DataRequirements()->num_classes, 3);
  EXPECT_EQ(three->DataRequirements()->num_classes_option, "num_classes");
  EXPECT_THAT(three->SetDatasetMetadata(TwoClasses()).message(),
              HasSubstr("num_classes is 3 but the evaluation dataset has 2 classes; set "
                        "num_classes: 2"));
  EXPECT_FALSE(MakeEvaluator()->DataRequirements()->num_classes.has_value());
  options.set_num_classes(256);
  EXPECT_FALSE(SemanticSegmentationEvaluator::Create(options).ok());
  core::DatasetMetadata boxes = TwoClasses();
  boxes.annotation_kind = core::AnnotationKind::kObjectInstances;
  EXPECT_THAT(evaluator->SetDatasetMetadata(boxes).message(), HasSubstr("scores label maps"));
  core::DatasetMetadata odd = TwoClasses();
  odd.class_categories = {"only one"};
  EXPECT_THAT(evaluator->SetDatasetMetadata(odd).message(),
              HasSubstr("1 class categories for 2 classes"));
  odd = TwoClasses();
  odd.ignore_label = 0;
  EXPECT_THAT(evaluator->SetDatasetMetadata(odd).message(), HasSubstr("ignore label is 0"));
}

// Through the registry, as a pipeline builds it.
TEST(SemanticSegmentationTest, IsRegistered) {
  SemanticSegmentationOptions options;
  options.set_num_classes(2);
  google::protobuf::Any any;
  any.PackFrom(options);
  absl::StatusOr<std::unique_ptr<core::Evaluator>> evaluator =
      core::EvaluatorRegistry::Get().Create("SemanticSegmentation", any);
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  EXPECT_EQ((*evaluator)->DataRequirements()->annotation_kind, core::AnnotationKind::kLabelMaps);
  EXPECT_EQ((*evaluator)->DataRequirements()->num_classes, 2);
}

// Result files in the layout and ids cityscapesScripts reads: each golden prediction, written
// from its train ids, reads back as its label ids wherever those are evaluated classes and as
// "unlabeled" (0) elsewhere, under labelIds/<city>/ with the image's name; the colour drawing
// beside it uses the Cityscapes palette.
TEST(SemanticSegmentationTest, WritesLabelIdsInTheCityscapesLayout) {
  const GoldenCase c = LoadCase("all_classes");
  const core::DatasetMetadata metadata = CityscapesMetadata();
  auto evaluator = MakeEvaluator();
  ASSERT_TRUE(evaluator->SetDatasetMetadata(metadata).ok());
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "semantic_segmentation_results";
  std::filesystem::remove_all(dir);
  for (size_t i = 0; i < c.truths.size(); ++i) {
    core::Sample truth = c.truths[i];
    // The image path of the Cityscapes dataset: leftImg8bit/<split>/<city>/<name>.
    const std::filesystem::path prediction_file(c.golden["pairs"][i][1].get<std::string>());
    const std::string city = prediction_file.parent_path().filename().string();
    truth.image_path = absl::StrCat("/data/leftImg8bit/val/", city, "/",
                                    prediction_file.filename().string());
    ASSERT_TRUE(evaluator->WriteResult(c.predictions[i], truth, dir.string()).ok());

    const std::filesystem::path written = dir / "labelIds" / city / prediction_file.filename();
    const cv::Mat ids = cv::imread(written.string(), cv::IMREAD_UNCHANGED);
    ASSERT_EQ(ids.type(), CV_8UC1) << written;
    const cv::Mat original = cv::imread(
        absl::StrCat(kTestdata, "/", prediction_file.string()), cv::IMREAD_UNCHANGED);
    const cv::Mat colour = cv::imread(
        (dir / "color" / city / prediction_file.filename()).string(), cv::IMREAD_COLOR);
    ASSERT_EQ(colour.size(), original.size());
    for (int y = 0; y < ids.rows; ++y) {
      for (int x = 0; x < ids.cols; ++x) {
        const int id = original.at<uint8_t>(y, x);
        const int train_id = data::datasets::cityscapes::TrainIdOfLabelId(id);
        ASSERT_EQ(ids.at<uint8_t>(y, x), train_id == kIgnore ? 0 : id) << x << "," << y;
        const cv::Vec3b rgb = train_id == kIgnore
                                  ? cv::Vec3b(0, 0, 0)
                                  : data::datasets::cityscapes::CityscapesLabels()[id].rgb;
        ASSERT_EQ(colour.at<cv::Vec3b>(y, x), cv::Vec3b(rgb[2], rgb[1], rgb[0])) << x << "," << y;
      }
    }
  }

  SemanticSegmentationOptions clash;
  clash.set_unlabeled_result_id(7);
  auto clashing = MakeEvaluator(clash);
  ASSERT_TRUE(clashing->SetDatasetMetadata(metadata).ok());
  EXPECT_THAT(clashing->WriteResult(c.predictions[0], c.truths[0], dir.string()).message(),
              AllOf(HasSubstr("unlabeled_result_id is 7, the label id of class 'road'"),
                    HasSubstr("set it to an id no class has")));
}

// tools/infer gives the evaluator no dataset: the labels are written as they are, under
// trainIds/, never passed off as format ids.
TEST(SemanticSegmentationTest, WritesLabelsAsTheyAreWithoutFormatIds) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "semantic_segmentation_train_ids";
  std::filesystem::remove_all(dir);
  core::Sample input;
  input.image_path = "/photos/street/IMG_0001.jpg";
  const cv::Mat labels = Map(1, 4, {0, 5, 18, 255});
  for (const bool with_metadata : {false, true}) {
    SCOPED_TRACE(with_metadata);
    auto evaluator = MakeEvaluator();
    if (with_metadata) {
      core::DatasetMetadata metadata = TwoClasses();
      for (int c = 2; c < 19; ++c) metadata.class_names.push_back(absl::StrCat("c", c));
      ASSERT_TRUE(evaluator->SetDatasetMetadata(metadata).ok());
    }
    std::filesystem::remove_all(dir);
    ASSERT_TRUE(evaluator->WriteResult(LabelSample("", labels), input, dir.string()).ok());
    const cv::Mat written =
        cv::imread((dir / "trainIds" / "street" / "IMG_0001.png").string(), cv::IMREAD_UNCHANGED);
    ASSERT_EQ(written.size(), labels.size());
    EXPECT_EQ(cv::countNonZero(written != labels), 0);
    EXPECT_FALSE(std::filesystem::exists(dir / "labelIds"));
    EXPECT_TRUE(std::filesystem::exists(dir / "color" / "street" / "IMG_0001.png"));
  }
}

}  // namespace
}  // namespace vision::evaluation::semantic_segmentation
