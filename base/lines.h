// The lines of a text, numbered from 1, for the parsers that read one record per line:
//
//   for (const auto [line, number] : Lines(text)) { ... }   // early return / continue as usual
//
// A line ends at '\n' (not included); a last line without '\n' counts, nothing after a final
// '\n' does ("a\n" is one line, "a\n\n" two, "" none). '\r' stays in the line: callers that
// accept CRLF strip it. Header-only; views into `text`, which must outlive the loop.
#pragma once

#include <cstddef>
#include <iterator>
#include <string_view>

namespace mocker {

struct NumberedLine {
  std::string_view text;
  std::size_t number = 0;  ///< 1-based
};

class Lines {
 public:
  explicit Lines(std::string_view text) : text_(text) {}

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = NumberedLine;
    using difference_type = std::ptrdiff_t;
    using pointer = const NumberedLine*;
    using reference = NumberedLine;

    Iterator() = default;
    Iterator(std::string_view text, std::size_t pos) : text_(text), pos_(pos) { find(); }

    NumberedLine operator*() const { return {text_.substr(pos_, eol_ - pos_), number_}; }
    Iterator& operator++() {
      pos_ = eol_ + 1;
      find();
      return *this;
    }
    Iterator operator++(int) {
      Iterator before = *this;
      ++*this;
      return before;
    }
    bool operator==(std::default_sentinel_t) const { return pos_ >= text_.size(); }

   private:
    void find() {
      if (pos_ >= text_.size()) return;
      ++number_;
      eol_ = text_.find('\n', pos_);
      if (eol_ == std::string_view::npos) eol_ = text_.size();
    }

    std::string_view text_;
    std::size_t pos_ = 0;
    std::size_t eol_ = 0;
    std::size_t number_ = 0;
  };

  Iterator begin() const { return Iterator(text_, 0); }
  std::default_sentinel_t end() const { return {}; }

 private:
  std::string_view text_;
};

}  // namespace mocker
