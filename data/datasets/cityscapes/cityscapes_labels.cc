#include "data/datasets/cityscapes/cityscapes_labels.h"

namespace vision::data::datasets::cityscapes {
namespace {

constexpr int kIgnore = kIgnoreTrainId;

// Transcribed from cityscapesScripts/helpers/labels.py (name, id, trainId, color, category).
// labels.py gives the license plate trainId -1; it is ignored like every other non-trained label.
const CityscapesLabel kLabels[] = {
    {"unlabeled", 0, kIgnore, {0, 0, 0}, "void"},
    {"ego vehicle", 1, kIgnore, {0, 0, 0}, "void"},
    {"rectification border", 2, kIgnore, {0, 0, 0}, "void"},
    {"out of roi", 3, kIgnore, {0, 0, 0}, "void"},
    {"static", 4, kIgnore, {0, 0, 0}, "void"},
    {"dynamic", 5, kIgnore, {111, 74, 0}, "void"},
    {"ground", 6, kIgnore, {81, 0, 81}, "void"},
    {"road", 7, 0, {128, 64, 128}, "flat"},
    {"sidewalk", 8, 1, {244, 35, 232}, "flat"},
    {"parking", 9, kIgnore, {250, 170, 160}, "flat"},
    {"rail track", 10, kIgnore, {230, 150, 140}, "flat"},
    {"building", 11, 2, {70, 70, 70}, "construction"},
    {"wall", 12, 3, {102, 102, 156}, "construction"},
    {"fence", 13, 4, {190, 153, 153}, "construction"},
    {"guard rail", 14, kIgnore, {180, 165, 180}, "construction"},
    {"bridge", 15, kIgnore, {150, 100, 100}, "construction"},
    {"tunnel", 16, kIgnore, {150, 120, 90}, "construction"},
    {"pole", 17, 5, {153, 153, 153}, "object"},
    {"polegroup", 18, kIgnore, {153, 153, 153}, "object"},
    {"traffic light", 19, 6, {250, 170, 30}, "object"},
    {"traffic sign", 20, 7, {220, 220, 0}, "object"},
    {"vegetation", 21, 8, {107, 142, 35}, "nature"},
    {"terrain", 22, 9, {152, 251, 152}, "nature"},
    {"sky", 23, 10, {70, 130, 180}, "sky"},
    {"person", 24, 11, {220, 20, 60}, "human"},
    {"rider", 25, 12, {255, 0, 0}, "human"},
    {"car", 26, 13, {0, 0, 142}, "vehicle"},
    {"truck", 27, 14, {0, 0, 70}, "vehicle"},
    {"bus", 28, 15, {0, 60, 100}, "vehicle"},
    {"caravan", 29, kIgnore, {0, 0, 90}, "vehicle"},
    {"trailer", 30, kIgnore, {0, 0, 110}, "vehicle"},
    {"train", 31, 16, {0, 80, 100}, "vehicle"},
    {"motorcycle", 32, 17, {0, 0, 230}, "vehicle"},
    {"bicycle", 33, 18, {119, 11, 32}, "vehicle"},
    {"license plate", -1, kIgnore, {0, 0, 142}, "vehicle"},
};

}  // namespace

absl::Span<const CityscapesLabel> CityscapesLabels() { return kLabels; }

int TrainIdOfLabelId(int label_id) {
  if (label_id < 0 || label_id > kMaxLabelId) return -1;
  // kLabels is in id order for ids 0..33.
  return kLabels[label_id].train_id;
}

const cv::Mat& LabelIdToTrainIdLut() {
  // Built on first use and never destroyed, so it is safe from static destructors.
  static const cv::Mat* const lut = [] {
    auto* table = new cv::Mat(1, 256, CV_8U, cv::Scalar(kIgnoreTrainId));
    for (int id = 0; id <= kMaxLabelId; ++id) {
      table->at<uint8_t>(0, id) = static_cast<uint8_t>(kLabels[id].train_id);
    }
    return table;
  }();
  return *lut;
}

const std::array<const char*, kNumTrainClasses>& TrainClassNames() {
  static const std::array<const char*, kNumTrainClasses> names = {
      "road",         "sidewalk",   "building", "wall",       "fence",  "pole",  "traffic light",
      "traffic sign", "vegetation", "terrain",  "sky",        "person", "rider", "car",
      "truck",        "bus",        "train",    "motorcycle", "bicycle"};
  return names;
}

}  // namespace vision::data::datasets::cityscapes
