// Strict UTF-8 validation. The client protocol, KV events, forward-pass metrics and index queries
// carry text as msgpack str, which is UTF-8: every decoder refuses a str (value or map key) that is
// not, so nothing it accepts can make a peer's UTF-8 decoder fail on an echo.
//
// Pure functions; thread-safe. No msgpack dependency (the output fast path uses it too).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace mocker::protocol::detail {

/// Offset of the first byte of `s` that does not start a well-formed UTF-8 sequence (RFC 3629,
/// Unicode Table 3-7: no overlong forms, no surrogates U+D800..U+DFFF, nothing above U+10FFFF,
/// no truncated sequence, no stray continuation byte), or nullopt when all of `s` is UTF-8.
/// ASCII runs are checked eight bytes at a time.
std::optional<std::size_t> findInvalidUtf8(std::string_view s);
/// The longest prefix of the UTF-8 string `s` of at most `max_bytes` bytes that does not split a
/// character (for quoting untrusted strings in error messages).
std::string_view clipUtf8(std::string_view s, std::size_t max_bytes);

}  // namespace mocker::protocol::detail
