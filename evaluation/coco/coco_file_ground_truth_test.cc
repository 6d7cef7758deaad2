// The COCO numbers of a file shaped like the real ones (two-decimal coordinates, polygons and
// boxes crossing the border, the file's own "area", crowd RLE, category ids with gaps), scored on
// the production path: CocoDataset reads the file, the loader keeps each sample's ground truth
// (Dataset::GroundTruth) as tools/eval and the trainer's evaluation do, CocoEvaluator scores the
// detections. All 24 numbers must be pycocotools 2.0.11's within 1e-6
// (testdata/make_file_ground_truth_golden.py).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/run_length_mask.h"
#include "core/sample.h"
#include "data/datasets/coco/coco.pb.h"
#include "data/datasets/coco/coco_dataset.h"
#include "data/loader/loader.h"
#include "evaluation/coco/coco_eval.pb.h"
#include "evaluation/coco/coco_evaluator.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vision::evaluation::coco {
namespace {

using Json = nlohmann::json;

constexpr char kDir[] = "evaluation/coco/testdata/file_ground_truth";
constexpr char kStatNames[][6] = {"AP",  "AP50", "AP75",  "APs", "APm", "APl",
                                  "AR1", "AR10", "AR100", "ARs", "ARm", "ARl"};

Json ReadJson(const std::string& name) {
  const std::string path = absl::StrCat(kDir, "/", name);
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return Json::parse(in);
}

TEST(CocoFileGroundTruthTest, ProductionPathGivesPycocotoolsNumbers) {
  data::datasets::CocoOptions options;
  options.set_root(kDir);
  options.set_annotation_file("instances.json");
  options.set_image_dir("images");
  options.set_keep_crowd(false);  // a training choice: evaluation still sees the crowd regions
  absl::StatusOr<std::unique_ptr<data::datasets::coco::CocoDataset>> dataset =
      data::datasets::coco::CocoDataset::Create(options);
  ASSERT_TRUE(dataset.ok()) << dataset.status();

  CocoEvalOptions eval_options;
  eval_options.add_iou_types(CocoEvalOptions::BBOX);
  eval_options.add_iou_types(CocoEvalOptions::SEGM);
  absl::StatusOr<std::unique_ptr<CocoEvaluator>> evaluator = CocoEvaluator::Create(eval_options);
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  ASSERT_TRUE((*evaluator)->SetDatasetMetadata(*(*dataset)->Metadata()).ok());

  // Detections by image id, labels from category ids (the dataset's table).
  const std::vector<int64_t>& category_ids = (*dataset)->category_ids();
  std::map<int64_t, std::vector<Json>> detections;
  for (const Json& d : ReadJson("detections.json")) {
    detections[d.at("image_id").get<int64_t>()].push_back(d);
  }
  int truths = 0;
  for (int64_t i = 0; i < (*dataset)->Size(); ++i) {
    absl::StatusOr<core::Sample> sample = data::LoadSample(
        **dataset, {}, nullptr, i, /*seed=*/1, /*epoch=*/0, /*keep_ground_truth=*/true);
    ASSERT_TRUE(sample.ok()) << sample.status();
    ASSERT_NE(sample->ground_truth, nullptr);
    const core::Sample& truth = *sample->ground_truth;
    truths += static_cast<int>(truth.objects.size());
    absl::StatusOr<int64_t> image_id = CocoImageId(truth.id);
    ASSERT_TRUE(image_id.ok()) << image_id.status();
    core::Sample prediction;
    prediction.id = truth.id;
    for (const Json& d : detections[*image_id]) {
      core::ObjectInstance object;
      const auto found = std::find(category_ids.begin(), category_ids.end(),
                                   d.at("category_id").get<int64_t>());
      ASSERT_NE(found, category_ids.end());
      object.label = static_cast<int>(found - category_ids.begin());
      const std::vector<double> box = d.at("bbox").get<std::vector<double>>();
      object.box = cv::Rect2f(box[0], box[1], box[2], box[3]);
      object.score = d.at("score").get<float>();
      object.rle.height = truth.original_height;
      object.rle.width = truth.original_width;
      object.rle.counts =
          core::DecodeCocoRleString(d.at("segmentation").at("counts").get<std::string>()).value();
      prediction.objects.push_back(std::move(object));
    }
    ASSERT_TRUE((*evaluator)->Add(prediction, truth).ok());
  }
  // Every annotation of the file, the crowd regions included.
  EXPECT_EQ(truths, static_cast<int>(ReadJson("instances.json").at("annotations").size()));

  const std::map<std::string, double> metrics = (*evaluator)->Compute();
  const Json golden = ReadJson("golden.json");
  for (const char* type : {"bbox", "segm"}) {
    int apart = 0;  // numbers the clamped ground truth of before moves by more than 1e-4
    for (int k = 0; k < 12; ++k) {
      const std::string name = absl::StrCat(type, "_", kStatNames[k]);
      ASSERT_EQ(metrics.count(name), 1u) << name;
      const double expected = golden.at(type)[k].get<double>();
      EXPECT_NEAR(metrics.at(name), expected, 1e-6)
          << name << ": expected pycocotools' " << expected << ", saw " << metrics.at(name);
      const double before = golden.at(absl::StrCat(type, "_clamped_ground_truth"))[k].get<double>();
      apart += std::abs(before - expected) > 1e-4 ? 1 : 0;
    }
    // The data tells the file's ground truth from the clamped float32 one.
    EXPECT_GE(apart, 3) << type << ": expected the golden case to separate the two ground truths";
  }

  // The results files: the per-type ones hold exactly what the golden's pycocotools scored
  // (segm without "bbox"), so loadRes + COCOeval on them gives the numbers above.
  const std::string dir = std::getenv("TEST_TMPDIR");
  ASSERT_TRUE((*evaluator)->WriteMergedResults(dir).ok());
  auto sorted_dumps = [](const Json& list, const char* drop) {
    std::vector<std::string> dumps;
    for (Json entry : list) {
      if (drop != nullptr) entry.erase(drop);
      dumps.push_back(entry.dump());
    }
    std::sort(dumps.begin(), dumps.end());
    return dumps;
  };
  auto read = [&dir](const std::string& name) {
    std::ifstream in(dir + "/" + name);
    EXPECT_TRUE(in.good()) << "expected " << name << " in the results directory";
    return Json::parse(in);
  };
  const Json golden_detections = ReadJson("detections.json");
  EXPECT_EQ(sorted_dumps(read("coco_results.json"), nullptr),
            sorted_dumps(golden_detections, nullptr));
  EXPECT_EQ(sorted_dumps(read("coco_results_segm.json"), nullptr),
            sorted_dumps(golden_detections, "bbox"));
  EXPECT_EQ(sorted_dumps(read("coco_results_bbox.json"), nullptr),
            sorted_dumps(golden_detections, "segmentation"));
}

}  // namespace
}  // namespace vision::evaluation::coco
