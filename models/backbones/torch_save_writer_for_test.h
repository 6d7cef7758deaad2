// Writes state dicts in torch.save's zip format (PyTorch >= 1.6, pickle protocol 2), so the
// importer's tests need no Python. The opcodes follow what Python's pickler emits for
// torch.save(model.state_dict()), minus the memo, which a reader must not depend on.
#ifndef VISION_MODELS_BACKBONES_TORCH_SAVE_WRITER_FOR_TEST_H_
#define VISION_MODELS_BACKBONES_TORCH_SAVE_WRITER_FOR_TEST_H_

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

namespace vision::models::backbones::testing {

enum class DictKind {
  // collections.OrderedDict with a _metadata attribute, as module.state_dict() returns.
  kOrderedDict,
  // A plain dict, as torch.save(dict(model.state_dict())) writes.
  kDict,
};

// Each tensor is stored contiguously in its own storage record. Throws c10::Error on I/O
// failure.
void WriteTorchSave(const std::string& path,
                    const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                    DictKind kind = DictKind::kOrderedDict);

// The pickle alone (data.pkl) for the same tensors; storage i is record "data/<i>".
std::string PickleStateDict(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                            DictKind kind);

}  // namespace vision::models::backbones::testing

#endif  // VISION_MODELS_BACKBONES_TORCH_SAVE_WRITER_FOR_TEST_H_
