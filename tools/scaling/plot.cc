#include "tools/scaling/plot.h"

#include <algorithm>
#include <cmath>
#include <opencv2/imgproc.hpp>

#include "absl/strings/str_format.h"

namespace vision::tools::scaling {
namespace {

const cv::Scalar kInk(40, 40, 40);
const cv::Scalar kGrid(215, 215, 215);
const cv::Scalar kIdeal(150, 150, 150);
const cv::Scalar kMeasured(180, 90, 20);  // BGR: a blue

// The smallest round number (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8 x 10^k) >= value > 0: the
// axis end, so that its fifths are round too.
double NiceCeil(double value) {
  const double power = std::pow(10.0, std::floor(std::log10(value)));
  for (const double step : {1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0}) {
    if (step * power >= value) return step * power;
  }
  return 10 * power;
}

void Text(cv::Mat& image, const std::string& text, cv::Point at, double scale = 0.45) {
  cv::putText(image, text, at, cv::FONT_HERSHEY_SIMPLEX, scale, kInk, 1, cv::LINE_AA);
}

// One panel in `area`: x = processes (linear, ticks at the measured counts), y from 0 to y_max;
// `ideal` (may be empty) drawn in grey under the measured points.
void Panel(cv::Mat& image, cv::Rect area, const std::vector<ScalingRow>& rows,
           const std::vector<double>& measured, const std::vector<double>& ideal, double y_max,
           const std::string& y_label, const char* tick_format, double tick_scale) {
  const int left = area.x + 60, right = area.x + area.width - 15;
  const int top = area.y + 30, bottom = area.y + area.height - 45;
  const double x_max = rows.back().processes;
  const auto px = [&](double x) {
    return left + static_cast<int>(std::lround((right - left) * x / x_max));
  };
  const auto py = [&](double y) {
    return bottom - static_cast<int>(std::lround((bottom - top) * y / y_max));
  };
  for (int i = 0; i <= 5; ++i) {
    const double y = y_max * i / 5;
    cv::line(image, {left, py(y)}, {right, py(y)}, kGrid, 1);
    Text(image, absl::StrFormat(tick_format, y * tick_scale), {area.x + 5, py(y) + 5}, 0.4);
  }
  cv::line(image, {left, bottom}, {right, bottom}, kInk, 1);
  cv::line(image, {left, top}, {left, bottom}, kInk, 1);
  for (const ScalingRow& row : rows) {
    const int x = px(row.processes);
    cv::line(image, {x, bottom}, {x, bottom + 4}, kInk, 1);
    Text(image, absl::StrFormat("%d", row.processes), {x - 4, bottom + 18}, 0.4);
  }
  Text(image, "processes", {(left + right) / 2 - 35, bottom + 38});
  Text(image, y_label, {left, top - 10});
  const auto polyline = [&](const std::vector<double>& values, const cv::Scalar& colour,
                            int thickness) {
    for (size_t i = 0; i < values.size(); ++i) {
      const cv::Point p(px(rows[i].processes), py(values[i]));
      if (i > 0) {
        cv::line(image, {px(rows[i - 1].processes), py(values[i - 1])}, p, colour, thickness,
                 cv::LINE_AA);
      }
      cv::circle(image, p, thickness + 2, colour, cv::FILLED, cv::LINE_AA);
    }
  };
  if (!ideal.empty()) polyline(ideal, kIdeal, 1);
  polyline(measured, kMeasured, 2);
}

}  // namespace

cv::Mat DrawScalingPlot(const std::vector<ScalingRow>& rows, const std::string& title) {
  cv::Mat image(420, 960, CV_8UC3, cv::Scalar(255, 255, 255));
  Text(image, title, {15, 22}, 0.55);
  if (rows.empty()) return image;
  std::vector<double> images, ideal, efficiency;
  const ScalingRow& base = rows.front();
  for (const ScalingRow& row : rows) {
    images.push_back(row.images_per_second);
    ideal.push_back(base.images_per_second * row.processes / base.processes);
    efficiency.push_back(row.efficiency);
  }
  const double images_max =
      NiceCeil(1.05 * std::max(*std::max_element(images.begin(), images.end()),
                               *std::max_element(ideal.begin(), ideal.end())));
  const double efficiency_max =
      NiceCeil(std::max(1.2, 1.05 * *std::max_element(efficiency.begin(), efficiency.end())));
  Panel(image, cv::Rect(0, 30, 480, 390), rows, images, ideal, images_max,
        "images/s (all processes; grey: linear from the first row)", "%g", 1.0);
  Panel(image, cv::Rect(480, 30, 480, 390), rows, efficiency, std::vector<double>(rows.size(), 1.0),
        efficiency_max, "efficiency (grey: 100%)", "%.0f%%", 100.0);
  return image;
}

}  // namespace vision::tools::scaling
