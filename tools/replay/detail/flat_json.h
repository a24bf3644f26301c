// Fast scanner for the common shape of a Mooncake trace line: one JSON object whose values are
// non-negative numbers, plain strings, null, or arrays of non-negative integers, e.g.
//
//   {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}
//
// It accepts only a strict subset of JSON and says "not handled" for everything else (signs,
// floats inside arrays, out-of-range floats, integers over 19 digits, escapes, non-ASCII text,
// booleans, nested containers, anything malformed); the caller
// then parses the line with the full parser, which owns every error message. Whatever it accepts
// is valid JSON with exactly the members it reports, so both paths see the same values.
//
// Internal to tools/replay. Pure function; thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace mocker::replay::detail {

/// One member value. Text and array views point into the scanned line and the numbers vector.
struct FlatValue {
  enum class Kind : std::uint8_t { Null, Uint, Float, String, UintArray };
  Kind kind = Kind::Null;
  std::uint64_t uint_value = 0;  ///< Kind::Uint
  double float_value = 0.0;      ///< Kind::Float: a literal with a fraction or exponent
  std::string_view text{};       ///< Kind::String: the characters between the quotes
  std::size_t array_begin = 0;   ///< Kind::UintArray: [array_begin, array_end) of `numbers`
  std::size_t array_end = 0;
};

struct FlatMember {
  std::string_view key{};  ///< without quotes; never contains escapes
  FlatValue value{};
};

/// Scans `line` (one JSON text, no newline). On success fills `members` in source order
/// (repeated keys appear repeatedly) and `numbers` with the array elements, and returns true.
/// Returns false when the line is outside the subset above or not valid JSON; `members` and
/// `numbers` are then unspecified. Both vectors are cleared first, so they can be reused.
bool scanFlatJsonObject(std::string_view line, std::vector<FlatMember>& members,
                        std::vector<std::uint64_t>& numbers);

}  // namespace mocker::replay::detail
