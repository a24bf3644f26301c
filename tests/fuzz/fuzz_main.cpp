// The libFuzzer entry point of one target: MOCKER_FUZZ_CHECK names its check (fuzz_checks.h),
// set per executable by tests/fuzz/CMakeLists.txt.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mocker::fuzz::MOCKER_FUZZ_CHECK({data, size});
  return 0;
}
