// What the weight-file fuzzers (torch_state_dict, torch_pickle) require of every input: the
// reader returns a state dict or an error with a message, and every accepted tensor is readable
// in full (touching each element finds an out-of-bounds view).
#ifndef VISION_TOOLS_FUZZ_STATE_DICT_CHECK_H_
#define VISION_TOOLS_FUZZ_STATE_DICT_CHECK_H_

#include "absl/strings/string_view.h"

namespace vision::fuzz {

void CheckStateDictReader(absl::string_view archive);

}  // namespace vision::fuzz

#endif  // VISION_TOOLS_FUZZ_STATE_DICT_CHECK_H_
