#include "gateway/tokenizer.h"

#include <algorithm>
#include <optional>

namespace mocker::gateway {
namespace {

bool isSpace(unsigned char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

/// Bytes of the UTF-8 sequence that starts with `lead` (1 for a stray continuation byte).
std::size_t sequenceLength(unsigned char lead) {
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

std::uint32_t fnv1a(std::string_view piece) {
  std::uint32_t h = 2166136261u;
  for (const char c : piece) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  return h;
}

/// The id a canonical spelling " t<hex>" names, if `piece` is one.
std::optional<std::uint32_t> canonicalId(std::string_view piece) {
  if (piece.size() < 3 || piece.size() > 10 || piece[0] != ' ' || piece[1] != 't') return {};
  const std::string_view hex = piece.substr(2);
  if (hex.size() > 1 && hex[0] == '0') return {};
  std::uint32_t value = 0;
  for (const char c : hex) {
    std::uint32_t digit = 0;
    if (c >= '0' && c <= '9') {
      digit = static_cast<std::uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<std::uint32_t>(c - 'a' + 10);
    } else {
      return {};
    }
    value = value * 16 + digit;  // ≤ 8 digits: fits
  }
  return value;
}

std::uint32_t pieceId(std::string_view piece) {
  if (const auto id = canonicalId(piece)) return *id;
  return fnv1a(piece);
}

}  // namespace

std::vector<std::uint32_t> BuiltinTokenizer::encode(std::string_view text) const {
  std::vector<std::uint32_t> ids;
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    const bool word_follows =
        i + 1 < text.size() && !isSpace(static_cast<unsigned char>(text[i + 1]));
    if (isSpace(c) && !(c == ' ' && word_follows)) {
      ids.push_back(pieceId(text.substr(i, 1)));
      ++i;
      continue;
    }
    // A word (with its leading space): pieces of at most kMaxPieceBytes at code-point bounds.
    std::size_t start = i;
    std::size_t end = c == ' ' ? i + 1 : i;
    while (end < text.size() && !isSpace(static_cast<unsigned char>(text[end]))) {
      const std::size_t len = sequenceLength(static_cast<unsigned char>(text[end]));
      if (end + len - start > kMaxPieceBytes && end > start) {
        ids.push_back(pieceId(text.substr(start, end - start)));
        start = end;
      }
      end += len;
    }
    end = std::min(end, text.size());
    ids.push_back(pieceId(text.substr(start, end - start)));
    i = end;
  }
  return ids;
}

namespace {

/// Appends the canonical spelling of `id`: " t" + its lowercase hex digits.
void appendPiece(std::string& out, std::uint32_t id) {
  static constexpr char kHex[] = "0123456789abcdef";
  char spelled[10];
  char* p = spelled + sizeof spelled;
  do {
    *--p = kHex[id % 16];
    id /= 16;
  } while (id != 0);
  *--p = 't';
  *--p = ' ';
  out.append(p, static_cast<std::size_t>(spelled + sizeof spelled - p));
}

}  // namespace

std::string BuiltinTokenizer::piece(std::uint32_t id) const {
  std::string out;
  appendPiece(out, id);
  return out;
}

std::string BuiltinTokenizer::decode(std::span<const std::uint32_t> ids) const {
  std::string out;
  out.reserve(ids.size() * 10);
  for (const std::uint32_t id : ids) appendPiece(out, id);
  return out;
}

}  // namespace mocker::gateway
