// The fuzz checks: one function per decoder of untrusted bytes, shared by the libFuzzer targets
// (fuzz_main.cpp, built with clang and -DMOCKER_BUILD_FUZZERS=ON) and by the regression test
// (corpus_test.cpp, an ordinary gtest of the g++ build) that replays tests/fuzz/corpus/<target>/.
//
// Each check feeds one input to its decoder and asserts properties with MOCKER_FUZZ_REQUIRE,
// which prints the failed property and aborts (libFuzzer reports it as a crash; the gtest dies):
// the decoder never crashes, every error carries a message, and, where the format allows it,
// whatever is accepted survives a round trip or agrees with a second, independent path.
//
// Checks are pure functions of the input: no files, sockets, clocks or global state, so every
// finding reproduces from the saved input alone.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace mocker::fuzz {

using Input = std::span<const std::uint8_t>;

/// Client protocol v1 (protocol/client.h): decode, peekRequestId, fast path == general decoder,
/// encode → decode round trip.
void checkClientMessage(Input input);
/// Forward-pass metrics (protocol/fpm.h): decode, round trip.
void checkFpm(Input input);
/// KV-event batches (protocol/kv_events.h), every layout: decode, round trip through p8 and map.
void checkKvEvents(Input input);
/// Index query protocol (protocol/index_query.h): requests and replies, peekQueryId, round trips.
void checkIndexQuery(Input input);
/// KV replay request (publishers/kv_event_publisher.h handleReplayRequest) and the seq frame
/// (protocol/framing.h). Byte 0 configures the ring and the layout, byte 1 how many batches are
/// published first; the rest is the request, as frames each preceded by a one-byte length.
void checkKvReplay(Input input);
/// The index's replay-response state machine (tools/index/sequencer.h) driven by a stream of
/// live / replay / end-marker / tick / resync inputs decoded from the bytes: applies come in
/// strictly increasing seq order between resyncs and the documented REQUIRES hold.
void checkSequencer(Input input);
/// The service TOML configuration (service/config.h) through its public entry points: parse over
/// the defaults, finish (validate), and a valid config dumps to TOML that parses back equal.
void checkConfigToml(Input input);
/// The interpolated timing profile JSON (service/config.h parseTimingProfile).
void checkTimingProfile(Input input);
/// Mooncake JSONL traces (tools/replay/mooncake_trace.h): the workload invariants, and
/// skip_invalid never changes the outcome of a trace without bad lines.
void checkMooncake(Input input);
/// The fast Mooncake line scanner (tools/replay/detail/flat_json.h) against nlohmann's parser:
/// whatever the scanner accepts is valid JSON with exactly the members and values it reports.
void checkFlatJson(Input input);

/// mooncake-delta JSONL (parseMooncakeTrace, TraceFormat::MooncakeDelta): as checkMooncake, plus
/// every delta fills exactly its blocks and every cumulative prompt fits in 32 bits.
void checkMooncakeDelta(Input input);

/// Agentic JSONL (TraceFormat::Agentic): as checkMooncake, plus one turn per session, dependency
/// indices in range and acyclic, dependents without an arrival of their own.
void checkAgentic(Input input);
/// Azure CSV traces (tools/replay/azure_trace.h): the workload invariants, as for Mooncake.
void checkAzure(Input input);

/// The text parsers of command-line values, chosen by byte 0 (byte 1 is their small argument):
/// `--worker` specs, one config key set from flag text (valid → dump → parse equal), per-rank
/// endpoints (rank 0 is the endpoint itself), Azure timestamps.
void checkCliText(Input input);

/// The gateway's OpenAI request parser (gateway/openai_request.h): byte 0 picks completions or
/// chat and the context length, the rest is the body. Errors are 400s naming their field, with a
/// valid JSON error body; accepted requests satisfy the length and stream-option rules.
void checkOpenAiRequest(Input input);

/// The targets by name (the fuzzer's binary name and the corpus directory name).
struct FuzzTarget {
  std::string_view name;
  void (*check)(Input);
};
std::span<const FuzzTarget> fuzzTargets();

}  // namespace mocker::fuzz
