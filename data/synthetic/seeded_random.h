// Random draws that are the same on every platform, for the synthetic dataset generators: a
// generated dataset must be byte-identical for the same seed, so the arithmetic from engine
// bits to values is fixed here rather than left to the standard library's distributions
// (whose algorithms differ between implementations). std::mt19937_64's output sequence itself
// is fixed by the C++ standard.
//
// Callers make one draw per statement: the evaluation order of function arguments is
// unspecified, so cv::Point(rng.Int(..), rng.Int(..)) could differ between compilers.
#ifndef VISION_DATA_SYNTHETIC_SEEDED_RANDOM_H_
#define VISION_DATA_SYNTHETIC_SEEDED_RANDOM_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>

#include <opencv2/core.hpp>

namespace vision::data::synthetic {

// SplitMix64's finaliser: neighbouring inputs give unrelated outputs.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The seed of item `index` of the stream `salt` (a split, say) of a dataset seeded `seed`, so
// that one image can be regenerated alone.
inline uint64_t MixSeed(uint64_t seed, uint64_t salt, uint64_t index) {
  return SplitMix64(SplitMix64(SplitMix64(seed) ^ salt) ^ index);
}

class SeededRandom {
 public:
  explicit SeededRandom(uint64_t seed) : engine_(seed) {}

  uint64_t Bits() { return engine_(); }
  // Uniform in [0, 1), from the top 53 bits.
  double Unit() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Unit(); }
  // Uniform in [lo, hi].
  int Int(int lo, int hi) { return lo + static_cast<int>(Unit() * (hi - lo + 1)); }
  bool Chance(double p) { return Unit() < p; }
  // A uniformly random BGR colour.
  cv::Scalar Colour() {
    const int b = Int(0, 255);
    const int g = Int(0, 255);
    const int r = Int(0, 255);
    return cv::Scalar(b, g, r);
  }
  cv::Point PointIn(cv::Size size) {
    const int x = Int(0, size.width - 1);
    const int y = Int(0, size.height - 1);
    return cv::Point(x, y);
  }
  // `colour` with each channel moved by an integer in [-spread, spread], kept in [0, 255].
  cv::Scalar Near(const cv::Scalar& colour, int spread) {
    cv::Scalar result;
    for (int c = 0; c < 3; ++c) {
      const int delta = Int(-spread, spread);
      result[c] = std::clamp(colour[c] + delta, 0.0, 255.0);
    }
    return result;
  }
  // `base` with each channel moved by a real number in [-amount, amount), unclamped.
  cv::Scalar Jitter(const cv::Scalar& base, double amount) {
    cv::Scalar colour = base;
    for (int c = 0; c < 3; ++c) colour[c] += Uniform(-amount, amount);
    return colour;
  }
  template <typename T, size_t N>
  const T& Pick(const T (&items)[N]) {
    return items[Int(0, static_cast<int>(N) - 1)];
  }

 private:
  std::mt19937_64 engine_;
};

}  // namespace vision::data::synthetic

#endif  // VISION_DATA_SYNTHETIC_SEEDED_RANDOM_H_
