// The scaling table as a picture: images/s against processes (with the linear ideal from the
// baseline row) beside efficiency against processes.
#ifndef VISION_TOOLS_SCALING_PLOT_H_
#define VISION_TOOLS_SCALING_PLOT_H_

#include <opencv2/core.hpp>
#include <string>
#include <vector>

#include "tools/scaling/scaling.h"

namespace vision::tools::scaling {

// A 3-channel 8-bit image, 960x420; `title` goes above both panels. Rows as ScalingTable
// returns them (sorted, at least one).
cv::Mat DrawScalingPlot(const std::vector<ScalingRow>& rows, const std::string& title);

}  // namespace vision::tools::scaling

#endif  // VISION_TOOLS_SCALING_PLOT_H_
