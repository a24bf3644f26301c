#include "tools/replay/heap_huge_pages.h"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

namespace mocker::replay {
namespace {

constexpr std::uintptr_t kHugePage = std::uintptr_t{2} << 20;
// Prompts up to 16 Mi tokens come from the heap, which grows by at least 32 MiB at a time and
// gives memory back only when 256 MiB are free at its top.
constexpr int kMmapThreshold = 64 << 20;
constexpr int kTopPad = 32 << 20;
constexpr int kTrimThreshold = 256 << 20;

std::uintptr_t heapEnd() { return reinterpret_cast<std::uintptr_t>(sbrk(0)); }

}  // namespace

HeapHugePages::HeapHugePages() {
  mallopt(M_MMAP_THRESHOLD, kMmapThreshold);
  mallopt(M_TOP_PAD, kTopPad);
  mallopt(M_TRIM_THRESHOLD, kTrimThreshold);
  // From the current break on: what the heap held before (the parsed trace) stays as it is.
  // Under a sanitizer's allocator the break never moves and follow() advises nothing.
  advised_end_ = (heapEnd() + kHugePage - 1) & ~(kHugePage - 1);
}

void HeapHugePages::follow() {
  const std::uintptr_t end = heapEnd() & ~(kHugePage - 1);
  if (end <= advised_end_) return;
  // Best effort: a kernel without THP refuses, and the replay runs in small pages as before.
  (void)madvise(reinterpret_cast<void*>(advised_end_), end - advised_end_, MADV_HUGEPAGE);
  advised_end_ = end;
}

}  // namespace mocker::replay
