#include "gateway/detail/json_fast_parse.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "protocol/detail/utf8.h"

namespace mocker::gateway::detail {
namespace {

using nlohmann::json;

constexpr int kMaxDepth = 64;
constexpr std::size_t kMaxDigits = 18;  // fits int64 and uint64: no overflow check needed

class FastParser {
 public:
  FastParser(std::string_view text, std::optional<std::vector<std::uint32_t>>* prompt_ids)
      : p_(text.data()), end_(text.data() + text.size()), prompt_ids_(prompt_ids) {}

  /// The whole text as one object, or false.
  bool parseDocument(json& out) {
    skipSpace();
    if (p_ == end_ || *p_ != '{') return false;
    if (!value(out, 0)) return false;
    skipSpace();
    return p_ == end_;
  }

 private:
  void skipSpace() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  bool value(json& out, int depth) {
    skipSpace();
    if (p_ == end_) return false;
    switch (*p_) {
      case '{':
        return object(out, depth + 1);
      case '[':
        return array(out, depth + 1);
      case '"': {
        std::string_view s;
        if (!string(s)) return false;
        out = std::string(s);
        return true;
      }
      case 't':
        return literal("true", out, json(true));
      case 'f':
        return literal("false", out, json(false));
      case 'n':
        return literal("null", out, json(nullptr));
      default:
        return number(out);
    }
  }

  bool literal(std::string_view word, json& out, json&& v) {
    if (static_cast<std::size_t>(end_ - p_) < word.size() ||
        std::string_view(p_, word.size()) != word) {
      return false;
    }
    p_ += word.size();
    out = std::move(v);
    return true;
  }

  /// An integer of at most kMaxDigits digits ("-" + digits: signed, as nlohmann reads it).
  bool number(json& out) {
    const bool negative = *p_ == '-';
    if (negative) ++p_;
    const char* digits = p_;
    std::uint64_t v = 0;
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') v = v * 10 + static_cast<unsigned>(*p_++ - '0');
    const auto n = static_cast<std::size_t>(p_ - digits);
    if (n == 0 || n > kMaxDigits || (n > 1 && *digits == '0')) return false;
    if (p_ != end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E')) return false;
    if (negative) {
      out = static_cast<std::int64_t>(0) - static_cast<std::int64_t>(v);
    } else {
      out = v;
    }
    return true;
  }

  /// A string without escapes or control bytes, of valid UTF-8 (the view points into the text).
  bool string(std::string_view& out) {
    const char* start = ++p_;
    while (p_ != end_ && *p_ != '"') {
      const auto c = static_cast<unsigned char>(*p_);
      if (c < 0x20 || c == '\\') return false;
      ++p_;
    }
    if (p_ == end_) return false;
    out = std::string_view(start, static_cast<std::size_t>(p_ - start));
    ++p_;
    return !protocol::detail::findInvalidUtf8(out);
  }

  enum class Next : std::uint8_t { More, Closed, Bad };
  /// After an element of a list or object: its `close` (consumed: Closed), a comma (consumed:
  /// More), anything else or the end of the body (Bad).
  Next afterElement(char close) {
    skipSpace();
    if (p_ == end_) return Next::Bad;
    if (*p_ == close) {
      ++p_;
      return Next::Closed;
    }
    return *p_++ == ',' ? Next::More : Next::Bad;
  }

  bool array(json& out, int depth) {
    if (depth > kMaxDepth) return false;
    ++p_;
    out = json::array();
    skipSpace();
    if (p_ != end_ && *p_ == ']') {
      ++p_;
      return true;
    }
    auto& items = out.get_ref<json::array_t&>();
    while (true) {
      items.emplace_back();
      if (!value(items.back(), depth)) return false;
      if (const Next next = afterElement(']'); next != Next::More) return next == Next::Closed;
    }
  }

  bool object(json& out, int depth) {
    if (depth > kMaxDepth) return false;
    ++p_;
    out = json::object();
    skipSpace();
    if (p_ != end_ && *p_ == '}') {
      ++p_;
      return true;
    }
    auto& members = out.get_ref<json::object_t&>();
    while (true) {
      skipSpace();
      std::string_view key;
      if (p_ == end_ || *p_ != '"' || !string(key)) return false;
      skipSpace();
      if (p_ == end_ || *p_++ != ':') return false;
      // A repeated key keeps its last value, as nlohmann's parser does.
      if (depth == 1 && prompt_ids_ != nullptr && key == "prompt") {
        prompt_ids_->reset();
        std::vector<std::uint32_t> ids;
        if (tokenIds(ids)) {
          members.erase("prompt");
          *prompt_ids_ = std::move(ids);
        } else if (!value(members["prompt"], depth)) {
          return false;
        }
      } else if (!value(members[std::string(key)], depth)) {
        return false;
      }
      if (const Next next = afterElement('}'); next != Next::More) return next == Next::Closed;
    }
  }

  /// A non-empty list of token ids (integers in [0, 2^32)) read into `ids`; else false, with the
  /// cursor where it was.
  bool tokenIds(std::vector<std::uint32_t>& ids) {
    const char* const start = p_;
    if (readTokenIds(ids)) return true;
    p_ = start;
    ids.clear();
    return false;
  }

  bool readTokenIds(std::vector<std::uint32_t>& ids) {
    skipSpace();
    if (p_ == end_ || *p_ != '[') return false;
    ++p_;
    // One allocation: room for as many ids as there are commas before the list's end, if it is
    // one (the scan is bounded by the body, so is the reservation).
    const void* close = std::memchr(p_, ']', static_cast<std::size_t>(end_ - p_));
    if (close == nullptr) return false;
    ids.reserve(1 + static_cast<std::size_t>(std::count(p_, static_cast<const char*>(close), ',')));
    while (true) {
      skipSpace();
      const char* digits = p_;
      std::uint64_t v = 0;
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9' && p_ - digits < 11) {
        v = v * 10 + static_cast<unsigned>(*p_++ - '0');
      }
      const auto n = p_ - digits;
      if (n == 0 || n > 10 || (n > 1 && *digits == '0') || v > 0xFFFF'FFFFull) return false;
      ids.push_back(static_cast<std::uint32_t>(v));
      if (const Next next = afterElement(']'); next != Next::More) return next == Next::Closed;
    }
  }

  const char* p_;
  const char* end_;
  std::optional<std::vector<std::uint32_t>>* prompt_ids_;
};

}  // namespace

std::optional<json> parseJsonFast(std::string_view text,
                                  std::optional<std::vector<std::uint32_t>>* prompt_ids) {
  if (prompt_ids != nullptr) prompt_ids->reset();
  json out;
  if (!FastParser(text, prompt_ids).parseDocument(out)) {
    if (prompt_ids != nullptr) prompt_ids->reset();
    return std::nullopt;
  }
  return out;
}

}  // namespace mocker::gateway::detail
