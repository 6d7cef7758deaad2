#include "data/synthetic/cityscapes/synthetic_cityscapes.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "data/datasets/cityscapes/cityscapes.pb.h"
#include "data/datasets/cityscapes/cityscapes_dataset.h"
#include "data/datasets/cityscapes/cityscapes_labels.h"
#include "data/synthetic/testing/file_tree.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::data::synthetic::cityscapes {
namespace {

namespace fs = std::filesystem;
namespace labels = ::vision::data::datasets::cityscapes;
using ::testing::HasSubstr;

using ::vision::data::synthetic::file_tree::ExpectIdenticalTrees;
using ::vision::data::synthetic::file_tree::ExpectSameNamesDifferentBytes;
using ::vision::data::synthetic::file_tree::FreshDir;
using ::vision::data::synthetic::file_tree::ReadTree;

SyntheticCityscapesOptions SmallDataset(uint64_t seed) {
  SyntheticCityscapesOptions options;
  options.num_train = 5;
  options.num_val = 2;
  options.seed = seed;
  return options;
}

TEST(SyntheticCityscapesTest, SameSeedGivesByteIdenticalFiles) {
  const std::string first = FreshDir("same_seed_a");
  const std::string second = FreshDir("same_seed_b");
  ASSERT_TRUE(WriteSyntheticCityscapes(SmallDataset(7), first).ok());
  ASSERT_TRUE(WriteSyntheticCityscapes(SmallDataset(7), second).ok());
  const auto a = ReadTree(first);
  const auto b = ReadTree(second);
  ASSERT_EQ(a.size(), 2u * (5 + 2));
  ExpectIdenticalTrees(a, b);
  // The layout of the real archives, images divided among two cities in index order.
  EXPECT_EQ(a[0].first, "gtFine/train/alderburg/alderburg_000000_000000_gtFine_labelIds.png");
  EXPECT_EQ(a[3].first, "gtFine/train/birchfield/birchfield_000000_000003_gtFine_labelIds.png");
  EXPECT_EQ(a[5].first, "gtFine/val/elmstead/elmstead_000000_000000_gtFine_labelIds.png");
  EXPECT_EQ(a[6].first, "gtFine/val/fernhill/fernhill_000000_000001_gtFine_labelIds.png");
  EXPECT_EQ(a[7].first, "leftImg8bit/train/alderburg/alderburg_000000_000000_leftImg8bit.png");
}

TEST(SyntheticCityscapesTest, DifferentSeedGivesDifferentImages) {
  const std::string first = FreshDir("seed_7");
  const std::string second = FreshDir("seed_8");
  ASSERT_TRUE(WriteSyntheticCityscapes(SmallDataset(7), first).ok());
  ASSERT_TRUE(WriteSyntheticCityscapes(SmallDataset(8), second).ok());
  const auto a = ReadTree(first);
  const auto b = ReadTree(second);
  ExpectSameNamesDifferentBytes(a, b);
}

TEST(SyntheticCityscapesTest, SplitsAndIndicesGetDifferentSeeds) {
  EXPECT_NE(ImageSeed(1, Split::kTrain, 0), ImageSeed(1, Split::kVal, 0));
  EXPECT_NE(ImageSeed(1, Split::kTrain, 0), ImageSeed(1, Split::kTrain, 1));
  EXPECT_NE(ImageSeed(1, Split::kTrain, 0), ImageSeed(2, Split::kTrain, 0));
  EXPECT_EQ(ImageSeed(1, Split::kTrain, 5), ImageSeed(1, Split::kTrain, 5));
}

// The written files load with the Cityscapes plugin, sample i is scene i exactly (PNG is
// lossless), and the scenes cover the street classes plus ignored pixels.
TEST(SyntheticCityscapesTest, GeneratedDatasetLoadsAsCityscapes) {
  const std::string root = FreshDir("loadable");
  SyntheticCityscapesOptions options = SmallDataset(3);
  options.num_train = 8;
  options.num_val = 3;
  options.num_cities = 3;
  ASSERT_TRUE(WriteSyntheticCityscapes(options, root).ok());
  for (const auto& [split, split_name, count] : std::vector<std::tuple<Split, std::string, int>>{
           {Split::kTrain, "train", 8}, {Split::kVal, "val", 3}}) {
    datasets::CityscapesOptions dataset_options;
    dataset_options.set_root(root);
    dataset_options.set_split(split_name);
    auto dataset = labels::CityscapesDataset::Create(dataset_options);
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    ASSERT_EQ((*dataset)->Size(), count);
    EXPECT_THAT((*dataset)->Describe(), HasSubstr("in 3 cities"));
    std::set<int> classes;
    int64_t ignored = 0;
    for (int64_t i = 0; i < count; ++i) {
      absl::StatusOr<core::Sample> sample = (*dataset)->Load(i);
      ASSERT_TRUE(sample.ok()) << sample.status();
      EXPECT_TRUE(absl::EndsWith(sample->id, absl::StrCat("_000000_00000", i, "_leftImg8bit")))
          << sample->id;
      const StreetScene scene = RenderStreetScene(256, 128, ImageSeed(3, split, i));
      ASSERT_EQ(sample->image.size(), cv::Size(256, 128));
      EXPECT_EQ(cv::norm(sample->image, scene.image, cv::NORM_INF), 0) << sample->id;
      absl::StatusOr<cv::Mat> expected =
          labels::ToTrainIds(scene.label_ids, labels::LabelType::kLabelIds, "scene");
      ASSERT_TRUE(expected.ok()) << expected.status();
      EXPECT_EQ(cv::norm(sample->semantic, *expected, cv::NORM_INF), 0) << sample->id;
      for (int y = 0; y < sample->semantic.rows; ++y) {
        for (int x = 0; x < sample->semantic.cols; ++x) {
          const int train_id = sample->semantic.at<uint8_t>(y, x);
          if (train_id == labels::kIgnoreTrainId) {
            ++ignored;
          } else {
            classes.insert(train_id);
          }
        }
      }
    }
    EXPECT_GE(classes.size(), split == Split::kTrain ? 9u : 6u) << split_name;
    EXPECT_GT(ignored, 0) << split_name;
  }
}

// Over many scenes every drawn class appears, the street's layout holds (sky above road), and
// colour alone does not give the classes away.
TEST(SyntheticCityscapesTest, ScenesCoverTheStreetClassesAndAreNotTrivial) {
  namespace id = labels::label_id;
  constexpr int kScenes = 40;
  const std::set<int> drawn = {id::kEgoVehicle,  id::kRectificationBorder,
                               id::kStatic,      id::kRoad,
                               id::kSidewalk,    id::kBuilding,
                               id::kPole,        id::kTrafficLight,
                               id::kTrafficSign, id::kVegetation,
                               id::kTerrain,     id::kSky,
                               id::kPerson,      id::kRider,
                               id::kCar,         id::kTruck,
                               id::kBus,         id::kBicycle};
  std::array<int, 256> scenes_with{};
  std::vector<StreetScene> scenes;
  for (int s = 0; s < kScenes; ++s) {
    scenes.push_back(RenderStreetScene(256, 128, ImageSeed(11, Split::kTrain, s)));
    const StreetScene& scene = scenes.back();
    ASSERT_EQ(scene.image.type(), CV_8UC3);
    ASSERT_EQ(scene.label_ids.type(), CV_8UC1);
    std::array<bool, 256> present{};
    for (int y = 0; y < scene.label_ids.rows; ++y) {
      for (int x = 0; x < scene.label_ids.cols; ++x) {
        const int label = scene.label_ids.at<uint8_t>(y, x);
        present[label] = true;
      }
    }
    for (int label = 0; label < 256; ++label) {
      if (!present[label]) continue;
      EXPECT_TRUE(drawn.count(label)) << "scene " << s << " has label id " << label;
      ++scenes_with[label];
    }
    // Sky touches the top of the picture away from the sides; road is below the middle.
    EXPECT_GT(cv::countNonZero(scene.label_ids.row(0) == id::kSky), 0) << "scene " << s;
    EXPECT_EQ(scene.label_ids.at<uint8_t>(0, 128) == id::kSky ||
                  scene.label_ids.at<uint8_t>(0, 128) == id::kBuilding ||
                  scene.label_ids.at<uint8_t>(0, 128) == id::kVegetation ||
                  scene.label_ids.at<uint8_t>(0, 128) == id::kTruck ||
                  scene.label_ids.at<uint8_t>(0, 128) == id::kBus ||
                  scene.label_ids.at<uint8_t>(0, 128) == id::kPole,
              true)
        << "scene " << s;
  }
  for (int label : drawn) EXPECT_GT(scenes_with[label], 0) << "label id " << label << " never";
  for (int label : {id::kRoad, id::kSidewalk, id::kBuilding, id::kSky}) {
    EXPECT_EQ(scenes_with[label], kScenes) << "label id " << label;
  }
  EXPECT_GE(scenes_with[id::kCar], kScenes * 3 / 4);

  // The best any classifier of single pixel colours can do on these scenes: label each colour
  // (16 levels per channel) with its most frequent label id.
  std::vector<std::array<int, 256>> counts(16 * 16 * 16);
  int64_t total = 0;
  std::array<int64_t, 256> pixels_per_label{};
  for (const StreetScene& scene : scenes) {
    for (int y = 0; y < scene.label_ids.rows; ++y) {
      for (int x = 0; x < scene.label_ids.cols; ++x) {
        const cv::Vec3b pixel = scene.image.at<cv::Vec3b>(y, x);
        const int label = scene.label_ids.at<uint8_t>(y, x);
        ++counts[(pixel[0] / 16) * 256 + (pixel[1] / 16) * 16 + pixel[2] / 16][label];
        ++pixels_per_label[label];
        ++total;
      }
    }
  }
  int64_t correct = 0;
  for (const std::array<int, 256>& bin : counts)
    correct += *std::max_element(bin.begin(), bin.end());
  const double accuracy = double(correct) / total;
  const double majority =
      double(*std::max_element(pixels_per_label.begin(), pixels_per_label.end())) / total;
  RecordProperty("colour_only_accuracy", absl::StrCat(accuracy));
  RecordProperty("majority_share", absl::StrCat(majority));
  // Colour carries much of the signal, but shape and context are needed for the rest.
  EXPECT_LT(majority, 0.4);
  EXPECT_GT(accuracy, majority + 0.2);
  EXPECT_LT(accuracy, 0.9);
}

TEST(SyntheticCityscapesTest, RejectsBadOptionsAndNonEmptyDirectories) {
  SyntheticCityscapesOptions options = SmallDataset(1);
  options.width = 10;
  absl::Status status = WriteSyntheticCityscapes(options, FreshDir("bad_size"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("10x128"));

  options = SmallDataset(1);
  options.num_cities = 5;
  EXPECT_EQ(ValidateOptions(options).code(), absl::StatusCode::kInvalidArgument);
  options = SmallDataset(1);
  options.num_val = -1;
  EXPECT_EQ(ValidateOptions(options).code(), absl::StatusCode::kInvalidArgument);

  const std::string root = FreshDir("twice");
  options = SmallDataset(1);
  options.num_train = 1;
  options.num_val = 1;
  ASSERT_TRUE(WriteSyntheticCityscapes(options, root).ok());
  status = WriteSyntheticCityscapes(options, root);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("leftImg8bit/train' already holds files"));
}

}  // namespace
}  // namespace vision::data::synthetic::cityscapes
