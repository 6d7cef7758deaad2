// The Cityscapes label set (cityscapesScripts, helpers/labels.py): 34 label ids 0..33 as stored in
// *_gtFine_labelIds.png plus "license plate" (id -1, never written to label maps), of which 19 are
// trained and evaluated (train ids 0..18); all others map to train id 255, ignored by losses and
// metrics.
//
// Kept apart from the dataset plugin so that the synthetic generator and evaluators can name
// classes without linking (and registering) the plugin.
#ifndef VISION_DATA_DATASETS_CITYSCAPES_CITYSCAPES_LABELS_H_
#define VISION_DATA_DATASETS_CITYSCAPES_CITYSCAPES_LABELS_H_

#include <array>
#include <cstdint>

#include <opencv2/core.hpp>

#include "absl/types/span.h"

namespace vision::data::datasets::cityscapes {

inline constexpr int kNumTrainClasses = 19;
inline constexpr uint8_t kIgnoreTrainId = 255;
// Label maps hold ids 0..kMaxLabelId; any other value is corrupt data.
inline constexpr int kMaxLabelId = 33;

// The label ids of *_gtFine_labelIds.png, named as in labels.py.
namespace label_id {
inline constexpr uint8_t kUnlabeled = 0;
inline constexpr uint8_t kEgoVehicle = 1;
inline constexpr uint8_t kRectificationBorder = 2;
inline constexpr uint8_t kOutOfRoi = 3;
inline constexpr uint8_t kStatic = 4;
inline constexpr uint8_t kDynamic = 5;
inline constexpr uint8_t kGround = 6;
inline constexpr uint8_t kRoad = 7;
inline constexpr uint8_t kSidewalk = 8;
inline constexpr uint8_t kParking = 9;
inline constexpr uint8_t kRailTrack = 10;
inline constexpr uint8_t kBuilding = 11;
inline constexpr uint8_t kWall = 12;
inline constexpr uint8_t kFence = 13;
inline constexpr uint8_t kGuardRail = 14;
inline constexpr uint8_t kBridge = 15;
inline constexpr uint8_t kTunnel = 16;
inline constexpr uint8_t kPole = 17;
inline constexpr uint8_t kPoleGroup = 18;
inline constexpr uint8_t kTrafficLight = 19;
inline constexpr uint8_t kTrafficSign = 20;
inline constexpr uint8_t kVegetation = 21;
inline constexpr uint8_t kTerrain = 22;
inline constexpr uint8_t kSky = 23;
inline constexpr uint8_t kPerson = 24;
inline constexpr uint8_t kRider = 25;
inline constexpr uint8_t kCar = 26;
inline constexpr uint8_t kTruck = 27;
inline constexpr uint8_t kBus = 28;
inline constexpr uint8_t kCaravan = 29;
inline constexpr uint8_t kTrailer = 30;
inline constexpr uint8_t kTrain = 31;
inline constexpr uint8_t kMotorcycle = 32;
inline constexpr uint8_t kBicycle = 33;
}  // namespace label_id

struct CityscapesLabel {
  const char* name;
  // -1 for the license plate, which the official tools never draw into label maps.
  int id;
  // 0..18, or kIgnoreTrainId.
  int train_id;
  // The colour of the official visualisations, RGB.
  cv::Vec3b rgb;
  // The group the official evaluation also scores as a whole ("flat", "vehicle"; "void" for
  // labels that are never evaluated).
  const char* category;
};

// All 35 labels in id order, the license plate last.
absl::Span<const CityscapesLabel> CityscapesLabels();

// The train id of label id 0..255: 0..18, kIgnoreTrainId for the ignored labels, and -1 for values
// that are no Cityscapes label id (34..255).
int TrainIdOfLabelId(int label_id);

// The 256-entry lookup table for cv::LUT from label ids to train ids; values that are no label id
// map to kIgnoreTrainId (check them with TrainIdOfLabelId first).
const cv::Mat& LabelIdToTrainIdLut();

// Names of train ids 0..18: "road", "sidewalk", ..., "bicycle".
const std::array<const char*, kNumTrainClasses>& TrainClassNames();

}  // namespace vision::data::datasets::cityscapes

#endif  // VISION_DATA_DATASETS_CITYSCAPES_CITYSCAPES_LABELS_H_
