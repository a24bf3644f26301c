#include "gateway/openai_request.h"

#include <nlohmann/json.hpp>

#include <limits>

#include "gateway/detail/json_fast_parse.h"
#include "gateway/tokenizer.h"

namespace mocker::gateway {
namespace {

using nlohmann::json;

ApiError badRequest(const std::string& param, const std::string& message) {
  return ApiError{.status = 400, .message = param + ": " + message, .param = param};
}

ApiError wrongType(const std::string& param, const char* expected, const json& got) {
  return badRequest(param, std::string("expected ") + expected + ", got " + got.type_name());
}

/// A field that is absent or null reads as "not given".
const json* field(const json& body, const char* key) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

/// Unsigned integer field in [minimum, maximum]; nullopt when absent.
std::variant<std::optional<std::uint64_t>, ApiError> uintField(const json& body, const char* key,
                                                               std::uint64_t minimum,
                                                               std::uint64_t maximum) {
  const json* v = field(body, key);
  if (v == nullptr) return std::optional<std::uint64_t>{};
  if (!v->is_number_integer()) return wrongType(key, "an integer", *v);
  if (v->is_number_unsigned() || v->get<std::int64_t>() >= 0) {
    const auto value = v->get<std::uint64_t>();
    if (value >= minimum && value <= maximum) return std::optional<std::uint64_t>(value);
  }
  return badRequest(key, "must be an integer in [" + std::to_string(minimum) + ", " +
                             std::to_string(maximum) + "], got " + v->dump());
}

std::optional<ApiError> boolField(const json& body, const char* key, bool& out) {
  const json* v = field(body, key);
  if (v == nullptr) return {};
  if (!v->is_boolean()) return wrongType(key, "a boolean", *v);
  out = v->get<bool>();
  return {};
}

/// Sampling fields the mock does not model: type-checked, then ignored.
std::optional<ApiError> checkIgnoredFields(const json& body) {
  for (const char* key : {"temperature", "top_p", "presence_penalty", "frequency_penalty",
                          "repetition_penalty", "min_p", "length_penalty"}) {
    const json* v = field(body, key);
    if (v != nullptr && !v->is_number()) return wrongType(key, "a number", *v);
  }
  for (const char* key : {"top_k", "best_of", "top_logprobs"}) {
    const json* v = field(body, key);
    if (v != nullptr && !v->is_number_integer()) return wrongType(key, "an integer", *v);
  }
  for (const char* key : {"user", "suffix"}) {
    const json* v = field(body, key);
    if (v != nullptr && !v->is_string()) return wrongType(key, "a string", *v);
  }
  for (const char* key : {"skip_special_tokens", "spaces_between_special_tokens"}) {
    const json* v = field(body, key);
    if (v != nullptr && !v->is_boolean()) return wrongType(key, "a boolean", *v);
  }
  if (const json* v = field(body, "logit_bias"); v != nullptr && !v->is_object()) {
    return wrongType("logit_bias", "an object", *v);
  }
  // Fields that would change the output: refused rather than silently ignored.
  bool echo = false;
  if (auto e = boolField(body, "echo", echo)) return e;
  if (echo) return badRequest("echo", "echo is not supported by the mock");
  if (const json* v = field(body, "logprobs");
      v != nullptr && !(v->is_boolean() && !v->get<bool>())) {
    return badRequest("logprobs", "log probabilities are not supported by the mock");
  }
  return {};
}

std::optional<ApiError> parseStop(const json& body, const RequestLimits& limits,
                                  std::vector<std::string>& out) {
  const json* v = field(body, "stop");
  if (v == nullptr) return {};
  if (v->is_string()) {
    if (!v->get_ref<const std::string&>().empty()) out.push_back(v->get<std::string>());
    return {};
  }
  if (!v->is_array()) return wrongType("stop", "a string or a list of strings", *v);
  if (v->size() > limits.max_stop) {
    return badRequest("stop", "at most " + std::to_string(limits.max_stop) + " stop strings");
  }
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& s = (*v)[i];
    if (!s.is_string()) return wrongType("stop[" + std::to_string(i) + "]", "a string", s);
    if (!s.get_ref<const std::string&>().empty()) out.push_back(s.get<std::string>());
  }
  return {};
}

/// Token ids of a JSON array of integers, or the error naming the bad element.
std::variant<std::vector<std::uint32_t>, ApiError> tokenIds(const json& list,
                                                            const std::string& where) {
  std::vector<std::uint32_t> ids;
  ids.reserve(list.size());
  for (std::size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    // The element's name is spelt only for an error (this loop runs once per prompt token).
    auto name = [&] { return where + "[" + std::to_string(i) + "]"; };
    if (!t.is_number_integer()) return wrongType(name(), "a token id (integer)", t);
    const auto* id = t.get_ptr<const json::number_unsigned_t*>();
    if (id == nullptr || *id > std::numeric_limits<std::uint32_t>::max()) {
      return badRequest(name(), "token id must be in [0, 4294967295], got " + t.dump());
    }
    ids.push_back(static_cast<std::uint32_t>(*id));
  }
  return ids;
}

/// `prompt`, or `prompt_ids` when the fast JSON path read it as a list of token ids already.
std::optional<ApiError> parsePrompt(const json& body,
                                    std::optional<std::vector<std::uint32_t>>&& prompt_ids,
                                    const Tokenizer& tokenizer, const RequestLimits& limits,
                                    GenerateRequest& out) {
  const json* p = prompt_ids ? nullptr : field(body, "prompt");
  constexpr const char* kShapes =
      "a string, a list of strings, a list of token ids or a list of lists of token ids";
  if (prompt_ids) {
    out.prompts.push_back(std::move(*prompt_ids));
  } else if (p == nullptr) {
    return badRequest("prompt", "required");
  } else if (p->is_string()) {
    out.prompts.push_back(tokenizer.encode(p->get_ref<const std::string&>()));
  } else if (!p->is_array()) {
    return wrongType("prompt", kShapes, *p);
  } else if (p->empty()) {
    return badRequest("prompt", "must not be an empty list");
  } else if (p->front().is_number()) {
    auto ids = tokenIds(*p, "prompt");
    if (auto* e = std::get_if<ApiError>(&ids)) return *e;
    out.prompts.push_back(std::move(std::get<0>(ids)));
  } else {
    if (p->size() > limits.max_prompts) {
      return badRequest("prompt", "at most " + std::to_string(limits.max_prompts) + " prompts");
    }
    for (std::size_t i = 0; i < p->size(); ++i) {
      const json& item = (*p)[i];
      const std::string name = "prompt[" + std::to_string(i) + "]";
      if (item.is_string()) {
        out.prompts.push_back(tokenizer.encode(item.get_ref<const std::string&>()));
      } else if (item.is_array()) {
        auto ids = tokenIds(item, name);
        if (auto* e = std::get_if<ApiError>(&ids)) return *e;
        out.prompts.push_back(std::move(std::get<0>(ids)));
      } else {
        return wrongType(name, "a string or a list of token ids", item);
      }
    }
  }
  for (std::size_t i = 0; i < out.prompts.size(); ++i) {
    if (out.prompts[i].empty()) {
      return badRequest(out.prompts.size() == 1 ? "prompt" : "prompt[" + std::to_string(i) + "]",
                        "the prompt is empty (no tokens)");
    }
  }
  return {};
}

std::optional<ApiError> parseContent(const json& content, const std::string& where,
                                     std::string& out) {
  if (content.is_null()) return {};
  if (content.is_string()) {
    out = content.get<std::string>();
    return {};
  }
  if (!content.is_array()) return wrongType(where, "a string or a list of content parts", content);
  for (std::size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string name = where + "[" + std::to_string(i) + "]";
    if (!part.is_object()) return wrongType(name, "an object", part);
    const json* type = field(part, "type");
    if (type == nullptr || !type->is_string()) {
      return badRequest(name + ".type", "required string");
    }
    if (type->get_ref<const std::string&>() != "text") {
      return badRequest(name + ".type", "only \"text\" parts are supported, got " + type->dump());
    }
    const json* text = field(part, "text");
    if (text == nullptr || !text->is_string()) {
      return badRequest(name + ".text", text == nullptr ? "required string"
                                                        : "expected a string, got " +
                                                              std::string(text->type_name()));
    }
    out += text->get_ref<const std::string&>();
  }
  return {};
}

std::optional<ApiError> parseMessages(const json& body, const Tokenizer& tokenizer,
                                      GenerateRequest& out) {
  const json* m = field(body, "messages");
  if (m == nullptr) return badRequest("messages", "required");
  if (!m->is_array()) return wrongType("messages", "a list of messages", *m);
  if (m->empty()) return badRequest("messages", "must not be empty");
  std::vector<ChatMessage> messages;
  for (std::size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string name = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) return wrongType(name, "an object", msg);
    const json* role = field(msg, "role");
    if (role == nullptr) return badRequest(name + ".role", "required");
    if (!role->is_string()) return wrongType(name + ".role", "a string", *role);
    ChatMessage parsed{.role = role->get<std::string>()};
    const auto content = msg.find("content");
    if (content != msg.end()) {
      if (auto e = parseContent(*content, name + ".content", parsed.content)) return e;
    }
    messages.push_back(std::move(parsed));
  }
  out.prompts.push_back(tokenizer.encode(chatPrompt(messages)));
  return {};
}

/// The fields both endpoints share, after the prompt is known.
std::optional<ApiError> parseCommon(const json& body, const RequestLimits& limits,
                                    GenerateRequest& out) {
  if (const json* model = field(body, "model")) {
    if (!model->is_string()) return wrongType("model", "a string", *model);
    out.model = model->get<std::string>();
  }
  if (auto e = boolField(body, "stream", out.stream)) return e;
  if (const json* opts = field(body, "stream_options")) {
    if (!opts->is_object()) return wrongType("stream_options", "an object", *opts);
    if (!out.stream) {
      return badRequest("stream_options", "only allowed when stream is true");
    }
    if (const json* v = field(*opts, "include_usage")) {
      if (!v->is_boolean()) return wrongType("stream_options.include_usage", "a boolean", *v);
      out.include_usage = v->get<bool>();
    }
    if (const json* v = field(*opts, "continuous_usage_stats")) {
      if (!v->is_boolean()) {
        return wrongType("stream_options.continuous_usage_stats", "a boolean", *v);
      }
      out.continuous_usage_stats = v->get<bool>();
    }
  }
  if (auto e = boolField(body, "ignore_eos", out.ignore_eos)) return e;
  if (auto e = parseStop(body, limits, out.stop)) return e;
  if (auto e = checkIgnoredFields(body)) return e;
  auto n = uintField(body, "n", 1, limits.max_n);
  if (auto* e = std::get_if<ApiError>(&n)) return *e;
  out.n = static_cast<std::uint32_t>(std::get<0>(n).value_or(1));
  if (const json* seed = field(body, "seed")) {
    if (!seed->is_number_integer()) return wrongType("seed", "an integer", *seed);
    out.seed = seed->is_number_unsigned() ? seed->get<std::uint64_t>()
                                          : static_cast<std::uint64_t>(seed->get<std::int64_t>());
  }
  return {};
}

/// max_tokens (and max_completion_tokens for chat), min_tokens, and the context-length check.
std::optional<ApiError> parseLengths(const json& body, const RequestLimits& limits,
                                     GenerateRequest& out) {
  const std::uint64_t cap = limits.max_model_len;
  auto max_tokens = uintField(body, "max_tokens", 1, cap);
  if (auto* e = std::get_if<ApiError>(&max_tokens)) return *e;
  std::optional<std::uint64_t> requested = std::get<0>(max_tokens);
  if (out.kind == ApiKind::Chat) {
    auto mct = uintField(body, "max_completion_tokens", 1, cap);
    if (auto* e = std::get_if<ApiError>(&mct)) return *e;
    if (std::get<0>(mct)) requested = std::get<0>(mct);
  }
  std::size_t longest = 0;
  for (const auto& p : out.prompts) longest = std::max(longest, p.size());
  const char* in_what = out.kind == ApiKind::Chat ? "messages" : "prompt";
  if (!requested) {
    if (out.kind == ApiKind::Completion) {
      requested = limits.default_completion_max_tokens;
    } else if (longest < cap) {
      requested = cap - longest;
    }
  }
  if (!requested || longest + *requested > cap) {
    const std::uint64_t asked = requested.value_or(0);
    return ApiError{
        .status = 400,
        .message = "This model's maximum context length is " + std::to_string(cap) +
                   " tokens. However, you requested " + std::to_string(longest + asked) +
                   " tokens (" + std::to_string(longest) + " in the " + in_what + ", " +
                   std::to_string(asked) + " in the completion). Please reduce the length of the " +
                   in_what + " or completion.",
        .param = std::string(in_what)};
  }
  out.max_tokens = static_cast<std::uint32_t>(*requested);
  auto min_tokens = uintField(body, "min_tokens", 0, cap);
  if (auto* e = std::get_if<ApiError>(&min_tokens)) return *e;
  out.min_tokens = static_cast<std::uint32_t>(std::get<0>(min_tokens).value_or(0));
  if (out.min_tokens > out.max_tokens) {
    return badRequest("min_tokens", "must be at most max_tokens (" +
                                        std::to_string(out.max_tokens) + "), got " +
                                        std::to_string(out.min_tokens));
  }
  return {};
}

std::variant<GenerateRequest, ApiError> parse(ApiKind kind, std::string_view text,
                                              const Tokenizer& tokenizer,
                                              const RequestLimits& limits) {
  json body;
  // A completion's token-id prompt comes back as one vector, not as JSON values.
  std::optional<std::vector<std::uint32_t>> prompt_ids;
  if (auto fast =
          detail::parseJsonFast(text, kind == ApiKind::Completion ? &prompt_ids : nullptr)) {
    body = std::move(*fast);
  } else {
    try {
      body = json::parse(text);
    } catch (const json::exception& e) {
      return ApiError{.status = 400, .message = std::string("invalid JSON body: ") + e.what()};
    }
  }
  if (!body.is_object()) {
    return ApiError{
        .status = 400,
        .message = std::string("request body: expected a JSON object, got ") + body.type_name()};
  }
  GenerateRequest out{.kind = kind};
  auto e = kind == ApiKind::Chat ? parseMessages(body, tokenizer, out)
                                 : parsePrompt(body, std::move(prompt_ids), tokenizer, limits, out);
  if (!e) e = parseCommon(body, limits, out);
  if (!e) e = parseLengths(body, limits, out);
  if (e) return *e;
  return out;
}

}  // namespace

std::string chatPrompt(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const auto& m : messages) out += "<|" + m.role + "|>\n" + m.content + "\n";
  out += "<|assistant|>\n";
  return out;
}

std::variant<GenerateRequest, ApiError> parseCompletionRequest(std::string_view body,
                                                               const Tokenizer& tokenizer,
                                                               const RequestLimits& limits) {
  return parse(ApiKind::Completion, body, tokenizer, limits);
}

std::variant<GenerateRequest, ApiError> parseChatRequest(std::string_view body,
                                                         const Tokenizer& tokenizer,
                                                         const RequestLimits& limits) {
  return parse(ApiKind::Chat, body, tokenizer, limits);
}

}  // namespace mocker::gateway
