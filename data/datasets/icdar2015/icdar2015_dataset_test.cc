#include "data/datasets/icdar2015/icdar2015_dataset.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/dataset.h"
#include "core/polygon.h"
#include "data/datasets/icdar2015/icdar2015.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/any.pb.h"
#include "gtest/gtest.h"

namespace vision::data::datasets::icdar2015 {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Tests run in the runfiles tree of the workspace, so data paths are workspace-relative.
constexpr char kRoot[] = "testdata/icdar2015";
constexpr char kTrainGt[] = "testdata/icdar2015/ch4_training_localization_transcription_gt";

std::vector<float> Flatten(const core::Polygon& polygon) {
  std::vector<float> values;
  for (const cv::Point2f& p : polygon) {
    values.push_back(p.x);
    values.push_back(p.y);
  }
  return values;
}

std::unique_ptr<ICDAR2015Dataset> MakeDataset(const ICDAR2015Options& options) {
  absl::StatusOr<std::unique_ptr<ICDAR2015Dataset>> dataset = ICDAR2015Dataset::Create(options);
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  return dataset.ok() ? std::move(dataset).value() : nullptr;
}

ICDAR2015Options BadOptions(const std::string& which) {
  ICDAR2015Options options;
  options.set_root(std::string(kRoot) + "/bad/" + which);
  options.set_image_dir("images");
  options.set_gt_dir("gt");
  return options;
}

TEST(ParseIcdarGroundTruthTest, ParsesCoordinatesTranscriptionAndIgnore) {
  absl::StatusOr<std::vector<core::TextInstance>> texts =
      ParseIcdarGroundTruth("1,2,7,2,7,8,1,8,Hi\n10,20,30,20,30,40,10,40,###\n", "a.txt");
  ASSERT_TRUE(texts.ok()) << texts.status();
  ASSERT_EQ(texts->size(), 2u);
  EXPECT_THAT(Flatten((*texts)[0].polygon), ElementsAre(1, 2, 7, 2, 7, 8, 1, 8));
  EXPECT_EQ((*texts)[0].transcription, "Hi");
  EXPECT_FALSE((*texts)[0].ignore);
  EXPECT_EQ((*texts)[1].transcription, "###");
  EXPECT_TRUE((*texts)[1].ignore);
}

TEST(ParseIcdarGroundTruthTest, TranscriptionKeepsCommasAndOnlyExactHashesIgnore) {
  absl::StatusOr<std::vector<core::TextInstance>> texts = ParseIcdarGroundTruth(
      "0,0,9,0,9,9,0,9,1,000\n0,0,9,0,9,9,0,9,\n0,0,9,0,9,9,0,9,####\n", "a.txt");
  ASSERT_TRUE(texts.ok()) << texts.status();
  ASSERT_EQ(texts->size(), 3u);
  EXPECT_EQ((*texts)[0].transcription, "1,000");
  EXPECT_EQ((*texts)[1].transcription, "");
  EXPECT_EQ((*texts)[2].transcription, "####");
  EXPECT_FALSE((*texts)[2].ignore);
}

TEST(ParseIcdarGroundTruthTest, StripsByteOrderMarkAndCarriageReturns) {
  absl::StatusOr<std::vector<core::TextInstance>> texts = ParseIcdarGroundTruth(
      "\xEF\xBB\xBF"
      "1,1,5,1,5,5,1,5,caf\xC3\xA9\r\n\r\n 2 , 2,6,2,6,6,2,6,b\r\n",
      "a.txt");
  ASSERT_TRUE(texts.ok()) << texts.status();
  ASSERT_EQ(texts->size(), 2u);
  EXPECT_EQ((*texts)[0].polygon[0], cv::Point2f(1, 1));
  EXPECT_EQ((*texts)[0].transcription, "caf\xC3\xA9");
  EXPECT_EQ((*texts)[1].polygon[0], cv::Point2f(2, 2));
  EXPECT_EQ((*texts)[1].transcription, "b");
}

TEST(ParseIcdarGroundTruthTest, EmptyFileHasNoTexts) {
  absl::StatusOr<std::vector<core::TextInstance>> texts =
      ParseIcdarGroundTruth("\xEF\xBB\xBF\r\n", "a.txt");
  ASSERT_TRUE(texts.ok()) << texts.status();
  EXPECT_TRUE(texts->empty());
}

TEST(ParseIcdarGroundTruthTest, ErrorsNameFileAndLine) {
  struct Case {
    const char* text;
    const char* expected;
  };
  const Case cases[] = {
      {"1,1,5,1,5,5,1,5,ok\n1,1,5,1,5,5,word\n", "g.txt:2: expected 8 coordinates"},
      {"1,1,5,1,5,5,1,x5,word\n", "g.txt:1: coordinate y4 is 'x5', not a number"},
      {"1,1,5,1,nan,5,1,5,word\n", "g.txt:1: coordinate x3 is 'nan'"},
      {"\n\n1,1,5,1,5,5,,5,empty\n", "g.txt:3: coordinate x4 is '', not a number"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<core::TextInstance>> texts = ParseIcdarGroundTruth(c.text, "g.txt");
    ASSERT_FALSE(texts.ok()) << c.text;
    EXPECT_EQ(texts.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(texts.status().message(), HasSubstr(c.expected));
  }
}

TEST(ParseIcdarGroundTruthTest, CoincidentPointsAreDontCareNotAnError) {
  // MhLiao/DB loads such lines and marks them don't-care (area < 1); so do we, counted.
  for (const char* line : {"1,1,1,1,1,1,1,1,dot\n", "1,1,5,1,5,1,1,1,two points\n"}) {
    GroundTruthRepairs repairs;
    absl::StatusOr<std::vector<core::TextInstance>> texts =
        ParseIcdarGroundTruth(line, "g.txt", cv::Size(100, 50), &repairs);
    ASSERT_TRUE(texts.ok()) << "expected '" << line << "' to load as don't-care, got "
                            << texts.status();
    ASSERT_EQ(texts->size(), 1u);
    EXPECT_TRUE((*texts)[0].ignore) << line;
    EXPECT_EQ(repairs.degenerate_ignored, 1) << line;
    EXPECT_EQ(repairs.first, "g.txt:1") << line;
  }
}

TEST(ParseIcdarGroundTruthTest, ClampsSlightlyOutsideAndRejectsFarOutside) {
  const cv::Size size(100, 50);
  absl::StatusOr<std::vector<core::TextInstance>> texts =
      ParseIcdarGroundTruth("-10,-5,120,-5,120,60,-10,60,edge\n", "g.txt", size);
  ASSERT_TRUE(texts.ok()) << texts.status();
  EXPECT_THAT(Flatten((*texts)[0].polygon), ElementsAre(0, 0, 99, 0, 99, 49, 0, 49));
  // Without an image size nothing is clamped.
  texts = ParseIcdarGroundTruth("-10,-5,120,-5,120,60,-10,60,edge\n", "g.txt");
  ASSERT_TRUE(texts.ok()) << texts.status();
  EXPECT_THAT(Flatten((*texts)[0].polygon), ElementsAre(-10, -5, 120, -5, 120, 60, -10, 60));

  EXPECT_FALSE((*texts)[0].ignore);
  // Wholly beyond the right border: clamped to a line, so it cannot be matched or learned.
  texts = ParseIcdarGroundTruth("110,5,120,5,120,9,110,9,gone\n", "g.txt", size);
  ASSERT_TRUE(texts.ok()) << texts.status();
  EXPECT_THAT(Flatten((*texts)[0].polygon), ElementsAre(99, 5, 99, 5, 99, 9, 99, 9));
  EXPECT_EQ((*texts)[0].transcription, "gone");
  EXPECT_TRUE((*texts)[0].ignore);

  // 50% of the width beyond the right border is 99 + 50 = 149.
  EXPECT_TRUE(ParseIcdarGroundTruth("1,1,149,1,149,9,1,9,w\n", "g.txt", size).ok());
  for (const char* far : {"1,1,150,1,150,9,1,9,w\n", "1,-26,9,-26,9,9,1,9,w\n"}) {
    absl::StatusOr<std::vector<core::TextInstance>> bad =
        ParseIcdarGroundTruth(std::string("0,0,5,0,5,5,0,5,ok\n") + far, "g.txt", size);
    ASSERT_FALSE(bad.ok()) << far;
    EXPECT_THAT(bad.status().message(),
                AllOf(HasSubstr("g.txt:2: point"), HasSubstr("far outside the 100x50 image")));
  }
}

TEST(NaturalLessTest, OrdersNumbersByValue) {
  std::vector<std::string> names = {"img_10.jpg", "img_2.jpg", "img_1.jpg", "img_100.jpg",
                                    "img_02.jpg", "a.jpg",     "img_9.jpg"};
  std::sort(names.begin(), names.end(),
            [](const std::string& a, const std::string& b) { return NaturalLess(a, b); });
  EXPECT_THAT(names, ElementsAre("a.jpg", "img_1.jpg", "img_02.jpg", "img_2.jpg", "img_9.jpg",
                                 "img_10.jpg", "img_100.jpg"));
}

TEST(ICDAR2015DatasetTest, GroundTruthFileName) {
  EXPECT_EQ(ICDAR2015Dataset::GroundTruthFileName("img_7.jpg"), "gt_img_7.txt");
}

TEST(ICDAR2015DatasetTest, ReadsTrainSplitInNaturalOrder) {
  ICDAR2015Options options;
  options.set_root(kRoot);
  std::unique_ptr<ICDAR2015Dataset> dataset = MakeDataset(options);
  ASSERT_NE(dataset, nullptr);
  ASSERT_EQ(dataset->Size(), 3);
  EXPECT_THAT(dataset->Describe(), AllOf(HasSubstr("split=train"), HasSubstr("3 samples")));

  std::vector<core::Sample> samples;
  for (int64_t i = 0; i < dataset->Size(); ++i) {
    absl::StatusOr<core::Sample> sample = dataset->Load(i);
    ASSERT_TRUE(sample.ok()) << sample.status();
    EXPECT_EQ(sample->image.size(), cv::Size(64, 48));
    EXPECT_EQ(sample->image.type(), CV_8UC3);
    EXPECT_EQ(sample->original_width, 64);
    EXPECT_EQ(sample->original_height, 48);
    samples.push_back(std::move(sample).value());
  }
  EXPECT_EQ(samples[0].id, "img_1.jpg");
  EXPECT_EQ(samples[1].id, "img_2.jpg");
  EXPECT_EQ(samples[2].id, "img_10.jpg");
  EXPECT_EQ(samples[2].image_path, std::string(kRoot) + "/ch4_training_images/img_10.jpg");

  // gt_img_1.txt: byte-order mark, CRLF.
  ASSERT_EQ(samples[0].texts.size(), 2u);
  EXPECT_THAT(Flatten(samples[0].texts[0].polygon), ElementsAre(4, 10, 40, 10, 40, 34, 4, 34));
  EXPECT_EQ(samples[0].texts[0].transcription, "1ab");
  EXPECT_FALSE(samples[0].texts[0].ignore);
  EXPECT_THAT(Flatten(samples[0].texts[1].polygon), ElementsAre(44, 5, 60, 5, 60, 15, 44, 15));
  EXPECT_TRUE(samples[0].texts[1].ignore);

  // gt_img_2.txt: LF, commas in transcriptions, a blank line.
  ASSERT_EQ(samples[1].texts.size(), 3u);
  EXPECT_THAT(Flatten(samples[1].texts[0].polygon), ElementsAre(2, 3, 30, 4, 29, 20, 2, 19));
  EXPECT_EQ(samples[1].texts[0].transcription, "Hello, World");
  EXPECT_TRUE(samples[1].texts[1].ignore);
  EXPECT_THAT(Flatten(samples[1].texts[2].polygon), ElementsAre(33, 30, 62, 31, 62, 46, 33, 45));
  EXPECT_EQ(samples[1].texts[2].transcription, "a,b,,c");

  // gt_img_10.txt: CRLF without a final newline; the second word is clamped to the image.
  ASSERT_EQ(samples[2].texts.size(), 2u);
  EXPECT_THAT(Flatten(samples[2].texts[0].polygon), ElementsAre(5.5, 2, 60, 2, 60, 20, 5.5, 20));
  EXPECT_EQ(samples[2].texts[0].transcription, "mid");
  EXPECT_THAT(Flatten(samples[2].texts[1].polygon), ElementsAre(0, 24, 63, 24, 63, 47, 0, 47));
  EXPECT_EQ(samples[2].texts[1].transcription, "edge");
}

TEST(ICDAR2015DatasetTest, ReadsTestSplit) {
  ICDAR2015Options options;
  options.set_root(kRoot);
  options.set_split("test");
  std::unique_ptr<ICDAR2015Dataset> dataset = MakeDataset(options);
  ASSERT_NE(dataset, nullptr);
  ASSERT_EQ(dataset->Size(), 1);
  absl::StatusOr<core::Sample> sample = dataset->Load(0);
  ASSERT_TRUE(sample.ok()) << sample.status();
  ASSERT_EQ(sample->texts.size(), 1u);
  EXPECT_EQ(sample->texts[0].transcription, "test");
  EXPECT_THAT(Flatten(sample->texts[0].polygon), ElementsAre(1, 1, 20, 1, 20, 12, 1, 12));
}

TEST(ICDAR2015DatasetTest, BuildsThroughTheRegistry) {
  ICDAR2015Options options;
  options.set_root(kRoot);
  google::protobuf::Any any;
  any.PackFrom(options);
  absl::StatusOr<std::unique_ptr<core::Dataset>> dataset =
      core::DatasetRegistry::Get().Create("ICDAR2015", any);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->Size(), 3);
}

TEST(ICDAR2015DatasetTest, MetadataIsClassAgnosticTextPolygons) {
  ICDAR2015Options options;
  options.set_root(kRoot);
  std::unique_ptr<ICDAR2015Dataset> dataset = MakeDataset(options);
  ASSERT_NE(dataset, nullptr);
  const std::optional<core::DatasetMetadata> metadata = dataset->Metadata();
  ASSERT_TRUE(metadata.has_value());
  EXPECT_EQ(metadata->annotation_kind, core::AnnotationKind::kTextPolygons);
  EXPECT_EQ(metadata->num_classes(), 0);
  EXPECT_THAT(metadata->source_ids, IsEmpty());
  EXPECT_EQ(metadata->ignore_label, std::nullopt);
}

TEST(ICDAR2015DatasetTest, RejectsBadOptions) {
  ICDAR2015Options options;
  absl::Status status = ICDAR2015Dataset::Create(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("root is empty"));

  options.set_root(kRoot);
  options.set_split("val");
  status = ICDAR2015Dataset::Create(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("unknown split 'val'"));
}

TEST(ICDAR2015DatasetTest, MissingDirectoriesNameTheExpectedPath) {
  ICDAR2015Options options;
  options.set_root(std::string(kRoot) + "/bad");
  absl::Status status = ICDAR2015Dataset::Create(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("image directory 'testdata/icdar2015/bad/ch4_training_images' "
                              "does not exist"),
                    HasSubstr("set image_dir")));

  options = BadOptions("missing_gt");
  options.set_gt_dir("no_such_gt");
  status = ICDAR2015Dataset::Create(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(),
              HasSubstr("ground-truth directory 'testdata/icdar2015/bad/missing_gt/no_such_gt' "
                        "does not exist"));

  // A directory without images is a misconfiguration, not an empty dataset.
  options = BadOptions("missing_gt");
  options.set_image_dir("gt");
  status = ICDAR2015Dataset::Create(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("no images"));
}

TEST(ICDAR2015DatasetTest, UnpairedFilesAreAnErrorNamingThem) {
  // An image without ground truth and a ground-truth file without image.
  absl::Status status = ICDAR2015Dataset::Create(BadOptions("missing_gt")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("1 image in 'testdata/icdar2015/bad/missing_gt/images' has no "
                              "ground-truth (gt_img_<N>.txt) in "
                              "'testdata/icdar2015/bad/missing_gt/gt' (img_1.jpg)"),
                    HasSubstr("has no image in 'testdata/icdar2015/bad/missing_gt/images' "
                              "(gt_img_2.txt)"),
                    HasSubstr("ICDAR2015Options.allow_unpaired_files: true")));

  status = ICDAR2015Dataset::Create(BadOptions("orphans")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("(img_2.jpg)"), HasSubstr("(gt_img_9.txt)")));
}

TEST(ICDAR2015DatasetTest, AllowedUnpairedFilesAreSkippedAndCounted) {
  ICDAR2015Options options = BadOptions("orphans");
  options.set_allow_unpaired_files(true);
  std::unique_ptr<ICDAR2015Dataset> dataset = MakeDataset(options);
  ASSERT_NE(dataset, nullptr);
  ASSERT_EQ(dataset->Size(), 1);
  EXPECT_THAT(dataset->Describe(),
              HasSubstr("1 samples; skipped 1 images without ground-truth (gt_img_<N>.txt) and 1 "
                        "ground-truth (gt_img_<N>.txt) files without image"));
  absl::StatusOr<core::Sample> sample = dataset->Load(0);
  ASSERT_TRUE(sample.ok()) << sample.status();
  EXPECT_EQ(sample->id, "img_1.jpg");

  // With nothing paired there is no dataset.
  options = BadOptions("missing_gt");
  options.set_allow_unpaired_files(true);
  EXPECT_EQ(ICDAR2015Dataset::Create(options).status().code(), absl::StatusCode::kNotFound);
}

TEST(ICDAR2015DatasetTest, OtherFilesDoNotTakePartInPairingAndAreCounted) {
  // readme.txt and .DS_Store beside the ground truth, Thumbs.db and cover.jpg beside the image.
  std::unique_ptr<ICDAR2015Dataset> dataset = MakeDataset(BadOptions("other_files"));
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(dataset->Size(), 1);
  EXPECT_THAT(dataset->Describe(),
              AllOf(HasSubstr("1 samples; 4 other files ignored ("), HasSubstr("readme.txt"),
                    HasSubstr(".DS_Store"), HasSubstr("Thumbs.db"), HasSubstr("cover.jpg")));

  EXPECT_TRUE(IsIcdarImageName("img_1.jpg"));
  EXPECT_TRUE(IsIcdarImageName("img_007.JPEG"));
  EXPECT_TRUE(IsIcdarImageName("img_12.png"));
  EXPECT_FALSE(IsIcdarImageName("img_.jpg"));
  EXPECT_FALSE(IsIcdarImageName("img_1a.jpg"));
  EXPECT_FALSE(IsIcdarImageName("cover.jpg"));
  EXPECT_FALSE(IsIcdarImageName("img_1.gif"));
  EXPECT_TRUE(IsIcdarGroundTruthName("gt_img_10.txt"));
  EXPECT_FALSE(IsIcdarGroundTruthName("readme.txt"));
  EXPECT_FALSE(IsIcdarGroundTruthName("gt_img_1.txt.bak"));
}

TEST(ICDAR2015DatasetTest, InvalidPolygonsAreRepairedAndCounted) {
  std::unique_ptr<ICDAR2015Dataset> dataset = MakeDataset(BadOptions("invalid_polygons"));
  ASSERT_NE(dataset, nullptr);
  EXPECT_THAT(dataset->Describe(),
              HasSubstr("1 samples; 1 self-intersecting polygon replaced by the convex hull, 3 "
                        "zero-area polygons made don't-care (first: "
                        "testdata/icdar2015/bad/invalid_polygons/gt/gt_img_1.txt:2)"));
  absl::StatusOr<core::Sample> sample = dataset->Load(0);
  ASSERT_TRUE(sample.ok()) << sample.status();
  ASSERT_EQ(sample->texts.size(), 5u);
  EXPECT_FALSE(sample->texts[0].ignore);
  // The bow-tie (40,2) (60,2) (40,20) (60,20) is its hull, the 20 x 18 box, and stays a word.
  EXPECT_FALSE(sample->texts[1].ignore);
  EXPECT_EQ(sample->texts[1].transcription, "bowtie");
  EXPECT_TRUE(core::IsValidSimplePolygon(sample->texts[1].polygon));
  EXPECT_DOUBLE_EQ(core::PolygonArea(sample->texts[1].polygon), 360);
  // The flat line, the four coincident points and the two distinct points cannot be repaired:
  // don't-care, and counted above.
  EXPECT_TRUE(sample->texts[2].ignore);
  EXPECT_TRUE(sample->texts[3].ignore);
  EXPECT_TRUE(sample->texts[4].ignore);
}

TEST(ICDAR2015DatasetTest, ParseCountsRepairs) {
  GroundTruthRepairs repairs;
  absl::StatusOr<std::vector<core::TextInstance>> texts =
      ParseIcdarGroundTruth("0,0,10,0,0,10,10,10,a\n0,0,10,0,10,10,0,10,b\n5,5,6,6,7,7,8,8,c\n",
                            "f.txt", cv::Size(), &repairs);
  ASSERT_TRUE(texts.ok()) << texts.status();
  EXPECT_EQ(repairs.hull_repaired, 1);
  EXPECT_EQ(repairs.degenerate_ignored, 1);
  EXPECT_EQ(repairs.first, "f.txt:1");
  EXPECT_THAT(Flatten((*texts)[1].polygon), ElementsAre(0, 0, 10, 0, 10, 10, 0, 10));
  EXPECT_EQ(GroundTruthRepairs().Describe(), "");
}

TEST(ICDAR2015DatasetTest, TranscriptionsMustBeUtf8) {
  std::unique_ptr<ICDAR2015Dataset> dataset = MakeDataset(BadOptions("not_utf8"));
  ASSERT_NE(dataset, nullptr);
  const absl::Status status = dataset->Load(0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("testdata/icdar2015/bad/not_utf8/gt/gt_img_1.txt:2: the "
                              "transcription is not valid UTF-8 (byte 0xE9 at column 26)"),
                    HasSubstr("iconv")));
}

TEST(ICDAR2015DatasetTest, Utf8Validation) {
  size_t bad = 0;
  EXPECT_TRUE(IsValidUtf8("", &bad));
  EXPECT_TRUE(IsValidUtf8("caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80", &bad));
  EXPECT_FALSE(IsValidUtf8("caf\xE9", &bad));
  EXPECT_EQ(bad, 3u);
  EXPECT_FALSE(IsValidUtf8("a\xC3", &bad));  // cut short
  EXPECT_EQ(bad, 1u);
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF", &bad));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80", &bad));      // a surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80", &bad));  // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\x80", &bad));
}

TEST(ICDAR2015DatasetTest, UndecodableImage) {
  std::unique_ptr<ICDAR2015Dataset> dataset = MakeDataset(BadOptions("undecodable"));
  ASSERT_NE(dataset, nullptr);
  absl::Status status = dataset->Load(0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("testdata/icdar2015/bad/undecodable/images/img_1.jpg"),
                    HasSubstr("is not a JPEG, PNG, BMP, TIFF or WebP file")));

  // The first 750 of its 904 bytes (its scan starts at byte 609): OpenCV would decode it with a
  // grey lower part.
  dataset = MakeDataset(BadOptions("truncated"));
  ASSERT_NE(dataset, nullptr);
  status = dataset->Load(0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("testdata/icdar2015/bad/truncated/images/img_1.jpg: the "
                                          "JPEG file is truncated: its 750 bytes end inside the "
                                          "compressed data of scan 1"));
}

TEST(ICDAR2015DatasetTest, BadGroundTruthLinesNameFileAndLine) {
  std::unique_ptr<ICDAR2015Dataset> dataset = MakeDataset(BadOptions("bad_gt"));
  ASSERT_NE(dataset, nullptr);
  ASSERT_EQ(dataset->Size(), 4);
  const std::string gt = "testdata/icdar2015/bad/bad_gt/gt/";
  const std::vector<std::string> expected = {
      gt + "gt_img_1.txt:2: expected 8 coordinates and a transcription",
      gt + "gt_img_2.txt:3: coordinate x2 is '2O', not a number",
      gt + "gt_img_3.txt:1: coordinate x2 is '', not a number",
      gt + "gt_img_4.txt:1: point (200, 1) lies far outside the 64x48 image",
  };
  for (int64_t i = 0; i < dataset->Size(); ++i) {
    absl::Status status = dataset->Load(i).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr(expected[i]));
  }
}

}  // namespace
}  // namespace vision::data::datasets::icdar2015
