// A synthetic semantic-segmentation dataset in the Cityscapes layout, for training and testing
// the segmentation pipeline (DANet) without the real data.
//
// Each image is a street seen from a car: sky above a horizon; building facades with windows
// on both sides of a street that runs to a vanishing point; a road (a trapezoid in perspective)
// with dashed lane marks between sidewalks, sometimes with a strip of grass; and, sized by their
// distance, trees, poles with traffic signs and lights, parked and moving cars, trucks and buses,
// pedestrians, cyclists (rider on a bicycle) and street furniture. The bottom shows the hood of
// the ego vehicle and some images a rectification border. The label map holds the official
// Cityscapes label ids (cityscapes_labels.h), so street furniture ("static"), the ego vehicle and
// the border are ignored once mapped to train ids, as in the real data. Every class has its own
// colour range and texture, jittered per image and object, and the image is slightly blurred and
// noisy, so the classes are learnable but not separable by colour alone.
//
// Determinism: an image depends only on (options, ImageSeed(seed, split, index)): it draws from
// its own std::mt19937_64 (whose output sequence is fixed by the C++ standard) through the
// hand-written helpers in the .cc rather than std::uniform_*_distribution (whose algorithms
// differ between standard libraries); shapes are filled without antialiasing and the PNGs are
// written with a fixed compression level. The same seed therefore gives byte-identical files
// with the same OpenCV and zlib builds.
#ifndef VISION_DATA_SYNTHETIC_CITYSCAPES_SYNTHETIC_CITYSCAPES_H_
#define VISION_DATA_SYNTHETIC_CITYSCAPES_SYNTHETIC_CITYSCAPES_H_

#include <cstdint>
#include <string>

#include <opencv2/core.hpp>

#include "absl/status/status.h"

namespace vision::data::synthetic::cityscapes {

enum class Split { kTrain, kVal };

struct StreetScene {
  cv::Mat image;      // CV_8UC3, BGR
  cv::Mat label_ids;  // CV_8UC1, Cityscapes label ids 0..33 (not train ids)
};

struct SyntheticCityscapesOptions {
  // 2:1 like the real 2048x1024 images.
  int width = 256;
  int height = 128;
  int num_train = 100;
  int num_val = 20;
  // Cities per split (1..kMaxCities); a split's images are divided among them in order.
  int num_cities = 2;
  uint64_t seed = 1;
};

inline constexpr int kMaxCities = 4;

// Checks ranges: the image at least 64x32, counts non-negative, 1 <= num_cities <= kMaxCities.
absl::Status ValidateOptions(const SyntheticCityscapesOptions& options);

// The seed of image `index` (0-based) of `split`: a hash, so that neighbouring seeds and
// indices give unrelated images and one image can be regenerated alone.
uint64_t ImageSeed(uint64_t seed, Split split, int64_t index);

// Renders one scene of width x height pixels (at least 64x32).
StreetScene RenderStreetScene(int width, int height, uint64_t image_seed);

// The name of city `city` (0-based, < kMaxCities) of `split`; the names of a split sort in
// index order, and no name is that of a real Cityscapes city.
std::string CityName(Split split, int city);

// Writes, for each split and image index i (0-based),
//
//   <output_dir>/leftImg8bit/<split>/<city>/<city>_000000_<i, 6 digits>_leftImg8bit.png
//   <output_dir>/gtFine/<split>/<city>/<city>_000000_<i, 6 digits>_gtFine_labelIds.png
//
// with split "train" or "val" and the images divided into contiguous blocks among the cities,
// so that the Cityscapes dataset's sample i is image i. Refuses to write into a split directory
// that already holds files, so that no stale image survives a rerun.
absl::Status WriteSyntheticCityscapes(const SyntheticCityscapesOptions& options,
                                      const std::string& output_dir);

}  // namespace vision::data::synthetic::cityscapes

#endif  // VISION_DATA_SYNTHETIC_CITYSCAPES_SYNTHETIC_CITYSCAPES_H_
