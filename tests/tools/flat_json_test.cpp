// The fast Mooncake line scanner against nlohmann-json's DOM parser as the oracle: whatever the
// scanner accepts must be valid JSON with exactly the members it reports; what it declines goes
// to the full parser. Plus: a trace parsed through the fast path and through the full SAX path
// gives the same workload.
#include "tools/replay/detail/flat_json.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <bit>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "tools/replay/mooncake_trace.h"
#include "tools/replay/random.h"

namespace mocker::replay {
namespace {

using detail::FlatMember;
using detail::FlatValue;
using nlohmann::json;

/// The scanner's view of a line as JSON (last value wins for a repeated key, as in the DOM).
json asJson(const std::vector<FlatMember>& members, const std::vector<std::uint64_t>& numbers) {
  json out = json::object();
  for (const FlatMember& m : members) {
    const FlatValue& v = m.value;
    json& slot = out[std::string(m.key)];
    switch (v.kind) {
      case FlatValue::Kind::Null:
        slot = nullptr;
        break;
      case FlatValue::Kind::Uint:
        slot = v.uint_value;
        break;
      case FlatValue::Kind::Float:
        slot = v.float_value;
        break;
      case FlatValue::Kind::String:
        slot = std::string(v.text);
        break;
      case FlatValue::Kind::UintArray:
        slot = json::array();
        for (std::size_t i = v.array_begin; i < v.array_end; ++i) slot.push_back(numbers[i]);
        break;
    }
  }
  return out;
}

/// If the scanner accepts `line`, the DOM must parse it to the same object; returns whether the
/// scanner accepted.
bool checkAgainstDom(const std::string& line) {
  std::vector<FlatMember> members;
  std::vector<std::uint64_t> numbers;
  if (!detail::scanFlatJsonObject(line, members, numbers)) return false;
  json dom;
  try {
    dom = json::parse(line);
  } catch (const json::exception& e) {
    ADD_FAILURE() << "scanner accepted invalid JSON: " << line << " (" << e.what() << ")";
    return true;
  }
  const json mine = asJson(members, numbers);
  EXPECT_EQ(mine, dom) << line;
  // Numbers must keep their type too (the trace parser tells integers from floats), and
  // floats their exact value.
  for (const auto& [key, value] : dom.items()) {
    if (!mine.contains(key)) continue;
    EXPECT_EQ(mine[key].type(), value.type()) << key << " in " << line;
    if (value.is_number_float()) {
      EXPECT_EQ(std::bit_cast<std::uint64_t>(mine[key].get<double>()),
                std::bit_cast<std::uint64_t>(value.get<double>()))
          << key << " in " << line;
    }
  }
  return true;
}

TEST(FlatJsonTest, AcceptsTheUsualTraceLineShapes) {
  const std::vector<std::string> accepted = {
      R"({"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]})",
      R"({"timestamp":0,"output_length":0,"hash_ids":[0],"session_id":"chat-a","request_id":"a-1"})",
      " \t{ \"hash_ids\" : [ 1 , 2 ,3 ] , \"delay\" : null }\r",
      "{}",
      R"({"hash_ids": []})",
      R"({"hash_ids": [1], "hash_ids": [2, 3]})",
      "{\"extra\": [4, 5], \"x\": \"\", \"y\": \"a b ~ \x7f\"}",
      R"({"timestamp": 9999999999999999999})",
      R"({"timestamp": 12.0, "delay": 1e3, "x": 0.1, "y": 2.5E-3, "z": 1234567.8912345678901})",
      R"({"timestamp": 0.0, "a": 0e0, "b": 1E+2, "c": 4.9406564584124654e-324})",
      R"({"timestamp": 0, "session_id": 12})",
  };
  for (const std::string& line : accepted) {
    EXPECT_TRUE(checkAgainstDom(line)) << "declined: " << line;
  }
}

TEST(FlatJsonTest, DeclinesEverythingOutsideTheSubset) {
  const std::vector<std::string> declined = {
      R"({"timestamp": -1})",
      R"({"timestamp": -1.5})",
      R"({"timestamp": 1e400})",
      R"({"timestamp": 1e-400})",
      R"({"timestamp": 1.})",
      R"({"timestamp": .5})",
      R"({"timestamp": 1.e3})",
      R"({"timestamp": 1e})",
      R"({"timestamp": 01.5})",
      R"({"hash_ids": [1.0]})",
      R"({"hash_ids": [1e2]})",
      R"({"flag": true})",
      R"({"flag": false})",
      R"({"nested": {"a": 1}})",
      R"({"hash_ids": [[1]]})",
      R"({"hash_ids": [1, "2"]})",
      R"({"hash_ids": [1, -2]})",
      R"({"s": "a\"b"})",
      R"({"s": "\u00e9"})",
      "{\"s\": \"caf\xc3\xa9\"}",
      "{\"s\": \"tab\there\"}",
      R"({"timestamp": 18446744073709551615})",
      R"({"timestamp": 01})",
      R"({"timestamp": 1} x)",
      R"({"a": 1 "b": 2})",
      R"({"a": 1,})",
      R"({"hash_ids": [1,]})",
      R"({"a": 1)",
      R"({"a": "open)",
      R"({"a" 1})",
      R"({a: 1})",
      "\xEF\xBB\xBF{\"a\": 1}",
      "[1, 2]",
      "",
      "null",
      R"({"a": nul})",
  };
  for (const std::string& line : declined) {
    std::vector<FlatMember> members;
    std::vector<std::uint64_t> numbers;
    EXPECT_FALSE(detail::scanFlatJsonObject(line, members, numbers)) << line;
  }
}

TEST(FlatJsonTest, MutatedLinesAreDeclinedOrParsedExactlyAsTheDomDoes) {
  // Random single-character edits of valid lines from the JSON alphabet: the scanner may
  // decline any of them, but what it accepts must match the DOM.
  const std::vector<std::string> seeds = {
      R"({"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]})",
      R"({"timestamp": 1292229.934, "delay": 2.5e-3, "hash_ids": [1, 2, 3], "request_id": null})",
      R"({"session_id": "s-1", "delay": 50, "hash_ids": [1, 2, 3], "request_id": null})",
      R"({"created_time": 10, "input_tokens": 5, "output_tokens": 1, "hash_ids": [0]})",
  };
  const std::string alphabet = "{}[]:,\" 0123456789-+.eEnulltruefalse\\ab\t";
  SplitMix64 rng(11);
  int accepted = 0;
  for (int i = 0; i < 20'000; ++i) {
    std::string line = seeds[rng.uniformIndex(seeds.size())];
    const int edits = 1 + static_cast<int>(rng.uniformIndex(3));
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng.uniformIndex(line.size());
      const char c = alphabet[rng.uniformIndex(alphabet.size())];
      switch (rng.uniformIndex(3)) {
        case 0:
          line[at] = c;
          break;
        case 1:
          line.insert(line.begin() + static_cast<std::ptrdiff_t>(at), c);
          break;
        default:
          line.erase(at, 1);
      }
    }
    if (checkAgainstDom(line)) ++accepted;
  }
  EXPECT_GT(accepted, 1000);  // the edits do exercise the accepting paths
}

/// A workload as text, every field the parser sets.
std::string describe(const Workload& w) {
  std::ostringstream out;
  for (const Session& s : w.sessions) {
    out << s.session_id << " @" << (s.first_arrival_ms ? *s.first_arrival_ms : -1.0) << "\n";
    for (const Turn& t : s.turns) {
      out << "  line " << t.line << " in " << t.input_length << " out " << t.output_length
          << " delay " << t.delay_after_previous_ms << " id " << t.request_id.value_or("-")
          << " hashes";
      for (const std::uint64_t h : t.hash_ids) out << " " << h;
      out << "\n";
    }
  }
  for (const LineError& e : w.skipped_lines) out << "skipped " << e.line << ": " << e.message;
  return out.str();
}

TEST(FlatJsonTest, FastAndFullParsersBuildTheSameWorkload) {
  // The same trace twice: as written (fast path) and with an ignored float-valued key appended
  // to every line, which sends each line through the full SAX parser.
  const std::vector<std::string> lines = {
      R"({"timestamp": 0, "input_length": 1000, "output_length": 4, "hash_ids": [1, 2]})",
      R"({"timestamp": 10.25, "output_length": 3, "hash_ids": [1, 2, 3], "request_id": 7})",
      R"({"timestamp": 11, "output_length": 3.0, "input_length": 1e3, "hash_ids": [1, 2]})",
      R"({"timestamp": 12, "output_length": 3.5, "hash_ids": [1, 2]})",
      R"({"timestamp": 20, "input_length": 600, "output_length": 5, "hash_ids": [4, 5], "session_id": "chat-a", "request_id": "a-1"})",
      R"({"timestamp": 40, "input_length": 1500, "output_length": 2, "hash_ids": [4, 5, 6], "session_id": "chat-a", "delay": 50})",
      R"({"timestamp": 45, "input_length": 10, "output_length": 2, "hash_ids": [4], "session_id": "chat-a", "delay": null})",
      R"({"timestamp": 46.5, "output_length": 2, "hash_ids": [4], "session_id": "chat-a", "delay": 0.125})",
      R"({"created_time": 60, "input_tokens": 800, "output_tokens": 0, "hash_ids": [7, 8], "extra": [1, 2]})",
      R"({"timestamp": 70, "output_length": 1, "hash_ids": []})",
      R"({"timestamp": 71, "output_length": 1, "hash_ids": null})",
      R"({"timestamp": 72, "output_length": 1, "hash_ids": 5})",
      R"({"timestamp": 73, "output_length": 1, "input_length": [1], "hash_ids": [1]})",
      R"({"timestamp": 74, "output_length": 1, "output_tokens": 2, "hash_ids": [1]})",
      R"({"timestamp": 75, "output_length": 1, "hash_ids": [3], "hash_ids": [9, 9]})",
      R"({"timestamp": 76, "output_length": 1, "hash_ids": [3], "session_id": "chat-a", "delay": 5})",
      R"({"timestamp": 77, "input_length": 0, "output_length": 1, "hash_ids": [3]})",
  };
  std::string fast, full;
  for (const std::string& line : lines) {
    fast += line + "\n";
    full += line.substr(0, line.size() - 1) + R"(, "zz_forces_full_parser": true})" + "\n";
  }
  for (const bool skip_invalid : {true, false}) {
    const TraceOptions options{.trace_block_size = 512, .skip_invalid = skip_invalid};
    const Result<Workload> a = parseMooncakeTrace(fast, options);
    const Result<Workload> b = parseMooncakeTrace(full, options);
    ASSERT_EQ(a.has_value(), b.has_value());
    if (a) {
      EXPECT_EQ(describe(*a), describe(*b));
      EXPECT_GE(a->skipped_lines.size(), 6u);  // the invalid rows above
    } else {
      EXPECT_EQ(a.error().message, b.error().message);
    }
  }
}

}  // namespace
}  // namespace mocker::replay
