#include "evaluation/coco/coco_evaluator.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/run_length_mask.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vision::evaluation::coco {
namespace {

using Json = nlohmann::json;

constexpr char kStatNames[][6] = {"AP",  "AP50", "AP75",  "APs", "APm", "APl",
                                  "AR1", "AR10", "AR100", "ARs", "ARm", "ARl"};

// One golden case of testdata/make_coco_golden.py as samples.
struct Case {
  Json golden;
  core::DatasetMetadata metadata;
  std::vector<core::Sample> truths;       // by image, in the file's order
  std::vector<core::Sample> predictions;  // same order
};

core::ObjectInstance ObjectFromJson(const Json& j, const std::map<int64_t, int>& labels, int height,
                                    int width) {
  core::ObjectInstance object;
  object.label = labels.at(j.at("category_id").get<int64_t>());
  const std::vector<double> box = j.at("bbox").get<std::vector<double>>();
  object.box = cv::Rect2f(box[0], box[1], box[2], box[3]);
  if (j.contains("score")) object.score = j.at("score").get<float>();
  if (j.contains("iscrowd")) object.is_crowd = j.at("iscrowd").get<int>() == 1;
  const Json& segmentation = j.at("segmentation");
  if (segmentation.is_array()) {
    for (const Json& flat : segmentation) {
      core::Polygon polygon;
      for (size_t i = 0; i + 1 < flat.size(); i += 2) {
        polygon.emplace_back(flat[i].get<float>(), flat[i + 1].get<float>());
      }
      object.polygons.push_back(polygon);
    }
  } else {
    object.rle.height = height;
    object.rle.width = width;
    const Json& counts = segmentation.at("counts");
    if (counts.is_string()) {
      object.rle.counts = core::DecodeCocoRleString(counts.get<std::string>()).value();
    } else {
      object.rle.counts = counts.get<std::vector<uint32_t>>();
    }
  }
  return object;
}

Case LoadCase(const std::string& name) {
  const std::string path = absl::StrCat("evaluation/coco/testdata/golden_", name, ".json");
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  Case c;
  c.golden = Json::parse(in);
  const Json& gt = c.golden.at("gt");
  std::vector<std::pair<int64_t, std::string>> categories;
  for (const Json& category : gt.at("categories")) {
    categories.emplace_back(category.at("id").get<int64_t>(), category.at("name"));
  }
  std::sort(categories.begin(), categories.end());
  std::map<int64_t, int> labels;
  c.metadata.annotation_kind = core::AnnotationKind::kObjectInstances;
  c.metadata.source_id_name = "category id";
  for (const auto& [id, category_name] : categories) {
    labels[id] = c.metadata.num_classes();
    c.metadata.class_names.push_back(category_name);
    c.metadata.source_ids.push_back(id);
  }
  std::map<int64_t, size_t> index;
  for (const Json& image : gt.at("images")) {
    const int64_t id = image.at("id").get<int64_t>();
    index[id] = c.truths.size();
    core::Sample truth;
    truth.id = absl::StrCat(image.at("file_name").get<std::string>(), " (image id ", id, ")");
    truth.original_height = image.at("height").get<int>();
    truth.original_width = image.at("width").get<int>();
    c.truths.push_back(truth);
    c.predictions.emplace_back().id = truth.id;
  }
  for (const Json& annotation : gt.at("annotations")) {
    core::Sample& truth = c.truths[index.at(annotation.at("image_id").get<int64_t>())];
    truth.objects.push_back(
        ObjectFromJson(annotation, labels, truth.original_height, truth.original_width));
  }
  for (const Json& detection : c.golden.at("detections")) {
    const size_t i = index.at(detection.at("image_id").get<int64_t>());
    c.predictions[i].objects.push_back(
        ObjectFromJson(detection, labels, c.truths[i].original_height, c.truths[i].original_width));
  }
  return c;
}

std::unique_ptr<CocoEvaluator> Make(std::vector<CocoEvalOptions::IouType> types,
                                    const core::DatasetMetadata* metadata) {
  CocoEvalOptions options;
  for (auto type : types) options.add_iou_types(type);
  absl::StatusOr<std::unique_ptr<CocoEvaluator>> made = CocoEvaluator::Create(options);
  EXPECT_TRUE(made.ok()) << made.status();
  if (metadata != nullptr) {
    EXPECT_TRUE((*made)->SetDatasetMetadata(*metadata).ok());
  }
  return std::move(made).value();
}

void ExpectMatchesGolden(const Case& c, const std::map<std::string, double>& metrics,
                         const std::string& name) {
  for (const char* type : {"bbox", "segm"}) {
    const std::vector<double> stats = c.golden.at(type).get<std::vector<double>>();
    ASSERT_EQ(stats.size(), 12u);
    for (int i = 0; i < 12; ++i) {
      const std::string key = absl::StrCat(type, "_", kStatNames[i]);
      ASSERT_TRUE(metrics.count(key)) << key;
      EXPECT_NEAR(metrics.at(key), stats[i], 1e-6) << name << " " << key;
    }
    const std::vector<double> class_ap =
        c.golden.at(absl::StrCat(type, "_class_ap")).get<std::vector<double>>();
    for (size_t k = 0; k < class_ap.size(); ++k) {
      const std::string key = absl::StrCat(type, "_AP/", c.metadata.class_names[k]);
      if (class_ap[k] <= -1) {
        EXPECT_EQ(metrics.count(key), 0u) << name << " " << key;
      } else {
        ASSERT_TRUE(metrics.count(key)) << name << " " << key;
        EXPECT_NEAR(metrics.at(key), class_ap[k], 1e-6) << name << " " << key;
      }
    }
  }
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

// All twelve numbers and per-class AP as pycocotools' COCOeval, for bbox and segm; images
// added in reverse file order (the metric orders them by image id itself).
TEST_P(GoldenTest, MatchesPycocotools) {
  const Case c = LoadCase(GetParam());
  std::unique_ptr<CocoEvaluator> evaluator =
      Make({CocoEvalOptions::BBOX, CocoEvalOptions::SEGM}, &c.metadata);
  for (size_t i = c.truths.size(); i-- > 0;) {
    ASSERT_TRUE(evaluator->Add(c.predictions[i], c.truths[i]).ok());
  }
  ExpectMatchesGolden(c, evaluator->Compute(), GetParam());
}

// Three "ranks" evaluate every third image; merged states give the same numbers.
TEST_P(GoldenTest, MergedRanksMatchPycocotools) {
  const Case c = LoadCase(GetParam());
  std::vector<std::unique_ptr<CocoEvaluator>> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.push_back(Make({CocoEvalOptions::SEGM, CocoEvalOptions::BBOX}, &c.metadata));
  }
  for (size_t i = 0; i < c.truths.size(); ++i) {
    ASSERT_TRUE(ranks[i % 3]->Add(c.predictions[i], c.truths[i]).ok());
  }
  for (int r = 1; r < 3; ++r) {
    const absl::Status merged = ranks[0]->MergeState(ranks[r]->SerializeState());
    ASSERT_TRUE(merged.ok()) << merged;
  }
  ExpectMatchesGolden(c, ranks[0]->Compute(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenTest,
                         ::testing::Values("perturbed", "random", "crowd", "empty", "many",
                                           "borders", "duplicates", "synthetic"));

TEST(CocoEvaluatorTest, ResultsJsonUsesDatasetIds) {
  const Case c = LoadCase("perturbed");
  std::unique_ptr<CocoEvaluator> evaluator =
      Make({CocoEvalOptions::BBOX, CocoEvalOptions::SEGM}, &c.metadata);
  for (size_t i = 0; i < c.truths.size(); ++i) {
    ASSERT_TRUE(evaluator->Add(c.predictions[i], c.truths[i]).ok());
  }
  const std::string dir = std::getenv("TEST_TMPDIR");
  ASSERT_TRUE(evaluator->WriteMergedResults(dir).ok());
  std::ifstream in(std::filesystem::path(dir) / "coco_results.json");
  const Json results = Json::parse(in);
  // The golden's detections, with the same ids, boxes, scores and masks (images ascending).
  Json expected = c.golden.at("detections");
  std::stable_sort(expected.begin(), expected.end(), [](const Json& a, const Json& b) {
    return a.at("image_id").get<int64_t>() < b.at("image_id").get<int64_t>();
  });
  ASSERT_EQ(results.size(), expected.size());
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i].at("image_id"), expected[i].at("image_id"));
    EXPECT_EQ(results[i].at("category_id"), expected[i].at("category_id"));
    EXPECT_EQ(results[i].at("bbox"), expected[i].at("bbox"));
    EXPECT_DOUBLE_EQ(results[i].at("score").get<double>(), expected[i].at("score").get<double>());
    EXPECT_EQ(results[i].at("segmentation"), expected[i].at("segmentation"));
  }
}

TEST(CocoEvaluatorTest, WithoutMetadataMetricsStillWorkButResultsNeedIds) {
  const Case c = LoadCase("crowd");
  std::unique_ptr<CocoEvaluator> evaluator = Make({CocoEvalOptions::BBOX}, nullptr);
  for (size_t i = 0; i < c.truths.size(); ++i) {
    ASSERT_TRUE(evaluator->Add(c.predictions[i], c.truths[i]).ok());
  }
  const std::map<std::string, double> metrics = evaluator->Compute();
  EXPECT_NEAR(metrics.at("bbox_AP"), c.golden.at("bbox")[0].get<double>(), 1e-6);
  EXPECT_EQ(evaluator->MainMetric(), "bbox_AP");
  EXPECT_EQ(metrics.count("segm_AP"), 0u);
  const absl::Status written = evaluator->WriteMergedResults(std::getenv("TEST_TMPDIR"));
  EXPECT_EQ(written.code(), absl::StatusCode::kFailedPrecondition);
}

core::Sample OneBox(int label, bool with_mask) {
  core::Sample sample;
  sample.id = "a.png (image id 3)";
  sample.original_height = 8;
  sample.original_width = 8;
  core::ObjectInstance object;
  object.label = label;
  object.box = cv::Rect2f(0, 0, 4, 4);
  if (with_mask) object.polygons = {{{0, 0}, {4, 0}, {4, 4}, {0, 4}}};
  sample.objects.push_back(object);
  return sample;
}

TEST(CocoEvaluatorTest, UnknownLabelsAreNamed) {
  const Case c = LoadCase("borders");
  std::unique_ptr<CocoEvaluator> evaluator = Make({CocoEvalOptions::BBOX}, &c.metadata);
  const absl::Status status = evaluator->Add(OneBox(4, true), OneBox(0, true));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("label(s) 4 are not classes"), std::string::npos) << status;
}

TEST(CocoEvaluatorTest, BadInputIsAnError) {
  std::unique_ptr<CocoEvaluator> segm = Make({CocoEvalOptions::SEGM}, nullptr);
  EXPECT_EQ(segm->MainMetric(), "segm_AP");
  // A detection without a mask cannot be scored for segm.
  const absl::Status no_mask = segm->Add(OneBox(0, false), OneBox(0, true));
  EXPECT_NE(no_mask.message().find("prediction object 0: it has no mask"), std::string::npos)
      << no_mask;
  // Samples must carry the COCO image id.
  core::Sample anonymous = OneBox(0, true);
  anonymous.id = "a.png";
  EXPECT_FALSE(segm->Add(anonymous, anonymous).ok());
  // The same image twice (on two ranks, say).
  ASSERT_TRUE(segm->Add(OneBox(0, true), OneBox(0, true)).ok());
  const absl::Status twice = segm->MergeState(segm->SerializeState());
  EXPECT_NE(twice.message().find("image id 3 was evaluated twice"), std::string::npos) << twice;
  EXPECT_FALSE(segm->MergeState("ICDAR2015Hmean 1 2 3").ok());
  CocoEvalOptions bad;
  bad.add_max_dets(10);
  bad.add_max_dets(1);
  bad.add_max_dets(100);
  EXPECT_FALSE(CocoEvaluator::Create(bad).ok());
}

TEST(CocoEvaluatorTest, ImageIdFromSampleId) {
  EXPECT_EQ(CocoImageId("000000000139.jpg (image id 139)").value(), 139);
  EXPECT_FALSE(CocoImageId("img.jpg (image id x)").ok());
  EXPECT_FALSE(CocoImageId("img.jpg").ok());
}

}  // namespace
}  // namespace vision::evaluation::coco
