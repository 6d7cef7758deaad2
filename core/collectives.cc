#include "core/collectives.h"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace vision::core {

// Out of line: an intrusive_ptr needs the complete ProcessGroup type, kept out of the header.
c10::intrusive_ptr<c10d::ProcessGroup> SingleProcess::group() const { return {}; }

}  // namespace vision::core
