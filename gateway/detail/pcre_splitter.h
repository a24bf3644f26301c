// PcreSplitter: one pre-tokenizer regex of a tokenizer.json (Oniguruma syntax as the
// `tokenizers` library uses it; the patterns models ship — GPT-2's, Llama 3's, Qwen's — are
// valid PCRE2), compiled with PCRE2 in UTF + Unicode-property mode (JIT when available), and
// the `Split` behaviours on top of it.
//
// Immutable after compile(); split() is thread-safe (match data per call).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace mocker::gateway::detail {

class PcreSplitter {
 public:
  /// `isolated`: matches and the text between them are pieces (Split "Isolated"); otherwise
  /// only the text between matches is (Split "Removed").
  static Result<PcreSplitter> compile(const std::string& pattern, bool isolated);
  PcreSplitter(PcreSplitter&&) noexcept;
  PcreSplitter& operator=(PcreSplitter&&) noexcept;
  ~PcreSplitter();

  /// Appends the non-empty pieces of `text` to `out`, in order. Text the pattern cannot be
  /// matched against (not UTF-8) is one piece.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  struct Code;
  PcreSplitter(std::unique_ptr<Code> code, bool isolated);
  std::unique_ptr<Code> code_;
  bool isolated_ = true;
};

}  // namespace mocker::gateway::detail
