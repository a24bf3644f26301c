// Frame-level helpers shared by every ZeroMQ message we put on the wire (docs/wire.md):
// the 8-byte big-endian sequence-number frame of KV-event and forward-pass-metric messages.
//
// Pure functions; thread-safe. Never throws.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "base/result.h"

namespace mocker::protocol {

/// Sequence number used by the replay protocol's end marker (ff×8, i.e. −1 as signed BE).
inline constexpr std::uint64_t kReplayEndMarker = ~std::uint64_t{0};

/// Encodes `seq` as exactly 8 big-endian bytes.
std::array<std::byte, 8> encodeSeqNo(std::uint64_t seq);

/// Decodes an 8-byte big-endian sequence number; any other length is a Corruption error.
Result<std::uint64_t> decodeSeqNo(std::span<const std::byte> frame);

}  // namespace mocker::protocol
