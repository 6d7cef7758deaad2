// Writes state dicts in torch.save's zip format (PyTorch >= 1.6, pickle protocol 2), so that
// Python's torch.load(path, weights_only=True) reads them as an OrderedDict of CPU tensors, and
// ReadTorchStateDict (torchvision_import.h) reads them back. The opcodes follow what Python's
// pickler emits for torch.save(model.state_dict()), minus the memo, which a reader must not
// depend on. The OrderedDict's _metadata is empty (no module versions), which PyTorch's loaders
// treat as the oldest version: BatchNorm, for one, then accepts a file without
// num_batches_tracked.
#ifndef VISION_MODELS_BACKBONES_TORCH_SAVE_WRITER_H_
#define VISION_MODELS_BACKBONES_TORCH_SAVE_WRITER_H_

#include <string>

#include "absl/status/status.h"
#include "models/backbones/torchvision_import.h"

namespace vision::models::backbones {

enum class DictKind {
  // collections.OrderedDict with a _metadata attribute, as module.state_dict() returns.
  kOrderedDict,
  // A plain dict, as torch.save(dict(model.state_dict())) writes.
  kDict,
};

// Writes `state` (tensors on any device, any strides; each is stored contiguously in its own
// storage record) to `path` atomically: under a temporary name beside it, fsynced, then renamed
// into place, so `path` is either the complete file or untouched. Errors name the path; an
// unsupported dtype is an InvalidArgument error.
absl::Status WriteTorchStateDict(const StateDict& state, const std::string& path,
                                 DictKind kind = DictKind::kOrderedDict);

// The pickle alone (data.pkl) for the same tensors; storage i is record "data/<i>". Throws
// c10::Error for a dtype torch.save has no storage class for here.
std::string PickleStateDict(const StateDict& state, DictKind kind);

}  // namespace vision::models::backbones

#endif  // VISION_MODELS_BACKBONES_TORCH_SAVE_WRITER_H_
