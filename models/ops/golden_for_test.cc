#include "models/ops/golden_for_test.h"

#include <fstream>
#include <iterator>
#include <vector>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <torch/serialize.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::models::ops {

std::map<std::string, std::map<std::string, at::Tensor>> LoadGoldenCases(const std::string& op,
                                                                         const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  TORCH_CHECK(file, "cannot open ", path);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(file)),
                                std::istreambuf_iterator<char>());
  std::map<std::string, std::map<std::string, at::Tensor>> cases;
  for (const auto& entry : torch::pickle_load(bytes).toGenericDict()) {
    const std::string key = entry.key().toStringRef();
    // Case names may hold dots ("scale0.5"): the op ends at the first, the name starts after the
    // last.
    const size_t first = key.find('.');
    const size_t last = key.rfind('.');
    if (first == std::string::npos || first == last || key.substr(0, first) != op) continue;
    cases[key.substr(first + 1, last - first - 1)][key.substr(last + 1)] = entry.value().toTensor();
  }
  TORCH_CHECK(!cases.empty(), path, " holds no ", op, " cases");
  return cases;
}

double MaxDiff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.numel() == 0) return 0;
  return (a.detach().cpu().to(at::kDouble) - b.detach().cpu().to(at::kDouble)).abs().max().item<double>();
}

void ExpectError(const std::function<void()>& call, const std::string& message) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one containing \"" << message << "\"";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(), ::testing::HasSubstr(message));
  }
}

}  // namespace vision::models::ops
