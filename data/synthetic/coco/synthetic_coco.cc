#include "data/synthetic/coco/synthetic_coco.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/polygon.h"
#include "core/run_length_mask.h"
#include "core/run_length_mask.h"
#include "core/status_macros.h"
#include "data/synthetic/clutter.h"
#include "data/synthetic/dataset_files.h"
#include "data/synthetic/seeded_random.h"

namespace vision::data::synthetic::coco {
namespace {


namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

constexpr double kPi = 3.14159265358979323846;
constexpr int kPlacementAttempts = 20;
// No shape may hide more than this fraction of an earlier one (crowd regions included), so
// that every annotated object stays recognisable.
constexpr double kMinVisibleFraction = 0.5;
// Fixed-point bits of cv::fillPoly: vertices are placed to 1/256 pixel.
constexpr int kShift = 8;
// Free pixels between a shape and the image border.
constexpr int kBorder = 2;

enum ShapeKind { kCircle, kRectangle, kTriangle, kStar, kNumKinds };

struct ClassStyle {
  SyntheticCategory category;
  cv::Scalar bgr;  // the class's colour; instances vary around it
};

const std::array<ClassStyle, kNumKinds>& Classes() {
  static const std::array<ClassStyle, kNumKinds> classes = {{
      {{1, "circle"}, cv::Scalar(60, 60, 220)},
      {{3, "rectangle"}, cv::Scalar(220, 130, 40)},
      {{7, "triangle"}, cv::Scalar(60, 200, 60)},
      {{12, "star"}, cv::Scalar(40, 215, 235)},
  }};
  return classes;
}

// Coordinates are written with two decimals; the shapes are built from the rounded values so
// that the JSON holds exactly what was drawn.
float Round2(double v) { return static_cast<float>(std::round(v * 100) / 100); }

core::Polygon ShapeOutline(SeededRandom& rng, ShapeKind kind, cv::Point2d centre, double radius) {
  const double rotation = rng.Uniform(0, 2 * kPi);
  std::vector<cv::Point2d> points;
  switch (kind) {
    case kCircle: {
      constexpr int kVertices = 32;
      for (int k = 0; k < kVertices; ++k) {
        const double angle = rotation + 2 * kPi * k / kVertices;
        points.emplace_back(radius * std::cos(angle), radius * std::sin(angle));
      }
      break;
    }
    case kRectangle: {
      const double half_w = radius * rng.Uniform(0.5, 0.95);
      const double half_h = radius * rng.Uniform(0.3, 0.95);
      constexpr int kCorners[4][2] = {{-1, -1}, {1, -1}, {1, 1}, {-1, 1}};
      for (const auto& corner : kCorners) {
        const double x = corner[0] * half_w;
        const double y = corner[1] * half_h;
        points.emplace_back(x * std::cos(rotation) - y * std::sin(rotation),
                            x * std::sin(rotation) + y * std::cos(rotation));
      }
      break;
    }
    case kTriangle: {
      for (int k = 0; k < 3; ++k) {
        const double jitter = rng.Uniform(-0.3, 0.3);
        const double reach = radius * rng.Uniform(0.8, 1.0);
        const double angle = rotation + 2 * kPi * k / 3 + jitter;
        points.emplace_back(reach * std::cos(angle), reach * std::sin(angle));
      }
      break;
    }
    default: {
      const double inner = radius * rng.Uniform(0.4, 0.55);
      for (int k = 0; k < 10; ++k) {
        const double reach = k % 2 == 0 ? radius : inner;
        const double angle = rotation + kPi * k / 5;
        points.emplace_back(reach * std::cos(angle), reach * std::sin(angle));
      }
      break;
    }
  }
  core::Polygon polygon;
  for (const cv::Point2d& p : points) {
    polygon.emplace_back(Round2(centre.x + p.x), Round2(centre.y + p.y));
  }
  return polygon;
}

// COCO's pixel (i, j) covers [i, i + 1) x [j, j + 1): a pixel is in the polygon when its
// centre is, which cv::fillPoly (integer coordinates at pixel centres) decides after a shift
// by half a pixel, up to its rounding of the outline to whole pixels.
cv::Mat Rasterise(const core::Polygon& polygon, cv::Size size) {
  std::vector<cv::Point> fixed;
  for (const cv::Point2f& p : polygon) {
    fixed.emplace_back(static_cast<int>(std::lround((p.x - 0.5) * (1 << kShift))),
                       static_cast<int>(std::lround((p.y - 0.5) * (1 << kShift))));
  }
  cv::Mat mask = cv::Mat::zeros(size, CV_8U);
  cv::fillPoly(mask, std::vector<std::vector<cv::Point>>{fixed}, cv::Scalar(1), cv::LINE_8, kShift);
  return mask;
}

// Fills `mask` with `colour` lit from a random direction, so that a shape is not flat.
void Paint(SeededRandom& rng, const cv::Mat& mask, const cv::Scalar& colour, cv::Mat& image) {
  const double angle = rng.Uniform(0, 2 * kPi);
  const double dx = std::cos(angle);
  const double dy = std::sin(angle);
  const cv::Rect extent = cv::boundingRect(mask);
  const double span = std::max(1, extent.width + extent.height);
  for (int y = extent.y; y < extent.br().y; ++y) {
    const uchar* m = mask.ptr<uchar>(y);
    cv::Vec3b* pixel = image.ptr<cv::Vec3b>(y);
    for (int x = extent.x; x < extent.br().x; ++x) {
      if (m[x] == 0) continue;
      const double t = ((x - extent.x) * dx + (y - extent.y) * dy) / span;
      const double light = 0.85 + 0.3 * t;
      for (int c = 0; c < 3; ++c) pixel[x][c] = cv::saturate_cast<uchar>(colour[c] * light);
    }
  }
}

void DrawBackground(SeededRandom& rng, cv::Mat& image) {
  FillGradient(rng, image);
  BlendColourBlobs(rng, image, /*max_cells=*/5, /*max_weight=*/0.5);
  // Thin lines and arcs that a detector must not take for objects.
  const int lines = rng.Int(3, 10);
  for (int i = 0; i < lines; ++i) {
    const cv::Scalar colour = rng.Colour();
    const int thickness = rng.Int(1, 2);
    const int x0 = rng.Int(0, image.cols - 1);
    const int y0 = rng.Int(0, image.rows - 1);
    const int x1 = rng.Int(0, image.cols - 1);
    const int y1 = rng.Int(0, image.rows - 1);
    cv::line(image, cv::Point(x0, y0), cv::Point(x1, y1), colour, thickness, cv::LINE_AA);
  }
}

// A shape or crowd region while the image is being composed.
struct Placed {
  SyntheticObject object;
  int64_t full_area = 0;  // before anything hid part of it
};

// Whether `candidate` can go on top of `placed` without hiding more than allowed of any of
// them.
bool LeavesEnoughVisible(const cv::Mat& candidate, const std::vector<Placed>& placed) {
  for (const Placed& p : placed) {
    const int64_t hidden = cv::countNonZero(candidate & p.object.mask);
    if (p.object.area - hidden < kMinVisibleFraction * p.full_area) return false;
  }
  return true;
}

void PutOnTop(const cv::Mat& mask, std::vector<Placed>& placed) {
  for (Placed& p : placed) {
    p.object.mask.setTo(0, mask);
    p.object.area = cv::countNonZero(p.object.mask);
  }
}

// A cluster of small shapes of one class, annotated as one iscrowd region.
bool PlaceCrowd(SeededRandom& rng, cv::Mat& image, std::vector<Placed>& placed) {
  const cv::Size size = image.size();
  const int min_side = std::min(size.width, size.height);
  const int kind = rng.Int(0, kNumKinds - 1);
  const ClassStyle& style = Classes()[kind];
  const double cluster = min_side * rng.Uniform(0.1, 0.18);
  const double small_max = std::max(3.0, min_side / 40.0);
  const double reach = cluster + small_max + kBorder;
  if (2 * reach >= min_side) return false;
  const double cx = rng.Uniform(reach, size.width - reach);
  const double cy = rng.Uniform(reach, size.height - reach);
  const int members = rng.Int(5, 12);
  cv::Mat mask = cv::Mat::zeros(size, CV_8U);
  for (int i = 0; i < members; ++i) {
    const double angle = rng.Uniform(0, 2 * kPi);
    const double distance = cluster * std::sqrt(rng.Unit());
    const double radius = rng.Uniform(2.5, small_max);
    const core::Polygon outline = ShapeOutline(
        rng, static_cast<ShapeKind>(kind),
        cv::Point2d(cx + distance * std::cos(angle), cy + distance * std::sin(angle)), radius);
    const cv::Mat member = Rasterise(outline, size);
    Paint(rng, member, rng.Near(style.bgr, 40), image);
    mask |= member;
  }
  Placed crowd;
  crowd.object.category_id = style.category.id;
  crowd.object.is_crowd = true;
  crowd.object.encoding = rng.Chance(0.5) ? MaskEncoding::kRleCounts : MaskEncoding::kRleString;
  crowd.object.mask = mask;
  crowd.object.area = cv::countNonZero(mask);
  crowd.full_area = crowd.object.area;
  if (crowd.full_area == 0) return false;
  placed.push_back(std::move(crowd));
  return true;
}

bool PlaceShape(SeededRandom& rng, cv::Mat& image, std::vector<Placed>& placed) {
  const cv::Size size = image.size();
  const int min_side = std::min(size.width, size.height);
  const int kind = rng.Int(0, kNumKinds - 1);
  const ClassStyle& style = Classes()[kind];
  const cv::Scalar colour = rng.Near(style.bgr, 35);
  for (int attempt = 0; attempt < kPlacementAttempts; ++attempt) {
    const double radius = rng.Uniform(min_side / 16.0, min_side / 5.0);
    const double reach = radius + kBorder;
    const double cx = rng.Uniform(reach, size.width - reach);
    const double cy = rng.Uniform(reach, size.height - reach);
    core::Polygon outline =
        ShapeOutline(rng, static_cast<ShapeKind>(kind), cv::Point2d(cx, cy), radius);
    cv::Mat mask = Rasterise(outline, size);
    const int64_t area = cv::countNonZero(mask);
    if (area < 16 || !LeavesEnoughVisible(mask, placed)) continue;
    Paint(rng, mask, colour, image);
    PutOnTop(mask, placed);
    Placed shape;
    shape.object.category_id = style.category.id;
    shape.object.polygon = std::move(outline);
    shape.object.mask = std::move(mask);
    shape.object.area = area;
    shape.full_area = area;
    placed.push_back(std::move(shape));
    return true;
  }
  return false;
}

// Numbers as written: two decimals at most, so that the text does not depend on float noise.
double Written(float v) { return std::round(static_cast<double>(v) * 100) / 100; }

OrderedJson AnnotationJson(const SyntheticObject& object, int64_t id, int64_t image_id) {
  OrderedJson annotation;
  annotation["id"] = id;
  annotation["image_id"] = image_id;
  annotation["category_id"] = object.category_id;
  annotation["iscrowd"] = object.is_crowd ? 1 : 0;
  if (object.encoding == MaskEncoding::kPolygon) {
    // COCO's area of a polygon is that of pycocotools' raster of the written coordinates
    // (COCOeval's area ranges use it), not of OpenCV's fill, which covers more boundary pixels.
    std::vector<double> written;
    for (const cv::Point2f& p : object.polygon) {
      written.push_back(Written(p.x));
      written.push_back(Written(p.y));
    }
    annotation["area"] = core::RleArea(
        core::RleFromPolygonCoordinates(written, object.mask.rows, object.mask.cols));
  } else {
    annotation["area"] = object.area;
  }
  annotation["bbox"] = {Written(object.box.x), Written(object.box.y), Written(object.box.width),
                        Written(object.box.height)};
  if (object.encoding == MaskEncoding::kPolygon) {
    OrderedJson flat = OrderedJson::array();
    for (const cv::Point2f& p : object.polygon) {
      flat.push_back(Written(p.x));
      flat.push_back(Written(p.y));
    }
    annotation["segmentation"] = OrderedJson::array({flat});
  } else {
    const core::RunLengthMask rle = core::EncodeRle(object.mask);
    OrderedJson segmentation;
    segmentation["size"] = {rle.height, rle.width};
    if (object.encoding == MaskEncoding::kRleString) {
      segmentation["counts"] = core::EncodeCocoRleString(rle.counts);
    } else {
      segmentation["counts"] = rle.counts;
    }
    annotation["segmentation"] = std::move(segmentation);
  }
  return annotation;
}

// The instances JSON with one image or annotation per line: diffable, and its bytes depend
// only on the content.
std::string FormatInstancesJson(const std::vector<OrderedJson>& images,
                                const std::vector<OrderedJson>& annotations, uint64_t seed,
                                absl::string_view split) {
  OrderedJson info;
  info["description"] = absl::StrCat("Synthetic shapes in the COCO instances format (", split,
                                     " split, seed ", seed, ")");
  info["contributor"] = "vision data/synthetic/coco";
  std::vector<std::string> categories;
  for (const SyntheticCategory& category : SyntheticCategories()) {
    OrderedJson entry;
    entry["id"] = category.id;
    entry["name"] = category.name;
    entry["supercategory"] = "shape";
    categories.push_back(entry.dump());
  }
  auto lines = [](const std::vector<OrderedJson>& records) {
    std::string out;
    for (size_t i = 0; i < records.size(); ++i) {
      absl::StrAppend(&out, i == 0 ? "\n" : ",\n", records[i].dump());
    }
    return absl::StrCat(out, "\n");
  };
  return absl::StrCat("{\"info\": ", info.dump(), ",\n\"images\": [", lines(images),
                      "],\n\"annotations\": [", lines(annotations), "],\n\"categories\": [\n",
                      absl::StrJoin(categories, ",\n"), "\n]}\n");
}

}  // namespace

const std::vector<SyntheticCategory>& SyntheticCategories() {
  static const std::vector<SyntheticCategory>* categories = [] {
    auto* result = new std::vector<SyntheticCategory>();
    for (const ClassStyle& style : Classes()) result->push_back(style.category);
    return result;
  }();
  return *categories;
}

absl::Status ValidateOptions(const SyntheticCocoDatasetOptions& options) {
  const SyntheticCocoImageOptions& image = options.image;
  if (image.width < 64 || image.height < 64 || image.width > 8192 || image.height > 8192) {
    return absl::InvalidArgumentError(absl::StrCat("image size ", image.width, "x", image.height,
                                                   ": width and height must be in [64, 8192]"));
  }
  if (image.min_objects < 0 || image.max_objects < image.min_objects || image.max_objects > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("objects per image [", image.min_objects, ", ", image.max_objects,
                     "]: need 0 <= min_objects <= max_objects <= 100"));
  }
  using Fraction = std::pair<const char*, double>;
  for (const auto& [name, value] : {Fraction{"empty_fraction", image.empty_fraction},
                                    Fraction{"crowd_fraction", image.crowd_fraction}}) {
    if (!(value >= 0 && value <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(name, " ", value, ": must be in [0, 1]"));
    }
  }
  if (options.num_train < 0 || options.num_val < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_train ", options.num_train, ", num_val ",
                                                   options.num_val, ": image counts must be >= 0"));
  }
  if (options.jpeg_quality < 1 || options.jpeg_quality > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("jpeg_quality ", options.jpeg_quality, ": must be in [1, 100]"));
  }
  return absl::OkStatus();
}

uint64_t ImageSeed(uint64_t seed, Split split, int64_t index) {
  // Salts differ from synthetic_text's, so that the same seed gives unrelated datasets.
  const uint64_t split_salt = split == Split::kTrain ? 0x636f636f74726eULL : 0x636f636f76616cULL;
  return MixSeed(seed, split_salt, static_cast<uint64_t>(index));
}

SyntheticCocoImage RenderSyntheticCocoImage(const SyntheticCocoImageOptions& options,
                                            uint64_t image_seed) {
  SeededRandom rng(image_seed);
  SyntheticCocoImage result;
  result.image.create(options.height, options.width, CV_8UC3);
  if (options.plain_background) {
    result.image.setTo(rng.Colour());
  } else {
    DrawBackground(rng, result.image);
  }
  std::vector<Placed> placed;
  if (!rng.Chance(options.empty_fraction)) {
    if (rng.Chance(options.crowd_fraction)) PlaceCrowd(rng, result.image, placed);
    const int shapes = rng.Int(options.min_objects, options.max_objects);
    for (int i = 0; i < shapes; ++i) PlaceShape(rng, result.image, placed);
  }
  if (!options.plain_background) AddGaussianNoise(rng, result.image, /*max_sigma=*/6);

  for (Placed& p : placed) {
    SyntheticObject& object = p.object;
    if (!object.is_crowd) {
      // A hidden part would make the drawn outline wrong: only the visible pixels are exact.
      object.encoding =
          object.area == p.full_area ? MaskEncoding::kPolygon : MaskEncoding::kRleString;
    }
    if (object.encoding == MaskEncoding::kPolygon) {
      object.box = core::PolygonBounds(object.polygon);
    } else {
      object.polygon.clear();
      const cv::Rect pixels = cv::boundingRect(object.mask);
      object.box = cv::Rect2f(pixels.x, pixels.y, pixels.width, pixels.height);
    }
    result.objects.push_back(std::move(object));
  }
  return result;
}

absl::Status WriteSyntheticCocoDataset(const SyntheticCocoDatasetOptions& options,
                                       const std::string& output_dir) {
  VISION_RETURN_IF_ERROR(ValidateOptions(options));
  struct SplitLayout {
    Split split;
    int count;
    const char* name;
  };
  const SplitLayout splits[] = {{Split::kTrain, options.num_train, "train"},
                                {Split::kVal, options.num_val, "val"}};
  const fs::path annotation_dir = fs::path(output_dir) / "annotations";
  VISION_RETURN_IF_ERROR(CreateDirectories(annotation_dir));
  const std::vector<int> jpeg_params = {cv::IMWRITE_JPEG_QUALITY, options.jpeg_quality};
  for (const SplitLayout& split : splits) {
    const fs::path image_dir = fs::path(output_dir) / absl::StrCat(split.name, "2017");
    const fs::path json_path = annotation_dir / absl::StrCat("instances_", split.name, "2017.json");
    std::error_code error;
    if (fs::exists(json_path, error)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "'", json_path.string(),
          "' already exists; write the synthetic dataset into a new or empty directory"));
    }
    VISION_RETURN_IF_ERROR(PrepareEmptyDirectory(image_dir));
    std::vector<OrderedJson> images;
    std::vector<OrderedJson> annotations;
    for (int i = 0; i < split.count; ++i) {
      const SyntheticCocoImage sample =
          RenderSyntheticCocoImage(options.image, ImageSeed(options.seed, split.split, i));
      const int64_t image_id = i + 1;
      const std::string file_name = absl::StrFormat("%012d.jpg", image_id);
      std::vector<uchar> jpeg;
      if (!cv::imencode(".jpg", sample.image, jpeg, jpeg_params)) {
        return absl::InternalError(absl::StrCat("JPEG encoding of ", file_name, " failed"));
      }
      VISION_RETURN_IF_ERROR(WriteWholeFile(image_dir / file_name, jpeg.data(), jpeg.size()));
      OrderedJson image;
      image["id"] = image_id;
      image["file_name"] = file_name;
      image["width"] = sample.image.cols;
      image["height"] = sample.image.rows;
      images.push_back(std::move(image));
      for (const SyntheticObject& object : sample.objects) {
        const int64_t annotation_id = static_cast<int64_t>(annotations.size()) + 1;
        annotations.push_back(AnnotationJson(object, annotation_id, image_id));
      }
    }
    const std::string json = FormatInstancesJson(images, annotations, options.seed, split.name);
    VISION_RETURN_IF_ERROR(WriteWholeFile(json_path, json.data(), json.size()));
  }
  return absl::OkStatus();
}

}  // namespace vision::data::synthetic::coco
