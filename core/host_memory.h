// Keeps freed host memory in the process instead of handing it back to the kernel.
//
// LibTorch's CPU allocator calls malloc for every tensor, without a cache of its own, and
// glibc serves each large block with mmap and returns it with munmap on free. A training step
// allocates its activations anew each time, so every step faults hundreds of megabytes in
// again, page by page. Raising glibc's mmap and trim thresholds keeps those blocks in the heap
// for the next step, which is what the CUDA caching allocator does on the GPU and what
// PyTorch's CPU performance guide gets by preloading jemalloc or tcmalloc. Measured on a
// 2-core machine: a DBNet-ResNet-18 step at 640x640, batch 2, goes from 3.8-4.2 s to about
// 3.3 s, with a peak resident set about 25% larger (benchmarks/dbnet_step.sh).
#ifndef VISION_CORE_HOST_MEMORY_H_
#define VISION_CORE_HOST_MEMORY_H_

#include <string>

namespace vision::core {

// Applies the thresholds unless the user tuned malloc already (MALLOC_MMAP_THRESHOLD_,
// MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_ or GLIBC_TUNABLES in the environment, which then
// win) or the C library is not glibc. Returns one line saying what it did, for logs.
std::string RetainFreedHostMemory();

}  // namespace vision::core

#endif  // VISION_CORE_HOST_MEMORY_H_
