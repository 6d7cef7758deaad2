// What the operator tests share: reading the golden files (testdata/ops_golden.pth from
// make_ops_golden.py, ops_golden2.pth from make_ops_golden2.py, deform_conv_golden.pth), the
// largest difference between tensors, and expecting a LibTorch error.
#ifndef VISION_MODELS_OPS_GOLDEN_FOR_TEST_H_
#define VISION_MODELS_OPS_GOLDEN_FOR_TEST_H_

#include <functional>
#include <map>
#include <string>

#include <ATen/core/Tensor.h>

namespace vision::models::ops {

// The golden cases of one operator in `path`: case name -> (tensor name -> tensor), from the
// keys "<op>.<case>.<name>". Throws c10::Error if the file cannot be read or holds no such case.
std::map<std::string, std::map<std::string, at::Tensor>> LoadGoldenCases(
    const std::string& op, const std::string& path = "models/ops/testdata/ops_golden.pth");

// max |a - b| in double on the host; 0 for empty tensors. Fails the test if the sizes differ.
double MaxDiff(const at::Tensor& a, const at::Tensor& b);

// Fails the test unless `call` throws a c10::Error whose message contains `message`.
void ExpectError(const std::function<void()>& call, const std::string& message);

}  // namespace vision::models::ops

#endif  // VISION_MODELS_OPS_GOLDEN_FOR_TEST_H_
