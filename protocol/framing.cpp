#include "protocol/framing.h"

#include <string>

namespace mocker::protocol {

std::array<std::byte, 8> encodeSeqNo(std::uint64_t seq) {
  std::array<std::byte, 8> out{};
  for (std::size_t i = 0; i < 8; ++i) out[i] = static_cast<std::byte>(seq >> (56 - 8 * i));
  return out;
}

Result<std::uint64_t> decodeSeqNo(std::span<const std::byte> frame) {
  if (frame.size() != 8) {
    return corruption("sequence frame must be exactly 8 bytes (got " +
                      std::to_string(frame.size()) + ")");
  }
  std::uint64_t seq = 0;
  for (std::byte b : frame) seq = (seq << 8) | std::to_integer<std::uint64_t>(b);
  return seq;
}

}  // namespace mocker::protocol
