#include "data/synthetic/clutter.h"

#include <algorithm>
#include <cmath>

#include <opencv2/imgproc.hpp>

namespace vision::data::synthetic {

void FillGradient(SeededRandom& rng, cv::Mat& image) {
  constexpr double kPi = 3.14159265358979323846;
  const cv::Scalar from = rng.Colour();
  const cv::Scalar to = rng.Colour();
  const double angle = rng.Uniform(0, 2 * kPi);
  const double dx = std::cos(angle);
  const double dy = std::sin(angle);
  double lo = 0;
  double hi = 0;
  for (const cv::Point2d corner : {cv::Point2d(image.cols - 1, 0), cv::Point2d(0, image.rows - 1),
                                   cv::Point2d(image.cols - 1, image.rows - 1)}) {
    lo = std::min(lo, corner.x * dx + corner.y * dy);
    hi = std::max(hi, corner.x * dx + corner.y * dy);
  }
  for (int y = 0; y < image.rows; ++y) {
    cv::Vec3b* row = image.ptr<cv::Vec3b>(y);
    for (int x = 0; x < image.cols; ++x) {
      const double t = (x * dx + y * dy - lo) / (hi - lo);
      for (int c = 0; c < 3; ++c) {
        row[x][c] = cv::saturate_cast<uchar>(from[c] + (to[c] - from[c]) * t);
      }
    }
  }
}

void BlendColourBlobs(SeededRandom& rng, cv::Mat& image, int max_cells, double max_weight) {
  const int rows = rng.Int(2, max_cells);
  const int cols = rng.Int(2, max_cells);
  cv::Mat small(rows, cols, CV_8UC3);
  for (int y = 0; y < rows; ++y) {
    for (int x = 0; x < cols; ++x) {
      const cv::Scalar colour = rng.Colour();
      small.at<cv::Vec3b>(y, x) = cv::Vec3b(colour[0], colour[1], colour[2]);
    }
  }
  cv::Mat blobs;
  cv::resize(small, blobs, image.size(), 0, 0, cv::INTER_CUBIC);
  const double weight = rng.Uniform(0.2, max_weight);
  cv::addWeighted(image, 1 - weight, blobs, weight, 0, image);
}

void AddGaussianNoise(SeededRandom& rng, cv::Mat& image, double max_sigma) {
  const double sigma = rng.Uniform(0, max_sigma);
  cv::RNG noise_rng(rng.Bits());
  cv::Mat noise(image.size(), CV_16SC3);
  noise_rng.fill(noise, cv::RNG::NORMAL, 0, sigma);
  cv::Mat wide;
  image.convertTo(wide, CV_16SC3);
  wide += noise;
  wide.convertTo(image, CV_8UC3);
}

}  // namespace vision::data::synthetic
