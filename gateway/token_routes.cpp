#include "gateway/token_routes.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

#include "gateway/api_error.h"

namespace mocker::gateway {
namespace {

using ojson = nlohmann::ordered_json;

HttpReply errorReply(const ApiError& error) {
  return HttpReply{.status = error.status, .body = errorBody(error)};
}

HttpReply jsonReply(const ojson& body) {
  return HttpReply{.body = body.dump(-1, ' ', false, ojson::error_handler_t::replace)};
}

}  // namespace

HttpReply tokenizeReply(const std::string& body, const Tokenizer& tokenizer, RequestLimits limits) {
  const std::uint32_t max_model_len = limits.max_model_len;
  limits.max_model_len = 0xFFFF'FFFFu;
  const auto probe = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  const bool chat = probe.is_object() && probe.contains("messages");
  const auto parsed = chat ? parseChatRequest(body, tokenizer, limits)
                           : parseCompletionRequest(body, tokenizer, limits);
  if (const auto* e = std::get_if<ApiError>(&parsed)) return errorReply(*e);
  const auto& request = std::get<GenerateRequest>(parsed);
  if (request.prompts.size() != 1) {
    return errorReply(
        {.status = 400, .message = "prompt: /tokenize takes one prompt", .param = "prompt"});
  }
  return jsonReply(ojson{{"count", request.prompts[0].size()},
                         {"max_model_len", max_model_len},
                         {"tokens", request.prompts[0]}});
}

HttpReply detokenizeReply(const std::string& body, const Tokenizer& tokenizer) {
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    return errorReply({.status = 400, .message = std::string("invalid JSON body: ") + e.what()});
  }
  const auto it = parsed.is_object() ? parsed.find("tokens") : parsed.end();
  if (it == parsed.end() || !it->is_array()) {
    return errorReply(
        {.status = 400, .message = "tokens: required list of token ids", .param = "tokens"});
  }
  std::vector<std::uint32_t> ids;
  for (std::size_t i = 0; i < it->size(); ++i) {
    const auto& t = (*it)[i];
    if (!t.is_number_unsigned() || t.get<std::uint64_t>() > 0xFFFF'FFFFull) {
      const std::string name = "tokens[" + std::to_string(i) + "]";
      return errorReply(
          {.status = 400,
           .message = name + ": expected a token id in [0, 4294967295], got " + t.dump(),
           .param = name});
    }
    ids.push_back(static_cast<std::uint32_t>(t.get<std::uint64_t>()));
  }
  return jsonReply(ojson{{"prompt", tokenizer.decode(ids)}});
}

}  // namespace mocker::gateway
