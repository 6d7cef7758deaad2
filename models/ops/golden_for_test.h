// Reads testdata/ops_golden.pth (written by testdata/make_ops_golden.py) and ops_golden2.pth
// (make_ops_golden2.py) for the operator tests.
#ifndef VISION_MODELS_OPS_GOLDEN_FOR_TEST_H_
#define VISION_MODELS_OPS_GOLDEN_FOR_TEST_H_

#include <map>
#include <string>

#include <ATen/core/Tensor.h>

namespace vision::models::ops {

// The golden cases of one operator in `path`: case name -> (tensor name -> tensor), from the
// keys "<op>.<case>.<name>". Throws c10::Error if the file cannot be read or holds no such case.
std::map<std::string, std::map<std::string, at::Tensor>> LoadGoldenCases(
    const std::string& op, const std::string& path = "models/ops/testdata/ops_golden.pth");

}  // namespace vision::models::ops

#endif  // VISION_MODELS_OPS_GOLDEN_FOR_TEST_H_
