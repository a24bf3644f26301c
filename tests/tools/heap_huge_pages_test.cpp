// HeapHugePages (tools/replay/heap_huge_pages.h): what the heap grows by is advised for
// transparent huge pages. What it buys is measured in docs/benchmarks.md, not asserted here.
#include "tools/replay/heap_huge_pages.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace mocker::replay {
namespace {

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The smaps entry of the mapping holding `addr`: its "THPeligible" value, or -1 if not found.
int thpEligible(std::uintptr_t addr) {
  std::istringstream smaps(readFile("/proc/self/smaps"));
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &lo, &hi) == 2 && line.find('-') < 17) {
      inside = lo <= addr && addr < hi;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::stoi(line.substr(12));
  }
  return -1;
}

TEST(HeapHugePages, WhatTheHeapGrewByIsAdvised) {
  const std::string mode = readFile("/sys/kernel/mm/transparent_hugepage/enabled");
  if (mode.find("[madvise]") == std::string::npos) {
    GTEST_SKIP() << "transparent huge pages are not in madvise mode here: " << mode;
  }
  HeapHugePages pages;
  const auto before = reinterpret_cast<std::uintptr_t>(sbrk(0));
  std::vector<char> block(48u << 20, 1);  // below the raised mmap threshold: on the heap
  const auto last = reinterpret_cast<std::uintptr_t>(block.data() + block.size() - 1);
  if (reinterpret_cast<std::uintptr_t>(sbrk(0)) == before) {
    GTEST_SKIP() << "the allocator does not grow the brk heap (a sanitizer's)";
  }
  EXPECT_EQ(thpEligible(last), 0) << "not advised before follow()";
  pages.follow();
  EXPECT_EQ(thpEligible(last), 1);
}

}  // namespace
}  // namespace mocker::replay
