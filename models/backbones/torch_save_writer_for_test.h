// The tests' spelling of torch_save_writer.h (which does the work): a writer that throws, so
// that a test needs no status handling.
#ifndef VISION_MODELS_BACKBONES_TORCH_SAVE_WRITER_FOR_TEST_H_
#define VISION_MODELS_BACKBONES_TORCH_SAVE_WRITER_FOR_TEST_H_

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "models/backbones/torch_save_writer.h"

namespace vision::models::backbones::testing {

using DictKind = ::vision::models::backbones::DictKind;

// WriteTorchStateDict; throws c10::Error on failure.
void WriteTorchSave(const std::string& path,
                    const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                    DictKind kind = DictKind::kOrderedDict);

// The pickle alone (data.pkl) for the same tensors; storage i is record "data/<i>".
std::string PickleStateDict(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                            DictKind kind);

}  // namespace vision::models::backbones::testing

#endif  // VISION_MODELS_BACKBONES_TORCH_SAVE_WRITER_FOR_TEST_H_
