#include "evaluation/icdar2015/icdar2015_evaluator.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "google/protobuf/any.pb.h"
#include "gtest/gtest.h"

namespace vision::evaluation::icdar2015 {
namespace {

core::Polygon Box(float x, float y, float w, float h) {
  return {{x, y}, {x + w, y}, {x + w, y + h}, {x, y + h}};
}

// A w x h rectangle centred at (cx, cy), turned by `degrees`.
core::Polygon Rotated(float cx, float cy, float w, float h, float degrees) {
  const double a = degrees * M_PI / 180, c = std::cos(a), s = std::sin(a);
  core::Polygon polygon;
  for (const auto& [u, v] : {std::pair{-0.5, -0.5}, {0.5, -0.5}, {0.5, 0.5}, {-0.5, 0.5}}) {
    const double x = u * w, y = v * h;
    polygon.emplace_back(static_cast<float>(cx + c * x - s * y),
                         static_cast<float>(cy + s * x + c * y));
  }
  return polygon;
}

core::Sample Texts(const std::vector<core::Polygon>& polygons,
                   const std::vector<bool>& ignore = {}) {
  core::Sample sample;
  sample.id = "img";
  for (size_t i = 0; i < polygons.size(); ++i) {
    core::TextInstance text;
    text.polygon = polygons[i];
    text.ignore = i < ignore.size() && ignore[i];
    text.transcription = text.ignore ? "###" : "word";
    sample.texts.push_back(text);
  }
  return sample;
}

std::unique_ptr<ICDAR2015HmeanEvaluator> Make() {
  absl::StatusOr<std::unique_ptr<ICDAR2015HmeanEvaluator>> made =
      ICDAR2015HmeanEvaluator::Create(ICDAR2015HmeanOptions());
  EXPECT_TRUE(made.ok()) << made.status();
  return std::move(made).value();
}

// Evaluates one image; returns {precision, recall, hmean} and the state.
struct Result {
  double precision, recall, hmean;
  std::vector<double> state;
};

Result Evaluate(const core::Sample& det, const core::Sample& gt) {
  std::unique_ptr<ICDAR2015HmeanEvaluator> evaluator = Make();
  EXPECT_TRUE(evaluator->Add(det, gt).ok());
  std::map<std::string, double> m = evaluator->Compute();
  return {m.at("precision"), m.at("recall"), m.at("hmean"), evaluator->State()};
}

TEST(GeometryTest, AreasAndIoUAreExact) {
  EXPECT_DOUBLE_EQ(PolygonArea(Box(0, 0, 10, 10)), 100);
  // The helper fills a bow-tie's two triangles (non-zero fill), but no bow-tie reaches the
  // metric: rule 0 drops it (InvalidPolygonsTest).
  EXPECT_DOUBLE_EQ(PolygonArea({{0, 0}, {10, 0}, {0, 10}, {10, 10}}), 50);
  // A 45-degree diamond inscribed in a square covers half of it.
  const core::Polygon diamond = {{5, 0}, {10, 5}, {5, 10}, {0, 5}};
  EXPECT_DOUBLE_EQ(IntersectionArea(diamond, Box(0, 0, 10, 10)), 50);
  EXPECT_DOUBLE_EQ(IoU(diamond, Box(0, 0, 10, 10)), 0.5);
  EXPECT_DOUBLE_EQ(IoU(Box(0, 0, 10, 10), Box(20, 0, 10, 10)), 0);
  // A rotated 20x10 rectangle against itself moved by (2, 0): the overlap is
  // (20 - 2 cos 30)(10 - 2 sin 30).
  const double overlap = (20 - 2 * std::cos(M_PI / 6)) * (10 - 2 * std::sin(M_PI / 6));
  EXPECT_NEAR(IoU(Rotated(50, 50, 20, 10, 30), Rotated(52, 50, 20, 10, 30)),
              overlap / (400 - overlap), 1e-4);
}

TEST(ICDAR2015HmeanTest, PerfectMatch) {
  const core::Sample gt = Texts({Box(0, 0, 10, 10), Box(20, 0, 10, 10)});
  const Result r = Evaluate(gt, gt);
  EXPECT_EQ(r.precision, 1);
  EXPECT_EQ(r.recall, 1);
  EXPECT_EQ(r.hmean, 1);
  EXPECT_EQ(r.state, (std::vector<double>{2, 2, 2}));
}

TEST(ICDAR2015HmeanTest, OneMiss) {
  const Result r =
      Evaluate(Texts({Box(0, 0, 10, 10)}), Texts({Box(0, 0, 10, 10), Box(20, 0, 10, 10)}));
  EXPECT_EQ(r.precision, 1);
  EXPECT_EQ(r.recall, 0.5);
  EXPECT_DOUBLE_EQ(r.hmean, 2.0 / 3);
}

TEST(ICDAR2015HmeanTest, OneFalsePositive) {
  const Result r =
      Evaluate(Texts({Box(0, 0, 10, 10), Box(50, 50, 10, 10)}), Texts({Box(0, 0, 10, 10)}));
  EXPECT_EQ(r.precision, 0.5);
  EXPECT_EQ(r.recall, 1);
  EXPECT_DOUBLE_EQ(r.hmean, 2.0 / 3);
}

TEST(ICDAR2015HmeanTest, DetectionInsideDontCareIsExcluded) {
  const core::Sample gt = Texts({Box(0, 0, 10, 10), Box(100, 0, 40, 20)}, {false, true});
  // Inside the don't-care region: neither a hit nor a false positive.
  Result r = Evaluate(Texts({Box(0, 0, 10, 10), Box(105, 5, 10, 10)}), gt);
  EXPECT_EQ(r.state, (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(r.precision, 1);
  EXPECT_EQ(r.recall, 1);
  // Exactly half inside is not "more than half": it stays, as a false positive.
  r = Evaluate(Texts({Box(0, 0, 10, 10), Box(95, 5, 10, 10)}), gt);
  EXPECT_EQ(r.state, (std::vector<double>{1, 1, 2}));
  // Just over half inside is excluded.
  r = Evaluate(Texts({Box(0, 0, 10, 10), Box(95.2f, 5, 10, 10)}), gt);
  EXPECT_EQ(r.state, (std::vector<double>{1, 1, 1}));
}

TEST(ICDAR2015HmeanTest, DontCareGroundTruthIsNeitherHitNorMiss) {
  const Result r = Evaluate(Texts({}), Texts({Box(0, 0, 10, 10)}, {true}));
  EXPECT_EQ(r.state, (std::vector<double>{0, 0, 0}));
}

TEST(ICDAR2015HmeanTest, TwoDetectionsOnOneGroundTruthMatchOnce) {
  const Result r =
      Evaluate(Texts({Box(0, 0, 10, 10), Box(0.5f, 0, 10, 10)}), Texts({Box(0, 0, 10, 10)}));
  EXPECT_EQ(r.state, (std::vector<double>{1, 1, 2}));
  EXPECT_EQ(r.precision, 0.5);
  EXPECT_EQ(r.recall, 1);
}

TEST(ICDAR2015HmeanTest, GreedyInIndexOrderLikeTheOfficialScript) {
  // Ground truth 0 matches both detections (IoU 9/11 each) and takes detection 0, the first in
  // index order; ground truth 1 matches only detection 0 (IoU 8/12; 6/14 with detection 1), so
  // it stays unmatched although an optimal assignment would pair everything.
  const core::Sample gt = Texts({Box(0, 0, 10, 10), Box(3, 0, 10, 10)});
  const Result r = Evaluate(Texts({Box(1, 0, 10, 10), Box(-1, 0, 10, 10)}), gt);
  EXPECT_EQ(r.state, (std::vector<double>{1, 2, 2}));
}

TEST(ICDAR2015HmeanTest, IoUThresholdIsStrict) {
  const core::Sample gt = Texts({Box(0, 0, 10, 10)});
  // IoU = w / 10 for a full-height detection of width w inside the ground truth.
  EXPECT_EQ(Evaluate(Texts({Box(0, 0, 4.9f, 10)}), gt).state[0], 0);
  EXPECT_EQ(Evaluate(Texts({Box(0, 0, 5, 10)}), gt).state[0], 0);
  EXPECT_EQ(Evaluate(Texts({Box(0, 0, 5.1f, 10)}), gt).state[0], 1);
}

TEST(ICDAR2015HmeanTest, RotatedQuads) {
  const core::Sample gt = Texts({Rotated(50, 50, 40, 10, 30)});
  // The same quad listed counter-clockwise from another corner matches.
  core::Polygon reordered = Rotated(50, 50, 40, 10, 30);
  std::reverse(reordered.begin(), reordered.end());
  std::rotate(reordered.begin(), reordered.begin() + 2, reordered.end());
  EXPECT_EQ(Evaluate(Texts({reordered}), gt).state[0], 1);
  // Its axis-aligned bounding box has IoU well below 0.5.
  EXPECT_EQ(Evaluate(Texts({Box(50 - 19.82f, 50 - 14.33f, 39.64f, 28.66f)}), gt).state[0], 0);
  // Turned by 5 degrees about its centre: still a match.
  EXPECT_EQ(Evaluate(Texts({Rotated(50, 50, 40, 10, 35)}), gt).state[0], 1);
  // Turned by 20 degrees: the thin boxes barely overlap.
  EXPECT_EQ(Evaluate(Texts({Rotated(50, 50, 40, 10, 50)}), gt).state[0], 0);
}

TEST(ICDAR2015HmeanTest, EmptyCases) {
  Result r = Evaluate(Texts({}), Texts({}));
  EXPECT_EQ(r.state, (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(r.precision, 0);
  EXPECT_EQ(r.recall, 0);
  EXPECT_EQ(r.hmean, 0);
  r = Evaluate(Texts({Box(0, 0, 5, 5)}), Texts({}));
  EXPECT_EQ(r.state, (std::vector<double>{0, 0, 1}));
  EXPECT_EQ(r.hmean, 0);
  r = Evaluate(Texts({}), Texts({Box(0, 0, 5, 5)}));
  EXPECT_EQ(r.state, (std::vector<double>{0, 1, 0}));
  EXPECT_EQ(r.precision, 0);
  EXPECT_EQ(r.recall, 0);
}

TEST(ICDAR2015HmeanTest, AccumulatesOverImagesAndResets) {
  std::unique_ptr<ICDAR2015HmeanEvaluator> evaluator = Make();
  ASSERT_TRUE(evaluator->Add(Texts({Box(0, 0, 10, 10)}), Texts({Box(0, 0, 10, 10)})).ok());
  ASSERT_TRUE(evaluator->Add(Texts({Box(50, 0, 10, 10)}), Texts({Box(0, 0, 10, 10)})).ok());
  EXPECT_EQ(evaluator->State(), (std::vector<double>{1, 2, 2}));
  EXPECT_EQ(evaluator->Compute().at("hmean"), 0.5);
  evaluator->Reset();
  EXPECT_EQ(evaluator->State(), (std::vector<double>{0, 0, 0}));
}

TEST(ICDAR2015HmeanTest, MergedHalvesEqualTheWhole) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> coord(0, 60), side(5, 25), jitter(-4, 4);
  std::vector<std::pair<core::Sample, core::Sample>> images;
  for (int i = 0; i < 20; ++i) {
    std::vector<core::Polygon> gts, dets;
    std::vector<bool> ignore;
    for (int k = 0; k < 4; ++k) {
      const core::Polygon gt = Box(coord(rng), coord(rng), side(rng), side(rng));
      gts.push_back(gt);
      ignore.push_back(rng() % 4 == 0);
      if (rng() % 3 != 0) {
        dets.push_back(Box(gt[0].x + jitter(rng), gt[0].y + jitter(rng), gt[2].x - gt[0].x,
                           gt[2].y - gt[0].y));
      }
    }
    dets.push_back(Box(coord(rng), coord(rng), side(rng), side(rng)));
    images.emplace_back(Texts(dets), Texts(gts, ignore));
  }
  std::unique_ptr<ICDAR2015HmeanEvaluator> whole = Make(), first = Make(), second = Make();
  for (size_t i = 0; i < images.size(); ++i) {
    ASSERT_TRUE(whole->Add(images[i].first, images[i].second).ok());
    ASSERT_TRUE((i % 2 ? first : second)->Add(images[i].first, images[i].second).ok());
  }
  // As the engine does: every rank merges the other ranks' serialised states into its own.
  ASSERT_TRUE(first->MergeState(second->SerializeState()).ok());
  EXPECT_EQ(first->State(), whole->State());
  EXPECT_EQ(first->Compute(), whole->Compute());
  // Not a degenerate case: some matches, misses and false positives.
  const std::map<std::string, double> m = whole->Compute();
  EXPECT_GT(m.at("precision"), 0.2);
  EXPECT_LT(m.at("precision"), 1);
  EXPECT_GT(m.at("recall"), 0.2);
  EXPECT_LT(m.at("recall"), 1);
}

TEST(ICDAR2015HmeanTest, RegisteredWithDefaultsAndRejectsBadOptions) {
  absl::StatusOr<std::unique_ptr<core::Evaluator>> evaluator =
      core::EvaluatorRegistry::Get().Create("ICDAR2015Hmean", google::protobuf::Any());
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  EXPECT_EQ((*evaluator)->MainMetric(), "hmean");
  ICDAR2015HmeanOptions options;
  options.set_iou_threshold(1.5);
  google::protobuf::Any any;
  any.PackFrom(options);
  EXPECT_FALSE(core::EvaluatorRegistry::Get().Create("ICDAR2015Hmean", any).ok());
}

TEST(ICDAR2015HmeanTest, ScoresClassAgnosticTextPolygons) {
  absl::StatusOr<std::unique_ptr<core::Evaluator>> evaluator =
      core::EvaluatorRegistry::Get().Create("ICDAR2015Hmean", google::protobuf::Any());
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  const std::optional<core::TaskRequirements> needs = (*evaluator)->DataRequirements();
  ASSERT_TRUE(needs.has_value());
  EXPECT_EQ(needs->annotation_kind, core::AnnotationKind::kTextPolygons);
  EXPECT_EQ(needs->num_classes, std::nullopt);
}

TEST(ICDAR2015HmeanTest, SerializedStateRoundTripsAndBadStatesAreRejected) {
  std::unique_ptr<ICDAR2015HmeanEvaluator> evaluator = Make();
  ASSERT_TRUE(evaluator->Add(Texts({Box(0, 0, 10, 10)}), Texts({Box(0, 0, 10, 10)})).ok());
  std::unique_ptr<ICDAR2015HmeanEvaluator> other = Make();
  ASSERT_TRUE(other->MergeState(evaluator->SerializeState()).ok());
  ASSERT_TRUE(other->MergeState(evaluator->SerializeState()).ok());
  EXPECT_EQ(other->State(), (std::vector<double>{2, 2, 2}));
  for (const std::string bad : {"", "ICDAR2015Hmean 1 2", "ICDAR2015Hmean 1 2 3", "COCO 1 2 3",
                                "ICDAR2015Hmean 1 x 3 0 0", "ICDAR2015Hmean 1 -2 3 0 0"}) {
    EXPECT_EQ(other->MergeState(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(other->State(), (std::vector<double>{2, 2, 2}));
}

TEST(ICDAR2015HmeanTest, RejectsMismatchedSamples) {
  std::unique_ptr<ICDAR2015HmeanEvaluator> evaluator = Make();
  core::Sample prediction = Texts({Box(0, 0, 10, 10)});
  prediction.id = "img_2.jpg";
  EXPECT_EQ(evaluator->Add(prediction, Texts({Box(0, 0, 10, 10)})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(evaluator->State(), (std::vector<double>{0, 0, 0}));
}

TEST(ICDAR2015HmeanTest, RejectsNonFiniteCoordinates) {
  std::unique_ptr<ICDAR2015HmeanEvaluator> evaluator = Make();
  const absl::Status status =
      evaluator->Add(Texts({Box(0, 0, NAN, 1)}), Texts({Box(0, 0, 10, 10)}));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

// Rule 0, hand-computed: invalid polygons are removed before matching, as the reference
// evaluators' `Polygon(points).is_valid and .is_simple` check does.
const core::Polygon kBowTie = {{20, 0}, {30, 0}, {20, 10}, {30, 10}};  // crosses at (25, 5)

TEST(InvalidPolygonsTest, BowTieGroundTruthLeavesRecallsDenominator) {
  // Without rule 0 the bow-tie would be a missed word: recall 1/2.
  const Result r = Evaluate(Texts({Box(0, 0, 10, 10)}), Texts({Box(0, 0, 10, 10), kBowTie}));
  EXPECT_EQ(r.state, (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(r.recall, 1);
  EXPECT_EQ(r.precision, 1);
}

TEST(InvalidPolygonsTest, ZeroAreaAndBowTieDetectionsAreNotDetections) {
  const core::Polygon line = {{0, 50}, {10, 50}, {20, 50}, {5, 50}};
  std::unique_ptr<ICDAR2015HmeanEvaluator> evaluator = Make();
  ASSERT_TRUE(
      evaluator->Add(Texts({Box(0, 0, 10, 10), line, kBowTie}), Texts({Box(0, 0, 10, 10)})).ok());
  // Without rule 0: 3 care detections, precision 1/3.
  EXPECT_EQ(evaluator->State(), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(evaluator->InvalidDropped(), (std::vector<double>{0, 2}));
  const std::map<std::string, double> m = evaluator->Compute();
  EXPECT_EQ(m.at("precision"), 1);
  EXPECT_EQ(m.at("invalid_gt_dropped"), 0);
  EXPECT_EQ(m.at("invalid_det_dropped"), 2);
}

TEST(InvalidPolygonsTest, DroppedDontCareGroundTruthExcludesNothing) {
  // A detection filling the bow-tie's lower triangle (20, 0), (30, 0), (25, 5): were the
  // bow-tie a don't-care region it would be excluded (covered 100%); dropped, it is a false
  // positive. Precision 1/2, recall 1/1.
  const core::Polygon in_lobe = {{21, 0.5f}, {29, 0.5f}, {25, 4}};
  const Result r = Evaluate(Texts({Box(0, 0, 10, 10), in_lobe}),
                            Texts({Box(0, 0, 10, 10), kBowTie}, {false, true}));
  EXPECT_EQ(r.state, (std::vector<double>{1, 1, 2}));
  EXPECT_EQ(r.precision, 0.5);
  EXPECT_EQ(r.recall, 1);
}

TEST(InvalidPolygonsTest, DroppedCountsMergeAndReset) {
  std::unique_ptr<ICDAR2015HmeanEvaluator> a = Make(), b = Make();
  ASSERT_TRUE(a->Add(Texts({kBowTie}), Texts({kBowTie, Box(0, 0, 10, 10)})).ok());
  ASSERT_TRUE(b->MergeState(a->SerializeState()).ok());
  ASSERT_TRUE(b->MergeState(a->SerializeState()).ok());
  EXPECT_EQ(b->InvalidDropped(), (std::vector<double>{2, 2}));
  EXPECT_EQ(b->State(), (std::vector<double>{0, 2, 0}));
  b->Reset();
  EXPECT_EQ(b->InvalidDropped(), (std::vector<double>{0, 0}));
}

}  // namespace
}  // namespace vision::evaluation::icdar2015
