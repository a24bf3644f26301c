// libFuzzer target: decodeKvEventBatch never crashes, and an accepted batch survives an
// encode (p8 and map26) → decode round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <span>

#include "protocol/kv_events.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mocker::protocol;
  const auto decoded = decodeKvEventBatch(std::as_bytes(std::span<const std::uint8_t>(data, size)));
  if (!decoded) {
    MOCKER_FUZZ_REQUIRE(!decoded.error().message.empty());
    return 0;
  }
  for (KvLayout layout : {KvLayout::P8, KvLayout::Map}) {
    const auto again = decodeKvEventBatch(encodeKvEventBatch(*decoded, {.layout = layout}));
    MOCKER_FUZZ_REQUIRE(again.has_value());
    MOCKER_FUZZ_REQUIRE(*again == *decoded);
  }
  return 0;
}
