// Live replay against an OpenAI-compatible HTTP server (`mocker replay --mode live --openai-url
// URL`; tools/replay/README.md, OpenAI replay): the driver of tools/replay/live_replay.h with the
// OpenAI API instead of mocker's ZeroMQ protocol, so the same trace can drive `mocker gateway`,
// vLLM, SGLang or TensorRT-LLM servers and give the same report and --requests-jsonl timelines.
//
// One thread, one Asio io_context: the dispatch timer, one timeout timer per request and every
// HTTP connection (tools/replay/http_client.h: many requests at once, keep-alive connections
// reused). The
// schedule is TurnScheduler's (trace timing or closed loop, dependencies), prompts are the
// trace's `hash_ids` through PromptSynthesizer (equal hash ids → equal token ids, so shared
// prefixes stay shared) and mooncake-delta histories are kept as in the ZeroMQ driver (the
// outputs' ids from re-tokenizing their text with the tokenizer in use, the built-in one by
// default). Each request is a streamed completion (or chat completion with `chat`; a
// non-streaming one with `stream` false): openAiRequestBody, X-Request-Id "r<dispatch index>".
//
// Prompt form: token ids (`prompt` as a list of ids) by default — exact for any server that
// accepts them (vLLM, SGLang and `mocker gateway` do): the server's prompt is the trace's. As text
// when a tokenizer is given (the ids decoded with it) or for chat (messages are text; without a
// tokenizer the built-in one spells the ids, which `mocker gateway`'s built-in tokenizer reads
// back exactly; a real server re-tokenizes the text its own way).
//
// Recorded per request: arrival = send time; the output tokens' times from the SSE chunks
// (openai_stream.h); admission = the first token's time (a client sees no admission), with
// usage.prompt_tokens_details.cached_tokens as the reused tokens; the input length =
// usage.prompt_tokens (the prompt sent when the server reports none). Non-streaming: the body is
// kept (at most 1 MiB + 1 KiB per max_tokens, else malformed) and read whole when it ends, every
// token at that time. The terminal: [DONE] (non-streaming: a complete 200 body) →
// completed (a finish_reason is not required); HTTP 429 → rejected; any other HTTP error, an error
// frame, a malformed stream, a connection that fails or a stream cut before [DONE] → failed
// (counted by kind, with the server's message); no terminal after request_timeout_ms → the
// connection is closed (the server cancels) and it is recorded cancelled.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "gateway/tokenizer.h"
#include "tools/replay/collector.h"
#include "tools/replay/live_replay.h"
#include "tools/replay/stats.h"
#include "tools/replay/workload.h"

namespace mocker::replay {

struct OpenAiReplayOptions {
  std::string url;    ///< http://HOST:PORT[/v1]
  std::string model;  ///< "" = the first model of GET /v1/models
  bool chat = false;  ///< /v1/chat/completions (text prompts) instead of /v1/completions
  /// false: non-streaming requests (`stream: false`): the whole answer in one JSON body, every
  /// output token stamped at its arrival (TTFT = E2E), usage from that body.
  bool stream = true;
  /// Keep-alive connections opened before the first request is sent (0: opened as needed).
  std::uint32_t connections = 0;
  std::string api_key{};  ///< sent as `Authorization: Bearer KEY` when not empty
  /// Text prompts spelled with this tokenizer (and outputs re-tokenized with it); null = token-id
  /// prompts (chat: text from the built-in tokenizer).
  std::shared_ptr<const gateway::Tokenizer> tokenizer{};
  std::string tokenizer_name{};                ///< how the footer names it ("tokenizer.json FILE")
  std::optional<std::uint32_t> concurrency{};  ///< closed loop when set (>= 1)
  double request_timeout_ms = 600'000.0;       ///< > 0
  double connect_timeout_ms = 10'000.0;        ///< the GET /v1/models handshake (no --model)
  std::function<void(const LiveProgress&)> progress{};
};

struct OpenAiReplayStats {
  double wall_ms = 0.0;
  std::string model;        ///< the model every request named
  std::string prompt_form;  ///< "token ids" | "text (built-in tokenizer)" | "text (…)"
  std::uint32_t max_in_flight = 0;
  Distribution dispatch_lag_ms{};                   ///< trace mode: how late each request was sent
  std::map<unsigned, std::uint64_t> http_errors{};  ///< by HTTP status (not 200)
  std::uint64_t connection_failures = 0;  ///< refused, reset, malformed HTTP before a status
  std::uint64_t error_frames = 0;         ///< streams that ended with an error event
  std::uint64_t malformed_streams = 0;    ///< SSE events that do not parse (connection closed)
  std::uint64_t cut_streams = 0;          ///< closed before data: [DONE]
  std::uint64_t timeouts = 0;             ///< cancelled by the request timeout
  /// usage.prompt_tokens different from the prompt's length in token ids (chat template, text
  /// re-tokenized by the server); the report's input lengths are the server's.
  std::uint64_t prompt_length_differs = 0;
  std::uint64_t missing_usage = 0;  ///< completed streams without usage
  /// Distinct error messages, first seen first, with how many requests ended with each (at most
  /// kMaxErrorMessages; the rest are counted above only).
  std::vector<std::pair<std::string, std::uint64_t>> error_messages{};
  std::vector<std::string> warnings{};
};

inline constexpr std::size_t kMaxErrorMessages = 8;

/// Runs the whole workload against the server. Errors (nothing sent): concurrency 0, a
/// non-positive timeout, a session without a first arrival in trace mode, a URL that does not
/// parse or a host that does not resolve, no --model and no answer naming one from GET
/// /v1/models within connect_timeout_ms. Everything after that is recorded, never an error.
Result<OpenAiReplayStats> runOpenAiReplay(const Workload& workload,
                                          const OpenAiReplayOptions& options,
                                          ReplayCollector& collector);

/// The footer lines of an OpenAI replay: server, model, prompt form, in flight, dispatch lag,
/// then the errors by kind and their messages (only when there were any).
std::string formatOpenAiReplay(const OpenAiReplayOptions& options, const OpenAiReplayStats& stats,
                               bool closed_loop);

}  // namespace mocker::replay
