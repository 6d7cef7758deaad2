#include "data/synthetic/coco/synthetic_coco.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <opencv2/imgproc.hpp>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/sample.h"
#include "core/run_length_mask.h"
#include "data/datasets/coco/coco.pb.h"
#include "data/datasets/coco/coco_dataset.h"
#include "data/synthetic/testing/file_tree.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::data::synthetic::coco {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using ::vision::data::synthetic::file_tree::ExpectIdenticalTrees;
using ::vision::data::synthetic::file_tree::ExpectSameNamesDifferentBytes;
using ::vision::data::synthetic::file_tree::FreshDir;
using ::vision::data::synthetic::file_tree::ReadBytes;
using ::vision::data::synthetic::file_tree::ReadTree;

SyntheticCocoDatasetOptions SmallDataset(uint64_t seed) {
  SyntheticCocoDatasetOptions options;
  options.num_train = 6;
  options.num_val = 3;
  options.seed = seed;
  options.image.width = 160;
  options.image.height = 128;
  return options;
}

// The generator's rule (synthetic_coco.cc): a pixel is in a polygon when its centre is, up to
// cv::fillPoly's rounding.
cv::Mat RasterisePolygon(const core::Polygon& polygon, cv::Size size) {
  constexpr int kShift = 8;
  std::vector<cv::Point> fixed;
  for (const cv::Point2f& p : polygon) {
    fixed.emplace_back(static_cast<int>(std::lround((p.x - 0.5) * (1 << kShift))),
                       static_cast<int>(std::lround((p.y - 0.5) * (1 << kShift))));
  }
  cv::Mat mask = cv::Mat::zeros(size, CV_8U);
  cv::fillPoly(mask, std::vector<std::vector<cv::Point>>{fixed}, cv::Scalar(1), cv::LINE_8, kShift);
  return mask;
}

bool SameMask(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && cv::countNonZero(a != b) == 0;
}

TEST(SyntheticCocoTest, SameSeedGivesByteIdenticalFiles) {
  const std::string first = FreshDir("same_seed_a");
  const std::string second = FreshDir("same_seed_b");
  ASSERT_TRUE(WriteSyntheticCocoDataset(SmallDataset(7), first).ok());
  ASSERT_TRUE(WriteSyntheticCocoDataset(SmallDataset(7), second).ok());
  const auto a = ReadTree(first);
  const auto b = ReadTree(second);
  // 6 + 3 images and two JSON files.
  ASSERT_EQ(a.size(), 6u + 3u + 2u);
  ExpectIdenticalTrees(a, b);
  EXPECT_EQ(a.front().first, "annotations/instances_train2017.json");
  EXPECT_EQ(a[2].first, "train2017/000000000001.jpg");
  EXPECT_EQ(a.back().first, "val2017/000000000003.jpg");
}

TEST(SyntheticCocoTest, DifferentSeedGivesDifferentFiles) {
  const std::string first = FreshDir("seed_7");
  const std::string second = FreshDir("seed_8");
  ASSERT_TRUE(WriteSyntheticCocoDataset(SmallDataset(7), first).ok());
  ASSERT_TRUE(WriteSyntheticCocoDataset(SmallDataset(8), second).ok());
  const auto a = ReadTree(first);
  const auto b = ReadTree(second);
  ExpectSameNamesDifferentBytes(a, b);
}

TEST(SyntheticCocoTest, SplitsAndIndicesGetDifferentSeeds) {
  EXPECT_NE(ImageSeed(1, Split::kTrain, 0), ImageSeed(1, Split::kVal, 0));
  EXPECT_NE(ImageSeed(1, Split::kTrain, 0), ImageSeed(1, Split::kTrain, 1));
  EXPECT_NE(ImageSeed(1, Split::kTrain, 0), ImageSeed(2, Split::kTrain, 0));
  EXPECT_EQ(ImageSeed(1, Split::kTrain, 5), ImageSeed(1, Split::kTrain, 5));
}

TEST(SyntheticCocoTest, CategoriesHaveNonContiguousIds) {
  std::vector<int64_t> ids;
  for (const SyntheticCategory& category : SyntheticCategories()) ids.push_back(category.id);
  EXPECT_THAT(ids, ElementsAre(1, 3, 7, 12));
}

// Over many images: masks never overlap (a later shape hides what it covers), a wholly
// visible shape's polygon rasterises to its mask, a hidden one is RLE with the bounding box
// of its visible pixels, and every kind of annotation occurs.
TEST(SyntheticCocoTest, OccludedShapesExcludeTheirOccluders) {
  const SyntheticCocoImageOptions options;
  int empty_images = 0;
  int polygons = 0;
  int occluded = 0;
  int crowd_counts = 0;
  int crowd_strings = 0;
  std::vector<int> per_category(13, 0);
  for (uint64_t seed = 0; seed < 60; ++seed) {
    const SyntheticCocoImage image = RenderSyntheticCocoImage(options, seed);
    ASSERT_EQ(image.image.size(), cv::Size(256, 256));
    empty_images += image.objects.empty();
    cv::Mat covered = cv::Mat::zeros(image.image.size(), CV_8U);
    for (size_t i = 0; i < image.objects.size(); ++i) {
      const SyntheticObject& object = image.objects[i];
      ASSERT_GE(object.category_id, 1);
      ASSERT_LE(object.category_id, 12);
      ++per_category[object.category_id];
      EXPECT_EQ(object.area, cv::countNonZero(object.mask)) << "seed " << seed << " object " << i;
      EXPECT_GT(object.area, 0);
      EXPECT_EQ(cv::countNonZero(object.mask & covered), 0)
          << "seed " << seed << ": object " << i << " overlaps an earlier one";
      covered |= object.mask;
      if (object.encoding == MaskEncoding::kPolygon) {
        ++polygons;
        EXPECT_FALSE(object.is_crowd);
        EXPECT_TRUE(SameMask(RasterisePolygon(object.polygon, image.image.size()), object.mask))
            << "seed " << seed << " object " << i;
      } else {
        occluded += !object.is_crowd;
        crowd_counts += object.is_crowd && object.encoding == MaskEncoding::kRleCounts;
        crowd_strings += object.is_crowd && object.encoding == MaskEncoding::kRleString;
        EXPECT_TRUE(object.polygon.empty());
        const cv::Rect extent = cv::boundingRect(object.mask);
        EXPECT_EQ(object.box, cv::Rect2f(extent.x, extent.y, extent.width, extent.height));
      }
    }
  }
  EXPECT_GE(empty_images, 2);
  EXPECT_LE(empty_images, 15);
  EXPECT_GT(polygons, 60);
  EXPECT_GT(occluded, 10);
  EXPECT_GE(crowd_counts, 2);
  EXPECT_GE(crowd_strings, 2);
  for (int id : {1, 3, 7, 12}) EXPECT_GT(per_category[id], 10) << "category " << id;
}

// On a plain background the shapes change exactly the pixels of their masks.
TEST(SyntheticCocoTest, MasksMatchTheDrawnPixels) {
  SyntheticCocoImageOptions options;
  options.plain_background = true;
  options.empty_fraction = 0;
  int64_t mask_pixels = 0;
  int64_t unchanged_mask_pixels = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const SyntheticCocoImage image = RenderSyntheticCocoImage(options, seed);
    cv::Mat covered = cv::Mat::zeros(image.image.size(), CV_8U);
    for (const SyntheticObject& object : image.objects) covered |= object.mask;
    // Shapes keep a gap to the border, so the corner shows the background.
    const cv::Vec3b background = image.image.at<cv::Vec3b>(0, 0);
    ASSERT_EQ(covered.at<uchar>(0, 0), 0);
    for (int y = 0; y < image.image.rows; ++y) {
      for (int x = 0; x < image.image.cols; ++x) {
        const bool changed = image.image.at<cv::Vec3b>(y, x) != background;
        if (covered.at<uchar>(y, x)) {
          ++mask_pixels;
          unchanged_mask_pixels += !changed;
        } else {
          ASSERT_FALSE(changed) << "seed " << seed << ": pixel (" << x << ", " << y
                                << ") changed outside every mask";
        }
      }
    }
  }
  EXPECT_GT(mask_pixels, 20000);
  // A shape's colour may match the background's by chance in a few pixels.
  EXPECT_LT(unchanged_mask_pixels, mask_pixels / 100);
}

// The written files read back through the COCO plugin to exactly the rendered annotations.
TEST(SyntheticCocoTest, WrittenDatasetLoadsWithTheCocoPlugin) {
  const std::string root = FreshDir("loadable");
  SyntheticCocoDatasetOptions options = SmallDataset(3);
  options.num_train = 12;
  options.image.crowd_fraction = 0.5;
  options.image.empty_fraction = 0.2;
  ASSERT_TRUE(WriteSyntheticCocoDataset(options, root).ok());
  const std::string json = ReadBytes(fs::path(root) / "annotations/instances_train2017.json");
  EXPECT_TRUE(absl::StrContains(json, "\"counts\":\"")) << "no compressed RLE written";
  EXPECT_TRUE(absl::StrContains(json, "\"iscrowd\":1")) << "no crowd region written";

  for (const auto& [split, count] :
       std::vector<std::pair<Split, int>>{{Split::kTrain, 12}, {Split::kVal, 3}}) {
    const std::string name = split == Split::kTrain ? "train" : "val";
    datasets::CocoOptions dataset_options;
    dataset_options.set_root(root);
    dataset_options.set_annotation_file(absl::StrCat("annotations/instances_", name, "2017.json"));
    dataset_options.set_image_dir(absl::StrCat(name, "2017"));
    dataset_options.set_empty_images(datasets::CocoOptions::KEEP);
    auto dataset = datasets::coco::CocoDataset::Create(dataset_options);
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    EXPECT_THAT((*dataset)->class_names(), ElementsAre("circle", "rectangle", "triangle", "star"));
    ASSERT_EQ((*dataset)->Size(), count);
    int with_objects = 0;
    for (int64_t i = 0; i < count; ++i) {
      const SyntheticCocoImage rendered =
          RenderSyntheticCocoImage(options.image, ImageSeed(options.seed, split, i));
      absl::StatusOr<core::Sample> sample = (*dataset)->Load(i);
      ASSERT_TRUE(sample.ok()) << sample.status();
      EXPECT_EQ(sample->id, absl::StrFormat("%012d.jpg (image id %d)", i + 1, i + 1));
      EXPECT_EQ(sample->image.size(), cv::Size(160, 128));
      ASSERT_EQ(sample->objects.size(), rendered.objects.size()) << sample->id;
      with_objects += std::any_of(rendered.objects.begin(), rendered.objects.end(),
                                  [](const SyntheticObject& o) { return !o.is_crowd; });
      for (size_t k = 0; k < rendered.objects.size(); ++k) {
        const core::ObjectInstance& loaded = sample->objects[k];
        const SyntheticObject& expected = rendered.objects[k];
        EXPECT_EQ(SyntheticCategories()[loaded.label].id, expected.category_id);
        EXPECT_EQ(loaded.is_crowd, expected.is_crowd);
        EXPECT_NEAR(loaded.box.x, expected.box.x, 0.006);
        EXPECT_NEAR(loaded.box.y, expected.box.y, 0.006);
        EXPECT_NEAR(loaded.box.width, expected.box.width, 0.011);
        EXPECT_NEAR(loaded.box.height, expected.box.height, 0.011);
        cv::Mat mask;
        if (expected.encoding == MaskEncoding::kPolygon) {
          ASSERT_EQ(loaded.polygons.size(), 1u);
          EXPECT_EQ(loaded.rle.height, 0);
          mask = RasterisePolygon(loaded.polygons[0], sample->image.size());
        } else {
          EXPECT_TRUE(loaded.polygons.empty());
          absl::StatusOr<cv::Mat> decoded = core::DecodeRle(loaded.rle);
          ASSERT_TRUE(decoded.ok()) << decoded.status();
          mask = *decoded;
        }
        EXPECT_TRUE(SameMask(mask, expected.mask)) << sample->id << " object " << k;
        // Every mask pixel lies in the box: in COCO's continuous coordinates pixel (x, y)
        // covers [x, x + 1) x [y, y + 1); its centre is in the box up to cv::fillPoly's
        // rounding of a polygon to whole pixels (under half a pixel).
        std::vector<cv::Point> pixels;
        cv::findNonZero(mask, pixels);
        ASSERT_FALSE(pixels.empty()) << sample->id << " object " << k;
        for (const cv::Point& p : pixels) {
          ASSERT_TRUE(p.x + 1 >= loaded.box.x && p.x <= loaded.box.br().x &&
                      p.y + 1 >= loaded.box.y && p.y <= loaded.box.br().y)
              << sample->id << " object " << k << ": pixel " << p << " outside box " << loaded.box;
        }
      }
    }
    // SKIP leaves exactly the images with a non-crowd object.
    dataset_options.set_empty_images(datasets::CocoOptions::SKIP);
    auto skipping = datasets::coco::CocoDataset::Create(dataset_options);
    ASSERT_TRUE(skipping.ok()) << skipping.status();
    EXPECT_EQ((*skipping)->Size(), with_objects);
    if (split == Split::kTrain) {
      EXPECT_LT(with_objects, count);
    }
  }
}

TEST(SyntheticCocoTest, RejectsBadOptionsAndNonEmptyDirectories) {
  SyntheticCocoDatasetOptions options = SmallDataset(1);
  options.image.width = 10;
  absl::Status status = WriteSyntheticCocoDataset(options, FreshDir("bad_size"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("10x128"));

  options = SmallDataset(1);
  options.image.min_objects = 5;
  options.image.max_objects = 2;
  EXPECT_EQ(ValidateOptions(options).code(), absl::StatusCode::kInvalidArgument);
  options = SmallDataset(1);
  options.image.crowd_fraction = 1.5;
  status = ValidateOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("crowd_fraction 1.5"));
  options = SmallDataset(1);
  options.jpeg_quality = 0;
  EXPECT_EQ(ValidateOptions(options).code(), absl::StatusCode::kInvalidArgument);

  const std::string root = FreshDir("twice");
  options = SmallDataset(1);
  options.num_train = 1;
  options.num_val = 1;
  ASSERT_TRUE(WriteSyntheticCocoDataset(options, root).ok());
  status = WriteSyntheticCocoDataset(options, root);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("instances_train2017.json' already exists"));
  fs::remove(fs::path(root) / "annotations/instances_train2017.json");
  status = WriteSyntheticCocoDataset(options, root);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("train2017' already holds files"));
}

}  // namespace
}  // namespace vision::data::synthetic::coco
