// HfTokenizer: `mocker gateway --tokenizer FILE` — a Hugging Face `tokenizer.json` with a
// byte-level BPE model (GPT-2, Llama 3, Qwen 2 style), so prompt token counts and prefix hashes
// match the real model's (gateway/README.md "Tokenizer").
//
// Supported, as the `tokenizers` library applies them:
//   - added_tokens: found in the text first (leftmost, then longest) and kept whole;
//   - normalizer: null, or NFC — applied as the identity (exact for text already in NFC, which
//     is what nearly all text is; this build has no Unicode normalization tables);
//   - pre_tokenizer: ByteLevel (add_prefix_space, use_regex: GPT-2's regex), Split (a Regex
//     pattern, behavior Isolated or Removed, invert false), or a Sequence of those; patterns run
//     on PCRE2 (Debian libpcre2) in UTF + Unicode-property mode (\p{L}, \p{N}, (?i:...));
//   - model: BPE over the byte-to-unicode alphabet — merges by rank (lowest first, every
//     occurrence left to right), ignore_merges (a whole word in the vocabulary is one token);
//     merges as "a b" strings or [a, b] pairs;
//   - post_processor: null, ByteLevel (no tokens), TemplateProcessing (the `single` template's
//     special tokens around the sequence: Llama 3's <|begin_of_text|>), or a Sequence of those;
//   - decoder: ByteLevel (or null): token characters back to their bytes.
// Anything else (WordPiece, Unigram, byte_fallback, Metaspace, ...) is refused at load with an
// error naming the field.
//
// Generated text: worker token id t is spelled by output token outputs[t mod N], where the
// outputs are every vocabulary token whose text is a space and ASCII letters (" the") that
// encodes to exactly itself, alone and twice in a row. Any sequence of them pre-tokenizes into
// one word per token, so generated text re-tokenizes to exactly the reported count.
//
// Immutable after load; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "gateway/tokenizer.h"

namespace mocker::gateway {

class HfTokenizer final : public Tokenizer {
 public:
  /// Reads and parses a tokenizer.json file. Errors name the file and the unsupported field.
  static Result<std::unique_ptr<HfTokenizer>> load(const std::string& path);
  /// Parses tokenizer.json text (`source` names it in errors).
  static Result<std::unique_ptr<HfTokenizer>> parse(std::string_view json_text,
                                                    const std::string& source);
  ~HfTokenizer() override;
  HfTokenizer(const HfTokenizer&) = delete;
  HfTokenizer& operator=(const HfTokenizer&) = delete;

  /// With the post-processor's special tokens (as vLLM's /tokenize and completions add them).
  std::vector<std::uint32_t> encode(std::string_view text) const override;
  /// Ids the vocabulary does not know decode to nothing.
  std::string decode(std::span<const std::uint32_t> ids) const override;
  std::string piece(std::uint32_t id) const override;
  std::string outputText(std::span<const std::uint32_t> ids) const override;

  /// Without any special token added: the text's own tokens.
  std::vector<std::uint32_t> encodeText(std::string_view text) const;
  /// The output tokens generated text is spelled with (ascending ids).
  const std::vector<std::uint32_t>& outputTokens() const;

 private:
  struct Impl;
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mocker::gateway
