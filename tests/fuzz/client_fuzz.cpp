// libFuzzer target: decodeClientMessage never crashes, and whatever it accepts survives an
// encode → decode round trip unchanged; the output fast path never changes the outcome.
#include <cstddef>
#include <cstdint>
#include <span>

#include "protocol/client.h"
#include "protocol/detail/output_fast_path.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto input = std::as_bytes(std::span<const std::uint8_t>(data, size));
  const auto decoded = mocker::protocol::decodeClientMessage(input);
  (void)mocker::protocol::peekRequestId(input);
  const auto general = mocker::protocol::detail::decodeClientMessageGeneral(input);
  MOCKER_FUZZ_REQUIRE(decoded.has_value() == general.has_value());
  MOCKER_FUZZ_REQUIRE(decoded ? *decoded == *general
                              : decoded.error().message == general.error().message);
  if (!decoded) {
    MOCKER_FUZZ_REQUIRE(!decoded.error().message.empty());
    return 0;
  }
  const auto again =
      mocker::protocol::decodeClientMessage(mocker::protocol::encodeClientMessage(*decoded));
  MOCKER_FUZZ_REQUIRE(again.has_value());
  MOCKER_FUZZ_REQUIRE(*again == *decoded);
  return 0;
}
