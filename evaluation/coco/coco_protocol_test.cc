#include "evaluation/coco/coco_protocol.h"

#include <opencv2/core.hpp>
#include <vector>

#include "core/run_length_mask.h"
#include "gtest/gtest.h"

namespace vision::evaluation::coco {
namespace {

constexpr std::array<int, 3> kMaxDets = {1, 10, 100};

core::RunLengthMask Rect(int height, int width, int x, int y, int w, int h) {
  cv::Mat mask = cv::Mat::zeros(height, width, CV_8U);
  mask(cv::Rect(x, y, w, h)).setTo(1);
  return core::EncodeRle(mask);
}

// Flat [x0, y0, x1, y1, ...] as a polygon.
core::Polygon Poly(const std::vector<float>& flat) {
  core::Polygon polygon;
  for (size_t i = 0; i + 1 < flat.size(); i += 2) polygon.emplace_back(flat[i], flat[i + 1]);
  return polygon;
}

TEST(GeometryTest, BoxIoUAndCrowdDenominator) {
  EXPECT_DOUBLE_EQ(BoxIoU({0, 0, 10, 10}, {5, 0, 10, 10}, false), 50.0 / 150);
  // Against a crowd region the union is the detection's own area.
  EXPECT_DOUBLE_EQ(BoxIoU({0, 0, 10, 10}, {5, 0, 10, 10}, true), 50.0 / 100);
  EXPECT_DOUBLE_EQ(BoxIoU({0, 0, 10, 10}, {10, 0, 10, 10}, false), 0);
}

TEST(GeometryTest, RleIoUWalksRuns) {
  const core::RunLengthMask a = Rect(8, 8, 0, 0, 4, 4);
  const core::RunLengthMask b = Rect(8, 8, 2, 2, 4, 4);
  EXPECT_EQ(core::RleArea(a), 16);
  EXPECT_DOUBLE_EQ(RleIoU(a, b, false), 4.0 / 28);
  EXPECT_DOUBLE_EQ(RleIoU(a, b, true), 4.0 / 16);
  EXPECT_DOUBLE_EQ(RleIoU(a, Rect(8, 8, 5, 5, 2, 2), false), 0);
  EXPECT_DOUBLE_EQ(RleIoU(a, a, false), 1);
  // A mask starting with foreground (a zero-length first run).
  const core::RunLengthMask corner = Rect(8, 8, 0, 0, 1, 1);
  ASSERT_EQ(corner.counts.front(), 0u);
  EXPECT_DOUBLE_EQ(RleIoU(corner, a, false), 1.0 / 16);
}

// Expected runs from pycocotools 2.0.11: maskUtils.merge(maskUtils.frPyObjects(poly, 10, 12)).
TEST(GeometryTest, PolygonsRasteriseAsPycocotools) {
  const core::RunLengthMask square = core::RleFromPolygons({Poly({0, 0, 4, 0, 4, 4, 0, 4})}, 10, 12);
  EXPECT_EQ(core::EncodeCocoRleString(square.counts), "04600000`2");
  EXPECT_EQ(core::RleArea(square), 16);
  const core::RunLengthMask triangle =
      core::RleFromPolygons({Poly({1.5, 1.25, 7.75, 2.5, 3.125, 8.0})}, 10, 12);
  EXPECT_EQ(core::EncodeCocoRleString(triangle.counts), "e0472MN2O1Oa1");
  EXPECT_EQ(core::RleArea(triangle), 19);
  const core::RunLengthMask two =
      core::RleFromPolygons({Poly({0, 0, 4, 0, 4, 4, 0, 4}), Poly({2, 2, 6, 2, 6, 6, 2, 6})}, 10, 12);
  EXPECT_EQ(core::RleArea(two), 28);
  EXPECT_EQ(core::RleArea(core::RleUnion(square, square)), 16);
}

Instance Box(int label, double x, double y, double w, double h, double score = 1,
             bool crowd = false) {
  Instance instance;
  instance.label = label;
  instance.box = {x, y, w, h};
  instance.area = w * h;
  instance.score = score;
  instance.crowd = crowd;
  return instance;
}

CocoResult Evaluate(const std::vector<ImageRecord>& images, int num_labels = 1) {
  std::vector<const ImageRecord*> pointers;
  for (const ImageRecord& image : images) pointers.push_back(&image);
  absl::StatusOr<CocoResult> result = EvaluateCoco(pointers, num_labels, IouType::kBbox, kMaxDets);
  EXPECT_TRUE(result.ok()) << result.status();
  return *result;
}

TEST(EvaluateCocoTest, PerfectDetectionAboveFalsePositive) {
  ImageRecord image;
  image.truths = {Box(0, 0, 0, 10, 10)};
  image.detections = {Box(0, 0, 0, 10, 10, 0.9), Box(0, 50, 50, 10, 10, 0.8)};
  const CocoResult r = Evaluate({image});
  EXPECT_DOUBLE_EQ(r.stats[0], 1);   // AP
  EXPECT_DOUBLE_EQ(r.stats[3], 1);   // APs: the 100 px object is small
  EXPECT_DOUBLE_EQ(r.stats[4], -1);  // APm: no medium object
  EXPECT_DOUBLE_EQ(r.stats[5], -1);
  EXPECT_DOUBLE_EQ(r.stats[6], 1);  // AR1
  EXPECT_DOUBLE_EQ(r.class_ap[0], 1);
}

TEST(EvaluateCocoTest, FalsePositiveRankedFirstHalvesPrecision) {
  ImageRecord image;
  image.truths = {Box(0, 0, 0, 10, 10)};
  image.detections = {Box(0, 0, 0, 10, 10, 0.8), Box(0, 50, 50, 10, 10, 0.9)};
  const CocoResult r = Evaluate({image});
  // Precision 0 then 1/2; the envelope makes it 1/2 at every recall level.
  EXPECT_DOUBLE_EQ(r.stats[0], 0.5);
  EXPECT_DOUBLE_EQ(r.stats[6], 0);  // AR1: the one detection kept is the false positive
  EXPECT_DOUBLE_EQ(r.stats[7], 1);  // AR10
}

TEST(EvaluateCocoTest, IoUThresholdsAndCategories) {
  // IoU 0.62 against the truth: a hit at 0.50, 0.55 and 0.60 only, so AP = 3/10, AP50 = 1,
  // AP75 = 0 for label 0.
  ImageRecord image;
  image.truths = {Box(0, 0, 0, 10, 10), Box(1, 0, 0, 10, 10)};
  image.detections = {Box(0, 0, 0, 10, 6.2, 0.9)};
  const CocoResult r = Evaluate({image}, /*num_labels=*/3);
  // Label 1 has a truth and no detection: AP 0; label 2 has nothing: left out.
  EXPECT_DOUBLE_EQ(r.class_ap[0], 0.3);
  EXPECT_DOUBLE_EQ(r.class_ap[1], 0);
  EXPECT_DOUBLE_EQ(r.class_ap[2], -1);
  EXPECT_DOUBLE_EQ(r.stats[0], 0.15);
  EXPECT_DOUBLE_EQ(r.stats[1], 0.5);
  EXPECT_DOUBLE_EQ(r.stats[2], 0);
}

TEST(EvaluateCocoTest, CrowdAbsorbsDetectionsAndIsNotCounted) {
  ImageRecord image;
  image.truths = {Box(0, 0, 0, 10, 10), Box(0, 40, 40, 20, 20, 1, /*crowd=*/true)};
  // Two detections inside the crowd region (IoU 1 by its rule) outrank the hit: ignored, not
  // false positives.
  image.detections = {Box(0, 40, 40, 5, 5, 0.95), Box(0, 50, 50, 5, 5, 0.9),
                      Box(0, 0, 0, 10, 10, 0.5)};
  const CocoResult r = Evaluate({image});
  EXPECT_DOUBLE_EQ(r.stats[0], 1);
  EXPECT_DOUBLE_EQ(r.stats[8], 1);
}

TEST(EvaluateCocoTest, EqualScoresKeepImageOrder) {
  // A false positive in the first image and a hit in the second with the same score: the
  // stable order puts the false positive first, so AP = 1/2 (precision 0 then 1/2).
  ImageRecord first, second;
  first.image_id = 1;
  first.detections = {Box(0, 0, 0, 10, 10, 0.5)};
  second.image_id = 2;
  second.truths = {Box(0, 0, 0, 10, 10)};
  second.detections = {Box(0, 0, 0, 10, 10, 0.5)};
  EXPECT_DOUBLE_EQ(Evaluate({first, second}).stats[0], 0.5);
  EXPECT_DOUBLE_EQ(Evaluate({second, first}).stats[0], 1);
}

TEST(EvaluateCocoTest, MaxDetsCutDetectionsPerImage) {
  ImageRecord image;
  image.truths = {Box(0, 0, 0, 10, 10), Box(0, 20, 0, 10, 10)};
  image.detections = {Box(0, 0, 0, 10, 10, 0.9), Box(0, 20, 0, 10, 10, 0.8)};
  const CocoResult r = Evaluate({image});
  EXPECT_DOUBLE_EQ(r.stats[6], 0.5);  // AR1
  EXPECT_DOUBLE_EQ(r.stats[7], 1);    // AR10
}

TEST(EvaluateCocoTest, MaskSizeMismatchIsAnError) {
  ImageRecord image;
  Instance truth = Box(0, 0, 0, 4, 4);
  truth.mask = Rect(8, 8, 0, 0, 4, 4);
  Instance detection = Box(0, 0, 0, 4, 4, 0.5);
  detection.mask = Rect(8, 9, 0, 0, 4, 4);
  image.truths = {truth};
  image.detections = {detection};
  const absl::StatusOr<CocoResult> r = EvaluateCoco({&image}, 1, IouType::kSegm, kMaxDets);
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace vision::evaluation::coco
