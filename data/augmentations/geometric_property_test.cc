// Properties every geometric augmentation must keep, checked over random seeds:
//  - the semantic map (warped as a raster, nearest) agrees with the text polygons (warped as
//    coordinates) rasterised afterwards, up to boundary pixels; the same for RLE masks and
//    polygon masks of objects, and for Sample::targets;
//  - boxes are the bounds of the transformed masks;
//  - label maps only hold original ids and 255;
//  - scale factors equal current size / original size for resizes (and stay 1 otherwise);
//  - the same seed gives the same output.
#include <cmath>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <opencv2/imgproc.hpp>

#include "core/augmentation.h"
#include "core/sample.h"
#include "data/augmentations/augmentations.pb.h"
#include "data/augmentations/geometry.h"
#include "core/run_length_mask.h"
#include "data/augmentations/test_util.h"
#include "gtest/gtest.h"

namespace vision::data::augmentations {
namespace {

using testing::MakeAugmentation;
using testing::MaskIoU;
using testing::PointBounds;
using testing::Rasterize;
using testing::WithinBoundaryTolerance;

constexpr int kWidth = 160;
constexpr int kHeight = 120;
constexpr int kTexts = 6;

// Six rotated rectangles, one per cell of a 3x2 grid so they never overlap; text k has label
// k + 1 in the semantic map and transcription "k". Object k (annotation_id k) covers text k's
// region: odd ones as RLE, even ones as a polygon.
core::Sample MakeSample(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(0, 1);
  core::Sample sample;
  sample.id = "synthetic";
  sample.original_width = kWidth;
  sample.original_height = kHeight;
  sample.image = cv::Mat(kHeight, kWidth, CV_8UC3);
  cv::RNG(seed).fill(sample.image, cv::RNG::UNIFORM, 0, 256);
  sample.semantic = cv::Mat(kHeight, kWidth, CV_8U, cv::Scalar(0));
  const float cell_w = kWidth / 3.0f, cell_h = kHeight / 2.0f;
  for (int k = 0; k < kTexts; ++k) {
    const cv::Point2f centre((k % 3 + 0.5f) * cell_w, (k / 3 + 0.5f) * cell_h);
    const cv::RotatedRect rect(centre, cv::Size2f(25 + 15 * unit(rng), 15 + 15 * unit(rng)),
                               -45 + 90 * unit(rng));
    cv::Point2f corners[4];
    rect.points(corners);
    core::TextInstance text;
    text.polygon.assign(corners, corners + 4);
    text.transcription = std::to_string(k);
    const cv::Mat mask = Rasterize(text.polygon, sample.image.size());
    sample.semantic.setTo(k + 1, mask);

    core::ObjectInstance object;
    object.annotation_id = k;
    object.label = k;
    if (k % 2 == 0) {
      object.polygons = {text.polygon};
      object.box = PointBounds(text.polygon);
    } else {
      object.rle = core::EncodeRle(mask);
      object.box = cv::Rect2f(cv::boundingRect(mask));
    }
    sample.texts.push_back(text);
    sample.objects.push_back(object);
  }
  cv::Mat target;
  sample.semantic.convertTo(target, CV_32F);
  sample.targets["label_as_float"] = target;
  return sample;
}

struct Case {
  std::string name;
  std::string plugin;
  std::function<std::unique_ptr<google::protobuf::Message>()> options;
  // Boundary tolerance in output pixels: 1, or the largest upscale factor, since the label map
  // is quantised to input pixels.
  int tolerance = 1;
  bool resizes = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

template <typename T>
std::function<std::unique_ptr<google::protobuf::Message>()> Options(std::function<void(T*)> set) {
  return [set] {
    auto options = std::make_unique<T>();
    set(options.get());
    return std::unique_ptr<google::protobuf::Message>(std::move(options));
  };
}

std::vector<Case> Cases() {
  return {
      {"RandomScale", "RandomScale", Options<RandomScaleOptions>([](RandomScaleOptions* o) {
         o->set_min_scale(0.5);
         o->set_max_scale(2.0);
       }),
       2, true},
      {"RandomCropSmaller", "RandomCrop", Options<RandomCropOptions>([](RandomCropOptions* o) {
         o->set_width(100);
         o->set_height(70);
       })},
      {"RandomCropPads", "RandomCrop", Options<RandomCropOptions>([](RandomCropOptions* o) {
         o->set_width(200);
         o->set_height(90);
       })},
      {"RandomRotateKeep", "RandomRotate",
       Options<RandomRotateOptions>([](RandomRotateOptions* o) {
         o->set_min_angle(-40);
         o->set_max_angle(40);
       })},
      {"RandomRotateExpand", "RandomRotate",
       Options<RandomRotateOptions>([](RandomRotateOptions* o) {
         o->set_min_angle(-180);
         o->set_max_angle(180);
         o->set_expand(true);
       })},
      {"HorizontalFlip", "HorizontalFlip",
       Options<HorizontalFlipOptions>([](HorizontalFlipOptions* o) { o->set_probability(1); })},
      {"ResizeShorterSide", "Resize", Options<ResizeOptions>([](ResizeOptions* o) {
         o->set_mode(ResizeOptions::SHORTER_SIDE);
         o->set_size(90);
       }),
       1, true},
      {"ResizeFit", "Resize", Options<ResizeOptions>([](ResizeOptions* o) {
         o->set_mode(ResizeOptions::FIT);
         o->set_width(100);
         o->set_height(100);
       }),
       1, true},
      {"ResizeExact", "Resize", Options<ResizeOptions>([](ResizeOptions* o) {
         o->set_mode(ResizeOptions::EXACT);
         o->set_width(200);
         o->set_height(70);
       }),
       2, true},
      {"PadToDivisor", "PadToDivisor",
       Options<PadToDivisorOptions>([](PadToDivisorOptions* o) { o->set_divisor(32); })},
  };
}

class GeometricPropertyTest : public ::testing::TestWithParam<Case> {
 protected:
  std::unique_ptr<core::Augmentation> Make() {
    absl::StatusOr<std::unique_ptr<core::Augmentation>> made =
        MakeAugmentation(GetParam().plugin, *GetParam().options());
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? std::move(made).value() : nullptr;
  }
};

TEST_P(GeometricPropertyTest, RastersAndCoordinatesAgree) {
  std::unique_ptr<core::Augmentation> augmentation = Make();
  ASSERT_NE(augmentation, nullptr);
  const int tolerance = GetParam().tolerance;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    core::Sample sample = MakeSample(seed);
    std::mt19937_64 rng(seed);
    ASSERT_TRUE(augmentation->Apply(&sample, rng).ok());
    const cv::Size size = sample.image.size();
    ASSERT_EQ(sample.semantic.size(), size);

    // Only original ids and the 255 padding.
    for (int r = 0; r < size.height; ++r) {
      for (int c = 0; c < size.width; ++c) {
        const int v = sample.semantic.at<uint8_t>(r, c);
        ASSERT_TRUE(v <= kTexts || v == 255) << v;
      }
    }
    // Targets moved with the label map (their padding is 0 instead of 255).
    cv::Mat target_as_labels;
    sample.targets.at("label_as_float").convertTo(target_as_labels, CV_8U);
    cv::Mat expected_target = sample.semantic.clone();
    expected_target.setTo(0, sample.semantic == 255);
    EXPECT_EQ(cv::countNonZero(target_as_labels != expected_target), 0);

    std::set<int> present;
    for (const core::TextInstance& text : sample.texts) {
      const int k = std::stoi(text.transcription);
      present.insert(k);
      const cv::Mat from_raster = sample.semantic == k + 1;
      const cv::Mat from_polygon = Rasterize(text.polygon, size);
      EXPECT_TRUE(WithinBoundaryTolerance(from_raster, from_polygon, tolerance)) << "text " << k;
      if (!text.ignore && cv::countNonZero(from_polygon) >= 300) {
        EXPECT_GT(MaskIoU(from_raster, from_polygon), 0.9) << "text " << k;
      }
    }
    // Nothing visible was lost: a label region of real size has its text.
    for (int k = 0; k < kTexts; ++k) {
      if (cv::countNonZero(sample.semantic == k + 1) > 20) {
        EXPECT_TRUE(present.count(k)) << "text " << k << " dropped but visible";
      }
    }

    for (const core::ObjectInstance& object : sample.objects) {
      const int k = static_cast<int>(object.annotation_id);
      const cv::Mat from_raster = sample.semantic == k + 1;
      cv::Mat mask(size, CV_8U, cv::Scalar(0));
      if (object.rle.height > 0) {
        absl::StatusOr<cv::Mat> decoded = core::DecodeRle(object.rle);
        ASSERT_TRUE(decoded.ok()) << decoded.status();
        mask = *decoded;
        // An RLE mask is warped like the label map, so it matches it exactly.
        EXPECT_EQ(cv::countNonZero((mask != 0) != from_raster), 0) << "object " << k;
        const cv::Rect bounds = cv::boundingRect(mask);
        EXPECT_EQ(object.box, cv::Rect2f(bounds)) << "object " << k;
      } else {
        ASSERT_FALSE(object.polygons.empty());
        for (const core::Polygon& polygon : object.polygons) mask |= Rasterize(polygon, size);
        EXPECT_TRUE(WithinBoundaryTolerance(from_raster, mask, tolerance)) << "object " << k;
        std::vector<cv::Point2f> points;
        for (const core::Polygon& polygon : object.polygons) {
          points.insert(points.end(), polygon.begin(), polygon.end());
        }
        const cv::Rect2f bounds = PointBounds(points);
        EXPECT_NEAR(object.box.x, bounds.x, 1.0) << "object " << k;
        EXPECT_NEAR(object.box.y, bounds.y, 1.0) << "object " << k;
        EXPECT_NEAR(object.box.br().x, bounds.br().x, 1.0) << "object " << k;
        EXPECT_NEAR(object.box.br().y, bounds.br().y, 1.0) << "object " << k;
      }
      for (const cv::Point2f& corner : {object.box.tl(), object.box.br()}) {
        EXPECT_GE(corner.x, 0);
        EXPECT_GE(corner.y, 0);
        EXPECT_LE(corner.x, size.width);
        EXPECT_LE(corner.y, size.height);
      }
    }

    if (GetParam().resizes) {
      EXPECT_DOUBLE_EQ(sample.scale_x, static_cast<double>(size.width) / kWidth);
      EXPECT_DOUBLE_EQ(sample.scale_y, static_cast<double>(size.height) / kHeight);
    } else {
      EXPECT_EQ(sample.scale_x, 1.0);
      EXPECT_EQ(sample.scale_y, 1.0);
    }
  }
}

TEST_P(GeometricPropertyTest, SameSeedSameOutput) {
  std::unique_ptr<core::Augmentation> augmentation = Make();
  ASSERT_NE(augmentation, nullptr);
  for (uint64_t seed = 0; seed < 4; ++seed) {
    core::Sample a = MakeSample(7), b = MakeSample(7);
    std::mt19937_64 rng_a(seed), rng_b(seed);
    ASSERT_TRUE(augmentation->Apply(&a, rng_a).ok());
    ASSERT_TRUE(augmentation->Apply(&b, rng_b).ok());
    ASSERT_EQ(a.image.size(), b.image.size());
    EXPECT_EQ(cv::norm(a.image, b.image, cv::NORM_INF), 0);
    EXPECT_EQ(cv::norm(a.semantic, b.semantic, cv::NORM_INF), 0);
    ASSERT_EQ(a.texts.size(), b.texts.size());
    for (size_t i = 0; i < a.texts.size(); ++i) {
      EXPECT_EQ(a.texts[i].polygon, b.texts[i].polygon);
      EXPECT_EQ(a.texts[i].ignore, b.texts[i].ignore);
    }
    ASSERT_EQ(a.objects.size(), b.objects.size());
    for (size_t i = 0; i < a.objects.size(); ++i) {
      EXPECT_EQ(a.objects[i].box, b.objects[i].box);
      EXPECT_EQ(a.objects[i].rle.counts, b.objects[i].rle.counts);
    }
    EXPECT_EQ(a.scale_x, b.scale_x);
    EXPECT_EQ(a.scale_y, b.scale_y);
    // The generator advanced the same way, so later augmentations stay in step too.
    EXPECT_EQ(rng_a(), rng_b());
  }
}

INSTANTIATE_TEST_SUITE_P(Augmentations, GeometricPropertyTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace vision::data::augmentations
