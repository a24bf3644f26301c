#include "tools/replay/detail/flat_json.h"

#include <charconv>
#include <system_error>

namespace mocker::replay::detail {
namespace {

/// Longest integer literal accepted: 19 digits always fit in uint64 (the 20-digit ones may not,
/// and the full parser turns those that do not into floats).
constexpr std::size_t kMaxDigits = 19;

/// A cursor over the line. Every method returns false when the text leaves the subset.
class Scanner {
 public:
  explicit Scanner(std::string_view text) : text_(text) {}

  void skipWhitespace() {
    while (pos_ < text_.size() && isWhitespace(text_[pos_])) ++pos_;
  }
  bool atEnd() const { return pos_ == text_.size(); }
  /// Consumes `c` if it is next.
  bool take(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool peekIs(char c) const { return pos_ < text_.size() && text_[pos_] == c; }

  /// A string without escapes, control characters or non-ASCII bytes; the opening quote is next.
  bool string(std::string_view& out) {
    if (!take('"')) return false;
    const std::size_t begin = pos_;
    while (pos_ < text_.size()) {
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        out = text_.substr(begin, pos_ - begin);
        ++pos_;
        return true;
      }
      if (c == '\\' || c < 0x20 || c >= 0x80) return false;
      ++pos_;
    }
    return false;  // unterminated
  }

  /// A non-negative JSON number (no sign): an integer literal without leading zeros becomes
  /// Kind::Uint (at most 19 digits), one with a fraction or exponent Kind::Float (correctly
  /// rounded, as the full parser's strtod; out-of-range values are declined).
  bool number(FlatValue& out, bool integer_only) {
    const std::size_t begin = pos_;
    const std::size_t digits = skipDigits();
    if (digits == 0) return false;
    if (digits > 1 && text_[begin] == '0') return false;  // leading zero: invalid JSON
    const bool fraction = take('.');
    if (fraction && skipDigits() == 0) return false;
    const bool exponent = take('e') || take('E');
    if (exponent) {
      if (!take('+')) take('-');
      if (skipDigits() == 0) return false;
    }
    if (!fraction && !exponent) {
      if (digits > kMaxDigits) return false;
      std::uint64_t value = 0;
      for (std::size_t i = begin; i < pos_; ++i) {
        value = value * 10 + static_cast<std::uint64_t>(text_[i] - '0');
      }
      out.kind = FlatValue::Kind::Uint;
      out.uint_value = value;
      return true;
    }
    if (integer_only) return false;
    double value = 0.0;
    const auto [end, ec] = std::from_chars(text_.data() + begin, text_.data() + pos_, value);
    if (ec != std::errc() || end != text_.data() + pos_) return false;
    out.kind = FlatValue::Kind::Float;
    out.float_value = value;
    return true;
  }

  bool literalNull() {
    if (text_.substr(pos_, 4) != "null") return false;
    pos_ += 4;
    return true;
  }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

 private:
  std::size_t skipDigits() {
    const std::size_t begin = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    return pos_ - begin;
  }

  static bool isWhitespace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

  std::string_view text_;
  std::size_t pos_ = 0;
};

bool value(Scanner& s, FlatValue& out, std::vector<std::uint64_t>& numbers) {
  const char c = s.peek();
  if (c == '"') {
    out.kind = FlatValue::Kind::String;
    return s.string(out.text);
  }
  if (c == 'n') {
    out.kind = FlatValue::Kind::Null;
    return s.literalNull();
  }
  if (c >= '0' && c <= '9') return s.number(out, /*integer_only=*/false);
  if (c != '[') return false;  // signs, booleans, objects, garbage: the full parser decides
  s.take('[');
  out.kind = FlatValue::Kind::UintArray;
  out.array_begin = numbers.size();
  s.skipWhitespace();
  if (!s.take(']')) {
    while (true) {
      FlatValue element;
      if (!s.number(element, /*integer_only=*/true)) return false;
      numbers.push_back(element.uint_value);
      s.skipWhitespace();
      if (s.take(']')) break;
      if (!s.take(',')) return false;
      s.skipWhitespace();
    }
  }
  out.array_end = numbers.size();
  return true;
}

}  // namespace

bool scanFlatJsonObject(std::string_view line, std::vector<FlatMember>& members,
                        std::vector<std::uint64_t>& numbers) {
  members.clear();
  numbers.clear();
  Scanner s(line);
  s.skipWhitespace();
  if (!s.take('{')) return false;
  s.skipWhitespace();
  if (!s.take('}')) {
    while (true) {
      FlatMember& m = members.emplace_back();
      if (!s.string(m.key)) return false;
      s.skipWhitespace();
      if (!s.take(':')) return false;
      s.skipWhitespace();
      if (!value(s, m.value, numbers)) return false;
      s.skipWhitespace();
      if (s.take('}')) break;
      if (!s.take(',')) return false;
      s.skipWhitespace();
    }
  }
  s.skipWhitespace();
  return s.atEnd();
}

}  // namespace mocker::replay::detail
