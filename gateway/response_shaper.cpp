#include "gateway/response_shaper.h"

#include <algorithm>

#include "base/check.h"
#include "gateway/api_error.h"
#include "gateway/detail/json_out.h"
#include "gateway/tokenizer.h"

namespace mocker::gateway {
namespace {

using detail::appendJsonInt;
using detail::appendJsonKey;
using detail::appendJsonString;

/// Opens an SSE frame ("data: " + JSON + "\n\n"; closeFrame ends it).
void openFrame(std::string& out) { out += "data: "; }
void closeFrame(std::string& out) { out += "\n\n"; }

void appendStringOrNull(std::string& out, const std::optional<std::string>& s) {
  if (s) {
    appendJsonString(out, *s);
  } else {
    out += "null";
  }
}

}  // namespace

ResponseShaper::ResponseShaper(const GenerateRequest& request,
                               std::vector<std::uint32_t> planned_lengths,
                               ResponseIdentity identity, const Tokenizer& tokenizer)
    : request_(request), identity_(std::move(identity)), tokenizer_(tokenizer) {
  MOCKER_CHECK(planned_lengths.size() == request_.prompts.size() * request_.n);
  for (const std::uint32_t planned : planned_lengths) choices_.push_back({.planned = planned});
  for (const auto& s : request_.stop) max_stop_len_ = std::max(max_stop_len_, s.size());
  // Every object this response writes opens with the same id, object, created and model.
  const bool chat = request_.kind == ApiKind::Chat;
  head_ = "{\"id\":";
  appendJsonString(head_, (chat ? "chatcmpl-" : "cmpl-") + identity_.request_id);
  head_ += ",\"object\":";
  head_ += !chat             ? "\"text_completion\""
           : request_.stream ? "\"chat.completion.chunk\""
                             : "\"chat.completion\"";
  head_ += ",\"created\":";
  appendJsonInt(head_, identity_.created);
  head_ += ",\"model\":";
  appendJsonString(head_, identity_.model);
  head_ += ",\"choices\":";
}

const std::vector<std::uint32_t>& ResponseShaper::prompt(std::size_t c) const {
  return request_.prompts[c / request_.n];
}

std::string ResponseShaper::start() {
  if (!request_.stream || request_.kind != ApiKind::Chat) return {};
  std::string out;
  for (std::size_t c = 0; c < choices_.size(); ++c) {
    openFrame(out);
    out += head_;
    out += "[{\"index\":";
    appendJsonInt(out, static_cast<std::int64_t>(c));
    out +=
        ",\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
        "\"finish_reason\":null}]";
    if (request_.continuous_usage_stats) {
      out += ",\"usage\":";
      appendUsage(out, false);
    }
    out += '}';
    closeFrame(out);
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
    step.body = chunk(
        c, std::string_view(choice.text).substr(choice.emitted, ready - choice.emitted), false);
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
    std::string out;
    openFrame(out);
    out += "{\"error\":{\"message\":";
    appendJsonString(out, message);
    out += ",\"type\":";
    appendJsonString(out, errorType(status));
    out += ",\"param\":null,\"code\":";
    appendJsonInt(out, status);
    out += "}}";
    closeFrame(out);
    return out;
  }
  const std::string_view rest =
      std::string_view(choice.text).substr(std::min(choice.emitted, choice.text.size()));
  choice.emitted = choice.text.size();
  return chunk(c, rest, true);
}

std::string ResponseShaper::chunk(std::size_t c, std::string_view delta, bool final) const {
  const Choice& choice = choices_[c];
  const bool chat = request_.kind == ApiKind::Chat;
  std::string out;
  out.reserve(head_.size() + delta.size() + 160);
  openFrame(out);
  out += head_;
  out += "[{\"index\":";
  appendJsonInt(out, static_cast<std::int64_t>(c));
  if (!chat) {
    out += ",\"text\":";
    appendJsonString(out, delta);
  } else if (final && delta.empty()) {
    out += ",\"delta\":{}";
  } else {
    out += ",\"delta\":{\"content\":";
    appendJsonString(out, delta);
    out += '}';
  }
  out += ",\"logprobs\":null,\"finish_reason\":";
  if (final) {
    appendJsonString(out, choice.finish_reason);
  } else {
    out += "null";
  }
  if (final || !chat) {
    out += ",\"stop_reason\":";
    appendStringOrNull(out, choice.stop);
  }
  out += "}]";
  if (request_.continuous_usage_stats) {
    out += ",\"usage\":";
    appendUsage(out, false);
  } else if (!chat) {
    out += ",\"usage\":null";
  }
  out += '}';
  closeFrame(out);
  return out;
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

void ResponseShaper::appendUsage(std::string& out, bool with_details) const {
  const std::uint32_t prompt = promptTokens();
  const std::uint32_t completion = completionTokens();
  out += "{\"prompt_tokens\":";
  appendJsonInt(out, prompt);
  out += ",\"total_tokens\":";
  appendJsonInt(out, std::int64_t{prompt} + completion);
  out += ",\"completion_tokens\":";
  appendJsonInt(out, completion);
  if (with_details) {
    out += ",\"prompt_tokens_details\":{\"cached_tokens\":";
    appendJsonInt(out, cachedTokens());
    out += '}';
  }
  out += '}';
}

std::string ResponseShaper::body() const {
  const bool chat = request_.kind == ApiKind::Chat;
  std::size_t text_bytes = 0;
  for (const Choice& ch : choices_) text_bytes += ch.text.size();
  std::string out;
  out.reserve(head_.size() + text_bytes + choices_.size() * 160 + 160);
  out += head_;
  out += '[';
  for (std::size_t c = 0; c < choices_.size(); ++c) {
    const Choice& ch = choices_[c];
    out += c == 0 ? "{" : ",{";
    appendJsonKey(out, "index");
    appendJsonInt(out, static_cast<std::int64_t>(c));
    if (chat) {
      out += ",\"message\":{\"role\":\"assistant\",\"content\":";
      appendJsonString(out, ch.text);
      out += ",\"tool_calls\":[]}";
    } else {
      out += ",\"text\":";
      appendJsonString(out, ch.text);
    }
    out += ",\"logprobs\":null,\"finish_reason\":";
    appendJsonString(out, ch.finish_reason);
    out += ",\"stop_reason\":";
    appendStringOrNull(out, ch.stop);
    out += chat ? "}" : ",\"prompt_logprobs\":null}";
  }
  out += "],\"usage\":";
  appendUsage(out, true);
  out += chat ? ",\"prompt_logprobs\":null}" : "}";
  return out;
}

std::string ResponseShaper::finish() {
  if (!request_.stream) return body();
  std::string out;
  if (request_.include_usage) {
    openFrame(out);
    out += head_;
    out += "[],\"usage\":";
    appendUsage(out, true);
    out += '}';
    closeFrame(out);
  }
  out += "data: [DONE]\n\n";
  return out;
}

}  // namespace mocker::gateway
