// Background steps the synthetic generators share: a linear colour gradient, soft colour
// blobs and per-pixel Gaussian noise. Each draws only from the given SeededRandom, so an
// image stays a function of its seed.
#ifndef VISION_DATA_SYNTHETIC_CLUTTER_H_
#define VISION_DATA_SYNTHETIC_CLUTTER_H_

#include <opencv2/core.hpp>

#include "data/synthetic/seeded_random.h"

namespace vision::data::synthetic {

// Fills an 8-bit BGR image with a gradient between two random colours in a random direction.
void FillGradient(SeededRandom& rng, cv::Mat& image);

// Blends in soft colour blobs: a grid of 2..max_cells random pixels per side, upsampled over
// the whole image, with a weight drawn from [0.2, max_weight).
void BlendColourBlobs(SeededRandom& rng, cv::Mat& image, int max_cells, double max_weight);

// Adds Gaussian noise of a standard deviation drawn from [0, max_sigma) to every channel.
void AddGaussianNoise(SeededRandom& rng, cv::Mat& image, double max_sigma);

}  // namespace vision::data::synthetic

#endif  // VISION_DATA_SYNTHETIC_CLUTTER_H_
