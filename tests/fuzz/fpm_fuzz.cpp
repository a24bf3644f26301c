// libFuzzer target: decodeFpm never crashes, and an accepted record survives an encode →
// decode round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <span>

#include "protocol/fpm.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto decoded =
      mocker::protocol::decodeFpm(std::as_bytes(std::span<const std::uint8_t>(data, size)));
  if (!decoded) {
    MOCKER_FUZZ_REQUIRE(!decoded.error().message.empty());
    return 0;
  }
  const auto again = mocker::protocol::decodeFpm(mocker::protocol::encodeFpm(*decoded));
  MOCKER_FUZZ_REQUIRE(again.has_value());
  MOCKER_FUZZ_REQUIRE(*again == *decoded);
  return 0;
}
