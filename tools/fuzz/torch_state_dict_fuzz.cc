// Fuzzes the reader of users' weight files (models/backbones/torchvision_import.h) on whole
// torch.save zip archives: LibTorch's zip reader (caffe2::serialize::PyTorchStreamReader),
// then our pickle interpreter and tensor checks. A downloaded .pth is untrusted input: every
// input must give a state dict or an error, never a crash, an out-of-bounds read, a huge
// allocation or a hang. Accepted tensors must be readable in full.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "tools/fuzz/state_dict_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vision::fuzz::CheckStateDictReader(absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
