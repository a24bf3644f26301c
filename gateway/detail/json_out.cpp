#include "gateway/detail/json_out.h"

#include <nlohmann/json.hpp>

#include <charconv>

#include "protocol/detail/utf8.h"

namespace mocker::gateway::detail {
namespace {

/// The escape of byte `c`, or nullptr when it is written as is.
const char* escapeOf(unsigned char c) {
  switch (c) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    default:
      return nullptr;
  }
}

}  // namespace

void appendJsonString(std::string& out, std::string_view s) {
  if (protocol::detail::findInvalidUtf8(s)) {
    // nlohmann's replacement of invalid sequences, byte for byte (rare: text is valid UTF-8).
    out += nlohmann::json(std::string(s))
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return;
  }
  out.reserve(out.size() + s.size() + 2);
  out += '"';
  std::size_t run = 0;  // start of the bytes not yet appended
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
    if (const char* e = escapeOf(c)) {
      out += e;
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      const char u[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xF]};
      out.append(u, sizeof u);
    }
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
}

void appendJsonInt(std::string& out, std::int64_t v) {
  char buf[24];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  out.append(buf, end);
}

}  // namespace mocker::gateway::detail
