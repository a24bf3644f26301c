#include "gateway/detail/pcre_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace mocker::gateway::detail {

struct PcreSplitter::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Result<PcreSplitter> PcreSplitter::compile(const std::string& pattern, bool isolated) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    return invalidArgument("regex '" + pattern + "' does not compile at offset " +
                           std::to_string(offset) + ": " +
                           std::string(reinterpret_cast<const char*>(message)));
  }
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // interpreted when JIT is unavailable
  auto holder = std::make_unique<Code>();
  holder->code = code;
  return PcreSplitter(std::move(holder), isolated);
}

PcreSplitter::PcreSplitter(std::unique_ptr<Code> code, bool isolated)
    : code_(std::move(code)), isolated_(isolated) {}
PcreSplitter::PcreSplitter(PcreSplitter&&) noexcept = default;
PcreSplitter& PcreSplitter::operator=(PcreSplitter&&) noexcept = default;
PcreSplitter::~PcreSplitter() = default;

void PcreSplitter::split(std::string_view text, std::vector<std::string_view>& out) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(code_->code, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t start = 0;  // where the next search begins
  std::size_t kept = 0;   // text before this is already in `out`
  while (start < text.size()) {
    const int rc = pcre2_match(code_->code, subject, text.size(), start, 0, match.get(), nullptr);
    if (rc < 0) break;  // no further match (or not UTF-8): the rest is one piece
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    const std::size_t begin = ovector[0];
    const std::size_t end = ovector[1];
    if (end == begin) {  // an empty match: step over one code point
      start = begin + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) {
        ++start;
      }
      continue;
    }
    if (begin > kept) out.push_back(text.substr(kept, begin - kept));
    if (isolated_) out.push_back(text.substr(begin, end - begin));
    kept = end;
    start = end;
  }
  if (kept < text.size()) out.push_back(text.substr(kept));
}

}  // namespace mocker::gateway::detail
