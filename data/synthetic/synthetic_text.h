// A synthetic text-detection dataset in the ICDAR2015 layout, for training and testing the
// text pipeline (DBNet) without the real data.
//
// Each image has a cluttered background (gradient, colour blobs, noise, random lines,
// rectangles, circles) and several non-overlapping words of random letters and digits drawn
// with OpenCV's Hershey fonts: rendered upright, then rotated and sometimes warped in
// perspective into the image. The ground-truth quadrilateral of a word is the tight box around
// its rendered glyphs, mapped by the same transform, so it is exact up to rounding. About
// `dont_care_fraction` of the words are tiny or blurred and marked "###" like the unreadable
// words of ICDAR2015.
//
// Determinism: an image depends only on (options, ImageSeed(seed, split, index)): it draws from
// its own std::mt19937_64 (whose output sequence is fixed by the C++ standard) through
// seeded_random.h rather than std::uniform_*_distribution (whose algorithms differ between
// standard libraries), and OpenCV's cv::RNG for pixel noise. The same seed
// therefore gives byte-identical files with the same OpenCV and libjpeg builds; other versions
// may antialias or encode differently.
#ifndef VISION_DATA_SYNTHETIC_SYNTHETIC_TEXT_H_
#define VISION_DATA_SYNTHETIC_SYNTHETIC_TEXT_H_

#include <cstdint>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "absl/status/status.h"
#include "core/sample.h"

namespace vision::data::synthetic {

enum class Split { kTrain, kTest };

struct SyntheticTextOptions {
  int width = 320;
  int height = 320;
  // Words attempted per image; a word that finds no free place is dropped.
  int min_words = 3;
  int max_words = 10;
  // Fraction of the words made unreadable (tiny or blurred) and marked "###".
  double dont_care_fraction = 0.1;
  // A single-colour background without clutter or noise, so that tests can tell which
  // pixels the text changed.
  bool plain_background = false;
};

struct SyntheticImage {
  cv::Mat image;  // CV_8UC3, BGR
  std::vector<core::TextInstance> texts;
};

struct SyntheticDatasetOptions {
  SyntheticTextOptions image;
  int num_train = 1000;
  int num_test = 500;
  uint64_t seed = 1;
  int jpeg_quality = 90;
};

// Checks ranges: the image at least 64x64, word counts ordered and non-negative, ...
absl::Status ValidateOptions(const SyntheticDatasetOptions& options);

// The seed of image `index` (0-based) of `split`: a hash, so that neighbouring seeds and
// indices give unrelated images and one image can be regenerated alone.
uint64_t ImageSeed(uint64_t seed, Split split, int64_t index);

// Renders one image. `options` must satisfy ValidateOptions.
SyntheticImage RenderSyntheticImage(const SyntheticTextOptions& options, uint64_t image_seed);

// The ICDAR2015 ground-truth text of `texts`: one "x1,y1,...,x4,y4,transcription" line per
// word, coordinates rounded to integers, LF line endings, no byte-order mark.
std::string FormatIcdarGroundTruth(const std::vector<core::TextInstance>& texts);

// Writes <output_dir>/ch4_training_images/img_N.jpg with
// <output_dir>/ch4_training_localization_transcription_gt/gt_img_N.txt (N = 1..num_train), and
// ch4_test_images/ with Challenge4_Test_Task1_GT/ for the test split. Refuses to write into
// a split directory that already holds files, so that no stale image survives a rerun.
absl::Status WriteSyntheticDataset(const SyntheticDatasetOptions& options,
                                   const std::string& output_dir);

}  // namespace vision::data::synthetic

#endif  // VISION_DATA_SYNTHETIC_SYNTHETIC_TEXT_H_
