#include "data/augmentations/geometry.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/polygon.h"
#include "core/run_length_mask.h"
#include "core/status_macros.h"
#include "core/status_util.h"

namespace vision::data::augmentations {
namespace {

bool IsIntegerTranslation(const cv::Matx23d& m) {
  return m(0, 0) == 1 && m(0, 1) == 0 && m(1, 0) == 0 && m(1, 1) == 1 &&
         m(0, 2) == std::round(m(0, 2)) && m(1, 2) == std::round(m(1, 2));
}

// A pure scaling that cv::resize reproduces: it derives the scale from the sizes.
bool IsResize(const cv::Matx23d& m, cv::Size src, cv::Size out) {
  if (m(0, 1) != 0 || m(1, 0) != 0 || m(0, 2) != 0 || m(1, 2) != 0) return false;
  return std::abs(m(0, 0) * src.width - out.width) < 1e-6 &&
         std::abs(m(1, 1) * src.height - out.height) < 1e-6;
}

cv::Mat CopyTranslated(const cv::Mat& src, int dx, int dy, cv::Size out, const cv::Scalar& fill) {
  cv::Mat dst(out, src.type(), fill);
  const cv::Point shift(dx, dy);
  const cv::Rect dst_rect =
      (cv::Rect(0, 0, src.cols, src.rows) + shift) & cv::Rect(0, 0, out.width, out.height);
  if (dst_rect.area() > 0) src(dst_rect - shift).copyTo(dst(dst_rect));
  return dst;
}

// Restores the orientation a mirroring mapping reversed: new[i] = old[(n / 2 - 1 - i) mod n].
// For a TL, TR, BR, BL quad (and 2k-point curved text, top side first) the first point is the
// top-left again.
core::Polygon ReorderMirrored(const core::Polygon& polygon) {
  const int n = static_cast<int>(polygon.size());
  core::Polygon reordered(polygon.size());
  for (int i = 0; i < n; ++i) reordered[i] = polygon[(((n / 2 - 1 - i) % n) + n) % n];
  return reordered;
}

core::Polygon BoxCorners(const cv::Rect2f& box) {
  return {{box.x, box.y},
          {box.x + box.width, box.y},
          {box.x + box.width, box.y + box.height},
          {box.x, box.y + box.height}};
}

// Maps one polygon and clips it to the canvas; empty when nothing of it is visible.
std::vector<core::Polygon> MapPolygon(const core::Polygon& polygon, const cv::Matx23d& m,
                                      bool mirrored, cv::Size canvas) {
  core::Polygon mapped = TransformPolygon(polygon, m);
  if (mirrored) mapped = ReorderMirrored(mapped);
  return core::ClipPolygonToCanvas(mapped, canvas);
}

// Applies the text rule of the file comment; false when the text is dropped.
bool WarpText(const cv::Matx23d& m, bool mirrored, cv::Size canvas, const ClipRules& rules,
              core::TextInstance* text) {
  core::Polygon mapped = TransformPolygon(text->polygon, m);
  if (mirrored) mapped = ReorderMirrored(mapped);
  std::vector<core::Polygon> pieces = core::ClipPolygonToCanvas(mapped, canvas);
  if (pieces.empty()) return false;
  auto largest = std::max_element(
      pieces.begin(), pieces.end(), [](const core::Polygon& a, const core::Polygon& b) {
        return core::PolygonArea(a) < core::PolygonArea(b);
      });
  const double full_area = core::PolygonArea(mapped);
  const double visible_area = core::PolygonArea(*largest);
  if (visible_area <= 0) return false;
  if (full_area <= 0 || visible_area < rules.text_min_visible_fraction * full_area) {
    text->ignore = true;
  }
  text->polygon = std::move(*largest);
  return true;
}

// Applies the object rule of the file comment; false when the object is dropped.
absl::StatusOr<bool> WarpObject(const cv::Matx23d& m, bool mirrored, cv::Size source,
                                cv::Size canvas, const ClipRules& rules,
                                core::ObjectInstance* object) {
  double area = 0;
  const bool has_polygons = !object->polygons.empty();
  if (has_polygons) {
    std::vector<core::Polygon> visible;
    for (const core::Polygon& polygon : object->polygons) {
      for (core::Polygon& piece : MapPolygon(polygon, m, mirrored, canvas)) {
        area += core::PolygonArea(piece);
        visible.push_back(std::move(piece));
      }
    }
    object->polygons = std::move(visible);
    if (!object->polygons.empty()) object->box = core::PolygonBounds(object->polygons);
  }
  if (object->rle.height > 0) {
    if (object->rle.height != source.height || object->rle.width != source.width) {
      return absl::InvalidArgumentError(absl::StrCat(
          "annotation ", object->annotation_id, ": RLE mask is ", object->rle.height, "x",
          object->rle.width, " but the image is ", source.height, "x", source.width,
          "; masks must be stored at the image's size"));
    }
    VISION_ASSIGN_OR_RETURN(const cv::Mat mask,
                            core::WithContext(absl::StrCat("annotation ", object->annotation_id),
                                              core::DecodeRle(object->rle)));
    const cv::Mat warped = WarpRaster(mask, m, canvas, cv::INTER_NEAREST, cv::Scalar(0));
    object->rle = core::EncodeRle(warped);
    if (!has_polygons) {
      area = cv::countNonZero(warped);
      if (area > 0) object->box = cv::Rect2f(cv::boundingRect(warped));
    }
  }
  if (!has_polygons && object->rle.height == 0) {
    std::vector<core::Polygon> pieces =
        MapPolygon(BoxCorners(object->box), m, /*mirrored=*/false, canvas);
    if (pieces.empty()) return false;
    object->box = core::PolygonBounds(pieces);
    area = object->box.area();
  }
  return area > 0 && area >= rules.object_min_area;
}

}  // namespace

ClipRules ClipRulesFromProto(const ClipPolicy& policy) {
  ClipRules rules;
  rules.text_min_visible_fraction = policy.text_min_visible_fraction();
  rules.object_min_area = policy.object_min_area();
  return rules;
}

cv::Mat WarpRaster(const cv::Mat& src, const cv::Matx23d& m, cv::Size out_size,
                   int interpolation, const cv::Scalar& fill) {
  if (IsIntegerTranslation(m)) {
    return CopyTranslated(src, static_cast<int>(m(0, 2)), static_cast<int>(m(1, 2)), out_size,
                          fill);
  }
  cv::Mat dst;
  if (m == cv::Matx23d(-1, 0, src.cols, 0, 1, 0) && out_size == src.size()) {
    cv::flip(src, dst, /*flipCode=*/1);
    return dst;
  }
  if (IsResize(m, src.size(), out_size)) {
    // cv::resize samples at pixel centres in the corner convention, so x * s is exact.
    cv::resize(src, dst, out_size, 0, 0,
               interpolation == cv::INTER_NEAREST ? cv::INTER_NEAREST_EXACT : interpolation);
    return dst;
  }
  // cv::warpAffine puts pixel centres on integers (x_c = x - 0.5), so its matrix is
  // [A | t + A * (0.5, 0.5) - (0.5, 0.5)].
  cv::Matx23d centred = m;
  centred(0, 2) += 0.5 * (m(0, 0) + m(0, 1)) - 0.5;
  centred(1, 2) += 0.5 * (m(1, 0) + m(1, 1)) - 0.5;
  cv::warpAffine(src, dst, centred, out_size, interpolation, cv::BORDER_CONSTANT, fill);
  return dst;
}

core::Polygon TransformPolygon(const core::Polygon& polygon, const cv::Matx23d& m) {
  core::Polygon mapped;
  mapped.reserve(polygon.size());
  for (const cv::Point2f& p : polygon) {
    mapped.emplace_back(static_cast<float>(m(0, 0) * p.x + m(0, 1) * p.y + m(0, 2)),
                        static_cast<float>(m(1, 0) * p.x + m(1, 1) * p.y + m(1, 2)));
  }
  return mapped;
}

absl::Status CheckHasImage(const core::Sample& sample) {
  if (!sample.image.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "sample '", sample.id, "': has no image; augmentations run after the dataset decodes it"));
}

absl::Status WarpSample(const cv::Matx23d& m, cv::Size out_size, const WarpParams& params,
                        core::Sample* sample) {
  VISION_RETURN_IF_ERROR(CheckHasImage(*sample));
  const std::string where = absl::StrCat("sample '", sample->id, "'");
  if (out_size.width <= 0 || out_size.height <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": output size ", out_size.width, "x", out_size.height, " is empty"));
  }
  const cv::Size source = sample->image.size();
  // A padding op sets it again after the warp (PadToDivisor).
  sample->size_before_padding = cv::Size();
  auto check_size = [&](const cv::Mat& raster, const std::string& name) -> absl::Status {
    if (raster.size() == source) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", name, " is ", raster.rows, "x", raster.cols, " but the image is ",
                     source.height, "x", source.width,
                     "; they must be the same size to be transformed together"));
  };
  if (!sample->semantic.empty()) {
    VISION_RETURN_IF_ERROR(check_size(sample->semantic, "semantic map"));
  }
  for (const auto& [name, target] : sample->targets) {
    VISION_RETURN_IF_ERROR(check_size(target, absl::StrCat("target '", name, "'")));
  }

  const bool mirrored = m(0, 0) * m(1, 1) - m(0, 1) * m(1, 0) < 0;
  std::vector<core::TextInstance> texts;
  texts.reserve(sample->texts.size());
  for (core::TextInstance& text : sample->texts) {
    if (WarpText(m, mirrored, out_size, params.clip, &text)) texts.push_back(std::move(text));
  }
  std::vector<core::ObjectInstance> objects;
  objects.reserve(sample->objects.size());
  for (core::ObjectInstance& object : sample->objects) {
    VISION_ASSIGN_OR_RETURN(
        const bool kept,
        core::WithContext(where, WarpObject(m, mirrored, source, out_size, params.clip, &object)));
    if (kept) objects.push_back(std::move(object));
  }

  sample->image =
      WarpRaster(sample->image, m, out_size, params.image_interpolation, params.image_fill);
  if (!sample->semantic.empty()) {
    sample->semantic =
        WarpRaster(sample->semantic, m, out_size, cv::INTER_NEAREST, cv::Scalar::all(255));
  }
  for (auto& [name, target] : sample->targets) {
    target = WarpRaster(target, m, out_size, cv::INTER_NEAREST, cv::Scalar::all(0));
  }
  sample->texts = std::move(texts);
  sample->objects = std::move(objects);
  return absl::OkStatus();
}

absl::Status ResizeSample(cv::Size new_size, core::Sample* sample) {
  VISION_RETURN_IF_ERROR(CheckHasImage(*sample));
  const double sx = static_cast<double>(new_size.width) / sample->image.cols;
  const double sy = static_cast<double>(new_size.height) / sample->image.rows;
  const cv::Matx23d m(sx, 0, 0, 0, sy, 0);
  VISION_RETURN_IF_ERROR(WarpSample(m, new_size, WarpParams(), sample));
  sample->scale_x *= sx;
  sample->scale_y *= sy;
  return absl::OkStatus();
}

absl::StatusOr<cv::Scalar> FillFromValues(const google::protobuf::RepeatedField<float>& values,
                                          const char* field) {
  if (values.empty()) return cv::Scalar::all(0);
  if (values.size() == 1) return cv::Scalar::all(values.Get(0));
  if (values.size() > 4) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": has ", values.size(),
                                                   " values; give one, or one per channel (<= 4)"));
  }
  cv::Scalar fill = cv::Scalar::all(0);
  for (int i = 0; i < values.size(); ++i) fill[i] = values.Get(i);
  return fill;
}

}  // namespace vision::data::augmentations
