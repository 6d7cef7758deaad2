// The cost of ReadImage's structural check against plain decoding, side by side on one
// 1280 x 720 JPEG (the size of an ICDAR2015 image) and its PNG:
//   bazel run -c opt //core:image_io_benchmark
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "core/image_io.h"

namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double MillisecondsPerCall(int repeats, F f) {
  f();  // warm-up
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < repeats; ++i) f();
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count() / repeats;
}

}  // namespace

int main() {
  // A photo-like picture: smooth gradients with some noise, so the JPEG is of typical size.
  cv::Mat image(720, 1280, CV_8UC3);
  for (int y = 0; y < image.rows; ++y) {
    for (int x = 0; x < image.cols; ++x) {
      image.at<cv::Vec3b>(y, x) = cv::Vec3b(x % 256, y % 256, (x + y) % 256);
    }
  }
  cv::Mat noise(image.size(), CV_8UC3);
  cv::randu(noise, 0, 32);
  image += noise;
  for (const std::string extension : {".jpg", ".png"}) {
    std::vector<uchar> bytes;
    cv::imencode(extension, image, bytes);
    const std::string path = "/tmp/image_io_benchmark" + extension;
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    const int repeats = 50;
    const double imread = MillisecondsPerCall(repeats, [&] { cv::imread(path, cv::IMREAD_COLOR); });
    const double read_image =
        MillisecondsPerCall(repeats, [&] { (void)vision::core::ReadImage(path).ok(); });
    const double check = MillisecondsPerCall(repeats, [&] {
      (void)vision::core::CheckImageStructure(
          absl::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()))
          .ok();
    });
    std::printf(
        "%s 1280x720, %zu KB: cv::imread %.3f ms, ReadImage %.3f ms (ratio %.3f), "
        "structure check alone %.4f ms\n",
        extension.c_str(), bytes.size() / 1024, imread, read_image, read_image / imread, check);
  }
  return 0;
}
