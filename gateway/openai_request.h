// OpenAI request parsing: the JSON body of POST /v1/completions or /v1/chat/completions, checked
// field by field, into a GenerateRequest of token ids (gateway/README.md "Requests").
//
//   auto request = parseCompletionRequest(body, tokenizer, limits);   // or parseChatRequest
//   if (!request) return reply(request.error());                      // 400 naming the field
//
// Every field of the wrong type is refused with a 400 that names it; unknown fields and the
// sampling fields that the mock does not model (temperature, top_p, top_k, seed-less sampling,
// penalties, logit_bias, user, ...) are accepted and ignored. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "gateway/api_error.h"

namespace mocker::gateway {

class Tokenizer;

enum class ApiKind { Completion, Chat };

/// Limits that bound what one request may ask for.
struct RequestLimits {
  std::uint32_t max_model_len = 8192;  ///< prompt + max_tokens must fit (vLLM's check)
  std::uint32_t max_n = 16;            ///< largest `n`
  std::uint32_t max_prompts = 64;      ///< largest batch of prompts in /v1/completions
  std::uint32_t max_stop = 16;         ///< most stop strings
  /// /v1/completions without max_tokens generates this many (OpenAI's and vLLM's default).
  std::uint32_t default_completion_max_tokens = 16;
};

/// A parsed request. Each prompt is run `n` times; choice index = prompt index · n + copy.
struct GenerateRequest {
  ApiKind kind = ApiKind::Completion;
  std::string model;
  std::vector<std::vector<std::uint32_t>> prompts;  ///< token ids, ≥ 1 prompt, none empty
  std::uint32_t max_tokens = 0;  ///< ≥ 1; chat default: max_model_len − prompt
  std::uint32_t min_tokens = 0;  ///< ≤ max_tokens
  std::uint32_t n = 1;
  bool stream = false;
  bool include_usage = false;           ///< stream_options.include_usage
  bool continuous_usage_stats = false;  ///< stream_options.continuous_usage_stats
  bool ignore_eos = false;
  std::vector<std::string> stop;      ///< stop strings (non-empty each)
  std::optional<std::uint64_t> seed;  ///< seeds the output-length draw
};

/// Parses a /v1/completions body. `prompt`: string, list of strings, list of token ids, or
/// list of lists of token ids (ids must be < 2^32).
std::variant<GenerateRequest, ApiError> parseCompletionRequest(std::string_view body,
                                                               const Tokenizer& tokenizer,
                                                               const RequestLimits& limits);

/// Parses a /v1/chat/completions body; `messages` go through chatPrompt().
std::variant<GenerateRequest, ApiError> parseChatRequest(std::string_view body,
                                                         const Tokenizer& tokenizer,
                                                         const RequestLimits& limits);

/// One chat message: role and text content (string content, or the concatenated "text" parts
/// of a content list).
struct ChatMessage {
  std::string role;
  std::string content;
};

/// The built-in chat template: for each message "<|ROLE|>\nCONTENT\n", then "<|assistant|>\n"
/// (the generation prompt). E.g. [{user, "Hi"}] → "<|user|>\nHi\n<|assistant|>\n".
std::string chatPrompt(const std::vector<ChatMessage>& messages);

}  // namespace mocker::gateway
