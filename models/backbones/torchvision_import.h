// Loads PyTorch state dicts saved by torch.save (e.g. torchvision's published weights) into
// LibTorch modules, matching keys to named_parameters() and named_buffers().
//
// ReadTorchStateDict reads the zip archive with caffe2::serialize::PyTorchStreamReader and
// interprets data.pkl itself: the pickle opcodes torch.save emits (protocols 2 to 4) and the
// tensor-rebuilding globals, rejecting anything else by name. LibTorch's torch::pickle_load is
// no substitute; measured with LibTorch 2.11 (PyPI torch 2.11.0) on files that Python's
// torch.save wrote:
//  - It still cannot read torchvision's files: they pickle a collections.OrderedDict, which its
//    unpickler only knows as a tensor's backward-hooks argument and replaces by None, so
//    torchvision 0.26's resnet18().state_dict() (and state_dict(keep_vars=True)) fails with
//    "isGenericDict() INTERNAL ASSERT FAILED ... Expected GenericDict but got None". Only a
//    plain dict, torch.save(dict(state_dict)), loads.
//  - Even then it checks no tensor against its data, and a downloaded file is untrusted: a
//    100-element view of a 4-element storage, or a storage record shorter than the element
//    count it declares, loads and reads past the end of its buffer; a negative stride loads as
//    a different tensor. Here each is an error naming the file and the key.
//  - It refuses integers that Python's pickler writes in fewer than 8 bytes (LONG1, e.g. 2^40:
//    "Expected length to be 8, got 6"), and its errors name neither the file nor the key.
// Like this reader, it does refuse unknown globals ("Unpickler found unknown type posix.system").
#ifndef VISION_MODELS_BACKBONES_TORCHVISION_IMPORT_H_
#define VISION_MODELS_BACKBONES_TORCHVISION_IMPORT_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vision::models::backbones {

// Keys and tensors in the file's order.
using StateDict = std::vector<std::pair<std::string, at::Tensor>>;

// Reads the state dict (a dict or OrderedDict of CPU tensors) stored in a torch.save zip file.
// Errors name the file and, for a bad tensor, its key.
absl::StatusOr<StateDict> ReadTorchStateDict(const std::string& path);

// The same for a torch.save archive held in memory (`data` must outlive the call); `name`
// stands for the file in messages. A hostile archive gives an error: no record larger than the
// archive is allocated, and sizes, strides and counts are checked before use (fuzzed by
// //tools/fuzz:torch_state_dict_fuzzer).
absl::StatusOr<StateDict> ReadTorchStateDictFromBuffer(absl::string_view data,
                                                       const std::string& name);

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
