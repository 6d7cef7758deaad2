// DBNet's training targets, made on the data side (core::TargetGenerator) after augmentation.
//
// For an image of H x W pixels it fills Sample::targets with four H x W maps:
//   "gt"          CV_8U, 1 inside each text polygon shrunk by D = A (1 - r^2) / L, else 0;
//   "mask"        CV_8U, 0 over don't-care and too small polygons (they count neither way),
//                 else 1;
//   "thresh_map"  CV_32F, thresh_min + (thresh_max - thresh_min) * max_p (1 - min(d_p / D_p, 1)),
//                 d_p the distance to the nearest edge of polygon p (MhLiao/DB's border map);
//   "thresh_mask" CV_8U, 1 inside each polygon dilated by its D (where the threshold loss
//                 applies), else 0.
// The three binary maps are bytes, as the reference implementations keep them (mmocr's
// gt_shrink and thresh_mask are uint8): a quarter of the memory to initialise, collate and
// copy to the device, where the loss converts them to float (dbnet.cc).
//
// Regions are rasterised by cv::fillPoly with vertices in fixed point at 1/256 px
// (kFixedPointShift = 8 fractional bits), boundary pixels included; the reference casts them to
// int32 first, truncating each vertex to a whole pixel. As in MhLiao/DB, polygon coordinates
// are first clamped to the image, pixel (x, y) sits at coordinates (x, y), and ignored polygons
// get no "gt" and no threshold target.
//
// Which polygons are ignored: don't-care ones (TextInstance::ignore), those with a (shoelace)
// area below 1 px^2 or a bounding-box side below min_text_size after clamping, and those the
// shrink empties, as in the reference. The ICDAR2015 dataset hands over only valid simple
// polygons (core::IsValidSimplePolygon; it repairs the others and counts them, README "Data
// policies"), so for it the area test removes only what clamping to the image has flattened.
//
// Differences from the reference's Python:
//  - the distance is the true point-to-segment distance. The reference's cosine-rule formula
//    uses the distance to the segment's line where the angle A-P-B at the pixel P is obtuse
//    and the distance to the nearer end otherwise, so a pixel that projects onto the segment
//    but lies outside the circle on A-B as diameter (near an end, or far out) gets its
//    distance to that end: an overestimate (unless another edge is nearer), so the
//    reference's threshold map can be lower there;
//  - thresh_mask is {inside the polygon} U {distance <= D}, the exact round-join dilation. The
//    reference fills pyclipper's JT_ROUND offset polygon (arcs approximated by chords) with
//    cv2.fillPoly after truncating its vertices to whole pixels; fillPoly also sets every
//    pixel the outline passes through, so its mask reaches up to about a pixel beyond
//    {distance <= D} on some sides and falls short on others (it is found in the same pass as
//    the distances here, which saves a Clipper call per polygon).
// Speed (see label_generation_benchmark): distances are computed only where a pixel can be
// within D of an edge (a span per row of the polygon's dilated bounding box, from the edges
// that reach that row), in vectorised row loops over a reused buffer (AVX2 where the CPU has
// it); the [0, 1] -> [thresh_min, thresh_max] scaling is folded into the per-polygon
// maximum; the four maps are initialised with non-temporal stores, and three of them are
// bytes.
#ifndef VISION_MODELS_DBNET_LABEL_GENERATOR_H_
#define VISION_MODELS_DBNET_LABEL_GENERATOR_H_

#include "absl/status/status.h"
#include "core/sample.h"
#include "core/target_generator.h"

namespace vision::models::dbnet {

inline constexpr char kGtTarget[] = "gt";
inline constexpr char kMaskTarget[] = "mask";
inline constexpr char kThreshMapTarget[] = "thresh_map";
inline constexpr char kThreshMaskTarget[] = "thresh_mask";

struct LabelGeneratorOptions {
  float shrink_ratio = 0.4f;
  float thresh_min = 0.3f;
  float thresh_max = 0.7f;
  // Polygons whose bounding box has a side shorter than this (pixels) are ignored.
  float min_text_size = 8.0f;
};

// The shrink (and dilation) offset D = A (1 - r^2) / L of the paper, in pixels.
double ShrinkDistance(const core::Polygon& polygon, float shrink_ratio);

class DBTargetGenerator : public core::TargetGenerator {
 public:
  explicit DBTargetGenerator(const LabelGeneratorOptions& options) : options_(options) {}

  // Thread-safe: all scratch memory is local to the call.
  absl::Status Generate(core::Sample* sample) const override;

  const LabelGeneratorOptions& options() const { return options_; }

 private:
  LabelGeneratorOptions options_;
};

}  // namespace vision::models::dbnet

#endif  // VISION_MODELS_DBNET_LABEL_GENERATOR_H_
