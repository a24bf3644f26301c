// HeapHugePages: keeps the process heap in transparent huge pages while an offline replay runs.
//
// An offline replay of a long trace walks the engines' pools, indexes and request records at
// random, and with the prompts given at dispatch (kv routers, mooncake-delta) it holds every
// queued request's synthesized prompt (a 3× Mooncake trace on one worker peaked near 200 MB;
// deferred prompts, the default otherwise, keep it near 70 MB). In 4 KiB pages that is ~50,000 page
// faults and a TLB miss on nearly every record touched; measured on the 2-core VM
// (docs/benchmarks.md, "the long trace, fifth pass") the faults and page walks were about half of
// the run's CPU time. glibc backs its heap with huge pages only when told at start-up
// (GLIBC_TUNABLES=glibc.malloc.hugetlb=1); this does the same from inside the process: large
// allocations stay on the brk heap (a higher mmap threshold), the heap grows and trims in large
// steps, and every range it grew by is advised MADV_HUGEPAGE (honoured when
// /sys/kernel/mm/transparent_hugepage/enabled is `madvise` or `always`; a no-op when `never`).
// Nothing the replay computes depends on it.
//
// Process-wide (malloc settings); construct at most one, on the replay's thread. Not thread-safe.
#pragma once

#include <cstdint>

namespace mocker::replay {

class HeapHugePages {
 public:
  /// Raises the mmap and trim thresholds and the heap's growth step; the heap grows from here.
  HeapHugePages();
  HeapHugePages(const HeapHugePages&) = delete;
  HeapHugePages& operator=(const HeapHugePages&) = delete;

  /// Advises the heap's growth since the last call (cheap when it did not grow: one compare).
  void follow();

 private:
  std::uintptr_t advised_end_ = 0;
};

}  // namespace mocker::replay
