// Strict UTF-8 validation for every msgpack str the decoders read.
#include "protocol/detail/utf8.h"

#include <cstdint>
#include <cstring>

namespace mocker::protocol::detail {

std::optional<std::size_t> findInvalidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    // ASCII fast path: eight bytes at a time while none has its top bit set.
    while (n - i >= 8) {
      std::uint64_t word = 0;
      std::memcpy(&word, p + i, 8);
      if ((word & 0x8080808080808080ull) != 0) break;
      i += 8;
    }
    if (i == n) break;
    const unsigned b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    // Unicode Table 3-7: the lead byte fixes the length and the range of the second byte.
    std::size_t len = 0;
    unsigned lo = 0x80;
    unsigned hi = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) {
      len = 2;
    } else if (b >= 0xe0 && b <= 0xef) {
      len = 3;
      if (b == 0xe0) lo = 0xa0;  // overlong below U+0800
      if (b == 0xed) hi = 0x9f;  // surrogates U+D800..U+DFFF
    } else if (b >= 0xf0 && b <= 0xf4) {
      len = 4;
      if (b == 0xf0) lo = 0x90;  // overlong below U+10000
      if (b == 0xf4) hi = 0x8f;  // above U+10FFFF
    } else {
      return i;  // continuation byte, overlong lead c0/c1, or f5..ff
    }
    if (n - i < len) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (std::size_t k = 2; k < len; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xbf) return i;
    }
    i += len;
  }
  return std::nullopt;
}

std::string_view clipUtf8(std::string_view s, std::size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  std::size_t n = max_bytes;
  // Back off continuation bytes (10xxxxxx) so the cut falls before a lead byte.
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0u) == 0x80u) --n;
  return s.substr(0, n);
}

}  // namespace mocker::protocol::detail
