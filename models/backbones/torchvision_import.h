// Loads PyTorch state dicts saved by torch.save (e.g. torchvision's published weights) into
// LibTorch modules, matching keys to named_parameters() and named_buffers().
//
// LibTorch 1.13's torch::pickle_load cannot read torchvision files: they pickle a
// collections.OrderedDict, which its unpickler only knows as a tensor's (always empty)
// backward-hooks argument. ReadTorchStateDict therefore reads the zip archive with
// caffe2::serialize::PyTorchStreamReader and interprets data.pkl itself; it understands the
// pickle opcodes torch.save emits (protocols 2 to 4) and the tensor-rebuilding globals, and
// rejects anything else by name.
#ifndef VISION_MODELS_BACKBONES_TORCHVISION_IMPORT_H_
#define VISION_MODELS_BACKBONES_TORCHVISION_IMPORT_H_

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "absl/status/statusor.h"

namespace vision::models::backbones {

// Keys and tensors in the file's order.
using StateDict = std::vector<std::pair<std::string, at::Tensor>>;

// Reads the state dict (a dict or OrderedDict of CPU tensors) stored in a torch.save zip file.
// Errors name the file and, for a bad tensor, its key.
absl::StatusOr<StateDict> ReadTorchStateDict(const std::string& path);

// What LoadStateDict did. Keys are full state-dict names ("layer1.0.bn1.running_mean").
struct ImportReport {
  std::vector<std::string> loaded;
  // In the module but not in the file.
  std::vector<std::string> missing;
  // In the file but not in the module.
  std::vector<std::string> unexpected;
  // "key: file [64, 3, 7, 7], module [64, 3, 3, 3]"; such tensors are not copied.
  std::vector<std::string> mismatched;
  // Skipped on purpose, not a problem: BatchNorm's num_batches_tracked present on one side
  // only (checkpoints from PyTorch < 0.4 lack it, FrozenBatchNorm2d has none, and it only
  // matters for momentum = None). Callers may add keys they drop themselves.
  std::vector<std::string> ignored;
  // In the module but not in the file, and named by the caller as parameters the file's
  // architecture lacks (a deformable convolution's offset branch where the checkpoint has a
  // plain convolution). They keep their initial values; not a problem.
  std::vector<std::string> added;

  bool complete() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  // One line per problem, for logs and error messages.
  std::string ToString() const;
};

// Copies `state` into `module`'s parameters and buffers of the same names and shapes.
// strict: a missing, unexpected or mismatched key is a FailedPrecondition error that names
// them, and the module is left unchanged. Not strict: everything that matches is copied and
// the rest is only reported. `source` names the origin in messages. Keys in `new_keys` that
// the file lacks are reported as added instead of missing (the file's are still loaded).
absl::StatusOr<ImportReport> LoadStateDict(const StateDict& state, torch::nn::Module& module,
                                           bool strict, const std::string& source,
                                           const std::vector<std::string>& new_keys = {});

// ReadTorchStateDict + LoadStateDict.
absl::StatusOr<ImportReport> ImportTorchvisionWeights(const std::string& path,
                                                      torch::nn::Module& module, bool strict);

}  // namespace vision::models::backbones

#endif  // VISION_MODELS_BACKBONES_TORCHVISION_IMPORT_H_
