#include "data/synthetic/synthetic_text.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <system_error>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "data/synthetic/clutter.h"
#include "data/synthetic/dataset_files.h"
#include "data/synthetic/seeded_random.h"

namespace vision::data::synthetic {
namespace {

namespace fs = std::filesystem;

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
constexpr int kAlphabetSize = sizeof(kAlphabet) - 1;
constexpr char kDontCare[] = "###";
constexpr double kPi = 3.14159265358979323846;
// Minimum luminance difference between a word and the mean of the background under it.
constexpr double kMinContrast = 90;
// Free pixels kept between two words and between a word and the image border.
constexpr int kWordGap = 3;
constexpr int kPlacementAttempts = 20;
constexpr std::array<int, 8> kFontFaces = {
    cv::FONT_HERSHEY_SIMPLEX,        cv::FONT_HERSHEY_PLAIN,         cv::FONT_HERSHEY_DUPLEX,
    cv::FONT_HERSHEY_COMPLEX,        cv::FONT_HERSHEY_TRIPLEX,       cv::FONT_HERSHEY_COMPLEX_SMALL,
    cv::FONT_HERSHEY_SCRIPT_SIMPLEX, cv::FONT_HERSHEY_SCRIPT_COMPLEX};

double Luminance(const cv::Scalar& bgr) { return 0.114 * bgr[0] + 0.587 * bgr[1] + 0.299 * bgr[2]; }

// A random colour at least kMinContrast brighter or darker than `background`: a random hue
// mixed towards white or black until its luminance reaches a random target.
cv::Scalar ContrastingColour(SeededRandom& rng, const cv::Scalar& background) {
  const double lb = Luminance(background);
  cv::Scalar colour = rng.Colour();
  const double lc = Luminance(colour);
  if (lb < 128) {
    const double target = rng.Uniform(lb + kMinContrast, 255);
    const double k = lc >= target ? 0 : (target - lc) / (255 - lc);
    for (int c = 0; c < 3; ++c) colour[c] += (255 - colour[c]) * k;
  } else {
    const double target = rng.Uniform(0, lb - kMinContrast);
    const double k = lc <= target ? 0 : 1 - target / lc;
    for (int c = 0; c < 3; ++c) colour[c] *= 1 - k;
  }
  return colour;
}

// Lines, rectangles, circles, ellipse arcs and zigzags that a detector must not take for text.
void DrawDistractors(SeededRandom& rng, cv::Mat& image) {
  const int count = rng.Int(4, 16);
  const cv::Size size = image.size();
  for (int i = 0; i < count; ++i) {
    const int kind = rng.Int(0, 4);
    const cv::Scalar colour = rng.Colour();
    const bool filled = kind <= 2 && rng.Chance(0.3);
    const int thickness = filled ? cv::FILLED : rng.Int(1, 4);
    const cv::Point a = rng.PointIn(size);
    switch (kind) {
      case 0: {
        const cv::Point b = rng.PointIn(size);
        cv::line(image, a, b, colour, std::max(thickness, 1), cv::LINE_AA);
        break;
      }
      case 1: {
        const cv::Point b = rng.PointIn(size);
        cv::rectangle(image, a, b, colour, thickness, cv::LINE_AA);
        break;
      }
      case 2: {
        const int radius = rng.Int(3, std::max(4, std::min(size.width, size.height) / 5));
        cv::circle(image, a, radius, colour, thickness, cv::LINE_AA);
        break;
      }
      case 3: {
        const int ax = rng.Int(5, std::max(6, size.width / 4));
        const int ay = rng.Int(5, std::max(6, size.height / 4));
        const double rotation = rng.Uniform(0, 180);
        const double start = rng.Uniform(0, 360);
        const double sweep = rng.Uniform(60, 360);
        cv::ellipse(image, a, cv::Size(ax, ay), rotation, start, start + sweep, colour, thickness,
                    cv::LINE_AA);
        break;
      }
      default: {
        std::vector<cv::Point> zigzag = {a};
        const int segments = rng.Int(2, 6);
        for (int s = 0; s < segments; ++s) {
          const int step_x = rng.Int(-30, 30);
          const int step_y = rng.Int(-30, 30);
          zigzag.push_back(zigzag.back() + cv::Point(step_x, step_y));
        }
        cv::polylines(image, zigzag, /*isClosed=*/false, colour, thickness, cv::LINE_AA);
        break;
      }
    }
  }
}

// Draws one word where it overlaps no earlier word (`occupied`); false if no attempt found a
// place. The word is rendered upright at its final size into a patch, its tight box is taken
// from the rendered pixels, and a homography maps that box onto the rotated (and perhaps
// perspective-jittered) destination quadrilateral.
bool DrawWord(SeededRandom& rng, const SyntheticTextOptions& options, cv::Mat& image, cv::Mat& occupied,
              std::vector<core::TextInstance>* texts) {
  const cv::Size image_size = image.size();
  const int min_side = std::min(image_size.width, image_size.height);
  // Decided once per word: small don't-care words find a place more easily, so drawing the
  // kind again on every attempt would make them more frequent than dont_care_fraction.
  const bool dont_care = rng.Chance(options.dont_care_fraction);
  const bool blurred = dont_care && rng.Chance(0.5);
  const bool tiny = dont_care && !blurred;
  for (int attempt = 0; attempt < kPlacementAttempts; ++attempt) {
    const int length = rng.Int(3, 10);
    std::string text;
    for (int i = 0; i < length; ++i) text += kAlphabet[rng.Int(0, kAlphabetSize - 1)];
    int face = kFontFaces[rng.Int(0, kFontFaces.size() - 1)];
    if (rng.Chance(0.15)) face |= cv::FONT_ITALIC;

    // Scale the font to a glyph height, then shrink it if the word would not fit across.
    // Blurred words are kept small too: a large blurred word is still readable.
    const double glyph_height = tiny      ? rng.Uniform(4, 7)
                                : blurred ? rng.Uniform(8, 16)
                                          : rng.Uniform(10, std::max(12.0, min_side / 6.0));
    int baseline = 0;
    const cv::Size unit_size = cv::getTextSize(text, face, 1.0, 1, &baseline);
    double scale = glyph_height / unit_size.height;
    scale = std::min(scale, 0.85 * image_size.width / unit_size.width);
    const double weight = rng.Uniform(1.0, 3.0);
    const int thickness =
        tiny ? 1
             : std::max(1, static_cast<int>(std::lround(scale * unit_size.height / 22.0 * weight)));
    const cv::Size text_size = cv::getTextSize(text, face, scale, thickness, &baseline);
    // Script and italic faces reach beyond getTextSize's box: pad generously and reject a
    // word whose glyphs still touch the patch border.
    const int pad = thickness + 4 + text_size.height / 2;
    cv::Mat patch =
        cv::Mat::zeros(text_size.height + baseline + 2 * pad, text_size.width + 2 * pad, CV_8UC1);
    cv::putText(patch, text, cv::Point(pad, pad + text_size.height), face, scale, cv::Scalar(255),
                thickness, cv::LINE_AA);
    std::vector<cv::Point> ink;
    cv::findNonZero(patch, ink);
    if (ink.empty()) continue;
    const cv::Rect tight = cv::boundingRect(ink);
    if (tight.x == 0 || tight.y == 0 || tight.br().x == patch.cols || tight.br().y == patch.rows ||
        tight.width < 2 || tight.height < 2) {
      continue;
    }
    // Corners at the centres of the extreme ink pixels, like ICDAR's integer coordinates.
    const float left = tight.x;
    const float top = tight.y;
    const float right = tight.x + tight.width - 1;
    const float bottom = tight.y + tight.height - 1;
    const std::array<cv::Point2f, 4> source = {cv::Point2f(left, top), cv::Point2f(right, top),
                                               cv::Point2f(right, bottom),
                                               cv::Point2f(left, bottom)};
    const cv::Point2f centre((left + right) / 2, (top + bottom) / 2);

    // Mostly near-horizontal words, some steep ones, a few vertical.
    const double kind = rng.Unit();
    const double degrees = kind < 0.5    ? rng.Uniform(-8, 8)
                           : kind < 0.85 ? rng.Uniform(-40, 40)
                                         : rng.Uniform(-90, 90);
    const double radians = degrees * kPi / 180;
    const float cos_a = std::cos(radians);
    const float sin_a = std::sin(radians);
    const bool perspective = rng.Chance(0.3);
    // Moving each corner by under a quarter of the box height keeps the quad convex.
    const float jitter = 0.2f * (bottom - top);
    std::array<cv::Point2f, 4> quad;
    for (int i = 0; i < 4; ++i) {
      const cv::Point2f d = source[i] - centre;
      quad[i] = cv::Point2f(cos_a * d.x - sin_a * d.y, sin_a * d.x + cos_a * d.y);
      if (perspective) {
        quad[i].x += rng.Uniform(-jitter, jitter);
        quad[i].y += rng.Uniform(-jitter, jitter);
      }
    }
    float min_x = quad[0].x;
    float max_x = quad[0].x;
    float min_y = quad[0].y;
    float max_y = quad[0].y;
    for (const cv::Point2f& q : quad) {
      min_x = std::min(min_x, q.x);
      max_x = std::max(max_x, q.x);
      min_y = std::min(min_y, q.y);
      max_y = std::max(max_y, q.y);
    }
    const double lo_x = kWordGap - min_x;
    const double hi_x = image_size.width - 1 - kWordGap - max_x;
    const double lo_y = kWordGap - min_y;
    const double hi_y = image_size.height - 1 - kWordGap - max_y;
    if (lo_x > hi_x || lo_y > hi_y) continue;
    const float at_x = rng.Uniform(lo_x, hi_x);
    const float at_y = rng.Uniform(lo_y, hi_y);
    std::array<cv::Point2f, 4> destination;
    for (int i = 0; i < 4; ++i) destination[i] = quad[i] + cv::Point2f(at_x, at_y);

    // Work in a region around the word with room for the gap and the blur.
    const double blur_sigma = blurred ? rng.Uniform(1.5, 2.5) : 0;
    const int margin = kWordGap + 2 + static_cast<int>(std::ceil(3 * blur_sigma));
    const cv::Rect region =
        cv::Rect(cv::Point(static_cast<int>(std::floor(at_x + min_x)) - margin,
                           static_cast<int>(std::floor(at_y + min_y)) - margin),
                 cv::Point(static_cast<int>(std::ceil(at_x + max_x)) + margin + 1,
                           static_cast<int>(std::ceil(at_y + max_y)) + margin + 1)) &
        cv::Rect(cv::Point(0, 0), image_size);
    std::vector<cv::Point> footprint_polygon;
    for (const cv::Point2f& p : destination) {
      footprint_polygon.emplace_back(cvRound(p.x) - region.x, cvRound(p.y) - region.y);
    }
    cv::Mat footprint = cv::Mat::zeros(region.size(), CV_8UC1);
    cv::fillConvexPoly(footprint, footprint_polygon, cv::Scalar(255));
    cv::dilate(
        footprint, footprint,
        cv::getStructuringElement(cv::MORPH_RECT, cv::Size(2 * kWordGap + 1, 2 * kWordGap + 1)));
    cv::Mat taken;
    cv::bitwise_and(footprint, occupied(region), taken);
    if (cv::countNonZero(taken) > 0) continue;

    cv::Mat homography = cv::getPerspectiveTransform(source.data(), destination.data());
    cv::Mat to_region = cv::Mat::eye(3, 3, CV_64F);
    to_region.at<double>(0, 2) = -region.x;
    to_region.at<double>(1, 2) = -region.y;
    cv::Mat alpha;
    cv::warpPerspective(patch, alpha, to_region * homography, region.size(), cv::INTER_LINEAR,
                        cv::BORDER_CONSTANT, cv::Scalar(0));
    if (blurred) cv::GaussianBlur(alpha, alpha, cv::Size(0, 0), blur_sigma);

    cv::Mat canvas = image(region);
    const cv::Scalar colour = ContrastingColour(rng, cv::mean(canvas, alpha));
    for (int y = 0; y < region.height; ++y) {
      const uchar* a = alpha.ptr<uchar>(y);
      cv::Vec3b* pixel = canvas.ptr<cv::Vec3b>(y);
      for (int x = 0; x < region.width; ++x) {
        if (a[x] == 0) continue;
        const float w = a[x] / 255.0f;
        for (int c = 0; c < 3; ++c) {
          pixel[x][c] = cv::saturate_cast<uchar>(pixel[x][c] * (1 - w) + colour[c] * w);
        }
      }
    }
    cv::Mat occupied_region = occupied(region);
    occupied_region |= footprint;

    core::TextInstance instance;
    instance.polygon.assign(destination.begin(), destination.end());
    instance.transcription = dont_care ? kDontCare : text;
    instance.ignore = dont_care;
    texts->push_back(std::move(instance));
    return true;
  }
  return false;
}

}  // namespace

absl::Status ValidateOptions(const SyntheticDatasetOptions& options) {
  const SyntheticTextOptions& image = options.image;
  if (image.width < 64 || image.height < 64 || image.width > 8192 || image.height > 8192) {
    return absl::InvalidArgumentError(absl::StrCat("image size ", image.width, "x", image.height,
                                                   ": width and height must be in [64, 8192]"));
  }
  if (image.min_words < 0 || image.max_words < image.min_words || image.max_words > 1000) {
    return absl::InvalidArgumentError(absl::StrCat("words per image [", image.min_words, ", ",
                                                   image.max_words,
                                                   "]: need 0 <= min_words <= max_words <= 1000"));
  }
  if (!(image.dont_care_fraction >= 0 && image.dont_care_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dont_care_fraction ", image.dont_care_fraction, ": must be in [0, 1]"));
  }
  if (options.num_train < 0 || options.num_test < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_train ", options.num_train, ", num_test ",
                                                   options.num_test,
                                                   ": image counts must be >= 0"));
  }
  if (options.jpeg_quality < 1 || options.jpeg_quality > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("jpeg_quality ", options.jpeg_quality, ": must be in [1, 100]"));
  }
  return absl::OkStatus();
}

uint64_t ImageSeed(uint64_t seed, Split split, int64_t index) {
  const uint64_t split_salt = split == Split::kTrain ? 0x7472616eULL : 0x74657374ULL;
  return MixSeed(seed, split_salt, static_cast<uint64_t>(index));
}

SyntheticImage RenderSyntheticImage(const SyntheticTextOptions& options, uint64_t image_seed) {
  SeededRandom rng(image_seed);
  SyntheticImage result;
  result.image.create(options.height, options.width, CV_8UC3);
  if (options.plain_background) {
    result.image.setTo(rng.Colour());
  } else {
    FillGradient(rng, result.image);
    BlendColourBlobs(rng, result.image, /*max_cells=*/6, /*max_weight=*/0.6);
    DrawDistractors(rng, result.image);
  }
  cv::Mat occupied = cv::Mat::zeros(result.image.size(), CV_8UC1);
  const int words = rng.Int(options.min_words, options.max_words);
  for (int i = 0; i < words; ++i) DrawWord(rng, options, result.image, occupied, &result.texts);
  if (!options.plain_background) AddGaussianNoise(rng, result.image, /*max_sigma=*/8);
  return result;
}

std::string FormatIcdarGroundTruth(const std::vector<core::TextInstance>& texts) {
  std::string out;
  for (const core::TextInstance& text : texts) {
    for (const cv::Point2f& p : text.polygon) {
      absl::StrAppend(&out, std::lround(p.x), ",", std::lround(p.y), ",");
    }
    absl::StrAppend(&out, text.transcription, "\n");
  }
  return out;
}

absl::Status WriteSyntheticDataset(const SyntheticDatasetOptions& options,
                                   const std::string& output_dir) {
  VISION_RETURN_IF_ERROR(ValidateOptions(options));
  struct SplitDirs {
    Split split;
    int count;
    const char* images;
    const char* ground_truth;
  };
  const SplitDirs splits[] = {
      {Split::kTrain, options.num_train, "ch4_training_images",
       "ch4_training_localization_transcription_gt"},
      {Split::kTest, options.num_test, "ch4_test_images", "Challenge4_Test_Task1_GT"},
  };
  const std::vector<int> jpeg_params = {cv::IMWRITE_JPEG_QUALITY, options.jpeg_quality};
  for (const SplitDirs& split : splits) {
    const fs::path image_dir = fs::path(output_dir) / split.images;
    const fs::path gt_dir = fs::path(output_dir) / split.ground_truth;
    VISION_RETURN_IF_ERROR(PrepareEmptyDirectory(image_dir));
    VISION_RETURN_IF_ERROR(PrepareEmptyDirectory(gt_dir));
    for (int i = 0; i < split.count; ++i) {
      const SyntheticImage sample =
          RenderSyntheticImage(options.image, ImageSeed(options.seed, split.split, i));
      std::vector<uchar> jpeg;
      if (!cv::imencode(".jpg", sample.image, jpeg, jpeg_params)) {
        return absl::InternalError(absl::StrCat("JPEG encoding of image ", i + 1, " failed"));
      }
      const std::string stem = absl::StrCat("img_", i + 1);
      VISION_RETURN_IF_ERROR(WriteWholeFile(image_dir / (stem + ".jpg"), jpeg.data(), jpeg.size()));
      const std::string gt = FormatIcdarGroundTruth(sample.texts);
      VISION_RETURN_IF_ERROR(
          WriteWholeFile(gt_dir / ("gt_" + stem + ".txt"), gt.data(), gt.size()));
    }
  }
  return absl::OkStatus();
}

}  // namespace vision::data::synthetic
