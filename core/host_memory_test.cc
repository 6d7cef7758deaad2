#include "core/host_memory.h"

#include <malloc.h>
#include <stdlib.h>

#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::core {
namespace {

using ::testing::HasSubstr;

// ASan and TSan replace glibc's malloc with their own allocator, which has no mmap threshold
// and refuses mallopt; the test is about glibc's allocator.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizerAllocator = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizerAllocator = true;
#else
constexpr bool kSanitizerAllocator = false;
#endif
#else
constexpr bool kSanitizerAllocator = false;
#endif

// Bytes that malloc currently serves with mmap (each such block is faulted in anew when it is
// allocated again after a free).
size_t MmappedBytes() { return mallinfo2().hblkhd; }

// How many more mmapped bytes a live 64 MiB block adds.
size_t MmappedBytesOfLargeBlock() {
  const size_t before = MmappedBytes();
  void* block = std::malloc(64 << 20);
  // A store the compiler must keep, so it cannot drop the malloc/free pair.
  static_cast<volatile char*>(block)[0] = 1;
  const size_t during = MmappedBytes();
  std::free(block);
  return during - before;
}

// One test, in order: the settings cannot be undone within a process.
TEST(HostMemoryTest, LargeBlocksComeFromTheHeapUnlessTheUserTunedMalloc) {
  if (kSanitizerAllocator) GTEST_SKIP() << "glibc's malloc is replaced by the sanitizer's";
  // glibc's default: a 64 MiB block is mmapped.
  EXPECT_GE(MmappedBytesOfLargeBlock(), size_t{64} << 20);

  ASSERT_EQ(setenv("MALLOC_TRIM_THRESHOLD_", "1000000", 1), 0);
  EXPECT_THAT(RetainFreedHostMemory(), HasSubstr("left as configured by MALLOC_TRIM_THRESHOLD_"));
  EXPECT_GE(MmappedBytesOfLargeBlock(), size_t{64} << 20);

  ASSERT_EQ(unsetenv("MALLOC_TRIM_THRESHOLD_"), 0);
  EXPECT_THAT(RetainFreedHostMemory(), HasSubstr("kept for reuse"));
  EXPECT_EQ(MmappedBytesOfLargeBlock(), 0u);
}

}  // namespace
}  // namespace vision::core
