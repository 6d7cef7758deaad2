#include "core/host_memory.h"

#include <cstdlib>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace vision::core {

std::string RetainFreedHostMemory() {
#if defined(__GLIBC__)
  for (const char* name :
       {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES"}) {
    if (std::getenv(name) != nullptr) {
      return std::string("host memory: malloc left as configured by ") + name;
    }
  }
  // Blocks up to 1 GiB come from the heap, and up to 1 GiB of free heap top is kept.
  constexpr int kOneGiB = 1 << 30;
  if (mallopt(M_MMAP_THRESHOLD, kOneGiB) == 1 && mallopt(M_TRIM_THRESHOLD, kOneGiB) == 1) {
    return "host memory: freed blocks up to 1 GiB kept for reuse (malloc mmap/trim thresholds)";
  }
  return "host memory: mallopt refused the thresholds; malloc defaults kept";
#else
  return "host memory: not glibc; malloc defaults kept";
#endif
}

}  // namespace vision::core
