#include "data/synthetic/cityscapes/synthetic_cityscapes.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <system_error>
#include <utility>
#include <vector>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "data/datasets/cityscapes/cityscapes_labels.h"
#include "data/synthetic/dataset_files.h"
#include "data/synthetic/seeded_random.h"

namespace vision::data::synthetic::cityscapes {
namespace {


namespace fs = std::filesystem;
namespace label = ::vision::data::datasets::cityscapes::label_id;

// Height of the camera above the road, in metres: with the horizon at row `horizon`, a point on
// the road at row y lies at a distance where one metre spans (y - horizon) / kCameraHeight px.
constexpr double kCameraHeight = 1.5;
constexpr int kPngCompression = 6;
constexpr const char* kTrainCities[kMaxCities] = {"alderburg", "birchfield", "cedarton", "dunmoor"};
constexpr const char* kValCities[kMaxCities] = {"elmstead", "fernhill", "glenrock", "hollowell"};

// How a shape's pixels are coloured: a base colour, optionally blended towards `bottom` from
// the shape's top row to its bottom row, plus per-pixel uniform noise of +-noise.
struct Paint {
  cv::Scalar colour;
  double noise = 0;
  bool gradient = false;
  cv::Scalar bottom;
};

Paint Solid(const cv::Scalar& colour, double noise) { return Paint{colour, noise, false, {}}; }

// The image and its label map, drawn together so that they always agree: a shape sets the
// label of exactly the pixels whose colour it sets. Later shapes occlude earlier ones.
class Canvas {
 public:
  Canvas(int width, int height, SeededRandom& rng)
      : image_(height, width, CV_8UC3, cv::Scalar(0, 0, 0)),
        labels_(height, width, CV_8UC1, cv::Scalar(label::kUnlabeled)),
        mask_(height, width, CV_8UC1, cv::Scalar(0)),
        rng_(rng) {}

  int width() const { return image_.cols; }
  int height() const { return image_.rows; }

  // `label` < 0 paints a detail (a window, a lane mark) that keeps the label of what it lies on.
  void Polygon(const std::vector<cv::Point2d>& points, int label, const Paint& paint) {
    std::vector<cv::Point> pixels;
    for (const cv::Point2d& p : points) pixels.emplace_back(cvRound(p.x), cvRound(p.y));
    const cv::Rect bounds = cv::boundingRect(pixels) & Full();
    if (bounds.empty()) return;
    cv::fillPoly(mask_, std::vector<std::vector<cv::Point>>{pixels}, cv::Scalar(255), cv::LINE_8);
    Apply(bounds, label, paint);
  }

  void Box(double left, double top, double right, double bottom, int label, const Paint& paint) {
    Polygon({{left, top}, {right, top}, {right, bottom}, {left, bottom}}, label, paint);
  }

  void Ellipse(cv::Point2d centre, double radius_x, double radius_y, int label,
               const Paint& paint) {
    const cv::Point c(cvRound(centre.x), cvRound(centre.y));
    const cv::Size axes(std::max(1, cvRound(radius_x)), std::max(1, cvRound(radius_y)));
    const cv::Rect bounds =
        cv::Rect(c.x - axes.width, c.y - axes.height, 2 * axes.width + 1, 2 * axes.height + 1) &
        Full();
    if (bounds.empty()) return;
    cv::ellipse(mask_, c, axes, 0, 0, 360, cv::Scalar(255), cv::FILLED, cv::LINE_8);
    Apply(bounds, label, paint);
  }

  // A straight band of `thickness` pixels from a to b.
  void Line(cv::Point2d a, cv::Point2d b, double thickness, int label, const Paint& paint) {
    const cv::Point2d d = b - a;
    const double length = std::max(1e-6, std::hypot(d.x, d.y));
    const cv::Point2d n(-d.y / length * thickness / 2, d.x / length * thickness / 2);
    Polygon({a + n, b + n, b - n, a - n}, label, paint);
  }

  // Blur, then noise: edges get soft like a camera's without the label map changing.
  StreetScene Finish() {
    cv::GaussianBlur(image_, image_, cv::Size(3, 3), 0.7);
    const double sigma = rng_.Uniform(2, 6);
    for (int y = 0; y < height(); ++y) {
      cv::Vec3b* row = image_.ptr<cv::Vec3b>(y);
      for (int x = 0; x < width(); ++x) {
        for (int c = 0; c < 3; ++c) {
          // The sum of two uniforms: a triangular distribution, no libm involved.
          const double u = rng_.Unit();
          const double v = rng_.Unit();
          row[x][c] = cv::saturate_cast<uchar>(row[x][c] + (u + v - 1) * sigma);
        }
      }
    }
    return StreetScene{image_, labels_};
  }

 private:
  cv::Rect Full() const { return cv::Rect(0, 0, width(), height()); }

  void Apply(const cv::Rect& bounds, int label, const Paint& paint) {
    for (int y = bounds.y; y < bounds.y + bounds.height; ++y) {
      uchar* mask = mask_.ptr<uchar>(y);
      uchar* labels = labels_.ptr<uchar>(y);
      cv::Vec3b* pixels = image_.ptr<cv::Vec3b>(y);
      const double t =
          paint.gradient && bounds.height > 1 ? double(y - bounds.y) / (bounds.height - 1) : 0;
      for (int x = bounds.x; x < bounds.x + bounds.width; ++x) {
        if (mask[x] == 0) continue;
        mask[x] = 0;
        if (label >= 0) labels[x] = static_cast<uchar>(label);
        for (int c = 0; c < 3; ++c) {
          const double base = paint.colour[c] + (paint.bottom[c] - paint.colour[c]) * t;
          const double noise = paint.noise > 0 ? rng_.Uniform(-paint.noise, paint.noise) : 0;
          pixels[x][c] = cv::saturate_cast<uchar>(base + noise);
        }
      }
    }
  }

  cv::Mat image_;
  cv::Mat labels_;
  cv::Mat mask_;  // zero outside the shape being drawn
  SeededRandom& rng_;
};

// The street's geometry: everything on the ground converges to (vanish_x, horizon).
struct Street {
  double height;
  double horizon;
  double vanish_x;
  // Where the road's and the sidewalks' edges cross the bottom row (may lie off the image).
  double road_left;
  double road_right;
  double outer_left;
  double outer_right;

  double Depth(double y) const { return (y - horizon) / (height - horizon); }
  double PixelsPerMetre(double y) const { return std::max(0.0, y - horizon) / kCameraHeight; }
  // x at row y of the line from the vanishing point to (bottom_x, height).
  double EdgeAt(double bottom_x, double y) const {
    return vanish_x + (bottom_x - vanish_x) * Depth(y);
  }
  cv::Point2d Vanish() const { return {vanish_x, horizon}; }
};

// Something standing on the ground, drawn after everything farther away (smaller base row).
struct Standing {
  double base_y;
  std::function<void(Canvas&)> draw;
};

const cv::Scalar kFacades[] = {{150, 170, 190}, {110, 120, 140}, {90, 90, 95},   {170, 185, 200},
                               {70, 90, 130},   {120, 140, 160}, {180, 180, 175}};
const cv::Scalar kCarColours[] = {{40, 40, 180},   {160, 90, 30}, {220, 220, 220}, {30, 30, 30},
                                  {170, 170, 165}, {40, 110, 40}, {30, 160, 200},  {110, 60, 60}};
const cv::Scalar kClothes[] = {{40, 40, 40},  {150, 60, 30}, {40, 40, 160}, {200, 200, 200},
                               {60, 120, 60}, {30, 90, 160}, {120, 40, 120}};

void DrawSky(SeededRandom& rng, Canvas& canvas, const Street& street) {
  Paint paint;
  paint.gradient = true;
  paint.noise = 2;
  if (rng.Chance(0.3)) {  // overcast
    paint.colour = rng.Jitter(cv::Scalar(185, 180, 175), 15);
    paint.bottom = rng.Jitter(cv::Scalar(215, 212, 210), 10);
  } else {
    paint.colour = rng.Jitter(cv::Scalar(210, 150, 90), 20);
    paint.bottom = rng.Jitter(cv::Scalar(235, 215, 190), 12);
  }
  canvas.Box(0, 0, canvas.width(), street.horizon + 2, label::kSky, paint);
}

// A facade from `left` to `right` reaching up to `top` and down behind the ground, with windows.
void DrawBuilding(SeededRandom& rng, Canvas& canvas, const Street& street, double left, double right,
                  double top, double haze) {
  const double scale = canvas.height() / 128.0;
  cv::Scalar colour = rng.Jitter(rng.Pick(kFacades), 15);
  colour = colour * (1 - haze) + cv::Scalar(200, 190, 180) * haze;
  canvas.Box(left, top, right, canvas.height(), label::kBuilding, Solid(colour, 6));
  if (haze > 0.5) return;
  const double step_x = rng.Uniform(6, 12) * scale;
  const double step_y = rng.Uniform(8, 13) * scale;
  const double fill = rng.Uniform(0.4, 0.65);
  const cv::Scalar glass =
      rng.Chance(0.7) ? rng.Jitter(cv::Scalar(70, 55, 45), 15) : rng.Jitter(colour * 0.6, 10);
  for (double y = top + step_y * 0.5; y + step_y * fill < street.horizon + step_y; y += step_y) {
    for (double x = left + step_x * 0.4; x + step_x * fill < right; x += step_x) {
      canvas.Box(x, y, x + step_x * fill, y + step_y * fill, -1, Solid(glass, 8));
    }
  }
}

void DrawBuildings(SeededRandom& rng, Canvas& canvas, const Street& street) {
  const double w = canvas.width();
  const double h = canvas.height();
  // A hazy row of distant buildings where the street meets the horizon.
  for (double x = 0; x < w;) {
    const double width = rng.Uniform(0.03, 0.08) * w;
    const double top = street.horizon - rng.Uniform(0.03, 0.12) * h;
    DrawBuilding(rng, canvas, street, x, x + width, top, 0.6);
    x += width;
  }
  const double gap_left = rng.Uniform(0.04, 0.14) * w;
  const double gap_right = rng.Uniform(0.04, 0.14) * w;
  for (double x = street.vanish_x - gap_left; x > 0;) {
    const double width = rng.Uniform(0.08, 0.22) * w;
    const double top = street.horizon - rng.Uniform(0.15, 0.5) * h;
    DrawBuilding(rng, canvas, street, x - width, x, top, 0);
    x -= width;
  }
  for (double x = street.vanish_x + gap_right; x < w;) {
    const double width = rng.Uniform(0.08, 0.22) * w;
    const double top = street.horizon - rng.Uniform(0.15, 0.5) * h;
    DrawBuilding(rng, canvas, street, x, x + width, top, 0);
    x += width;
  }
}

void DrawGround(SeededRandom& rng, Canvas& canvas, const Street& street) {
  const double h = canvas.height();
  const cv::Point2d v = street.Vanish();
  const Paint sidewalk = Solid(rng.Jitter(cv::Scalar(135, 140, 150), 15), 5);
  canvas.Polygon({v, {street.outer_left, h}, {street.road_left, h}}, label::kSidewalk, sidewalk);
  canvas.Polygon({v, {street.road_right, h}, {street.outer_right, h}}, label::kSidewalk, sidewalk);
  // Paving joints: lines towards the vanishing point and rows closer together far away.
  const cv::Scalar joint = sidewalk.colour * 0.8;
  for (const auto& [outer, inner] : {std::pair(street.outer_left, street.road_left),
                                     std::pair(street.road_right, street.outer_right)}) {
    for (double f = 0.25; f < 1; f += 0.25) {
      canvas.Line(v, {outer + (inner - outer) * f, h}, 1, -1, Solid(joint, 3));
    }
    for (double depth = 0.05; depth < 1; depth *= 1.35) {
      const double y = street.horizon + depth * (h - street.horizon);
      canvas.Line({street.EdgeAt(outer, y), y}, {street.EdgeAt(inner, y), y}, 1, -1,
                  Solid(joint, 3));
    }
  }
  // Grass strips between the facades and the sidewalk.
  for (const double outer : {street.outer_left, street.outer_right}) {
    if (!rng.Chance(0.5)) continue;
    const double inner = street.vanish_x > outer ? street.road_left : street.road_right;
    const double edge = outer + (inner - outer) * rng.Uniform(0.2, 0.45);
    canvas.Polygon({v, {outer, h}, {edge, h}}, label::kTerrain,
                   Solid(rng.Jitter(cv::Scalar(70, 150, 110), 20), 14));
  }
  const Paint road = Solid(rng.Jitter(cv::Scalar(85, 82, 80), 12), 8);
  canvas.Polygon({{street.vanish_x - 1, street.horizon},
                  {street.vanish_x + 1, street.horizon},
                  {street.road_right, h},
                  {street.road_left, h}},
                 label::kRoad, road);
  // Curbs and dashed centre marks, widening with depth.
  const Paint marking = Solid(rng.Jitter(cv::Scalar(215, 215, 215), 15), 6);
  const Paint curb = Solid(road.colour * 1.4, 5);
  canvas.Line(v, {street.road_left, h}, std::max(1.0, 0.01 * h), -1, curb);
  canvas.Line(v, {street.road_right, h}, std::max(1.0, 0.01 * h), -1, curb);
  const double centre =
      (street.road_left + street.road_right) / 2 + rng.Uniform(-0.1, 0.1) * canvas.width();
  for (double depth = 0.06; depth < 1.1; depth *= 1.6) {
    const double y0 = street.horizon + depth * (h - street.horizon);
    const double y1 = street.horizon + depth * 1.3 * (h - street.horizon);
    canvas.Polygon({{street.EdgeAt(centre, y0) - 0.1 * street.PixelsPerMetre(y0), y0},
                    {street.EdgeAt(centre, y0) + 0.1 * street.PixelsPerMetre(y0), y0},
                    {street.EdgeAt(centre, y1) + 0.1 * street.PixelsPerMetre(y1), y1},
                    {street.EdgeAt(centre, y1) - 0.1 * street.PixelsPerMetre(y1), y1}},
                   -1, marking);
  }
}

// A point on the sidewalk at row y: `across` 0 at the facade, 1 at the curb.
double SidewalkX(const Street& street, bool left, double across, double y) {
  const double outer = left ? street.outer_left : street.outer_right;
  const double inner = left ? street.road_left : street.road_right;
  return street.EdgeAt(outer + (inner - outer) * across, y);
}

// A row on the ground between `near` and `far` depth (0 at the horizon, 1 at the bottom).
double GroundRow(SeededRandom& rng, const Street& street, double far, double near) {
  return street.horizon + rng.Uniform(far, near) * (street.height - street.horizon);
}

void AddTree(SeededRandom& rng, const Street& street, std::vector<Standing>* objects) {
  const bool left = rng.Chance(0.5);
  const double y = GroundRow(rng, street, 0.15, 0.9);
  const double x = SidewalkX(street, left, rng.Uniform(0.05, 0.5), y);
  const double m = street.PixelsPerMetre(y);
  const double height = rng.Uniform(5, 9) * m;
  const cv::Scalar bark = rng.Jitter(cv::Scalar(40, 60, 80), 12);
  const cv::Scalar leaves = rng.Jitter(cv::Scalar(40, 120, 70), 20);
  struct Blob {
    cv::Point2d centre;
    double rx, ry;
    double shade;
  };
  std::vector<Blob> crown;
  const int blobs = rng.Int(3, 6);
  for (int i = 0; i < blobs; ++i) {
    const double dx = rng.Uniform(-0.25, 0.25) * height;
    const double dy = rng.Uniform(-0.2, 0.15) * height;
    const double rx = rng.Uniform(0.15, 0.3) * height;
    const double ry = rng.Uniform(0.12, 0.25) * height;
    const double shade = rng.Uniform(0.7, 1.1);
    crown.push_back(Blob{{x + dx, y - 0.7 * height + dy}, rx, ry, shade});
  }
  objects->push_back({y, [=](Canvas& canvas) {
                        canvas.Box(x - 0.15 * m, y - 0.6 * height, x + 0.15 * m, y,
                                   label::kVegetation, Solid(bark, 10));
                        for (const Blob& blob : crown) {
                          canvas.Ellipse(blob.centre, blob.rx, blob.ry, label::kVegetation,
                                         Solid(leaves * blob.shade, 28));
                        }
                      }});
}

void AddPole(SeededRandom& rng, const Street& street, std::vector<Standing>* objects) {
  const bool left = rng.Chance(0.5);
  const double y = GroundRow(rng, street, 0.1, 0.85);
  const double x = SidewalkX(street, left, rng.Uniform(0.7, 0.95), y);
  const double m = street.PixelsPerMetre(y);
  const double height = rng.Uniform(3, 6) * m;
  const cv::Scalar metal = rng.Jitter(cv::Scalar(120, 120, 120), 25);
  const int kind = rng.Int(0, 3);  // 0: bare, 1-2: traffic sign, 3: traffic light
  const double sign = rng.Uniform(0.5, 0.8) * m;
  const int shape = rng.Int(0, 2);
  const cv::Scalar sign_colour = rng.Chance(0.5) ? rng.Jitter(cv::Scalar(40, 40, 200), 20)
                                                 : rng.Jitter(cv::Scalar(170, 90, 30), 20);
  objects->push_back(
      {y, [=](Canvas& canvas) {
         const double half = std::max(0.5, 0.06 * m);
         canvas.Box(x - half, y - height, x + half, y, label::kPole, Solid(metal, 6));
         const cv::Point2d top(x, y - height);
         if (kind == 3) {
           canvas.Box(top.x - 0.2 * m, top.y, top.x + 0.2 * m, top.y + 0.8 * m,
                      label::kTrafficLight, Solid(cv::Scalar(30, 30, 30), 5));
           canvas.Ellipse({top.x, top.y + 0.2 * m}, 0.1 * m, 0.1 * m, -1,
                          Solid(cv::Scalar(40, 40, 230), 10));
           canvas.Ellipse({top.x, top.y + 0.6 * m}, 0.1 * m, 0.1 * m, -1,
                          Solid(cv::Scalar(60, 200, 60), 10));
         } else if (kind > 0 && shape == 0) {
           canvas.Ellipse(top, sign / 2, sign / 2, label::kTrafficSign, Solid(sign_colour, 8));
           canvas.Ellipse(top, sign / 3, sign / 3, -1, Solid(cv::Scalar(230, 230, 230), 8));
         } else if (kind > 0 && shape == 1) {
           canvas.Polygon({{top.x, top.y - sign / 2},
                           {top.x + sign / 2, top.y + sign / 2},
                           {top.x - sign / 2, top.y + sign / 2}},
                          label::kTrafficSign, Solid(sign_colour, 8));
         } else if (kind > 0) {
           canvas.Box(top.x - sign / 2, top.y - sign / 3, top.x + sign / 2, top.y + sign / 3,
                      label::kTrafficSign, Solid(cv::Scalar(180, 120, 40), 8));
           canvas.Box(top.x - sign / 3, top.y - sign / 6, top.x + sign / 3, top.y + sign / 6, -1,
                      Solid(cv::Scalar(230, 230, 230), 8));
         }
       }});
}

// A pedestrian on a sidewalk, or (rider = true) a cyclist on the road's edge.
void AddPerson(SeededRandom& rng, const Street& street, bool rider, std::vector<Standing>* objects) {
  const bool left = rng.Chance(0.5);
  const double y = GroundRow(rng, street, 0.2, 1.0);
  const double x = rider ? street.EdgeAt(left ? street.road_left : street.road_right, y) +
                               (left ? 1 : -1) * rng.Uniform(0.6, 1.5) * street.PixelsPerMetre(y)
                         : SidewalkX(street, left, rng.Uniform(0.1, 0.9), y);
  const double m = street.PixelsPerMetre(y);
  const double height = rng.Uniform(1.55, 1.9) * m;
  const cv::Scalar skin = rng.Jitter(cv::Scalar(120, 150, 190), 30);
  const cv::Scalar shirt = rng.Jitter(rng.Pick(kClothes), 20);
  const cv::Scalar trousers = rng.Jitter(rng.Pick(kClothes), 20) * 0.6;
  const cv::Scalar frame = rng.Jitter(rng.Pick(kCarColours), 20);
  objects->push_back(
      {y, [=](Canvas& canvas) {
         const int who = rider ? label::kRider : label::kPerson;
         // A cyclist sits higher, above a bicycle.
         const double feet = rider ? y - 0.35 * m : y;
         if (rider) {
           const double r = 0.33 * m;
           const Paint tyre = Solid(cv::Scalar(25, 25, 25), 5);
           canvas.Ellipse({x - 0.15 * m, y - r}, 0.08 * m, r, label::kBicycle, tyre);
           canvas.Ellipse({x + 0.15 * m, y - r}, 0.08 * m, r, label::kBicycle, tyre);
           canvas.Line({x, y - r}, {x, feet - 0.4 * height}, 0.08 * m, label::kBicycle,
                       Solid(frame, 8));
         }
         const double leg = 0.45 * height;
         canvas.Box(x - 0.18 * m, feet - leg, x - 0.02 * m, feet, who, Solid(trousers, 10));
         canvas.Box(x + 0.02 * m, feet - leg, x + 0.18 * m, feet, who, Solid(trousers, 10));
         canvas.Box(x - 0.22 * m, feet - 0.85 * height, x + 0.22 * m, feet - leg, who,
                    Solid(shirt, 10));
         canvas.Ellipse({x, feet - 0.92 * height}, 0.1 * m, 0.12 * m, who, Solid(skin, 8));
       }});
}

// A car (or truck or bus) on the road, seen from behind or in front.
void AddVehicle(SeededRandom& rng, const Street& street, std::vector<Standing>* objects) {
  // Mostly farther than a few car lengths, so that vehicles do not fill the picture.
  const double nearest = rng.Chance(0.8) ? 0.6 : 1.1;
  const double y = GroundRow(rng, street, 0.08, nearest);
  const double across = rng.Uniform(0.1, 0.9);
  const double x =
      street.EdgeAt(street.road_left + (street.road_right - street.road_left) * across, y);
  const double m = street.PixelsPerMetre(y);
  const double kind = rng.Unit();
  const int id = kind < 0.8 ? label::kCar : kind < 0.9 ? label::kTruck : label::kBus;
  const double width = (id == label::kCar ? rng.Uniform(1.6, 1.9) : rng.Uniform(2.3, 2.6)) * m;
  const double height = (id == label::kCar ? rng.Uniform(1.3, 1.6) : rng.Uniform(2.8, 3.4)) * m;
  const cv::Scalar body = rng.Jitter(rng.Pick(kCarColours), 20);
  const cv::Scalar glass = rng.Jitter(cv::Scalar(70, 50, 40), 15);
  objects->push_back({y, [=](Canvas& canvas) {
                        const double l = x - width / 2;
                        const double r = x + width / 2;
                        const double wheel = 0.2 * height;
                        const Paint tyre = Solid(cv::Scalar(25, 25, 25), 5);
                        canvas.Box(l + 0.05 * width, y - wheel, l + 0.25 * width, y, id, tyre);
                        canvas.Box(r - 0.25 * width, y - wheel, r - 0.05 * width, y, id, tyre);
                        if (id == label::kCar) {
                          canvas.Box(l, y - 0.6 * height, r, y - 0.15 * height, id, Solid(body, 6));
                          canvas.Polygon({{l + 0.1 * width, y - height},
                                          {r - 0.1 * width, y - height},
                                          {r, y - 0.6 * height},
                                          {l, y - 0.6 * height}},
                                         id, Solid(body, 6));
                          canvas.Polygon({{l + 0.16 * width, y - 0.93 * height},
                                          {r - 0.16 * width, y - 0.93 * height},
                                          {r - 0.08 * width, y - 0.65 * height},
                                          {l + 0.08 * width, y - 0.65 * height}},
                                         -1, Solid(glass, 10));
                        } else {
                          canvas.Box(l, y - height, r, y - 0.12 * height, id, Solid(body, 6));
                          const double band = id == label::kBus ? 0.35 : 0.2;
                          canvas.Box(l + 0.05 * width, y - 0.92 * height, r - 0.05 * width,
                                     y - (0.92 - band) * height, -1, Solid(glass, 10));
                        }
                        const Paint lamp = Solid(cv::Scalar(40, 40, 210), 10);
                        canvas.Box(l + 0.03 * width, y - 0.5 * height, l + 0.15 * width,
                                   y - 0.4 * height, -1, lamp);
                        canvas.Box(r - 0.15 * width, y - 0.5 * height, r - 0.03 * width,
                                   y - 0.4 * height, -1, lamp);
                        // The license plate stays "car" in label ids, as in the real data.
                        canvas.Box(x - 0.25 * m, y - 0.35 * height, x + 0.25 * m,
                                   y - 0.35 * height + 0.12 * m, -1,
                                   Solid(cv::Scalar(225, 225, 225), 5));
                      }});
}

// Street furniture (bins, boxes, bollards): label "static", ignored in training.
void AddStatic(SeededRandom& rng, const Street& street, std::vector<Standing>* objects) {
  const bool left = rng.Chance(0.5);
  const double y = GroundRow(rng, street, 0.2, 0.95);
  const double x = SidewalkX(street, left, rng.Uniform(0.1, 0.9), y);
  const double m = street.PixelsPerMetre(y);
  const double width = rng.Uniform(0.4, 1.2) * m;
  const double height = rng.Uniform(0.6, 1.1) * m;
  const cv::Scalar colour = rng.Jitter(cv::Scalar(60, 110, 80), 40);
  objects->push_back({y, [=](Canvas& canvas) {
                        canvas.Box(x - width / 2, y - height, x + width / 2, y, label::kStatic,
                                   Solid(colour, 8));
                      }});
}

void DrawEgoVehicleAndBorder(SeededRandom& rng, Canvas& canvas) {
  const double w = canvas.width();
  const double h = canvas.height();
  if (rng.Chance(0.8)) {
    const double hood = rng.Uniform(0.06, 0.12) * h;
    Paint paint;
    paint.colour = rng.Jitter(rng.Pick(kCarColours), 15) * 0.7;
    paint.bottom = paint.colour * 0.5;
    paint.gradient = true;
    paint.noise = 4;
    canvas.Ellipse({w / 2, h + hood}, 0.75 * w, 2 * hood, label::kEgoVehicle, paint);
  }
  if (rng.Chance(0.4)) {
    const double border = rng.Int(1, 3);
    const Paint black = Solid(cv::Scalar(0, 0, 0), 0);
    canvas.Box(0, 0, border - 1, h, label::kRectificationBorder, black);
    canvas.Box(w - border, 0, w, h, label::kRectificationBorder, black);
  }
}

absl::Status WritePng(const fs::path& path, const cv::Mat& mat) {
  std::vector<uchar> png;
  if (!cv::imencode(".png", mat, png, {cv::IMWRITE_PNG_COMPRESSION, kPngCompression})) {
    return absl::InternalError(absl::StrCat(path.string(), ": PNG encoding failed"));
  }
  return WriteWholeFile(path, png.data(), png.size());
}

}  // namespace

absl::Status ValidateOptions(const SyntheticCityscapesOptions& options) {
  if (options.width < 64 || options.height < 32 || options.width > 8192 || options.height > 8192) {
    return absl::InvalidArgumentError(
        absl::StrCat("image size ", options.width, "x", options.height,
                     ": width must be in [64, 8192] and height in [32, 8192]"));
  }
  if (options.num_train < 0 || options.num_val < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_train ", options.num_train, ", num_val ",
                                                   options.num_val, ": image counts must be >= 0"));
  }
  if (options.num_cities < 1 || options.num_cities > kMaxCities) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_cities ", options.num_cities, ": must be in [1, ", kMaxCities, "]"));
  }
  return absl::OkStatus();
}

uint64_t ImageSeed(uint64_t seed, Split split, int64_t index) {
  const uint64_t split_salt = split == Split::kTrain ? 0x7472616eULL : 0x76616cULL;
  return MixSeed(seed, split_salt, static_cast<uint64_t>(index));
}

std::string CityName(Split split, int city) {
  return split == Split::kTrain ? kTrainCities[city] : kValCities[city];
}

StreetScene RenderStreetScene(int width, int height, uint64_t image_seed) {
  SeededRandom rng(image_seed);
  Canvas canvas(width, height, rng);
  Street street;
  street.height = height;
  street.horizon = rng.Uniform(0.38, 0.5) * height;
  street.vanish_x = rng.Uniform(0.35, 0.65) * width;
  street.road_left = rng.Uniform(-0.05, 0.2) * width;
  street.road_right = rng.Uniform(0.8, 1.05) * width;
  street.outer_left = street.road_left - rng.Uniform(0.3, 0.7) * width;
  street.outer_right = street.road_right + rng.Uniform(0.3, 0.7) * width;

  DrawSky(rng, canvas, street);
  DrawBuildings(rng, canvas, street);
  DrawGround(rng, canvas, street);

  std::vector<Standing> objects;
  const int trees = rng.Int(0, 4);
  for (int i = 0; i < trees; ++i) AddTree(rng, street, &objects);
  const int poles = rng.Int(1, 4);
  for (int i = 0; i < poles; ++i) AddPole(rng, street, &objects);
  const int statics = rng.Int(0, 2);
  for (int i = 0; i < statics; ++i) AddStatic(rng, street, &objects);
  const int vehicles = rng.Int(1, 5);
  for (int i = 0; i < vehicles; ++i) AddVehicle(rng, street, &objects);
  const int people = rng.Int(0, 4);
  for (int i = 0; i < people; ++i) AddPerson(rng, street, /*rider=*/false, &objects);
  if (rng.Chance(0.3)) AddPerson(rng, street, /*rider=*/true, &objects);
  // Far to near; a stable sort keeps ties in creation order on every standard library.
  std::stable_sort(objects.begin(), objects.end(),
                   [](const Standing& a, const Standing& b) { return a.base_y < b.base_y; });
  for (const Standing& object : objects) object.draw(canvas);

  DrawEgoVehicleAndBorder(rng, canvas);
  return canvas.Finish();
}

absl::Status WriteSyntheticCityscapes(const SyntheticCityscapesOptions& options,
                                      const std::string& output_dir) {
  VISION_RETURN_IF_ERROR(ValidateOptions(options));
  const std::pair<Split, int> splits[] = {{Split::kTrain, options.num_train},
                                          {Split::kVal, options.num_val}};
  for (const auto& [split, count] : splits) {
    const char* split_name = split == Split::kTrain ? "train" : "val";
    const fs::path image_dir = fs::path(output_dir) / "leftImg8bit" / split_name;
    const fs::path label_dir = fs::path(output_dir) / "gtFine" / split_name;
    VISION_RETURN_IF_ERROR(PrepareEmptyDirectory(image_dir));
    VISION_RETURN_IF_ERROR(PrepareEmptyDirectory(label_dir));
    for (int i = 0; i < count; ++i) {
      // Contiguous blocks in city order: image i belongs to city floor(i * num_cities / count).
      const std::string city =
          CityName(split, static_cast<int>(int64_t{i} * options.num_cities / count));
      VISION_RETURN_IF_ERROR(CreateDirectories(image_dir / city));
      VISION_RETURN_IF_ERROR(CreateDirectories(label_dir / city));
      const std::string stem = absl::StrFormat("%s_000000_%06d", city, i);
      const StreetScene scene =
          RenderStreetScene(options.width, options.height, ImageSeed(options.seed, split, i));
      VISION_RETURN_IF_ERROR(WritePng(image_dir / city / (stem + "_leftImg8bit.png"), scene.image));
      VISION_RETURN_IF_ERROR(
          WritePng(label_dir / city / (stem + "_gtFine_labelIds.png"), scene.label_ids));
    }
  }
  return absl::OkStatus();
}

}  // namespace vision::data::synthetic::cityscapes
