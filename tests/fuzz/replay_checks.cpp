// Fuzz checks of the trace readers of tools/replay: Mooncake JSONL (and its fast line scanner),
// its mooncake-delta and agentic dialects, and Azure CSV.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/fuzz/fuzz_checks.h"
#include "tests/fuzz/fuzz_util.h"
#include "tools/replay/azure_trace.h"
#include "tools/replay/detail/flat_json.h"
#include "tools/replay/mooncake_trace.h"
#include "tools/replay/workload.h"

namespace mocker::fuzz {
namespace {

std::string_view textOf(Input input) {
  return {reinterpret_cast<const char*>(input.data()), input.size()};
}

bool sameTurn(const replay::Turn& a, const replay::Turn& b) {
  return a.input_length == b.input_length && a.output_length == b.output_length &&
         a.hash_ids == b.hash_ids && a.delay_after_previous_ms == b.delay_after_previous_ms &&
         a.request_id == b.request_id && a.line == b.line;
}

bool sameWorkload(const replay::Workload& a, const replay::Workload& b) {
  if (a.sessions.size() != b.sessions.size() || a.trace_block_size != b.trace_block_size) {
    return false;
  }
  for (std::size_t i = 0; i < a.sessions.size(); ++i) {
    const auto& sa = a.sessions[i];
    const auto& sb = b.sessions[i];
    if (sa.session_id != sb.session_id || sa.first_arrival_ms != sb.first_arrival_ms ||
        sa.turns.size() != sb.turns.size() || sa.wait_for != sb.wait_for ||
        sa.dependency_delay_ms != sb.dependency_delay_ms) {
      return false;
    }
    for (std::size_t t = 0; t < sa.turns.size(); ++t) {
      if (!sameTurn(sa.turns[t], sb.turns[t])) return false;
    }
  }
  return true;
}

/// The invariants every parser promises (workload.h: Turn, Session, Workload).
/// `sorted`: sessions come sorted by first arrival (every format but agentic, which keeps file
/// order because wait_for holds session indices).
void requireWorkloadInvariants(const replay::Workload& w, const replay::TraceOptions& options,
                               bool sorted) {
  MOCKER_FUZZ_REQUIRE(!w.sessions.empty());
  MOCKER_FUZZ_REQUIRE(w.trace_block_size == options.trace_block_size);
  bool all_arrive = true;
  bool has_dependencies = false;
  double min_arrival = INFINITY;
  for (std::size_t i = 0; i < w.sessions.size(); ++i) {
    const replay::Session& s = w.sessions[i];
    MOCKER_FUZZ_REQUIRE(!s.turns.empty());
    MOCKER_FUZZ_REQUIRE(std::isfinite(s.dependency_delay_ms) && s.dependency_delay_ms >= 0.0);
    if (!s.wait_for.empty()) {
      // Agentic: a dependent session has no arrival of its own; its dependencies are others.
      has_dependencies = true;
      MOCKER_FUZZ_REQUIRE(!s.first_arrival_ms.has_value());
      for (const std::uint32_t d : s.wait_for) MOCKER_FUZZ_REQUIRE(d < w.sessions.size() && d != i);
    } else {
      MOCKER_FUZZ_REQUIRE(s.dependency_delay_ms == 0.0);
    }
    if (s.first_arrival_ms) {
      MOCKER_FUZZ_REQUIRE(std::isfinite(*s.first_arrival_ms) && *s.first_arrival_ms >= 0.0);
      min_arrival = std::min(min_arrival, *s.first_arrival_ms);
    } else {
      all_arrive = false;
    }
    for (std::size_t t = 0; t < s.turns.size(); ++t) {
      const replay::Turn& turn = s.turns[t];
      MOCKER_FUZZ_REQUIRE(turn.input_length >= 1);
      MOCKER_FUZZ_REQUIRE(!turn.hash_ids.empty());
      MOCKER_FUZZ_REQUIRE(turn.input_length <=
                          turn.hash_ids.size() * std::uint64_t{w.trace_block_size});
      MOCKER_FUZZ_REQUIRE(std::isfinite(turn.delay_after_previous_ms));
      MOCKER_FUZZ_REQUIRE(turn.delay_after_previous_ms >= 0.0);
      MOCKER_FUZZ_REQUIRE(t > 0 || turn.delay_after_previous_ms == 0.0);
    }
  }
  if (all_arrive && sorted && !has_dependencies) {
    MOCKER_FUZZ_REQUIRE(min_arrival == 0.0);
    for (std::size_t i = 1; i < w.sessions.size(); ++i) {
      MOCKER_FUZZ_REQUIRE(*w.sessions[i - 1].first_arrival_ms <= *w.sessions[i].first_arrival_ms);
    }
  }
}

/// Agentic workloads: one turn per session with its request_id, the earliest root arrives at 0,
/// and the dependencies form no cycle (Kahn's algorithm orders every session).
void requireAgenticInvariants(const replay::Workload& w) {
  std::vector<std::uint32_t> pending(w.sessions.size(), 0);
  std::vector<std::vector<std::uint32_t>> dependents(w.sessions.size());
  std::vector<std::uint32_t> ready;
  double min_root = INFINITY;
  for (std::uint32_t i = 0; i < w.sessions.size(); ++i) {
    const replay::Session& s = w.sessions[i];
    MOCKER_FUZZ_REQUIRE(s.turns.size() == 1 && s.turns[0].request_id.has_value());
    pending[i] = static_cast<std::uint32_t>(s.wait_for.size());
    for (const std::uint32_t d : s.wait_for) dependents[d].push_back(i);
    if (s.wait_for.empty()) {
      ready.push_back(i);
      MOCKER_FUZZ_REQUIRE(s.first_arrival_ms.has_value());
      min_root = std::min(min_root, *s.first_arrival_ms);
    }
  }
  MOCKER_FUZZ_REQUIRE(min_root == 0.0);
  for (std::size_t q = 0; q < ready.size(); ++q) {
    for (const std::uint32_t i : dependents[ready[q]]) {
      if (--pending[i] == 0) ready.push_back(i);
    }
  }
  MOCKER_FUZZ_REQUIRE(ready.size() == w.sessions.size());
}

/// Strict and skip_invalid parses of the same text: both keep the invariants, and on a trace
/// the strict parse accepts, skip_invalid skips nothing and yields the same workload.
template <typename Parse>
void checkTraceParser(Input input, Parse parse, bool sorted = true) {
  const std::string_view text = textOf(input);
  const replay::TraceOptions strict{};
  const replay::TraceOptions lenient{.skip_invalid = true};
  const auto a = parse(text, strict);
  const auto b = parse(text, lenient);
  if (a) requireWorkloadInvariants(*a, strict, sorted);
  if (!a) MOCKER_FUZZ_REQUIRE(!a.error().message.empty());
  if (b) requireWorkloadInvariants(*b, lenient, sorted);
  if (!b) MOCKER_FUZZ_REQUIRE(!b.error().message.empty());
  if (a) {
    MOCKER_FUZZ_REQUIRE(b.has_value());
    MOCKER_FUZZ_REQUIRE(b->skipped_lines.empty());
    MOCKER_FUZZ_REQUIRE(sameWorkload(*a, *b));
  }
  if (b) {
    for (const replay::LineError& e : b->skipped_lines) {
      MOCKER_FUZZ_REQUIRE(e.line >= 1 && !e.message.empty());
    }
  }
}

/// One top-level member as nlohmann's SAX parser reports it, in the scanner's terms.
struct SaxMember {
  std::string key;
  replay::detail::FlatValue::Kind kind = replay::detail::FlatValue::Kind::Null;
  std::uint64_t uint_value = 0;
  double float_value = 0.0;
  std::string text;
  std::vector<std::uint64_t> numbers;
};

/// Collects the members of a top-level object whose values are scalars or arrays of unsigned
/// integers; anything else (the scanner must have refused it) sets `outside_subset`.
class MemberSax final : public nlohmann::json_sax<nlohmann::json> {
 public:
  using Kind = replay::detail::FlatValue::Kind;
  std::vector<SaxMember> members;
  bool outside_subset = false;

  bool null() override { return value(Kind::Null); }
  bool boolean(bool) override { return outside(); }
  bool number_integer(number_integer_t) override { return outside(); }
  bool number_unsigned(number_unsigned_t v) override {
    if (depth_ == 2 && in_array_) {
      members.back().numbers.push_back(v);
      return true;
    }
    if (!value(Kind::Uint)) return false;
    members.back().uint_value = v;
    return true;
  }
  bool number_float(number_float_t v, const string_t&) override {
    if (!value(Kind::Float)) return false;
    members.back().float_value = v;
    return true;
  }
  bool string(string_t& v) override {
    if (!value(Kind::String)) return false;
    members.back().text = v;
    return true;
  }
  bool binary(binary_t&) override { return outside(); }
  bool start_object(std::size_t) override {
    if (depth_ != 0) return outside();
    ++depth_;
    return true;
  }
  bool key(string_t& k) override {
    members.push_back({.key = k});
    return true;
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    if (depth_ != 1) return outside();
    if (!value(Kind::UintArray)) return false;
    ++depth_;
    in_array_ = true;
    return true;
  }
  bool end_array() override {
    --depth_;
    in_array_ = false;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return outside();
  }

 private:
  bool value(Kind kind) {
    if (depth_ != 1 || members.empty()) return outside();
    members.back().kind = kind;
    return true;
  }
  bool outside() {
    outside_subset = true;
    return false;
  }
  int depth_ = 0;
  bool in_array_ = false;
};

}  // namespace

void checkMooncake(Input input) {
  checkTraceParser(input, [](std::string_view text, const replay::TraceOptions& options) {
    return replay::parseMooncakeTrace(text, options);
  });
}

void checkMooncakeDelta(Input input) {
  checkTraceParser(input, [](std::string_view text, const replay::TraceOptions& options) {
    auto w = replay::parseMooncakeTrace(text, options, replay::TraceFormat::MooncakeDelta);
    if (w) {
      MOCKER_FUZZ_REQUIRE(w->cumulative_prompts);
      for (const replay::Session& s : w->sessions) {
        std::uint64_t cumulative = 0;
        for (const replay::Turn& t : s.turns) {
          // A delta fills exactly its blocks, and every cumulative prompt fits in 32 bits.
          MOCKER_FUZZ_REQUIRE((t.input_length + std::uint64_t{w->trace_block_size} - 1) /
                                  w->trace_block_size ==
                              t.hash_ids.size());
          cumulative += t.input_length;
          MOCKER_FUZZ_REQUIRE(cumulative <= 0xFFFF'FFFFull);
          cumulative += t.output_length;
        }
      }
    }
    return w;
  });
}

void checkAgentic(Input input) {
  checkTraceParser(
      input,
      [](std::string_view text, const replay::TraceOptions& options) {
        auto w = replay::parseMooncakeTrace(text, options, replay::TraceFormat::Agentic);
        if (w) requireAgenticInvariants(*w);
        return w;
      },
      /*sorted=*/false);
}

void checkAzure(Input input) {
  checkTraceParser(input, [](std::string_view text, const replay::TraceOptions& options) {
    return replay::parseAzureTrace(text, options);
  });
}

void checkFlatJson(Input input) {
  const std::string_view line = textOf(input);
  std::vector<replay::detail::FlatMember> members;
  std::vector<std::uint64_t> numbers;
  if (!replay::detail::scanFlatJsonObject(line, members, numbers)) return;
  MemberSax sax;
  const bool ok = nlohmann::json::sax_parse(line.begin(), line.end(), &sax);
  MOCKER_FUZZ_REQUIRE(ok && !sax.outside_subset);
  MOCKER_FUZZ_REQUIRE(sax.members.size() == members.size());
  for (std::size_t i = 0; i < members.size(); ++i) {
    const replay::detail::FlatMember& m = members[i];
    const SaxMember& s = sax.members[i];
    MOCKER_FUZZ_REQUIRE(m.key == s.key);
    MOCKER_FUZZ_REQUIRE(m.value.kind == s.kind);
    switch (m.value.kind) {
      case replay::detail::FlatValue::Kind::Null:
        break;
      case replay::detail::FlatValue::Kind::Uint:
        MOCKER_FUZZ_REQUIRE(m.value.uint_value == s.uint_value);
        break;
      case replay::detail::FlatValue::Kind::Float:
        MOCKER_FUZZ_REQUIRE(m.value.float_value == s.float_value);
        break;
      case replay::detail::FlatValue::Kind::String:
        MOCKER_FUZZ_REQUIRE(m.value.text == s.text);
        break;
      case replay::detail::FlatValue::Kind::UintArray:
        MOCKER_FUZZ_REQUIRE(m.value.array_begin <= m.value.array_end &&
                            m.value.array_end <= numbers.size());
        MOCKER_FUZZ_REQUIRE(std::vector<std::uint64_t>(
                                numbers.begin() + static_cast<std::ptrdiff_t>(m.value.array_begin),
                                numbers.begin() + static_cast<std::ptrdiff_t>(m.value.array_end)) ==
                            s.numbers);
        break;
    }
  }
}

}  // namespace mocker::fuzz
