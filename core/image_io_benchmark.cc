// The cost of ReadImage's checks against plain decoding, side by side on one 1280 x 720 JPEG
// (the size of an ICDAR2015 image), the same JPEG with EXIF orientations, and its PNG:
//   bazel run -c opt //core:image_io_benchmark
// ReadImage decodes a plain JPEG once, with libjpeg under its own error manager ("jpg"). Where
// it leaves the image to OpenCV it decodes twice (libjpeg as a check, then cv::imdecode): for
// "exif6" (orientation 6, which OpenCV applies) and "exif1" (orientation 1 written as a LONG,
// which this decoder does not trust to be 1 and leaves to OpenCV, which does nothing with it),
// so "exif1"'s ratio is the cost of checking with a separate decode instead of decoding once.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

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
  for (const std::string kind : {"jpg", "exif6", "exif1", "png"}) {
    const std::string extension = kind == "png" ? ".png" : ".jpg";
    std::vector<uchar> bytes;
    cv::imencode(extension, image, bytes);
    if (kind != "jpg" && kind != "png") {
      // APP1 "Exif", little-endian TIFF, IFD0 with one entry: orientation (0x0112) SHORT 6 or
      // LONG 1.
      const std::vector<uchar> app1 = {0xFF, 0xE1, 0, 34, 'E', 'x', 'i', 'f', 0,    0,    'I', 'I',
                                       0x2A, 0,    8, 0,  0,   0,   1,   0,   0x12, 0x01, 3,   0,
                                       1,    0,    0, 0,  6,   0,   0,   0,   0,    0,    0,   0};
      std::vector<uchar> segment = app1;
      if (kind == "exif1") segment[22] = 4, segment[28] = 1;  // type LONG, value 1
      bytes.insert(bytes.begin() + 2, segment.begin(), segment.end());
    }
    const std::string path = "/tmp/image_io_benchmark_" + kind + extension;
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    if (absl::Status status = vision::core::ReadImage(path).status(); !status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      return 1;
    }
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
        "%-5s 1280x720, %zu KB: cv::imread %.3f ms, ReadImage %.3f ms (ratio %.3f), "
        "structure check alone %.4f ms\n",
        kind.c_str(), bytes.size() / 1024, imread, read_image, read_image / imread, check);
  }
  return 0;
}
