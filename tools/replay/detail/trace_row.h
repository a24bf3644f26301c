// One line of a Mooncake-style JSONL trace as a flat record of the keys the parsers know
// (tools/replay/mooncake_trace.h): every known top-level scalar, hash_ids straight into a vector,
// the agentic id lists; unknown keys ignored. Lines of the usual shape (non-negative numbers,
// plain strings, null, integer arrays) go through the strict scanner of detail/flat_json.h,
// every other line, including every malformed one, through nlohmann-json's SAX interface, which
// owns the error messages; neither builds a DOM. Plus the value checks the parsers share.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "tools/replay/detail/flat_json.h"

namespace mocker::replay::detail {

/// A top-level value as seen by the SAX handler.
struct Scalar {
  enum class Kind : std::uint8_t { Absent, Null, Bool, Int, Uint, Float, String, Other };
  Kind kind = Kind::Absent;
  std::int64_t i = 0;
  std::uint64_t u = 0;
  double f = 0.0;
  std::string s{};

  /// Present and not null (null counts as absent).
  bool present() const { return kind != Kind::Absent && kind != Kind::Null; }
  bool isNumber() const { return kind == Kind::Int || kind == Kind::Uint || kind == Kind::Float; }
  double asDouble() const {
    return kind == Kind::Int    ? static_cast<double>(i)
           : kind == Kind::Uint ? static_cast<double>(u)
                                : f;
  }
  /// The value as it would print in JSON (for error messages).
  std::string describe() const {
    switch (kind) {
      case Kind::Int:
        return std::to_string(i);
      case Kind::Uint:
        return std::to_string(u);
      case Kind::Float: {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.17g", f);
        return buf;
      }
      case Kind::String:
        return "\"" + s + "\"";
      case Kind::Bool:
        return i != 0 ? "true" : "false";
      case Kind::Null:
      case Kind::Absent:
        return "null";
      case Kind::Other:
        return "an object or array";
    }
    return "?";
  }
};

enum Field : std::uint8_t {
  kTimestamp,
  kCreatedTime,
  kInputLength,
  kInputTokens,
  kOutputLength,
  kOutputTokens,
  kSessionId,
  kDelay,
  kDelayMs,
  kRequestId,
  kPrefixReset,  // agentic only
  kToolWaitMs,   // agentic only
  kLora,         // LoRA adapter name (docs/traces.md)
  kNumScalarFields,
  kHashIds = kNumScalarFields,
  kWaitFor,   // agentic only: array of identifiers
  kBranches,  // agentic only: array of identifiers
  kUnknown,
};

inline constexpr const char* kFieldNames[] = {
    "timestamp",  "created_time", "input_length", "input_tokens", "output_length", "output_tokens",
    "session_id", "delay",        "delay_ms",     "request_id",   "prefix_reset",  "tool_wait_ms",
    "lora",       "hash_ids",     "wait_for",     "branches"};

/// The field named `key`; kUnknown for any other key.
Field fieldOf(std::string_view key);

/// One parsed line: the known keys only.
struct Row {
  Scalar fields[kNumScalarFields];
  enum class Hash : std::uint8_t { Absent, Null, NotArray, Array } hash = Hash::Absent;
  std::vector<std::uint64_t> hash_ids;
  std::optional<std::string> bad_hash_id;  // description of the first non-unsigned element
  /// wait_for / branches (agentic): identifiers (strings, or integers in decimal).
  struct IdList {
    enum class State : std::uint8_t { Absent, Null, NotArray, Array } state = State::Absent;
    std::vector<std::string> ids;
    std::optional<std::string> bad;  // description of the first element that is no identifier
  };
  IdList id_lists[2];  // [0] wait_for, [1] branches

  const Scalar& operator[](Field f) const { return fields[f]; }
  IdList& ids(Field f) { return id_lists[f == kWaitFor ? 0 : 1]; }
  const IdList& ids(Field f) const { return id_lists[f == kWaitFor ? 0 : 1]; }
};

/// Scratch buffers of the fast scanner, reused from line to line.
struct RowScratch {
  std::vector<FlatMember> members;
  std::vector<std::uint64_t> numbers;
};

/// Parses one line into `row`: the fast scanner for the usual flat shape, nlohmann-json's SAX
/// parser for anything else (same rules: null counts as absent, a repeated key keeps its last
/// value, unknown keys are ignored). Errors: "not valid JSON", "expected a JSON object".
Status readRow(std::string_view line, Row& row, RowScratch& scratch);

/// Looks up `key` or its `alias` (kUnknown: none); null values count as absent. Both present ⇒
/// error.
Result<const Scalar*> findField(const Row& row, Field key, Field alias);
/// A finite number >= 0 (ms).
Result<double> nonNegativeNumber(const Scalar& v, const char* name);
/// A non-negative integer (integral floats such as 12.0 are accepted) no larger than `max`.
Result<std::uint64_t> nonNegativeInteger(const Scalar& v, const char* name, std::uint64_t max);
/// An identifier given as a string or an integer.
Result<std::string> identifier(const Scalar& v, const char* name);
/// A list of identifiers (wait_for, branches): absent/null ⇒ empty; each at most once.
Result<std::vector<std::string>> idList(const Row& row, Field field);

}  // namespace mocker::replay::detail
