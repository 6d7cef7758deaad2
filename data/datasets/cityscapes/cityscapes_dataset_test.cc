#include "data/datasets/cityscapes/cityscapes_dataset.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/dataset.h"
#include "data/datasets/cityscapes/cityscapes.pb.h"
#include "data/datasets/cityscapes/cityscapes_labels.h"
#include "gmock/gmock.h"
#include "google/protobuf/any.pb.h"
#include "gtest/gtest.h"

namespace vision::data::datasets::cityscapes {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// Tests run in the runfiles tree of the workspace, so data paths are workspace-relative.
constexpr char kRoot[] = "testdata/cityscapes";
constexpr char kBadRoot[] = "testdata/cityscapes/bad";
constexpr int kWidth = 16;
constexpr int kHeight = 8;
constexpr uint8_t kIgnore = 255;

// The train id of every label id 0..33, written out from labels.py independently of the table under
// test.
constexpr uint8_t kExpectedTrainIds[34] = {
    kIgnore, kIgnore, kIgnore, kIgnore, kIgnore, kIgnore, kIgnore,  // 0-6: void, ground
    0,       1,                                                     // 7 road, 8 sidewalk
    kIgnore, kIgnore,                                               // 9 parking, 10 rail track
    2,       3,       4,                                            // 11 building, wall, fence
    kIgnore, kIgnore, kIgnore,                                      // 14 guard rail, bridge, tunnel
    5,       kIgnore,                                               // 17 pole, 18 polegroup
    6,       7,       8,       9,       10,                         // 19 light .. 23 sky
    11,      12,      13,      14,      15,                         // 24 person .. 28 bus
    kIgnore, kIgnore,                                               // 29 caravan, 30 trailer
    16,      17,      18,                                           // 31 train, motorcycle, bicycle
};

std::unique_ptr<CityscapesDataset> MakeDataset(const CityscapesOptions& options) {
  absl::StatusOr<std::unique_ptr<CityscapesDataset>> dataset = CityscapesDataset::Create(options);
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  return dataset.ok() ? std::move(dataset).value() : nullptr;
}

CityscapesOptions Options(const std::string& root, const std::string& split = "train") {
  CityscapesOptions options;
  options.set_root(root);
  options.set_split(split);
  return options;
}

// A kWidth x kHeight map from its values in row-major order.
cv::Mat Semantic(const std::vector<uint8_t>& values) {
  return cv::Mat(kHeight, kWidth, CV_8U, const_cast<uint8_t*>(values.data())).clone();
}

// Pixel (x, y) of the sample image with index `k` is (B, G, R) = (16x, 32y, 100 + k).
void ExpectSampleImage(const cv::Mat& image, int k, const std::string& id) {
  ASSERT_EQ(image.type(), CV_8UC3) << id;
  ASSERT_EQ(image.size(), cv::Size(kWidth, kHeight)) << id;
  for (int y = 0; y < kHeight; ++y) {
    for (int x = 0; x < kWidth; ++x) {
      EXPECT_EQ(image.at<cv::Vec3b>(y, x), cv::Vec3b(16 * x, 32 * y, 100 + k))
          << id << " at (" << x << ", " << y << ")";
    }
  }
}

void ExpectSameMat(const cv::Mat& actual, const cv::Mat& expected, const std::string& id) {
  ASSERT_EQ(actual.type(), CV_8UC1) << id;
  ASSERT_EQ(actual.size(), expected.size()) << id;
  for (int y = 0; y < expected.rows; ++y) {
    for (int x = 0; x < expected.cols; ++x) {
      EXPECT_EQ(static_cast<int>(actual.at<uint8_t>(y, x)),
                static_cast<int>(expected.at<uint8_t>(y, x)))
          << id << " at (" << x << ", " << y << ")";
    }
  }
}

TEST(CityscapesLabelsTest, TableMatchesLabelsPy) {
  for (int id = 0; id <= kMaxLabelId; ++id) {
    EXPECT_EQ(TrainIdOfLabelId(id), kExpectedTrainIds[id]) << "label id " << id;
    EXPECT_EQ(LabelIdToTrainIdLut().at<uint8_t>(0, id), kExpectedTrainIds[id]) << id;
  }
  for (int id : {-1, 34, 100, 254, 255}) EXPECT_EQ(TrainIdOfLabelId(id), -1) << id;

  absl::Span<const CityscapesLabel> labels = CityscapesLabels();
  ASSERT_EQ(labels.size(), 35u);
  for (int id = 0; id <= kMaxLabelId; ++id) EXPECT_EQ(labels[id].id, id);
  EXPECT_STREQ(labels[label_id::kRoad].name, "road");
  EXPECT_EQ(labels[label_id::kRoad].rgb, cv::Vec3b(128, 64, 128));
  EXPECT_STREQ(labels[label_id::kPoleGroup].name, "polegroup");
  EXPECT_STREQ(labels[label_id::kTrafficSign].name, "traffic sign");
  EXPECT_EQ(labels[label_id::kTrafficSign].rgb, cv::Vec3b(220, 220, 0));
  EXPECT_STREQ(labels[label_id::kCaravan].name, "caravan");
  EXPECT_STREQ(labels[label_id::kBicycle].name, "bicycle");
  EXPECT_EQ(labels[label_id::kBicycle].rgb, cv::Vec3b(119, 11, 32));
  EXPECT_STREQ(labels[label_id::kUnlabeled].category, "void");
  EXPECT_STREQ(labels[label_id::kParking].category, "flat");
  EXPECT_STREQ(labels[label_id::kPoleGroup].category, "object");
  EXPECT_STREQ(labels[label_id::kCaravan].category, "vehicle");
  EXPECT_STREQ(labels[34].name, "license plate");
  EXPECT_EQ(labels[34].id, -1);
  EXPECT_EQ(labels[34].train_id, kIgnore);

  // Every trained label's name is the class name of its train id, and each train id has one.
  std::vector<int> labels_per_train_id(kNumTrainClasses, 0);
  for (const CityscapesLabel& label : labels) {
    if (label.train_id == kIgnore) continue;
    ASSERT_LT(label.train_id, kNumTrainClasses);
    ++labels_per_train_id[label.train_id];
    EXPECT_STREQ(TrainClassNames()[label.train_id], label.name);
  }
  EXPECT_THAT(labels_per_train_id, ::testing::Each(1));
  EXPECT_STREQ(TrainClassNames()[0], "road");
  EXPECT_STREQ(TrainClassNames()[6], "traffic light");
  EXPECT_STREQ(TrainClassNames()[10], "sky");
  EXPECT_STREQ(TrainClassNames()[18], "bicycle");
}

TEST(ToTrainIdsTest, MapsLabelIdsAndTrainIds) {
  cv::Mat ids(1, 34, CV_8U);
  for (int id = 0; id < 34; ++id) ids.at<uint8_t>(0, id) = id;
  absl::StatusOr<cv::Mat> train_ids = ToTrainIds(ids, LabelType::kLabelIds, "m.png");
  ASSERT_TRUE(train_ids.ok()) << train_ids.status();
  for (int id = 0; id < 34; ++id) EXPECT_EQ(train_ids->at<uint8_t>(0, id), kExpectedTrainIds[id]);

  cv::Mat already = (cv::Mat_<uint8_t>(1, 3) << 0, 18, 255);
  train_ids = ToTrainIds(already, LabelType::kLabelTrainIds, "t.png");
  ASSERT_TRUE(train_ids.ok()) << train_ids.status();
  EXPECT_EQ(cv::countNonZero(*train_ids != already), 0);

  absl::Status status =
      ToTrainIds((cv::Mat_<uint8_t>(2, 2) << 0, 18, 19, 255), LabelType::kLabelTrainIds, "t.png")
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("t.png: unknown train id 19 at (x=0, y=1)"));

  status =
      ToTrainIds(cv::Mat(2, 2, CV_16UC1, cv::Scalar(7)), LabelType::kLabelIds, "w.png").status();
  EXPECT_THAT(status.message(), HasSubstr("w.png: the label map has 1 channel of 16-bit"));
}

TEST(CityscapesDatasetTest, LabelFileName) {
  EXPECT_EQ(CityscapesDataset::LabelFileName("aachen_000000_000019_leftImg8bit.png",
                                             LabelType::kLabelIds),
            "aachen_000000_000019_gtFine_labelIds.png");
  EXPECT_EQ(CityscapesDataset::LabelFileName("ulm_000001_000002_leftImg8bit.png",
                                             LabelType::kLabelTrainIds),
            "ulm_000001_000002_gtFine_labelTrainIds.png");
}

TEST(CityscapesDatasetTest, ReadsTrainSplitByCityThenFileName) {
  std::unique_ptr<CityscapesDataset> dataset = MakeDataset(Options(kRoot));
  ASSERT_NE(dataset, nullptr);
  ASSERT_EQ(dataset->Size(), 3);
  EXPECT_THAT(dataset->Describe(), AllOf(HasSubstr("split=train"), HasSubstr("label_type=labelIds"),
                                         HasSubstr("3 samples in 2 cities")));

  std::vector<core::Sample> samples;
  for (int64_t i = 0; i < dataset->Size(); ++i) {
    absl::StatusOr<core::Sample> sample = dataset->Load(i);
    ASSERT_TRUE(sample.ok()) << sample.status();
    EXPECT_EQ(sample->original_width, kWidth);
    EXPECT_EQ(sample->original_height, kHeight);
    samples.push_back(std::move(sample).value());
  }
  EXPECT_EQ(samples[0].id, "aachen_000000_000019_leftImg8bit");
  EXPECT_EQ(samples[1].id, "bochum_000000_000100_leftImg8bit");
  EXPECT_EQ(samples[2].id, "bochum_000000_000313_leftImg8bit");
  EXPECT_EQ(samples[2].image_path,
            "testdata/cityscapes/leftImg8bit/train/bochum/"
            "bochum_000000_000313_leftImg8bit.png");
  ExpectSampleImage(samples[0].image, 0, samples[0].id);
  ExpectSampleImage(samples[1].image, 50, samples[1].id);
  ExpectSampleImage(samples[2].image, 100, samples[2].id);

  // aachen: a street (README.md): sky, building | vegetation, road with a car, sidewalk, ego
  // vehicle.
  const uint8_t S = 10, B = 2, V = 8, R = 0, C = 13, W = 1, I = kIgnore;
  // clang-format off
  const cv::Mat street = Semantic({
      S, S, S, S, S, S, S, S, S, S, S, S, S, S, S, S,
      S, S, S, S, S, S, S, S, S, S, S, S, S, S, S, S,
      B, B, B, B, B, B, B, B, V, V, V, V, V, V, V, V,
      B, B, B, B, B, B, B, B, V, V, V, V, V, V, V, V,
      R, R, R, R, R, R, C, C, C, C, R, R, R, R, R, R,
      R, R, R, R, R, R, C, C, C, C, R, R, R, R, R, R,
      W, W, W, W, W, W, W, W, W, W, W, W, W, W, W, W,
      I, I, I, I, I, I, I, I, I, I, I, I, I, I, I, I,
  });
  // clang-format on
  ExpectSameMat(samples[0].semantic, street, samples[0].id);

  // bochum 100: label id (16y + x) mod 34, so every label id appears.
  cv::Mat all_ids(kHeight, kWidth, CV_8U);
  for (int y = 0; y < kHeight; ++y) {
    for (int x = 0; x < kWidth; ++x)
      all_ids.at<uint8_t>(y, x) = kExpectedTrainIds[(16 * y + x) % 34];
  }
  ExpectSameMat(samples[1].semantic, all_ids, samples[1].id);

  // bochum 313: bus (label 28) above train (label 31).
  cv::Mat bus_train(kHeight, kWidth, CV_8U, cv::Scalar(16));
  bus_train.rowRange(0, 4).setTo(15);
  ExpectSameMat(samples[2].semantic, bus_train, samples[2].id);
}

TEST(CityscapesDatasetTest, ReadsValSplitAsLabelIdsAndAsTrainIds) {
  cv::Mat expected(kHeight, kWidth, CV_8U, cv::Scalar(kIgnore));
  expected.colRange(0, 8).setTo(18);  // bicycle (33) | static (4)
  for (const char* label_type : {"labelIds", "labelTrainIds"}) {
    CityscapesOptions options = Options(kRoot, "val");
    options.set_label_type(label_type);
    std::unique_ptr<CityscapesDataset> dataset = MakeDataset(options);
    ASSERT_NE(dataset, nullptr);
    ASSERT_EQ(dataset->Size(), 1);
    absl::StatusOr<core::Sample> sample = dataset->Load(0);
    ASSERT_TRUE(sample.ok()) << sample.status();
    EXPECT_EQ(sample->id, "frankfurt_000000_000294_leftImg8bit");
    ExpectSampleImage(sample->image, 150, sample->id);
    ExpectSameMat(sample->semantic, expected, label_type);
  }
}

TEST(CityscapesDatasetTest, MetadataIsTheTrainIdsWithTheirLabelIds) {
  for (const char* label_type : {"labelIds", "labelTrainIds"}) {
    SCOPED_TRACE(label_type);
    CityscapesOptions options = Options(kRoot, "val");
    options.set_label_type(label_type);
    std::unique_ptr<CityscapesDataset> dataset = MakeDataset(options);
    ASSERT_NE(dataset, nullptr);
    const std::optional<core::DatasetMetadata> metadata = dataset->Metadata();
    ASSERT_TRUE(metadata.has_value());
    EXPECT_EQ(metadata->annotation_kind, core::AnnotationKind::kLabelMaps);
    EXPECT_THAT(
        metadata->class_names,
        ElementsAre("road", "sidewalk", "building", "wall", "fence", "pole", "traffic light",
                    "traffic sign", "vegetation", "terrain", "sky", "person", "rider", "car",
                    "truck", "bus", "train", "motorcycle", "bicycle"));
    EXPECT_EQ(metadata->num_classes(), 19);
    // The label ids of train ids 0..18, from labels.py.
    EXPECT_THAT(metadata->source_ids, ElementsAre(7, 8, 11, 12, 13, 17, 19, 20, 21, 22, 23, 24, 25,
                                                  26, 27, 28, 31, 32, 33));
    EXPECT_EQ(metadata->source_id_name, "label id");
    EXPECT_EQ(metadata->ignore_label, 255);
    // labels.py's categories and colours of the same labels.
    EXPECT_THAT(
        metadata->class_categories,
        ElementsAre("flat", "flat", "construction", "construction", "construction", "object",
                    "object", "object", "nature", "nature", "sky", "human", "human", "vehicle",
                    "vehicle", "vehicle", "vehicle", "vehicle", "vehicle"));
    ASSERT_EQ(metadata->class_colours.size(), 19u);
    EXPECT_THAT(metadata->class_colours[0], ElementsAre(128, 64, 128));
    EXPECT_THAT(metadata->class_colours[18], ElementsAre(119, 11, 32));
  }
}

TEST(CityscapesDatasetTest, DirectoryOverrides) {
  CityscapesOptions options = Options(kRoot, "test");
  options.set_image_dir("leftImg8bit/val");
  // Relative to root, or absolute.
  options.set_label_dir(std::filesystem::absolute("testdata/cityscapes/gtFine/val").string());
  std::unique_ptr<CityscapesDataset> dataset = MakeDataset(options);
  ASSERT_NE(dataset, nullptr);
  ASSERT_EQ(dataset->Size(), 1);
  absl::StatusOr<core::Sample> sample = dataset->Load(0);
  ASSERT_TRUE(sample.ok()) << sample.status();
  EXPECT_EQ(sample->image_path,
            "testdata/cityscapes/leftImg8bit/val/frankfurt/"
            "frankfurt_000000_000294_leftImg8bit.png");
  EXPECT_EQ(cv::countNonZero(sample->semantic == 18), kWidth * kHeight / 2);
}

TEST(CityscapesDatasetTest, BuildsThroughTheRegistry) {
  google::protobuf::Any any;
  any.PackFrom(Options(kRoot));
  absl::StatusOr<std::unique_ptr<core::Dataset>> dataset =
      core::DatasetRegistry::Get().Create("Cityscapes", any);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->Size(), 3);
}

TEST(CityscapesDatasetTest, RejectsBadOptions) {
  absl::Status status = CityscapesDataset::Create(CityscapesOptions()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("root is empty"));

  status = CityscapesDataset::Create(Options(kRoot, "training")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("unknown split 'training'"));

  CityscapesOptions options = Options(kRoot);
  options.set_label_type("color");
  status = CityscapesDataset::Create(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("unknown label type 'color'"));
}

TEST(CityscapesDatasetTest, MissingDirectoriesNameTheExpectedPath) {
  absl::Status status = CityscapesDataset::Create(Options(kBadRoot, "val")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("image directory 'testdata/cityscapes/bad/leftImg8bit/val' does "
                              "not exist"),
                    HasSubstr("set image_dir")));

  CityscapesOptions options = Options(kRoot);
  options.set_label_dir("gtCoarse/train");
  status = CityscapesDataset::Create(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("label directory 'testdata/cityscapes/gtCoarse/train' does not "
                              "exist"),
                    HasSubstr("from CityscapesOptions.label_dir 'gtCoarse/train'")));

  // The labels of city 'ulm' lie under 'Ulm'.
  status = CityscapesDataset::Create(Options(std::string(kBadRoot) + "/no_label_city")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("label directory "
                              "'testdata/cityscapes/bad/no_label_city/gtFine/train/ulm' "
                              "does not "
                              "exist"),
                    HasSubstr("testdata/cityscapes/bad/no_label_city/leftImg8bit/train/ulm")));

  // A split directory without city directories of images is a misconfiguration.
  options = Options(kRoot);
  options.set_image_dir("gtFine/val/frankfurt");
  status = CityscapesDataset::Create(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("no *_leftImg8bit.png images"));
}

TEST(CityscapesDatasetTest, UnpairedFilesAreAnErrorNamingThem) {
  // bad/ has an image without its label map and a label map without its image.
  const absl::Status status = CityscapesDataset::Create(Options(kBadRoot)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      status.message(),
      AllOf(HasSubstr("1 image in 'testdata/cityscapes/bad/leftImg8bit/train' has no label map "
                      "(*_gtFine_labelIds.png) in 'testdata/cityscapes/bad/gtFine/train' "
                      "(missing_label/missing_label_000000_000000_leftImg8bit.png)"),
            HasSubstr("1 label map (*_gtFine_labelIds.png) file in "
                      "'testdata/cityscapes/bad/gtFine/train' has no image in "
                      "'testdata/cityscapes/bad/leftImg8bit/train' "
                      "(wrong_size/wrong_size_000000_000001_gtFine_labelIds.png)"),
            HasSubstr("CityscapesOptions.allow_unpaired_files: true")));
}

TEST(CityscapesDatasetTest, OtherFilesDoNotTakePartInPairingAndAreCounted) {
  // other_files/: a README beside the cities, Thumbs.db beside the image, .DS_Store and
  // notes.txt beside the label maps; the instanceIds and polygons files are Cityscapes' own.
  std::unique_ptr<CityscapesDataset> dataset =
      MakeDataset(Options("testdata/cityscapes/other_files"));
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(dataset->Size(), 1);
  EXPECT_THAT(dataset->Describe(),
              AllOf(HasSubstr("1 samples in 1 cities; 4 other files ignored ("),
                    HasSubstr("README"), HasSubstr("aachen/Thumbs.db"),
                    HasSubstr("aachen/.DS_Store"), HasSubstr("aachen/notes.txt")));
  EXPECT_THAT(dataset->Describe(), Not(HasSubstr("polygons")));
}

CityscapesOptions AllowUnpaired(CityscapesOptions options) {
  options.set_allow_unpaired_files(true);
  return options;
}

TEST(CityscapesDatasetTest, BadSamplesNameTheFileAndTheProblem) {
  std::unique_ptr<CityscapesDataset> dataset = MakeDataset(AllowUnpaired(Options(kBadRoot)));
  ASSERT_NE(dataset, nullptr);
  ASSERT_EQ(dataset->Size(), 5);
  EXPECT_THAT(dataset->Describe(),
              HasSubstr("5 samples in 5 cities; skipped 1 images without label map "
                        "(*_gtFine_labelIds.png) and 1 label map (*_gtFine_labelIds.png) files "
                        "without image"));
  const std::string images = "testdata/cityscapes/bad/leftImg8bit/train/";
  const std::string labels = "testdata/cityscapes/bad/gtFine/train/";
  struct Case {
    absl::StatusCode code;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {absl::StatusCode::kInvalidArgument,
       labels + "three_channel/three_channel_000000_000000_gtFine_labelIds.png: the "
                "label map "
                "has 3 channels of 8-bit; expected a single-channel 8-bit PNG"},
      {absl::StatusCode::kDataLoss,
       images + "undecodable_image/"
                "undecodable_image_000000_000000_leftImg8bit.png: the image file "
                "is not a JPEG, PNG, BMP, TIFF or WebP file"},
      {absl::StatusCode::kDataLoss,
       labels + "undecodable_label/"
                "undecodable_label_000000_000000_gtFine_labelIds.png: the label "
                "map file is not a JPEG, PNG, BMP, TIFF or WebP file"},
      {absl::StatusCode::kInvalidArgument,
       labels + "unknown_label_id/"
                "unknown_label_id_000000_000000_gtFine_labelIds.png: unknown "
                "label id 34 at (x=5, y=3)"},
      {absl::StatusCode::kInvalidArgument,
       labels +
           "wrong_size/wrong_size_000000_000000_gtFine_labelIds.png: the label "
           "map is 8x4 "
           "but its image " +
           images + "wrong_size/wrong_size_000000_000000_leftImg8bit.png is 16x8"},
  };
  for (int64_t i = 0; i < dataset->Size(); ++i) {
    absl::Status status = dataset->Load(i).status();
    EXPECT_EQ(status.code(), cases[i].code) << status;
    EXPECT_THAT(status.message(), HasSubstr(cases[i].expected));
  }
  EXPECT_EQ(dataset->Load(5).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(dataset->Load(-1).status().code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace vision::data::datasets::cityscapes
