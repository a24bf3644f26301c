#include "tools/replay/openai_stream.h"

#include <algorithm>
#include <charconv>

#include <nlohmann/json.hpp>

#include "gateway/detail/json_fast_parse.h"

namespace mocker::replay {
namespace {

using json = nlohmann::json;

constexpr std::size_t kMaxQuotedBody = 200;

/// `object[key]` when present and not null.
const json* field(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

Result<std::optional<std::uint32_t>> countField(const json& object, const char* key,
                                                const char* where) {
  const json* v = field(object, key);
  if (!v) return std::optional<std::uint32_t>{};
  if (!v->is_number_unsigned() || v->get<std::uint64_t>() > 0xffffffffULL) {
    return invalidArgument(std::string(where) + "." + key + " is not a token count: " + v->dump());
  }
  return std::optional<std::uint32_t>(v->get<std::uint32_t>());
}

Result<std::optional<std::string>> stringField(const json& object, const char* key,
                                               const char* where) {
  const json* v = field(object, key);
  if (!v) return std::optional<std::string>{};
  if (!v->is_string()) {
    return invalidArgument(std::string(where) + "." + key + " is not a string: " + v->dump());
  }
  return std::optional<std::string>(v->get<std::string>());
}

}  // namespace

Result<OpenAiUrl> parseOpenAiUrl(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (url.starts_with("https://")) {
    return invalidArgument("--openai-url " + std::string(url) +
                           ": https is not supported (plain HTTP only; put a TLS terminator or "
                           "the server's plain port in front)");
  }
  if (!url.starts_with(kScheme)) {
    return invalidArgument("--openai-url " + std::string(url) + ": expected http://HOST:PORT[/v1]");
  }
  std::string_view rest = url.substr(kScheme.size());
  const std::size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  std::string path(slash == std::string_view::npos ? std::string_view() : rest.substr(slash));
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (!path.ends_with("/v1")) path += "/v1";
  OpenAiUrl out{.base_path = path};
  std::string_view port = "80";
  std::string_view host = authority;
  if (authority.starts_with('[')) {  // [IPv6]:port
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return invalidArgument("--openai-url " + std::string(url) + ": unterminated [IPv6] host");
    }
    host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') {
        return invalidArgument("--openai-url " + std::string(url) + ": expected ':' after ]");
      }
      port = authority.substr(close + 2);
    }
  } else if (const std::size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty()) return invalidArgument("--openai-url " + std::string(url) + ": no host");
  unsigned value = 0;
  const auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc{} || ptr != port.data() + port.size() || value == 0 ||
      value > 65535) {
    return invalidArgument("--openai-url " + std::string(url) + ": the port '" + std::string(port) +
                           "' is not a number in 1..65535");
  }
  out.host = std::string(host);
  out.port = std::string(port);
  return out;
}

std::string openAiRequestBody(const OpenAiRequestSpec& spec) {
  // Written straight into one string, keys in the order nlohmann's std::map would dump them
  // (a tree and its dump cost ~40 k instructions per request for a 64-id prompt); strings are
  // escaped by nlohmann.
  std::string out;
  out.reserve(160 + spec.model.size() + 11 * spec.prompt_ids.size() +
              (spec.text ? spec.text->size() + 32 : 0));
  const auto number = [&out](std::uint64_t v) {
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof digits, v).ptr;
    out.append(digits, end);
  };
  out += R"({"ignore_eos":true,"max_tokens":)";
  number(spec.max_tokens);
  if (spec.chat) {
    out += R"(,"messages":[{"content":)";
    out += json(spec.text.value_or("")).dump();
    out += R"(,"role":"user"}])";
  }
  out += R"(,"min_tokens":)";
  number(spec.max_tokens);
  out += R"(,"model":)";
  out += json(spec.model).dump();
  if (!spec.chat) {
    out += R"(,"prompt":)";
    if (spec.text) {
      out += json(*spec.text).dump();
    } else {
      out += '[';
      for (std::size_t i = 0; i < spec.prompt_ids.size(); ++i) {
        if (i > 0) out += ',';
        number(spec.prompt_ids[i]);
      }
      out += ']';
    }
  }
  out +=
      spec.stream
          ? R"(,"stream":true,"stream_options":{"continuous_usage_stats":true,"include_usage":true}})"
          : R"(,"stream":false})";
  return out;
}

std::string openAiErrorMessage(std::string_view body) {
  const json doc = json::parse(body, nullptr, false);
  if (doc.is_object()) {
    if (const json* e = field(doc, "error")) {
      if (e->is_object()) {
        if (const json* m = field(*e, "message"); m && m->is_string()) return m->get<std::string>();
      } else if (e->is_string()) {
        return e->get<std::string>();
      }
    }
    for (const char* key : {"message", "detail"}) {
      if (const json* m = field(doc, key); m && m->is_string()) return m->get<std::string>();
    }
  }
  std::string quoted(body.substr(0, kMaxQuotedBody));
  if (body.size() > kMaxQuotedBody) quoted += "...";
  return quoted.empty() ? std::string("(empty body)") : quoted;
}

Result<std::string> firstModelId(std::string_view body) {
  const json doc = json::parse(body, nullptr, false);
  if (doc.is_object()) {
    if (const json* data = field(doc, "data"); data && data->is_array() && !data->empty()) {
      if (const json* id = (*data)[0].is_object() ? field((*data)[0], "id") : nullptr;
          id && id->is_string()) {
        return id->get<std::string>();
      }
    }
  }
  return invalidArgument("GET /v1/models named no model (give --model NAME): " +
                         openAiErrorMessage(body));
}

Status SseReader::feed(std::string_view bytes, std::vector<std::string>& events) {
  buffer_.append(bytes);
  std::size_t start = 0;
  while (start < buffer_.size()) {
    if (skip_lf_ && buffer_[start] == '\n') {
      skip_lf_ = false;
      ++start;
      continue;
    }
    skip_lf_ = false;
    // Bytes an earlier feed searched hold no line end: a long line is searched once, not per feed.
    const std::size_t end = buffer_.find_first_of("\r\n", std::max(start, scanned_));
    if (end == std::string::npos) break;
    const std::string_view line(buffer_.data() + start, end - start);
    skip_lf_ = buffer_[end] == '\r';
    start = end + 1;
    if (line.empty()) {  // a blank line dispatches the event
      if (has_data_) events.push_back(std::move(data_));
      data_.clear();
      has_data_ = false;
      continue;
    }
    if (line.front() == ':') continue;  // a comment
    const std::size_t colon = line.find(':');
    const std::string_view name = line.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
    if (value.starts_with(' ')) value.remove_prefix(1);
    if (name != "data") continue;
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  }
  buffer_.erase(0, start);
  scanned_ = buffer_.size();  // what is left has no line end (or is empty)
  if (pending() > kMaxSseEventBytes) {
    return invalidArgument("an SSE event over " + std::to_string(kMaxSseEventBytes >> 20) +
                           " MiB without its end (a line end, then a blank line)");
  }
  return {};
}

Status OpenAiStream::onEvent(std::string_view data, double now_ms) {
  if (done_) return invalidArgument("an event after data: [DONE]");
  if (data == "[DONE]") {
    done_ = true;
    return {};
  }
  // The common shape (a gateway's chunks and answers) without nlohmann's lexer: the same value.
  auto fast = gateway::detail::parseJsonFast(data);
  const json doc = fast ? std::move(*fast) : json::parse(data, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    std::string quoted(data.substr(0, kMaxQuotedBody));
    return invalidArgument("an SSE event that is not a JSON object: " + quoted);
  }
  if (field(doc, "error")) {
    error_ = openAiErrorMessage(data);
    return {};
  }
  if (const json* usage = field(doc, "usage")) {
    if (!usage->is_object()) return invalidArgument("usage is not an object: " + usage->dump());
    MOCKER_TRY(const auto prompt, countField(*usage, "prompt_tokens", "usage"));
    MOCKER_TRY(const auto completion, countField(*usage, "completion_tokens", "usage"));
    if (completion && *completion > max_tokens_) {
      return invalidArgument("usage.completion_tokens " + std::to_string(*completion) +
                             " is over the request's max_tokens " + std::to_string(max_tokens_));
    }
    if (prompt) prompt_tokens_ = prompt;
    if (completion) completion_tokens_ = completion;
    if (const json* details = field(*usage, "prompt_tokens_details")) {
      if (!details->is_object()) {
        return invalidArgument("usage.prompt_tokens_details is not an object");
      }
      MOCKER_TRY(const auto cached,
                 countField(*details, "cached_tokens", "usage.prompt_tokens_details"));
      if (cached) cached_tokens_ = cached;
    }
  }
  const json* choices = field(doc, "choices");
  if (!choices) return {};
  if (!choices->is_array()) return invalidArgument("choices is not an array");
  bool has_text = false;
  for (const json& choice : *choices) {
    if (!choice.is_object()) return invalidArgument("a choice is not an object");
    MOCKER_TRY(auto text, stringField(choice, "text", "choices[]"));
    for (const char* key : {"delta", "message"}) {
      const json* part = field(choice, key);
      if (!part) continue;
      if (!part->is_object())
        return invalidArgument("choices[]." + std::string(key) + " is not an object");
      MOCKER_TRY(auto content, stringField(*part, "content",
                                           key == std::string_view("delta") ? "choices[].delta"
                                                                            : "choices[].message"));
      if (content) text = std::move(content);
    }
    MOCKER_TRY(auto reason, stringField(choice, "finish_reason", "choices[]"));
    if (reason) finish_reason_ = std::move(reason);
    if (text && !text->empty()) {
      has_text = true;
      text_ += *text;
    }
  }
  if (choices->empty()) return {};  // the final usage chunk: finish() reconciles
  const json* usage = field(doc, "usage");
  countTokens(usage ? completion_tokens_ : std::nullopt, has_text, now_ms);
  return {};
}

Status OpenAiStream::onResponse(std::string_view body, double now_ms) {
  MOCKER_TRY_VOID(onEvent(body, now_ms));
  return onEvent("[DONE]", now_ms);
}

void OpenAiStream::countTokens(std::optional<std::uint32_t> cumulative, bool has_text,
                               double now_ms) {
  if (has_text) last_text_ms_ = now_ms;
  if (cumulative) {
    while (token_times_.size() < *cumulative) token_times_.push_back(now_ms);
  } else if (has_text && token_times_.size() < max_tokens_) {
    token_times_.push_back(now_ms);
  }
}

void OpenAiStream::finish() {
  if (!completion_tokens_) return;
  const std::size_t n = *completion_tokens_;
  if (token_times_.size() > n) token_times_.resize(n);
  if (token_times_.size() < n && last_text_ms_) token_times_.resize(n, *last_text_ms_);
}

}  // namespace mocker::replay
