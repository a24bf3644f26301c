// Tokenizer: the gateway's built-in deterministic tokenizer (gateway/README.md "Tokenizer").
//
// Text is cut into pieces, each one token:
//   - a run of non-whitespace characters, with the single space before it when there is one,
//     cut at code-point boundaries into pieces of at most kMaxPieceBytes bytes;
//   - every other whitespace byte (a space not followed by a word, '\n', '\t', '\r', ...) alone.
// A piece " t" + lowercase hexadecimal without leading zeros ("0" for zero, ≤ 8 digits, value
// < 2^32) is the token whose id is that number (its canonical spelling); any other piece's id is
// its 32-bit FNV-1a hash. decode(ids) concatenates the canonical spellings, so
// encode(decode(ids)) == ids for every id sequence: generated text re-tokenizes to exactly the
// count reported in `usage`, and to the same ids.
//
// Equal text prefixes give equal token prefixes (up to the last piece), so prompts that share
// text share KV blocks in the workers. Pure; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mocker::gateway {

class Tokenizer {
 public:
  static constexpr std::size_t kMaxPieceBytes = 12;

  virtual ~Tokenizer() = default;
  /// Token ids of `text`. REQUIRES: valid UTF-8 (the JSON parser checked it).
  virtual std::vector<std::uint32_t> encode(std::string_view text) const = 0;
  /// Text of `ids`.
  virtual std::string decode(std::span<const std::uint32_t> ids) const = 0;
  /// Text of one id (decode of a one-element sequence).
  virtual std::string piece(std::uint32_t id) const = 0;
  /// Text of generated ids (the workers' output tokens): it re-tokenizes to exactly ids.size()
  /// tokens. The built-in tokenizer spells the ids themselves.
  virtual std::string outputText(std::span<const std::uint32_t> ids) const { return decode(ids); }
};

class BuiltinTokenizer final : public Tokenizer {
 public:
  std::vector<std::uint32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const std::uint32_t> ids) const override;
  std::string piece(std::uint32_t id) const override;
};

}  // namespace mocker::gateway
