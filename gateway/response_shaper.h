// ResponseShaper: turns the worker outputs of one OpenAI request into the HTTP body, shaped as
// vLLM's OpenAI server shapes it (gateway/README.md "Responses"): SSE chunks while streaming
// (`data: {json}\n\n`; chat opens with a role chunk; a usage chunk only when asked; then
// `data: [DONE]\n\n`), or one JSON document at the end.
//
//   ResponseShaper shaper(request, ids, tokenizer);
//   out += shaper.start();                                // chat role chunks (streaming)
//   auto step = shaper.onOutput(choice, tokens, cached);  // step.body: SSE frames (streaming)
//   if (step.stop_matched) cancel(choice);                // a stop string ended the choice
//   out += shaper.onFinish(choice, ChoiceEnd::Planned);   // worker ended the stream
//   if (shaper.done()) out += shaper.finish();            // usage chunk + [DONE], or the JSON
//
// Bodies are written straight into one string per response (detail/json_out.h: the bytes
// nlohmann::json would write), not built as JSON trees. Socket-free and clock-free (`created` is
// given). Not thread-safe: one per request.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/openai_request.h"

namespace mocker::gateway {

class Tokenizer;

/// What names a response: its id ("cmpl-…" / "chatcmpl-…" is prefixed here), the served model
/// name and the creation time (seconds since the epoch).
struct ResponseIdentity {
  std::string request_id;
  std::string model;
  std::int64_t created = 0;
};

/// How a worker stream ended.
enum class ChoiceEnd {
  Planned,  ///< the worker produced the planned output: "stop" (modelled EOS) or "length"
  Failed,   ///< the worker failed the request (error / reject / shutdown / cancel)
};

class ResponseShaper {
 public:
  /// REQUIRES: planned_lengths.size() == number of choices (prompts × n), each ≥ 1.
  ResponseShaper(const GenerateRequest& request, std::vector<std::uint32_t> planned_lengths,
                 ResponseIdentity identity, const Tokenizer& tokenizer);

  std::size_t numChoices() const { return choices_.size(); }
  bool streaming() const { return request_.stream; }
  /// The planned output length of choice `c`.
  std::uint32_t planned(std::size_t c) const { return choices_.at(c).planned; }
  /// The prompt of choice `c` (prompt index c / n).
  const std::vector<std::uint32_t>& prompt(std::size_t c) const;

  /// Streaming only: the chunks that open the stream (chat: one role chunk per choice).
  std::string start();

  struct Step {
    std::string body;           ///< SSE frames to send (streaming; empty otherwise)
    bool stop_matched = false;  ///< a stop string ended this choice: cancel its worker request
  };
  /// New tokens of choice `c` (`cached` with the first ones: prompt tokens found cached).
  /// Ignored after the choice ended.
  Step onOutput(std::size_t c, std::span<const std::uint32_t> tokens,
                std::optional<std::uint32_t> cached);
  /// The worker's end of choice `c`. `message` says why for Failed. Ignored after it ended.
  /// A Failed end while streaming gives an error frame with `status`'s type and code.
  std::string onFinish(std::size_t c, ChoiceEnd end, const std::string& message = {},
                       int status = 500);

  /// Every choice has ended.
  bool done() const { return num_done_ == choices_.size(); }
  /// Whether a choice failed (non-streaming: the response is an error instead).
  const std::optional<std::string>& failure() const { return failure_; }
  /// After done(): streaming, the usage chunk (when asked) and `data: [DONE]`; otherwise the
  /// whole JSON response.
  std::string finish();

  std::uint32_t promptTokens() const;      ///< summed over prompts (not over n copies)
  std::uint32_t completionTokens() const;  ///< summed over choices
  std::uint32_t cachedTokens() const;      ///< the first copy of each prompt, summed

 private:
  struct Choice {
    std::uint32_t planned = 0;
    std::string text;         // generated text (a stop string and what follows cut off)
    std::size_t emitted = 0;  // bytes of text already streamed
    std::uint32_t tokens = 0;
    std::uint32_t cached = 0;
    bool ended = false;
    std::string finish_reason;        // "stop" | "length" | "error"
    std::optional<std::string> stop;  // the stop string that matched
  };

  std::string chunk(std::size_t c, std::string_view delta, bool final) const;
  void appendUsage(std::string& out, bool with_details) const;
  bool matchStop(Choice& choice, std::size_t searched_from);
  std::string body() const;  ///< the non-streaming response

  GenerateRequest request_;
  ResponseIdentity identity_;
  const Tokenizer& tokenizer_;
  std::string head_;  ///< `{"id":…,"object":…,"created":…,"model":…,"choices":` (JSON)
  std::vector<Choice> choices_;
  std::size_t num_done_ = 0;
  std::size_t max_stop_len_ = 0;
  std::optional<std::string> failure_;
};

}  // namespace mocker::gateway
