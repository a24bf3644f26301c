#include "gateway/response_shaper.h"

#include "gateway/api_error.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "base/check.h"
#include "gateway/tokenizer.h"

namespace mocker::gateway {
namespace {

using ojson = nlohmann::ordered_json;

std::string sse(const ojson& payload) {
  // Invalid UTF-8 cannot reach here (parsed text and generated text are valid), but never
  // throw from a dump: replace instead.
  return "data: " + payload.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n";
}

}  // namespace

ResponseShaper::ResponseShaper(const GenerateRequest& request,
                               std::vector<std::uint32_t> planned_lengths,
                               ResponseIdentity identity, const Tokenizer& tokenizer)
    : request_(request), identity_(std::move(identity)), tokenizer_(tokenizer) {
  MOCKER_CHECK(planned_lengths.size() == request_.prompts.size() * request_.n);
  for (const std::uint32_t planned : planned_lengths) choices_.push_back({.planned = planned});
  for (const auto& s : request_.stop) max_stop_len_ = std::max(max_stop_len_, s.size());
}

const std::vector<std::uint32_t>& ResponseShaper::prompt(std::size_t c) const {
  return request_.prompts[c / request_.n];
}

std::string ResponseShaper::start() {
  if (!request_.stream || request_.kind != ApiKind::Chat) return {};
  std::string out;
  for (std::size_t c = 0; c < choices_.size(); ++c) {
    ojson delta = {{"role", "assistant"}, {"content", ""}};
    ojson choice = {
        {"index", c}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    ojson payload = {{"id", "chatcmpl-" + identity_.request_id},
                     {"object", "chat.completion.chunk"},
                     {"created", identity_.created},
                     {"model", identity_.model},
                     {"choices", ojson::array({choice})}};
    if (request_.continuous_usage_stats) payload["usage"] = ojson::parse(usageJson(false));
    out += sse(payload);
  }
  return out;
}

bool ResponseShaper::matchStop(Choice& choice, std::size_t searched_from) {
  std::size_t best = std::string::npos;
  for (const auto& s : request_.stop) {
    const std::size_t from = searched_from >= s.size() ? searched_from - s.size() + 1 : 0;
    const std::size_t at = choice.text.find(s, from);
    if (at != std::string::npos && at < best) {
      best = at;
      choice.stop = s;
    }
  }
  if (best == std::string::npos) return false;
  choice.text.resize(best);
  return true;
}

ResponseShaper::Step ResponseShaper::onOutput(std::size_t c, std::span<const std::uint32_t> tokens,
                                              std::optional<std::uint32_t> cached) {
  Step step;
  Choice& choice = choices_.at(c);
  if (choice.ended) return step;
  if (cached) choice.cached = *cached;
  const std::size_t before = choice.text.size();
  choice.tokens += static_cast<std::uint32_t>(tokens.size());
  choice.text += tokenizer_.outputText(tokens);
  if (!request_.stop.empty() && matchStop(choice, before)) {
    step.stop_matched = true;
    step.body = onFinish(c, ChoiceEnd::Planned);
    return step;
  }
  if (!request_.stream) return step;
  // Hold back a tail that could still be the start of a stop string.
  const std::size_t hold = max_stop_len_ > 0 ? max_stop_len_ - 1 : 0;
  const std::size_t ready = choice.text.size() > hold ? choice.text.size() - hold : 0;
  if (ready > choice.emitted) {
    step.body = chunk(c, choice.text.substr(choice.emitted, ready - choice.emitted), false);
    choice.emitted = ready;
  }
  return step;
}

std::string ResponseShaper::onFinish(std::size_t c, ChoiceEnd end, const std::string& message,
                                     int status) {
  Choice& choice = choices_.at(c);
  if (choice.ended) return {};
  choice.ended = true;
  ++num_done_;
  if (choice.stop) {
    choice.finish_reason = "stop";
  } else if (end == ChoiceEnd::Failed) {
    choice.finish_reason = "error";
    if (!failure_) failure_ = message;
  } else {
    choice.finish_reason = choice.tokens < request_.max_tokens ? "stop" : "length";
  }
  if (!request_.stream) return {};
  if (end == ChoiceEnd::Failed && !choice.stop) {
    ojson error = {
        {"message", message}, {"type", errorType(status)}, {"param", nullptr}, {"code", status}};
    return sse(ojson{{"error", error}});
  }
  const std::string rest = choice.text.substr(std::min(choice.emitted, choice.text.size()));
  choice.emitted = choice.text.size();
  return chunk(c, rest, true);
}

std::string ResponseShaper::chunk(std::size_t c, const std::string& delta, bool final) const {
  const Choice& choice = choices_[c];
  const bool chat = request_.kind == ApiKind::Chat;
  ojson entry = {{"index", c}};
  if (chat) {
    entry["delta"] = final && delta.empty() ? ojson::object() : ojson{{"content", delta}};
  } else {
    entry["text"] = delta;
  }
  entry["logprobs"] = nullptr;
  entry["finish_reason"] = final ? ojson(choice.finish_reason) : ojson(nullptr);
  if (final || !chat) entry["stop_reason"] = choice.stop ? ojson(*choice.stop) : ojson(nullptr);
  ojson payload = {{"id", (chat ? "chatcmpl-" : "cmpl-") + identity_.request_id},
                   {"object", chat ? "chat.completion.chunk" : "text_completion"},
                   {"created", identity_.created},
                   {"model", identity_.model},
                   {"choices", ojson::array({entry})}};
  if (request_.continuous_usage_stats) {
    payload["usage"] = ojson::parse(usageJson(false));
  } else if (!chat) {
    payload["usage"] = nullptr;
  }
  return sse(payload);
}

std::uint32_t ResponseShaper::promptTokens() const {
  std::uint32_t total = 0;
  for (const auto& p : request_.prompts) total += static_cast<std::uint32_t>(p.size());
  return total;
}

std::uint32_t ResponseShaper::completionTokens() const {
  std::uint32_t total = 0;
  for (const auto& c : choices_) total += c.tokens;
  return total;
}

std::uint32_t ResponseShaper::cachedTokens() const {
  std::uint32_t total = 0;
  for (std::size_t c = 0; c < choices_.size(); c += request_.n) total += choices_[c].cached;
  return total;
}

std::string ResponseShaper::usageJson(bool with_details) const {
  ojson usage = {{"prompt_tokens", promptTokens()},
                 {"total_tokens", promptTokens() + completionTokens()},
                 {"completion_tokens", completionTokens()}};
  if (with_details) usage["prompt_tokens_details"] = {{"cached_tokens", cachedTokens()}};
  return usage.dump();
}

std::string ResponseShaper::completionBody() const {
  ojson choices = ojson::array();
  for (std::size_t c = 0; c < choices_.size(); ++c) {
    const Choice& ch = choices_[c];
    choices.push_back({{"index", c},
                       {"text", ch.text},
                       {"logprobs", nullptr},
                       {"finish_reason", ch.finish_reason},
                       {"stop_reason", ch.stop ? ojson(*ch.stop) : ojson(nullptr)},
                       {"prompt_logprobs", nullptr}});
  }
  ojson body = {{"id", "cmpl-" + identity_.request_id},
                {"object", "text_completion"},
                {"created", identity_.created},
                {"model", identity_.model},
                {"choices", choices},
                {"usage", ojson::parse(usageJson(true))}};
  return body.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string ResponseShaper::chatBody() const {
  ojson choices = ojson::array();
  for (std::size_t c = 0; c < choices_.size(); ++c) {
    const Choice& ch = choices_[c];
    ojson message = {{"role", "assistant"}, {"content", ch.text}, {"tool_calls", ojson::array()}};
    choices.push_back({{"index", c},
                       {"message", message},
                       {"logprobs", nullptr},
                       {"finish_reason", ch.finish_reason},
                       {"stop_reason", ch.stop ? ojson(*ch.stop) : ojson(nullptr)}});
  }
  ojson body = {{"id", "chatcmpl-" + identity_.request_id},
                {"object", "chat.completion"},
                {"created", identity_.created},
                {"model", identity_.model},
                {"choices", choices},
                {"usage", ojson::parse(usageJson(true))},
                {"prompt_logprobs", nullptr}};
  return body.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string ResponseShaper::finish() {
  if (!request_.stream) {
    return request_.kind == ApiKind::Chat ? chatBody() : completionBody();
  }
  std::string out;
  if (request_.include_usage) {
    const bool chat = request_.kind == ApiKind::Chat;
    ojson payload = {{"id", (chat ? "chatcmpl-" : "cmpl-") + identity_.request_id},
                     {"object", chat ? "chat.completion.chunk" : "text_completion"},
                     {"created", identity_.created},
                     {"model", identity_.model},
                     {"choices", ojson::array()},
                     {"usage", ojson::parse(usageJson(true))}};
    out += sse(payload);
  }
  out += "data: [DONE]\n\n";
  return out;
}

}  // namespace mocker::gateway
