#include "data/datasets/coco/coco_dataset.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "absl/status/status.h"
#include "core/dataset.h"
#include "core/run_length_mask.h"
#include "data/datasets/coco/coco.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/any.pb.h"
#include "gtest/gtest.h"

namespace vision::data::datasets::coco {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Tests run in the runfiles tree of the workspace, so data paths are workspace-relative.
constexpr char kRoot[] = "testdata/coco";

CocoOptions TinyOptions(CocoOptions::EmptyImages empty_images) {
  CocoOptions options;
  options.set_root(kRoot);
  options.set_annotation_file("annotations/instances_tiny.json");
  options.set_image_dir("images");
  options.set_empty_images(empty_images);
  return options;
}

std::unique_ptr<CocoDataset> MakeDataset(const CocoOptions& options) {
  absl::StatusOr<std::unique_ptr<CocoDataset>> dataset = CocoDataset::Create(options);
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  return dataset.ok() ? std::move(dataset).value() : nullptr;
}

std::vector<core::Sample> LoadAll(const CocoDataset& dataset) {
  std::vector<core::Sample> samples;
  for (int64_t i = 0; i < dataset.Size(); ++i) {
    absl::StatusOr<core::Sample> sample = dataset.Load(i);
    EXPECT_TRUE(sample.ok()) << sample.status();
    if (sample.ok()) samples.push_back(std::move(sample).value());
  }
  return samples;
}

std::vector<float> Flatten(const core::Polygon& polygon) {
  std::vector<float> values;
  for (const cv::Point2f& p : polygon) {
    values.push_back(p.x);
    values.push_back(p.y);
  }
  return values;
}

std::vector<float> BoxValues(const cv::Rect2f& box) {
  return {box.x, box.y, box.width, box.height};
}

// Decodes an RLE mask and returns its pixel count and bounding rectangle.
std::pair<int, cv::Rect> MaskExtent(const core::RunLengthMask& rle) {
  absl::StatusOr<cv::Mat> mask = core::DecodeRle(rle);
  EXPECT_TRUE(mask.ok()) << mask.status();
  if (!mask.ok()) return {-1, cv::Rect()};
  std::vector<cv::Point> pixels;
  cv::findNonZero(*mask, pixels);
  return {static_cast<int>(pixels.size()), cv::boundingRect(pixels)};
}

TEST(CocoDatasetTest, ReadsTheTinySampleToKnownValues) {
  std::unique_ptr<CocoDataset> dataset = MakeDataset(TinyOptions(CocoOptions::KEEP));
  ASSERT_NE(dataset, nullptr);
  // Categories 12, 1, 7, 3 in the file, sorted by id: 1, 3, 7, 12 -> labels 0..3.
  EXPECT_THAT(dataset->class_names(), ElementsAre("circle", "rectangle", "triangle", "star"));
  EXPECT_THAT(dataset->category_ids(), ElementsAre(1, 3, 7, 12));
  ASSERT_EQ(dataset->Size(), 4);
  EXPECT_EQ(dataset->Describe(),
            "COCO(annotations=testdata/coco/annotations/instances_tiny.json, "
            "images=testdata/coco/images, empty_images=KEEP, keep_crowd=true): 4 samples "
            "(4 images, 6 annotations, 4 categories)");

  const std::vector<core::Sample> samples = LoadAll(*dataset);
  ASSERT_EQ(samples.size(), 4u);
  // Images sorted by id, not in file order (7, 2, 5, 9).
  EXPECT_EQ(samples[0].id, "000000000002.png (image id 2)");
  EXPECT_EQ(samples[1].id, "000000000005.png (image id 5)");
  EXPECT_EQ(samples[2].id, "000000000007.png (image id 7)");
  EXPECT_EQ(samples[3].id, "000000000009.png (image id 9)");
  EXPECT_EQ(samples[0].image_path, "testdata/coco/images/000000000002.png");
  for (const core::Sample& sample : samples) {
    EXPECT_EQ(sample.image.size(), cv::Size(32, 24));
    EXPECT_EQ(sample.image.type(), CV_8UC3);
    EXPECT_EQ(sample.original_width, 32);
    EXPECT_EQ(sample.original_height, 24);
  }
  // Image 2 is red (RGB 200, 30, 40) with a green rectangle under annotation 101; BGR here.
  EXPECT_EQ(samples[0].image.at<cv::Vec3b>(0, 0), cv::Vec3b(40, 30, 200));
  EXPECT_EQ(samples[0].image.at<cv::Vec3b>(10, 10), cv::Vec3b(0, 255, 0));

  // Image 2: a polygon, a compressed RLE and a two-part polygon running off the image.
  const std::vector<core::ObjectInstance>& image2 = samples[0].objects;
  ASSERT_EQ(image2.size(), 3u);
  EXPECT_EQ(image2[0].annotation_id, 101);
  EXPECT_EQ(image2[0].label, 1);  // category 3, rectangle
  EXPECT_FALSE(image2[0].is_crowd);
  EXPECT_THAT(BoxValues(image2[0].box), ElementsAre(4, 6, 12, 8));
  ASSERT_EQ(image2[0].polygons.size(), 1u);
  EXPECT_THAT(Flatten(image2[0].polygons[0]), ElementsAre(4, 6, 16, 6, 16, 14, 4, 14));
  EXPECT_EQ(image2[0].rle.height, 0);

  EXPECT_EQ(image2[1].annotation_id, 102);
  EXPECT_EQ(image2[1].label, 3);  // category 12, star
  EXPECT_FALSE(image2[1].is_crowd);
  EXPECT_THAT(image2[1].polygons, IsEmpty());
  EXPECT_EQ(image2[1].rle.height, 24);
  EXPECT_EQ(image2[1].rle.width, 32);
  // "S?3e0000e6": a 3x3 block at columns 20-22, rows 3-5.
  EXPECT_THAT(image2[1].rle.counts, ElementsAre(483, 3, 21, 3, 21, 3, 234));
  EXPECT_EQ(MaskExtent(image2[1].rle), std::make_pair(9, cv::Rect(20, 3, 3, 3)));
  EXPECT_THAT(BoxValues(image2[1].box), ElementsAre(20, 3, 3, 3));

  EXPECT_EQ(image2[2].annotation_id, 103);
  EXPECT_EQ(image2[2].label, 0);  // category 1, circle
  // bbox [24, 2, 10, 24] ends at (34, 26) and the square's corners at 34 and 26: clamped.
  EXPECT_THAT(BoxValues(image2[2].box), ElementsAre(24, 2, 8, 22));
  ASSERT_EQ(image2[2].polygons.size(), 2u);
  EXPECT_THAT(Flatten(image2[2].polygons[0]), ElementsAre(26, 18, 32, 18, 32, 24, 26, 24));
  EXPECT_THAT(Flatten(image2[2].polygons[1]), ElementsAre(24, 2, 27, 2, 25.5, 5));

  // Image 5 has no annotations.
  EXPECT_THAT(samples[1].objects, IsEmpty());

  // Image 7: a triangle and a crowd region as uncompressed RLE.
  const std::vector<core::ObjectInstance>& image7 = samples[2].objects;
  ASSERT_EQ(image7.size(), 2u);
  EXPECT_EQ(image7[0].annotation_id, 104);
  EXPECT_EQ(image7[0].label, 2);  // category 7, triangle
  EXPECT_THAT(Flatten(image7[0].polygons[0]), ElementsAre(2, 2, 12, 2, 7, 10));
  EXPECT_EQ(image7[1].annotation_id, 105);
  EXPECT_EQ(image7[1].label, 0);
  EXPECT_TRUE(image7[1].is_crowd);
  EXPECT_EQ(MaskExtent(image7[1].rle), std::make_pair(16, cv::Rect(28, 18, 4, 4)));

  // Image 9: only a crowd region, compressed, whose first run is foreground.
  ASSERT_EQ(samples[3].objects.size(), 1u);
  EXPECT_EQ(samples[3].objects[0].annotation_id, 106);
  EXPECT_TRUE(samples[3].objects[0].is_crowd);
  EXPECT_THAT(samples[3].objects[0].rle.counts, ElementsAre(0, 2, 766));
  EXPECT_EQ(MaskExtent(samples[3].objects[0].rle), std::make_pair(2, cv::Rect(0, 0, 1, 2)));
}

TEST(CocoDatasetTest, SkipDropsImagesWithoutNonCrowdObjects) {
  // The default: image 5 (nothing) and image 9 (only a crowd region) are left out.
  CocoOptions options = TinyOptions(CocoOptions::KEEP);
  options.clear_empty_images();
  EXPECT_EQ(options.empty_images(), CocoOptions::SKIP);
  std::unique_ptr<CocoDataset> dataset = MakeDataset(options);
  ASSERT_NE(dataset, nullptr);
  ASSERT_EQ(dataset->Size(), 2);
  EXPECT_THAT(dataset->Describe(), HasSubstr("2 samples (4 images"));
  const std::vector<core::Sample> samples = LoadAll(*dataset);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].id, "000000000002.png (image id 2)");
  EXPECT_EQ(samples[1].id, "000000000007.png (image id 7)");
  EXPECT_EQ(samples[1].objects.size(), 2u);
}

TEST(CocoDatasetTest, DropsCrowdRegionsWhenAsked) {
  CocoOptions options = TinyOptions(CocoOptions::KEEP);
  options.set_keep_crowd(false);
  std::unique_ptr<CocoDataset> dataset = MakeDataset(options);
  ASSERT_NE(dataset, nullptr);
  EXPECT_THAT(dataset->Describe(), HasSubstr("2 crowd dropped"));
  const std::vector<core::Sample> samples = LoadAll(*dataset);
  ASSERT_EQ(samples.size(), 4u);
  EXPECT_EQ(samples[0].objects.size(), 3u);
  ASSERT_EQ(samples[2].objects.size(), 1u);
  EXPECT_EQ(samples[2].objects[0].annotation_id, 104);
  EXPECT_THAT(samples[3].objects, IsEmpty());
}

TEST(CocoDatasetTest, ImagesWithoutAnnotations) {
  // Like COCO's image_info_test2017.json: images and categories, no "annotations".
  CocoOptions options = TinyOptions(CocoOptions::KEEP);
  options.set_annotation_file("annotations/image_info_tiny.json");
  // Training and evaluation need labels: by default the missing key is an error naming it.
  absl::Status missing = CocoDataset::Create(options).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.message(),
              AllOf(HasSubstr("testdata/coco/annotations/image_info_tiny.json: the key "
                              "\"annotations\" is missing"),
                    HasSubstr("require_annotations: false")));

  options.set_require_annotations(false);
  std::unique_ptr<CocoDataset> dataset = MakeDataset(options);
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(dataset->Size(), 2);

  options.set_empty_images(CocoOptions::SKIP);
  absl::Status status = CocoDataset::Create(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("testdata/coco/annotations/image_info_tiny.json: none of the 2 "
                              "images has a non-crowd annotation"),
                    HasSubstr("set empty_images: KEEP")));
}

// What other exporters write: integers as 7.0, iscrowd as a boolean or absent, a box without
// a mask ("segmentation": [] or no key at all).
TEST(CocoDatasetTest, ReadsVariantsOfOtherExporters) {
  const std::filesystem::path root = std::filesystem::path(::testing::TempDir()) / "variants";
  std::filesystem::create_directories(root);
  std::ofstream(root / "instances.json") << R"({
    "images": [{"id": 2.0, "file_name": "x.png", "height": 24, "width": 32}],
    "annotations": [
      {"id": 1, "image_id": 2, "category_id": 5.0, "bbox": [1, 2, 3, 4], "segmentation": []},
      {"id": 2, "image_id": 2, "category_id": 5, "iscrowd": true, "bbox": [0.5, 0, 31.5, 24]}
    ],
    "categories": [{"id": 5, "name": "thing"}]})";
  CocoOptions options;
  options.set_root(root.string());
  options.set_annotation_file("instances.json");
  std::unique_ptr<CocoDataset> dataset = MakeDataset(options);
  ASSERT_NE(dataset, nullptr);
  ASSERT_EQ(dataset->Size(), 1);
  EXPECT_THAT(dataset->class_names(), ElementsAre("thing"));
  const std::string image_dir = (root / "train2017").string();
  std::filesystem::create_directories(image_dir);
  cv::imwrite(image_dir + "/x.png", cv::Mat(24, 32, CV_8UC3, cv::Scalar(1, 2, 3)));
  absl::StatusOr<core::Sample> sample = dataset->Load(0);
  ASSERT_TRUE(sample.ok()) << sample.status();
  ASSERT_EQ(sample->objects.size(), 2u);
  EXPECT_EQ(sample->objects[0].label, 0);
  EXPECT_FALSE(sample->objects[0].is_crowd);
  EXPECT_THAT(BoxValues(sample->objects[0].box), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(sample->objects[0].polygons, IsEmpty());
  EXPECT_EQ(sample->objects[0].rle.height, 0);
  EXPECT_TRUE(sample->objects[1].is_crowd);
  EXPECT_THAT(BoxValues(sample->objects[1].box), ElementsAre(0.5, 0, 31.5, 24));
}

TEST(CocoDatasetTest, BuildsThroughTheRegistry) {
  google::protobuf::Any any;
  any.PackFrom(TinyOptions(CocoOptions::KEEP));
  absl::StatusOr<std::unique_ptr<core::Dataset>> dataset =
      core::DatasetRegistry::Get().Create("COCO", any);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->Size(), 4);
  absl::StatusOr<core::Sample> sample = (*dataset)->Load(2);
  ASSERT_TRUE(sample.ok()) << sample.status();
  EXPECT_EQ(sample->id, "000000000007.png (image id 7)");
}

TEST(CocoDatasetTest, MetadataLabelsCategoriesInIdOrder) {
  // instances_tiny.json lists the categories 12 star, 1 circle, 7 triangle, 3 rectangle.
  for (CocoOptions::EmptyImages empty_images : {CocoOptions::SKIP, CocoOptions::KEEP}) {
    std::unique_ptr<CocoDataset> dataset = MakeDataset(TinyOptions(empty_images));
    ASSERT_NE(dataset, nullptr);
    const std::optional<core::DatasetMetadata> metadata = dataset->Metadata();
    ASSERT_TRUE(metadata.has_value());
    EXPECT_EQ(metadata->annotation_kind, core::AnnotationKind::kObjectInstances);
    EXPECT_THAT(metadata->class_names, ElementsAre("circle", "rectangle", "triangle", "star"));
    EXPECT_EQ(metadata->num_classes(), 4);
    EXPECT_THAT(metadata->source_ids, ElementsAre(1, 3, 7, 12));
    EXPECT_EQ(metadata->source_id_name, "category id");
    EXPECT_EQ(metadata->ignore_label, std::nullopt);
  }
}

TEST(CocoDatasetTest, RejectsBadOptions) {
  CocoOptions options;
  absl::Status status = CocoDataset::Create(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("root is empty"));

  options.set_root(kRoot);
  status = CocoDataset::Create(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("'testdata/coco/annotations/instances_train2017.json' does not "
                              "exist"),
                    HasSubstr("CocoOptions.annotation_file")));
}

CocoOptions BadOptions(const std::string& json, const std::string& image_dir = "images") {
  CocoOptions options;
  options.set_root(kRoot);
  options.set_annotation_file("bad/" + json);
  options.set_image_dir(image_dir);
  options.set_empty_images(CocoOptions::KEEP);
  return options;
}

// Each broken JSON in testdata/coco/bad fails at Create with the file, the record and the
// problem in the message.
TEST(CocoDatasetTest, BadAnnotationsNameFileRecordAndProblem) {
  struct Case {
    const char* json;
    const char* expected;
  };
  const Case cases[] = {
      {"malformed.json", "malformed.json: malformed JSON at byte 204: "},
      {"unknown_image.json",
       "unknown_image.json: annotation 201: image_id 99 is not in \"images\""},
      {"unknown_category.json",
       "unknown_category.json: annotation 202 (image 2): category_id 2 is not in \"categories\""},
      {"short_polygon.json",
       "short_polygon.json: annotation 203 (image 2): segmentation polygon 1 has 2 point(s); a "
       "polygon needs at least 3 points (6 numbers)"},
      {"odd_polygon.json",
       "odd_polygon.json: annotation 204 (image 2): segmentation polygon 0 has 7 numbers, an odd "
       "count"},
      {"far_outside.json",
       "far_outside.json: annotation 205 (image 2): segmentation polygon 0 point (60, 3) lies far "
       "outside the 32x24 image"},
      {"bbox_far_outside.json",
       "bbox_far_outside.json: annotation 218 (image 2): bbox corner (16, 46) lies far outside "
       "the 32x24 image"},
      {"rle_size_mismatch.json",
       "rle_size_mismatch.json: annotation 206 (image 2): RLE size [10, 10] does not match the "
       "image's [height, width] [24, 32]"},
      {"rle_counts_sum.json",
       "rle_counts_sum.json: annotation 207 (image 2): RLE counts add up to 710 pixels but the "
       "32x24 mask has 768"},
      {"rle_bad_string.json",
       "rle_bad_string.json: annotation 208 (image 2): compressed RLE counts have ' ' at "
       "character 1"},
      {"negative_bbox.json",
       "negative_bbox.json: annotation 209 (image 2): bbox [4,4,-2,3] has a negative width"},
      {"missing_category_id.json",
       "missing_category_id.json: annotation 210 (image 2): missing \"category_id\""},
      {"duplicate_annotation_id.json",
       "duplicate_annotation_id.json: annotation 211: the id is used twice (annotations[0] and "
       "annotations[1])"},
      {"duplicate_image_id.json",
       "duplicate_image_id.json: image id 2 is used twice ('000000000002.png' and "
       "'000000000005.png')"},
  };
  for (const Case& c : cases) {
    absl::Status status = CocoDataset::Create(BadOptions(c.json)).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(status.message(), HasSubstr(std::string("testdata/coco/bad/") + c.expected))
        << status;
  }
}

TEST(CocoDatasetTest, MissingImage) {
  std::unique_ptr<CocoDataset> dataset = MakeDataset(BadOptions("missing_image.json"));
  ASSERT_NE(dataset, nullptr);
  ASSERT_EQ(dataset->Size(), 2);
  EXPECT_TRUE(dataset->Load(0).ok());
  absl::Status status = dataset->Load(1).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(),
              HasSubstr("testdata/coco/images/000000000004.png: missing image (image 4 of "
                        "testdata/coco/bad/missing_image.json)"));
  EXPECT_EQ(dataset->Load(2).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(CocoDatasetTest, UndecodableImage) {
  std::unique_ptr<CocoDataset> dataset = MakeDataset(BadOptions("undecodable_image.json", "bad"));
  ASSERT_NE(dataset, nullptr);
  absl::Status status = dataset->Load(0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("testdata/coco/bad/not_an_image.png: the image file is not a JPEG, "
                              "PNG, BMP, TIFF or WebP file"),
                    HasSubstr("(image 3 of testdata/coco/bad/undecodable_image.json")));
}

TEST(CocoDatasetTest, ImageSizeIsTheJsonsWithoutDecoding) {
  // The JSON says 40x30 where the file is 32x24: ImageSize answers from the JSON, so it did not
  // decode the image (Load refuses it, below).
  std::unique_ptr<CocoDataset> dataset = MakeDataset(BadOptions("wrong_image_size.json"));
  ASSERT_NE(dataset, nullptr);
  absl::StatusOr<cv::Size> size = dataset->ImageSize(0);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, cv::Size(40, 30));
  EXPECT_EQ(dataset->ImageSize(dataset->Size()).status().code(), absl::StatusCode::kOutOfRange);
  std::unique_ptr<CocoDataset> tiny = MakeDataset(TinyOptions(CocoOptions::KEEP));
  ASSERT_NE(tiny, nullptr);
  for (int64_t i = 0; i < tiny->Size(); ++i) {
    absl::StatusOr<core::Sample> sample = tiny->Load(i);
    ASSERT_TRUE(sample.ok()) << sample.status();
    EXPECT_EQ(*tiny->ImageSize(i), sample->image.size()) << i;
  }
}

TEST(CocoDatasetTest, ImageSizeDiffersFromTheJson) {
  std::unique_ptr<CocoDataset> dataset = MakeDataset(BadOptions("wrong_image_size.json"));
  ASSERT_NE(dataset, nullptr);
  absl::Status status = dataset->Load(0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("testdata/coco/images/000000000002.png: the image is 32x24 but image 2 "
                        "of testdata/coco/bad/wrong_image_size.json says 40x30"));
}

}  // namespace
}  // namespace vision::data::datasets::coco
