#include "models/backbones/torch_save_writer_for_test.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace vision::models::backbones::testing {

void WriteTorchSave(const std::string& path,
                    const std::vector<std::pair<std::string, at::Tensor>>& tensors, DictKind kind) {
  const absl::Status status = WriteTorchStateDict(tensors, path, kind);
  TORCH_CHECK(status.ok(), std::string(status.message()));
}

std::string PickleStateDict(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                            DictKind kind) {
  return ::vision::models::backbones::PickleStateDict(tensors, kind);
}

}  // namespace vision::models::backbones::testing
