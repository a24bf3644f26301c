#include "protocol/detail/output_fast_path.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>

#include "base/check.h"
#include "protocol/detail/utf8.h"
#include "protocol/limits.h"

namespace mocker::protocol::detail {
namespace {

constexpr std::uint64_t kU32Max = std::numeric_limits<std::uint32_t>::max();

// A bounds-checked msgpack cursor for the handful of types an output message uses. Every read
// returns false (and the caller gives up) on a type it does not expect or on missing bytes.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes)
      : p_(reinterpret_cast<const std::uint8_t*>(bytes.data())), end_(p_ + bytes.size()) {}

  bool done() const { return p_ == end_; }
  std::size_t remaining() const { return static_cast<std::size_t>(end_ - p_); }

  bool mapHeader(std::uint32_t& n) { return header(n, 0x80, 0xde, 0xdf); }
  bool arrayHeader(std::uint32_t& n) { return header(n, 0x90, 0xdc, 0xdd); }

  bool str(std::string_view& s) {
    if (!rawStr(s)) return false;
    // Not UTF-8: step aside, the general decoder names the field.
    if (findInvalidUtf8(s)) return false;
    p_ += s.size();
    return true;
  }

  /// A map key equal to `want` (ASCII): compared as bytes, so not checked for UTF-8 first (a key
  /// that is not UTF-8 differs from `want` and the caller gives up all the same).
  bool key(std::string_view want) {
    std::string_view s;
    if (!rawStr(s) || s != want) return false;
    p_ += s.size();
    return true;
  }

  /// An unsigned integer in any width (positive fixint, uint8..uint64), at most `max`.
  bool uint(std::uint64_t& v, std::uint64_t max) {
    if (p_ == end_) return false;
    const std::uint8_t b = *p_;
    if (b <= 0x7f) {
      ++p_;
      v = b;
      return true;
    }
    std::size_t width = 0;
    switch (b) {
      case 0xcc:
        width = 1;
        break;
      case 0xcd:
        width = 2;
        break;
      case 0xce:
        width = 4;
        break;
      case 0xcf:
        width = 8;
        break;
      default:
        return false;
    }
    return bigEndian(width, v) && v <= max;
  }

 private:
  /// The next str's bytes (the cursor left on them), or false.
  bool rawStr(std::string_view& s) {
    if (p_ == end_) return false;
    const std::uint8_t b = *p_;
    std::uint32_t n = 0;
    if (b >= 0xa0 && b <= 0xbf) {
      ++p_;
      n = b & 0x1fu;
    } else if (!((b == 0xd9 && length(1, n)) || (b == 0xda && length(2, n)) ||
                 (b == 0xdb && length(4, n)))) {
      return false;
    }
    if (remaining() < n) return false;
    s = std::string_view(reinterpret_cast<const char*>(p_), n);
    return true;
  }

  // A map or array header: fix (`fix` | n < 16), 16-bit (`b16`) or 32-bit (`b32`) count.
  bool header(std::uint32_t& n, std::uint8_t fix, std::uint8_t b16, std::uint8_t b32) {
    if (p_ == end_) return false;
    const std::uint8_t b = *p_;
    if ((b & 0xf0u) == fix) {
      ++p_;
      n = b & 0x0fu;
      return true;
    }
    if (b == b16) return length(2, n);
    if (b == b32) return length(4, n);
    return false;
  }

  // Skips the type byte and reads a `width`-byte big-endian length.
  bool length(std::size_t width, std::uint32_t& n) {
    std::uint64_t v = 0;
    if (!bigEndian(width, v)) return false;
    n = static_cast<std::uint32_t>(v);
    return true;
  }

  // Skips the type byte and reads `width` big-endian bytes.
  bool bigEndian(std::size_t width, std::uint64_t& v) {
    if (remaining() < 1 + width) return false;
    ++p_;
    v = 0;
    for (std::size_t i = 0; i < width; ++i) v = (v << 8) | p_[i];
    p_ += width;
    return true;
  }

  const std::uint8_t* p_;
  const std::uint8_t* end_;
};

// The root map's header and its first two entries, "v" (this protocol's version) and "type"
// (`type`); `fields` is the map's entry count, to be checked by the caller.
bool readHead(Reader& r, std::string_view type, std::uint32_t& fields) {
  std::uint64_t version = 0;
  std::string_view text;
  return r.mapHeader(fields) && r.key("v") && r.uint(version, kClientProtocolVersion) &&
         version == kClientProtocolVersion && r.key("type") && r.str(text) && text == type;
}

// A token array (prompt, output_tokens): each token takes at least one byte, so a count the
// input cannot back is refused before the allocation.
bool readTokens(Reader& r, std::vector<std::uint32_t>& tokens, std::size_t& objects) {
  std::uint32_t count = 0;
  std::uint64_t v = 0;
  if (!r.arrayHeader(count) || count > kMaxTokensPerRequest || count > r.remaining()) {
    return false;
  }
  tokens.resize(count);
  for (std::uint32_t& t : tokens) {
    if (!r.uint(v, kU32Max)) return false;
    t = static_cast<std::uint32_t>(v);
  }
  objects += count;
  return true;
}

// The optional keys of an output entry, in the order the encoder writes them.
bool readOptionalFields(Reader& r, std::uint32_t count, RequestOutput& out) {
  int stage = 0;  // keys must come in encoder order: finish (1), reason (2), cached_tokens (3)
  for (std::uint32_t k = 0; k < count; ++k) {
    std::string_view key;
    if (!r.str(key)) return false;
    std::string_view s;
    std::uint64_t v = 0;
    if (stage < 1 && key == "finish") {
      stage = 1;
      if (!r.str(s)) return false;
      auto reason = parseFinishReason(s);
      if (!reason) return false;
      out.finish = *reason;
    } else if (stage < 2 && key == "reason") {
      stage = 2;
      if (!r.str(s) || s.size() > kMaxStringBytes) return false;
      out.reason.assign(s);
    } else if (stage < 3 && key == "cached_tokens") {
      stage = 3;
      if (!r.uint(v, kU32Max)) return false;
      out.cached_tokens = static_cast<std::uint32_t>(v);
    } else {
      return false;
    }
  }
  return true;
}

bool readOutput(Reader& r, RequestOutput& out, std::size_t& objects) {
  std::uint32_t fields = 0;
  std::string_view id;
  std::uint64_t v = 0;
  if (!r.mapHeader(fields) || fields < 3 || fields > 6) return false;
  if (!r.key("id") || !r.str(id) || id.empty() || id.size() > kMaxRequestIdBytes) return false;
  if (!r.key("index") || !r.uint(v, kU32Max)) return false;
  out.id.assign(id);
  out.index = static_cast<std::uint32_t>(v);
  if (!r.key("tokens") || !readTokens(r, out.tokens, objects)) return false;  // counts them
  if (!readOptionalFields(r, fields - 3, out)) return false;
  if (!out.finish && out.tokens.empty()) return false;
  objects += 1 + 2 * std::size_t{fields};  // the map, its keys and values
  return objects <= kMaxObjectsPerMessage;
}

// Writes msgpack into a buffer sized in advance from an upper bound (no bounds checks per
// field). Widths are the smallest that fit, as msgpack-c and python-msgpack choose them, so the
// bytes equal the general encoders' (pinned by the goldens).
class Writer {
 public:
  explicit Writer(std::byte* p) : p_(p) {}
  std::byte* position() const { return p_; }

  // Encoded sizes of what str / uint / the headers write.
  static constexpr std::size_t strSize(std::size_t n) {
    return n + (n <= 31 ? 1 : n <= 0xff ? 2 : n <= 0xffff ? 3 : 5);
  }
  static constexpr std::size_t uintSize(std::uint32_t v) {
    return v <= 0x7f ? 1 : v <= 0xff ? 2 : v <= 0xffff ? 3 : 5;
  }
  static constexpr std::size_t headerSize(std::uint32_t n) {
    return n <= 15 ? 1 : n <= 0xffff ? 3 : 5;
  }

  void raw(std::string_view bytes) {
    std::memcpy(p_, bytes.data(), bytes.size());
    p_ += bytes.size();
  }
  /// raw() for strings that are mostly short (ids, reasons): up to 16 bytes in at most two
  /// fixed-size, overlapping copies the compiler inlines; a call to memcpy per entry (its id)
  /// was a visible part of encoding an output message.
  void shortRaw(std::string_view bytes) {
    const char* s = bytes.data();
    const std::size_t n = bytes.size();
    if (n > 16) return raw(bytes);
    if (n >= 8) {
      std::memcpy(p_, s, 8);
      std::memcpy(p_ + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
      std::memcpy(p_, s, 4);
      std::memcpy(p_ + n - 4, s + n - 4, 4);
    } else {
      for (std::size_t i = 0; i < n; ++i) p_[i] = static_cast<std::byte>(s[i]);
    }
    p_ += n;
  }
  void mapHeader(std::uint32_t n) { header(n, 0x80, 0xde, 0xdf); }
  void arrayHeader(std::uint32_t n) { header(n, 0x90, 0xdc, 0xdd); }
  void str(std::string_view s) {
    const auto n = static_cast<std::uint32_t>(s.size());
    if (n <= 31) {
      byte(0xa0 | n);
    } else if (n <= 0xff) {
      byte(0xd9);
      byte(n);
    } else if (n <= 0xffff) {
      byte(0xda);
      bigEndian(n, 2);
    } else {
      byte(0xdb);
      bigEndian(n, 4);
    }
    shortRaw(s);
  }
  void uint(std::uint32_t v) {
    if (v <= 0x7f) {
      byte(v);
    } else if (v <= 0xff) {
      byte(0xcc);
      byte(v);
    } else if (v <= 0xffff) {
      byte(0xcd);
      bigEndian(v, 2);
    } else {
      byte(0xce);
      bigEndian(v, 4);
    }
  }

 private:
  void byte(std::uint32_t b) { *p_++ = static_cast<std::byte>(b & 0xffu); }
  void bigEndian(std::uint32_t v, int width) {
    for (int i = width - 1; i >= 0; --i) byte(v >> (8 * i));
  }
  void header(std::uint32_t n, std::uint32_t fix, std::uint8_t b16, std::uint8_t b32) {
    if (n <= 15) {
      byte(fix | n);
    } else if (n <= 0xffff) {
      byte(b16);
      bigEndian(n, 2);
    } else {
      byte(b32);
      bigEndian(n, 4);
    }
  }

  std::byte* p_;
};

// Key strings with their fixstr headers.
constexpr std::string_view kHead = "\x83\xa1v\x01\xa4type\xa6output\xa7outputs";
constexpr std::string_view kId = "\xa2id";
constexpr std::string_view kIndex = "\xa5index";
constexpr std::string_view kTokens = "\xa6tokens";
constexpr std::string_view kFinish =
    "\xa6"
    "finish";
constexpr std::string_view kReason = "\xa6reason";
constexpr std::string_view kCachedTokens =
    "\xad"
    "cached_tokens";

std::uint32_t entryFields(const RequestOutputView& o) {
  return 3 + (o.finish ? 1u : 0u) + (o.reason.empty() ? 0u : 1u) + (o.cached_tokens ? 1u : 0u);
}

}  // namespace

std::size_t canonicalOutputSize(std::span<const RequestOutputView> outputs) {
  std::size_t size = kHead.size() + Writer::headerSize(static_cast<std::uint32_t>(outputs.size()));
  for (const RequestOutputView& o : outputs) {
    size += Writer::headerSize(entryFields(o)) + kId.size() + Writer::strSize(o.id.size()) +
            kIndex.size() + Writer::uintSize(o.index) + kTokens.size() +
            Writer::headerSize(static_cast<std::uint32_t>(o.tokens.size()));
    for (const std::uint32_t t : o.tokens) size += Writer::uintSize(t);
    if (o.finish) size += kFinish.size() + Writer::strSize(toString(*o.finish).size());
    if (!o.reason.empty()) size += kReason.size() + Writer::strSize(o.reason.size());
    if (o.cached_tokens) size += kCachedTokens.size() + Writer::uintSize(*o.cached_tokens);
  }
  return size;
}

void encodeCanonicalOutputInto(std::span<const RequestOutputView> outputs,
                               std::span<std::byte> out) {
  static_assert(kClientProtocolVersion == 1, "kHead spells the version");
  Writer w(out.data());
  w.raw(kHead);
  w.arrayHeader(static_cast<std::uint32_t>(outputs.size()));
  for (const RequestOutputView& o : outputs) {
    w.mapHeader(entryFields(o));
    w.raw(kId);
    w.str(o.id);
    w.raw(kIndex);
    w.uint(o.index);
    w.raw(kTokens);
    w.arrayHeader(static_cast<std::uint32_t>(o.tokens.size()));
    for (std::uint32_t t : o.tokens) w.uint(t);
    if (o.finish) {
      w.raw(kFinish);
      w.str(toString(*o.finish));
    }
    if (!o.reason.empty()) {
      w.raw(kReason);
      w.str(o.reason);
    }
    if (o.cached_tokens) {
      w.raw(kCachedTokens);
      w.uint(*o.cached_tokens);
    }
  }
  MOCKER_CHECK(w.position() == out.data() + out.size());
}

std::vector<std::byte> encodeCanonicalOutput(std::span<const RequestOutputView> outputs) {
  std::vector<std::byte> out(canonicalOutputSize(outputs));
  encodeCanonicalOutputInto(outputs, out);
  return out;
}

std::optional<SubmitRequest> decodeCanonicalSubmit(std::span<const std::byte> bytes) {
  if (bytes.size() > kMaxMessageBytes) return std::nullopt;
  Reader r(bytes);
  std::uint32_t n = 0;
  std::uint64_t v = 0;
  std::string_view text;
  // v, type, id, prompt, max_tokens; then output_tokens and dp_rank, each optional, in the
  // encoder's order. Any other key (arrival_ms, priority, handoff, lora) goes the general way.
  if (!readHead(r, "submit", n) || n < 5 || n > 7) return std::nullopt;
  SubmitRequest s;
  if (!r.key("id") || !r.str(text) || text.empty() || text.size() > kMaxRequestIdBytes) {
    return std::nullopt;
  }
  s.id.assign(text);
  std::size_t objects = 1 + 2 * std::size_t{n};  // the map, its keys and values
  if (!r.key("prompt") || !readTokens(r, s.prompt, objects)) return std::nullopt;
  if (!r.key("max_tokens") || !r.uint(v, kU32Max)) return std::nullopt;
  s.max_tokens = static_cast<std::uint32_t>(v);
  int stage = 0;  // output_tokens (1), dp_rank (2)
  for (std::uint32_t k = 5; k < n; ++k) {
    if (!r.str(text)) return std::nullopt;
    if (stage < 1 && text == "output_tokens") {
      stage = 1;
      if (!readTokens(r, s.output_tokens.emplace(), objects)) return std::nullopt;
    } else if (stage < 2 && text == "dp_rank") {
      stage = 2;
      if (!r.uint(v, kU32Max)) return std::nullopt;
      s.dp_rank = static_cast<std::uint32_t>(v);
    } else {
      return std::nullopt;
    }
  }
  if (!r.done() || objects > kMaxObjectsPerMessage) return std::nullopt;
  return s;
}

std::optional<OutputBatch> decodeCanonicalOutput(std::span<const std::byte> bytes) {
  if (bytes.size() > kMaxMessageBytes) return std::nullopt;
  Reader r(bytes);
  std::uint32_t n = 0;
  if (!readHead(r, "output", n) || n != 3) return std::nullopt;
  // Every entry takes several bytes: a count the input cannot back is refused before reserving.
  if (!r.key("outputs") || !r.arrayHeader(n) || n > kMaxOutputsPerMessage || n > r.remaining()) {
    return std::nullopt;
  }
  std::size_t objects = 7;  // the root map, its three keys and values
  OutputBatch batch;
  batch.outputs.resize(n);
  for (RequestOutput& out : batch.outputs) {
    if (!readOutput(r, out, objects)) return std::nullopt;
  }
  if (!r.done()) return std::nullopt;
  return batch;
}

}  // namespace mocker::protocol::detail
