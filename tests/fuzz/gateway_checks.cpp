// The gateway's OpenAI request parser (gateway/openai_request.h) on arbitrary bodies.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "gateway/detail/json_fast_parse.h"
#include "gateway/openai_request.h"
#include "gateway/tokenizer.h"
#include "tests/fuzz/fuzz_checks.h"
#include "tests/fuzz/fuzz_util.h"

namespace mocker::fuzz {

void checkOpenAiRequest(Input input) {
  if (input.empty()) return;
  // Byte 0: the endpoint (bit 0) and a small context length (the rest), so that the length
  // checks are reachable.
  const bool chat = (input[0] & 1) != 0;
  const gateway::RequestLimits limits{.max_model_len = 2u + (input[0] >> 1) * 64u};
  const std::string body(reinterpret_cast<const char*>(input.data()) + 1, input.size() - 1);
  // The JSON fast path reads a body exactly as nlohmann does, or leaves it to nlohmann.
  if (const auto fast = gateway::detail::parseJsonFast(body)) {
    const auto slow = nlohmann::json::parse(body, nullptr, false);
    MOCKER_FUZZ_REQUIRE(!slow.is_discarded());
    MOCKER_FUZZ_REQUIRE(*fast == slow && fast->dump() == slow.dump());
  }
  // With the prompt taken out as token ids: the same value less "prompt", whose ids they are.
  std::optional<std::vector<std::uint32_t>> ids;
  if (auto fast = gateway::detail::parseJsonFast(body, &ids)) {
    auto slow = nlohmann::json::parse(body, nullptr, false);
    MOCKER_FUZZ_REQUIRE(!slow.is_discarded());
    if (ids) {
      MOCKER_FUZZ_REQUIRE(!ids->empty() && !fast->contains("prompt"));
      const auto& prompt = slow["prompt"];
      MOCKER_FUZZ_REQUIRE(prompt.is_array() && prompt.size() == ids->size());
      for (std::size_t i = 0; i < ids->size(); ++i) {
        MOCKER_FUZZ_REQUIRE(prompt[i].is_number_unsigned() &&
                            prompt[i].get<std::uint64_t>() == (*ids)[i]);
      }
      slow.erase("prompt");
    }
    MOCKER_FUZZ_REQUIRE(*fast == slow);
  } else {
    MOCKER_FUZZ_REQUIRE(!ids);
  }
  const gateway::BuiltinTokenizer tokenizer;
  const auto parsed = chat ? gateway::parseChatRequest(body, tokenizer, limits)
                           : gateway::parseCompletionRequest(body, tokenizer, limits);
  if (const auto* e = std::get_if<gateway::ApiError>(&parsed)) {
    MOCKER_FUZZ_REQUIRE(e->status == 400);
    MOCKER_FUZZ_REQUIRE(!e->message.empty());
    // A field's error names it first ("prompt[3]: ..."); the context-length one is vLLM's text.
    if (e->param && e->message.rfind("This model's", 0) != 0) {
      MOCKER_FUZZ_REQUIRE(e->message.rfind(*e->param + ": ", 0) == 0);
    }
    // The error body is valid JSON whatever bytes the message quotes.
    const auto error = nlohmann::json::parse(gateway::errorBody(*e), nullptr, false);
    MOCKER_FUZZ_REQUIRE(!error.is_discarded());
    MOCKER_FUZZ_REQUIRE(error["error"]["code"] == 400);
    return;
  }
  const auto& r = std::get<gateway::GenerateRequest>(parsed);
  MOCKER_FUZZ_REQUIRE(!r.prompts.empty());
  MOCKER_FUZZ_REQUIRE(r.n >= 1 && r.n <= limits.max_n);
  MOCKER_FUZZ_REQUIRE(r.max_tokens >= 1 && r.min_tokens <= r.max_tokens);
  for (const auto& prompt : r.prompts) {
    MOCKER_FUZZ_REQUIRE(!prompt.empty());
    MOCKER_FUZZ_REQUIRE(prompt.size() + r.max_tokens <= limits.max_model_len);
  }
  if (!r.stream) MOCKER_FUZZ_REQUIRE(!r.include_usage && !r.continuous_usage_stats);
}

}  // namespace mocker::fuzz
