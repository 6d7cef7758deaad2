#include "data/synthetic/synthetic_text.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <opencv2/imgproc.hpp>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/sample.h"
#include "data/datasets/icdar2015/icdar2015_dataset.h"
#include "data/synthetic/testing/file_tree.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::data::synthetic {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using ::vision::data::synthetic::file_tree::ExpectIdenticalTrees;
using ::vision::data::synthetic::file_tree::ExpectSameNamesDifferentBytes;
using ::vision::data::synthetic::file_tree::FreshDir;
using ::vision::data::synthetic::file_tree::ReadTree;

SyntheticDatasetOptions SmallDataset(uint64_t seed) {
  SyntheticDatasetOptions options;
  options.num_train = 6;
  options.num_test = 3;
  options.seed = seed;
  options.image.width = 192;
  options.image.height = 160;
  return options;
}

TEST(SyntheticTextTest, SameSeedGivesByteIdenticalFiles) {
  const std::string first = FreshDir("same_seed_a");
  const std::string second = FreshDir("same_seed_b");
  ASSERT_TRUE(WriteSyntheticDataset(SmallDataset(7), first).ok());
  ASSERT_TRUE(WriteSyntheticDataset(SmallDataset(7), second).ok());
  const auto a = ReadTree(first);
  const auto b = ReadTree(second);
  ASSERT_EQ(a.size(), 2u * (6 + 3));
  ExpectIdenticalTrees(a, b);
}

TEST(SyntheticTextTest, DifferentSeedGivesDifferentImages) {
  const std::string first = FreshDir("seed_7");
  const std::string second = FreshDir("seed_8");
  ASSERT_TRUE(WriteSyntheticDataset(SmallDataset(7), first).ok());
  ASSERT_TRUE(WriteSyntheticDataset(SmallDataset(8), second).ok());
  const auto a = ReadTree(first);
  const auto b = ReadTree(second);
  ExpectSameNamesDifferentBytes(a, b, ".jpg");
}

TEST(SyntheticTextTest, SplitsAndIndicesGetDifferentSeeds) {
  EXPECT_NE(ImageSeed(1, Split::kTrain, 0), ImageSeed(1, Split::kTest, 0));
  EXPECT_NE(ImageSeed(1, Split::kTrain, 0), ImageSeed(1, Split::kTrain, 1));
  EXPECT_NE(ImageSeed(1, Split::kTrain, 0), ImageSeed(2, Split::kTrain, 0));
  EXPECT_EQ(ImageSeed(1, Split::kTrain, 5), ImageSeed(1, Split::kTrain, 5));
}

bool IsWord(const std::string& text) {
  return text.size() >= 3 && text.size() <= 10 && std::all_of(text.begin(), text.end(), [](char c) {
           return absl::ascii_isalnum(static_cast<unsigned char>(c));
         });
}

TEST(SyntheticTextTest, GeneratedDatasetLoadsAsICDAR2015) {
  const std::string root = FreshDir("loadable");
  const SyntheticDatasetOptions options = SmallDataset(3);
  ASSERT_TRUE(WriteSyntheticDataset(options, root).ok());
  for (const auto& [split, count] :
       std::vector<std::pair<std::string, int>>{{"train", 6}, {"test", 3}}) {
    datasets::ICDAR2015Options dataset_options;
    dataset_options.set_root(root);
    dataset_options.set_split(split);
    auto dataset = datasets::icdar2015::ICDAR2015Dataset::Create(dataset_options);
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    ASSERT_EQ((*dataset)->Size(), count);
    for (int64_t i = 0; i < count; ++i) {
      absl::StatusOr<core::Sample> sample = (*dataset)->Load(i);
      ASSERT_TRUE(sample.ok()) << sample.status();
      EXPECT_EQ(sample->id, absl::StrCat("img_", i + 1, ".jpg"));
      EXPECT_EQ(sample->image.size(), cv::Size(192, 160));
      EXPECT_FALSE(sample->texts.empty()) << sample->id;
      for (const core::TextInstance& text : sample->texts) {
        ASSERT_EQ(text.polygon.size(), 4u);
        for (const cv::Point2f& p : text.polygon) {
          EXPECT_TRUE(p.x >= 0 && p.x <= 191 && p.y >= 0 && p.y <= 159)
              << sample->id << ": " << p << " outside the image";
        }
        EXPECT_GT(cv::contourArea(text.polygon), 4.0) << sample->id;
        EXPECT_TRUE(text.ignore ? text.transcription == "###" : IsWord(text.transcription))
            << sample->id << ": '" << text.transcription << "'";
      }
    }
  }
}

TEST(SyntheticTextTest, GroundTruthRoundTripsThroughTheParser) {
  const SyntheticImage image = RenderSyntheticImage(SyntheticTextOptions(), 11);
  ASSERT_FALSE(image.texts.empty());
  auto parsed = datasets::icdar2015::ParseIcdarGroundTruth(FormatIcdarGroundTruth(image.texts),
                                                           "gt_img_1.txt", image.image.size());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), image.texts.size());
  for (size_t i = 0; i < parsed->size(); ++i) {
    EXPECT_EQ((*parsed)[i].transcription, image.texts[i].transcription);
    EXPECT_EQ((*parsed)[i].ignore, image.texts[i].ignore);
    for (size_t k = 0; k < 4; ++k) {
      EXPECT_LE(cv::norm((*parsed)[i].polygon[k] - image.texts[i].polygon[k]), 0.5 * std::sqrt(2));
    }
  }
}

TEST(SyntheticTextTest, WordsDoNotOverlapAndSomeAreDontCare) {
  int words = 0;
  int dont_care = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    const SyntheticImage image = RenderSyntheticImage(SyntheticTextOptions(), seed);
    words += image.texts.size();
    for (size_t i = 0; i < image.texts.size(); ++i) {
      dont_care += image.texts[i].ignore;
      for (size_t j = i + 1; j < image.texts.size(); ++j) {
        cv::Mat intersection;
        const float area =
            cv::intersectConvexConvex(image.texts[i].polygon, image.texts[j].polygon, intersection);
        EXPECT_EQ(area, 0) << "seed " << seed << ": words " << i << " and " << j << " overlap";
      }
    }
  }
  // 3-10 words attempted per image, nearly all placed; about 10% don't care.
  EXPECT_GT(words, 40 * 5);
  EXPECT_GT(dont_care, words / 30);
  EXPECT_LT(dont_care, words / 5);
}

// On a plain background, the pixels the text changed must lie in its quadrilaterals, and the
// quadrilaterals must be tight: every side touches the ink.
TEST(SyntheticTextTest, QuadsCoverTheRenderedTextTightly) {
  // Antialiased edge pixels fall below the ink threshold and warping resamples them.
  constexpr double kMaxGap = 2.5;
  SyntheticTextOptions options;
  options.plain_background = true;
  int64_t ink_pixels = 0;
  int64_t uncovered = 0;
  int tight_words = 0;
  int words = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const SyntheticImage image = RenderSyntheticImage(options, seed);
    // Words keep a gap to the border, so the corner shows the background.
    const cv::Vec3b background = image.image.at<cv::Vec3b>(0, 0);
    std::vector<std::vector<cv::Point2f>> ink_per_word(image.texts.size());
    for (int y = 0; y < image.image.rows; ++y) {
      for (int x = 0; x < image.image.cols; ++x) {
        const cv::Vec3b pixel = image.image.at<cv::Vec3b>(y, x);
        int diff = 0;
        for (int c = 0; c < 3; ++c) diff = std::max(diff, std::abs(pixel[c] - background[c]));
        if (diff <= 40) continue;
        ++ink_pixels;
        const cv::Point2f p(x, y);
        bool covered = false;
        for (size_t w = 0; w < image.texts.size(); ++w) {
          const double distance = cv::pointPolygonTest(image.texts[w].polygon, p, true);
          // Bilinear warping spreads ink by up to a pixel; blur spreads don't-care words more.
          if (distance >= (image.texts[w].ignore ? -8.0 : -1.5)) {
            covered = true;
            ink_per_word[w].push_back(p);
          }
        }
        uncovered += !covered;
      }
    }
    for (size_t w = 0; w < image.texts.size(); ++w) {
      const core::Polygon& q = image.texts[w].polygon;
      if (image.texts[w].ignore || ink_per_word[w].empty()) continue;
      ++words;
      // Each side of a tight quad touches the ink: the box was taken around the rendered
      // glyphs and the homography maps its sides onto the quad's.
      double worst_gap = 0;
      for (int k = 0; k < 4; ++k) {
        const cv::Point2f side = q[(k + 1) % 4] - q[k];
        double gap = 1e9;
        for (const cv::Point2f& p : ink_per_word[w]) {
          gap = std::min<double>(gap, std::abs(side.cross(p - q[k])) / cv::norm(side));
        }
        worst_gap = std::max(worst_gap, gap);
      }
      const bool tight = worst_gap <= kMaxGap;
      tight_words += tight;
      EXPECT_TRUE(tight) << "seed " << seed << " word " << w << ": a side of the quad is "
                         << worst_gap << " px from the nearest ink";
    }
  }
  ASSERT_GT(ink_pixels, 1000);
  EXPECT_LT(uncovered, ink_pixels / 200)
      << uncovered << " of " << ink_pixels << " ink pixels lie outside every quad";
  EXPECT_GT(words, 60);
  EXPECT_EQ(tight_words, words);
}

TEST(SyntheticTextTest, RejectsBadOptionsAndNonEmptyDirectories) {
  SyntheticDatasetOptions options = SmallDataset(1);
  options.image.width = 10;
  absl::Status status = WriteSyntheticDataset(options, FreshDir("bad_size"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("10x160"));

  options = SmallDataset(1);
  options.image.min_words = 5;
  options.image.max_words = 2;
  EXPECT_EQ(ValidateOptions(options).code(), absl::StatusCode::kInvalidArgument);
  options = SmallDataset(1);
  options.jpeg_quality = 0;
  EXPECT_EQ(ValidateOptions(options).code(), absl::StatusCode::kInvalidArgument);

  const std::string root = FreshDir("twice");
  options = SmallDataset(1);
  options.num_train = 1;
  options.num_test = 1;
  ASSERT_TRUE(WriteSyntheticDataset(options, root).ok());
  status = WriteSyntheticDataset(options, root);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("ch4_training_images' already holds files"));
}

}  // namespace
}  // namespace vision::data::synthetic
