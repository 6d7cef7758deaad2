#include "core/polygon.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::core {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

Polygon Box(float x, float y, float width, float height) {
  return {{x, y}, {x + width, y}, {x + width, y + height}, {x, y + height}};
}

// Crossing itself at (5, 5): two triangles of area 25 with opposite orientations.
const Polygon kBowTie = {{0, 0}, {10, 0}, {0, 10}, {10, 10}};

TEST(PolygonAreaTest, ShoelaceOfSimplePolygonsInEitherOrientation) {
  EXPECT_DOUBLE_EQ(PolygonArea(Box(1, 2, 10, 20)), 200);
  Polygon clockwise = Box(1, 2, 10, 20);
  std::reverse(clockwise.begin(), clockwise.end());
  EXPECT_DOUBLE_EQ(PolygonArea(clockwise), 200);
  EXPECT_DOUBLE_EQ(PolygonArea({{0, 0}, {4, 0}, {0, 3}}), 6);
  // An L: the 4 x 4 square without its 2 x 2 top-right quarter.
  EXPECT_DOUBLE_EQ(PolygonArea({{0, 0}, {2, 0}, {2, 2}, {4, 2}, {4, 4}, {0, 4}}), 12);
  EXPECT_DOUBLE_EQ(PolygonArea({{0.5f, 0.25f}, {1.5f, 0.25f}, {1.5f, 0.75f}, {0.5f, 0.75f}}), 0.5);
}

TEST(PolygonAreaTest, FewerThanThreePointsAndCancellingLobesGiveZero) {
  EXPECT_EQ(PolygonArea({}), 0);
  EXPECT_EQ(PolygonArea({{3, 4}}), 0);
  EXPECT_EQ(PolygonArea({{3, 4}, {7.5f, 1.25f}}), 0);
  EXPECT_EQ(PolygonArea(kBowTie), 0);
}

TEST(FilledPolygonAreaTest, CountsEveryLobeOnce) {
  EXPECT_DOUBLE_EQ(FilledPolygonArea(Box(0, 0, 10, 10)), 100);
  EXPECT_DOUBLE_EQ(FilledPolygonArea(kBowTie), 50);
  EXPECT_EQ(FilledPolygonArea({{0, 0}, {10, 0}}), 0);
}

TEST(FilledPolygonAreaTest, RoundsCoordinatesToA1024thOfAPixel) {
  // 0.3 px is 307.2 units: rounded to 307, the side is 307 / 1024 px.
  const double side = 307.0 / 1024.0;
  EXPECT_DOUBLE_EQ(FilledPolygonArea(Box(0, 0, 0.3f, 0.3f)), side * side);
}

TEST(IntersectionAreaTest, HandComputedOverlaps) {
  EXPECT_DOUBLE_EQ(IntersectionArea(Box(0, 0, 10, 10), Box(5, 5, 10, 10)), 25);
  EXPECT_DOUBLE_EQ(IntersectionArea(Box(0, 0, 10, 10), Box(2, 3, 4, 5)), 20);
  // The diamond through the box's edge midpoints covers half of it.
  const Polygon diamond = {{5, 0}, {10, 5}, {5, 10}, {0, 5}};
  EXPECT_DOUBLE_EQ(IntersectionArea(diamond, Box(0, 0, 10, 10)), 50);
  // The bow-tie's lower triangle (0, 0), (10, 0), (5, 5) lies in the bottom half.
  EXPECT_DOUBLE_EQ(IntersectionArea(kBowTie, Box(0, 0, 10, 5)), 25);
}

TEST(IntersectionAreaTest, DisjointTouchingAndDegenerateGiveZero) {
  EXPECT_EQ(IntersectionArea(Box(0, 0, 10, 10), Box(20, 0, 5, 5)), 0);
  EXPECT_EQ(IntersectionArea(Box(0, 0, 10, 10), Box(10, 0, 5, 5)), 0);
  EXPECT_EQ(IntersectionArea(Box(0, 0, 10, 10), {{1, 1}, {5, 5}}), 0);
}

TEST(PolygonBoundsTest, TightUnroundedBoxes) {
  const Polygon quad = {{2.5f, 1.25f}, {7.75f, 3}, {6, 9.5f}, {1.5f, 4}};
  EXPECT_EQ(PolygonBounds(quad), cv::Rect2f(1.5f, 1.25f, 6.25f, 8.25f));
  EXPECT_EQ(PolygonBounds(std::vector<Polygon>{quad, Box(-3, 5, 2, 10)}),
            cv::Rect2f(-3, 1.25f, 10.75f, 13.75f));
  EXPECT_EQ(PolygonBounds(Polygon{{4, -2}}), cv::Rect2f(4, -2, 0, 0));
}

TEST(ClipPolygonToCanvasTest, InsideKeepsItsPointsExactly) {
  // Off the 1/1024 grid, and touching the border: nothing is rounded.
  const Polygon polygon = {{0, 0.1f}, {39.9f, 0}, {40, 40}, {0.3f, 33.3f}};
  EXPECT_THAT(ClipPolygonToCanvas(polygon, cv::Size(40, 40)), ElementsAre(polygon));
}

TEST(ClipPolygonToCanvasTest, KeepsTheVisiblePart) {
  const std::vector<Polygon> pieces = ClipPolygonToCanvas(Box(-6, 10, 10, 10), cv::Size(40, 30));
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_DOUBLE_EQ(PolygonArea(pieces[0]), 40);
  for (const cv::Point2f& p : pieces[0]) {
    EXPECT_GE(p.x, 0);
    EXPECT_LE(p.x, 4);
  }
}

TEST(ClipPolygonToCanvasTest, SplitsAConcavePolygonThatLeavesAndReenters) {
  // An arch whose top bar lies above the canvas: its two legs, 5 x 10 each, remain.
  const Polygon arch = {{0, -10}, {20, -10}, {20, 10}, {15, 10},
                        {15, -5}, {5, -5},   {5, 10},  {0, 10}};
  const std::vector<Polygon> pieces = ClipPolygonToCanvas(arch, cv::Size(40, 40));
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_DOUBLE_EQ(PolygonArea(pieces[0]), 50);
  EXPECT_DOUBLE_EQ(PolygonArea(pieces[1]), 50);
}

TEST(ClipPolygonToCanvasTest, NothingVisibleGivesNoPiece) {
  EXPECT_THAT(ClipPolygonToCanvas(Box(50, 5, 10, 10), cv::Size(40, 40)), IsEmpty());
  // Only its right edge touches the canvas: a line, not a piece.
  EXPECT_THAT(ClipPolygonToCanvas(Box(-5, 5, 5, 10), cv::Size(40, 40)), IsEmpty());
}

}  // namespace
// Verdicts checked against shapely 2.2 (Polygon(points).is_valid and .is_simple).
TEST(IsValidSimplePolygonTest, HandCases) {
  EXPECT_TRUE(IsValidSimplePolygon(Box(0, 0, 10, 10)));
  EXPECT_TRUE(IsValidSimplePolygon(Box(0, 0, 0.5f, 0.25f)));
  EXPECT_TRUE(IsValidSimplePolygon({{0, 0}, {10, 0}, {5, 3}, {10, 10}, {0, 10}}));  // concave
  EXPECT_TRUE(IsValidSimplePolygon({{0, 0}, {5, 0}, {10, 0}, {10, 10}, {0, 10}}));  // straight
  // Repeated points, the closing point included, are no error.
  EXPECT_TRUE(IsValidSimplePolygon({{0, 0}, {10, 0}, {10, 0}, {10, 10}, {0, 10}, {0, 0}}));

  EXPECT_FALSE(IsValidSimplePolygon(kBowTie));
  EXPECT_FALSE(IsValidSimplePolygon({{0, 0}, {1, 0}, {2, 0}, {3, 0}}));  // no area
  EXPECT_FALSE(IsValidSimplePolygon({{0, 0}, {2, 0}, {1, 0}}));
  EXPECT_FALSE(IsValidSimplePolygon({{0, 0}, {1, 1}, {0, 0}}));
  EXPECT_FALSE(IsValidSimplePolygon({{0, 0}, {10, 0}, {10, 10}, {5, 0}, {0, 10}}));  // touches
  EXPECT_FALSE(IsValidSimplePolygon({{0, 0}, {4, 0}, {2, 2}, {4, 4}, {0, 4}, {2, 2}}));
  EXPECT_FALSE(IsValidSimplePolygon({{0, 0}, {10, 0}, {10, 10}, {10, 5}, {0, 10}}));  // spike
  EXPECT_FALSE(IsValidSimplePolygon({{0, 0}, {10, 0}, {10, 10}, {10, 15}, {10, 10}, {0, 10}}));
  EXPECT_FALSE(IsValidSimplePolygon({{0, 0}, {10, 0}, {std::nanf(""), 10}}));
}

// 2000 random polygons on a 5 x 5 grid, where crossings, touchings and collinear edges are
// common, against shapely's verdicts (testdata/make_polygon_validity_golden.py).
TEST(IsValidSimplePolygonTest, AgreesWithShapelyOnRandomGridPolygons) {
  std::ifstream golden("core/testdata/polygon_validity.txt");
  ASSERT_TRUE(golden) << "core/testdata/polygon_validity.txt is missing";
  std::string line;
  int lines = 0, valid = 0;
  while (std::getline(golden, line)) {
    std::istringstream fields(line);
    int expected;
    fields >> expected;
    Polygon polygon;
    for (float x, y; fields >> x >> y;) polygon.emplace_back(x, y);
    EXPECT_EQ(IsValidSimplePolygon(polygon), expected == 1) << "line " << lines + 1 << ": " << line;
    ++lines;
    valid += expected;
  }
  EXPECT_EQ(lines, 2000);
  EXPECT_GT(valid, 500);  // both verdicts are well represented
}

TEST(ConvexHullTest, RepairsABowTieToTheIntendedBox) {
  const Polygon hull = ConvexHull(kBowTie);
  ASSERT_EQ(hull.size(), 4u);
  EXPECT_TRUE(IsValidSimplePolygon(hull));
  EXPECT_DOUBLE_EQ(PolygonArea(hull), 100);
  // A box with two vertices swapped: the hull is the box again.
  const Polygon swapped = {{2, 3}, {12, 3}, {2, 8}, {12, 8}};
  EXPECT_DOUBLE_EQ(PolygonArea(ConvexHull(swapped)), 50);
  EXPECT_DOUBLE_EQ(IntersectionArea(ConvexHull(swapped), Box(2, 3, 10, 5)), 50);
}

}  // namespace vision::core
