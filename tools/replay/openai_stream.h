// The socket-free half of replaying a trace against an OpenAI-compatible server
// (tools/replay/openai_replay.h): the server URL, the request body, the server-sent-events
// framing of a streamed response, its chunks (text, finish_reason, usage, error frames), the
// per-token receive times they give, and the message of an OpenAI error body.
//
// Per-token times. The request asks for `stream_options: {include_usage, continuous_usage_stats}`.
// A chunk that carries `usage.completion_tokens` (vLLM and `mocker gateway` do with
// continuous_usage_stats) advances the count to that cumulative value: its new tokens are stamped
// with the chunk's receive time. A server that ignores continuous_usage_stats sends usage only in
// the last chunk: every chunk with non-empty text then counts one token (vLLM streams one token
// per chunk), and when the final usage says more, the extra tokens are stamped with the last text
// chunk's time (fewer: the count is cut to the usage's). The count never passes the request's
// max_tokens: a usage above it is a malformed stream (a hostile server must not size the
// per-token vector), extra text chunks are not counted. Pure; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace mocker::replay {

/// http://HOST:PORT[/PATH]: where the API is. `base_path` ends in "/v1" ("" or "/" given → "/v1";
/// a path that does not end in /v1 gets it appended).
struct OpenAiUrl {
  std::string host;
  std::string port;
  std::string base_path;
};
/// Errors: not http:// (https:// is refused: plain HTTP only), no host, a port that is not a
/// number in 1..65535.
Result<OpenAiUrl> parseOpenAiUrl(std::string_view url);

/// What one request asks for.
struct OpenAiRequestSpec {
  std::string model;
  bool chat = false;  ///< /v1/chat/completions with one user message (else /v1/completions)
  /// Token-id prompt (`prompt` as a list of ids; completions only) when `text` is empty.
  std::span<const std::uint32_t> prompt_ids{};
  std::optional<std::string> text{};  ///< the prompt as text
  std::uint32_t max_tokens = 0;
  bool stream = true;  ///< false: one JSON response body (`stream: false`)
};
/// The JSON body: model, prompt / messages, max_tokens, ignore_eos and min_tokens (= max_tokens:
/// the trace's output length exactly, as vLLM's benchmark asks), then either stream with
/// include_usage and continuous_usage_stats, or `stream: false`.
std::string openAiRequestBody(const OpenAiRequestSpec& spec);

/// The message of an error response body: `error.message` of an OpenAI error object (or a
/// top-level `message` / `detail` string), else the body's first 200 bytes.
std::string openAiErrorMessage(std::string_view body);

/// The first model's id in a GET /v1/models body (`data[0].id`). Errors: a body without one.
Result<std::string> firstModelId(std::string_view body);

/// Server-sent events: bytes in, the `data` of each complete event out (several data lines of
/// one event joined by "\n"; comments and other fields ignored; "\n", "\r\n" or "\r" ends a line).
/// An event is at most kMaxSseEventBytes (its data and its unfinished line): a server that never
/// ends a line or an event is an error, not memory that grows with what it sends.
class SseReader {
 public:
  static constexpr std::size_t kMaxSseEventBytes = 1 << 20;

  /// Appends `bytes`; pushes the data of every event they complete onto `events`. Errors: the
  /// incomplete event is over kMaxSseEventBytes (the reader is then unusable).
  Status feed(std::string_view bytes, std::vector<std::string>& events);
  /// Bytes of an incomplete event still buffered (its data lines and its unfinished line).
  std::size_t pending() const { return buffer_.size() + data_.size(); }

 private:
  std::string buffer_;
  std::size_t scanned_ = 0;  ///< bytes of buffer_ already searched for a line end
  std::string data_;
  bool has_data_ = false;
  bool skip_lf_ = false;  ///< the previous line ended in "\r": a following "\n" belongs to it
};

/// One streamed response, event by event.
class OpenAiStream {
 public:
  /// The stream of a request that asked for `max_tokens` output tokens.
  explicit OpenAiStream(std::uint32_t max_tokens) : max_tokens_(max_tokens) {}

  /// One event's data received at `now_ms`. Errors (the stream is malformed): data that is not
  /// JSON, not an object, or whose known fields have the wrong types; a usage.completion_tokens
  /// over max_tokens; anything after [DONE].
  Status onEvent(std::string_view data, double now_ms);
  /// A whole non-streaming response body received at `now_ms` (`choices[].text` or
  /// `choices[].message.content`, usage): as one event whose tokens all arrive at `now_ms`, then
  /// [DONE]. Errors: as onEvent's.
  Status onResponse(std::string_view body, double now_ms);
  /// Ends the stream: reconciles the token count with the final usage (see the header comment).
  void finish();

  bool done() const { return done_; }  ///< [DONE] received
  std::uint32_t maxTokens() const { return max_tokens_; }
  /// An error frame (`{"error": {...}}`) ended the stream: its message.
  const std::optional<std::string>& error() const { return error_; }
  const std::optional<std::string>& finishReason() const { return finish_reason_; }
  std::optional<std::uint32_t> promptTokens() const { return prompt_tokens_; }
  std::optional<std::uint32_t> cachedTokens() const { return cached_tokens_; }
  std::optional<std::uint32_t> completionTokens() const { return completion_tokens_; }
  const std::vector<double>& tokenTimes() const { return token_times_; }
  const std::string& text() const { return text_; }  ///< the generated text

 private:
  void countTokens(std::optional<std::uint32_t> cumulative, bool has_text, double now_ms);

  std::uint32_t max_tokens_;
  std::vector<double> token_times_;
  std::string text_;
  std::optional<std::string> error_;
  std::optional<std::string> finish_reason_;
  std::optional<std::uint32_t> prompt_tokens_;
  std::optional<std::uint32_t> cached_tokens_;
  std::optional<std::uint32_t> completion_tokens_;
  std::optional<double> last_text_ms_;
  bool done_ = false;
};

}  // namespace mocker::replay
