#include "tools/replay/openai_replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <sstream>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "base/check.h"
#include "tools/replay/http_client.h"
#include "tools/replay/openai_stream.h"
#include "tools/replay/turn_scheduler.h"

namespace mocker::replay {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using Headers = std::vector<std::pair<std::string, std::string>>;

constexpr double kProgressEveryMs = 100.0;
/// An error body is kept up to this size (its message is all the report needs).
constexpr std::size_t kMaxErrorBody = 64 << 10;
/// A non-streaming response body over kMaxResponseBase + kMaxResponsePerToken x max_tokens is
/// malformed (the builtin tokenizer spells a token in a few bytes; a hostile server must not
/// size the client's memory).
constexpr std::size_t kMaxResponseBase = 1 << 20;
constexpr std::size_t kMaxResponsePerToken = 1 << 10;
/// A GET /v1/models body over this size is refused (a list of model cards is a few KiB).
constexpr std::size_t kMaxModelsBody = 1 << 20;

Clock::duration toDuration(double ms) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
}

/// One request sent.
struct Call {
  RequestHandle handle = 0;
  std::uint32_t session = 0;
  std::uint32_t turn = 0;
  std::uint32_t prompt_length = 0;  ///< token ids sent (or spelled as text)
  unsigned status = 0;              ///< HTTP status; 0 = none yet
  std::string error_body;
  std::string body;  ///< non-streaming: the response body so far
  SseReader sse;
  OpenAiStream stream{0};                  ///< set with the request's max_tokens at dispatch
  std::optional<std::string> malformed{};  ///< why the stream was abandoned
  std::shared_ptr<HttpCall> http;
  std::unique_ptr<asio::steady_timer> timeout;
  bool live = true;
};

/// The model of GET {base}/models, waiting at most `timeout_ms`.
Result<std::string> discoverModel(asio::io_context& io, HttpClient& client, const OpenAiUrl& url,
                                  const Headers& headers, double timeout_ms) {
  unsigned status = 0;
  std::string body;
  bool too_big = false;
  std::optional<std::optional<std::string>> ended;
  std::shared_ptr<HttpCall> call;
  call = client.request("GET", url.base_path + "/models", "", headers,
                        {.on_status = [&](unsigned s) { status = s; },
                         .on_body =
                             [&](std::string_view b) {
                               if (too_big) return;
                               if (body.size() + b.size() > kMaxModelsBody) {
                                 too_big = true;  // not what the server sends next: stop reading
                                 call->abort();
                                 return;
                               }
                               body.append(b);
                             },
                         .on_end = [&](std::optional<std::string> e) { ended = e; }});
  io.restart();
  io.run_for(toDuration(timeout_ms));
  const std::string where = "GET http://" + url.host + ":" + url.port + url.base_path + "/models";
  if (too_big) {
    return invalidArgument(where + ": a body over " + std::to_string(kMaxModelsBody >> 20) +
                           " MiB (give --model NAME to skip this)");
  }
  if (!ended) {
    call->abort();
    io.restart();
    io.poll();
    return invalidArgument(where +
                           ": no answer within the connect timeout (give --model NAME "
                           "to skip this)");
  }
  if (*ended) return invalidArgument(where + ": " + **ended);
  if (status != 200) {
    return invalidArgument(where + ": HTTP " + std::to_string(status) + ": " +
                           openAiErrorMessage(body));
  }
  Result<std::string> model = firstModelId(body);
  if (!model) return model.error().withContext(where);
  return model;
}

class OpenAiReplay {
 public:
  OpenAiReplay(const Workload& workload, const OpenAiReplayOptions& options,
               ReplayCollector& collector, asio::io_context& io, HttpClient& client, OpenAiUrl url,
               Headers headers, OpenAiReplayStats stats)
      : workload_(workload),
        options_(options),
        collector_(collector),
        io_(io),
        client_(client),
        url_(std::move(url)),
        headers_(std::move(headers)),
        stats_(std::move(stats)),
        scheduler_(workload, options.concurrency),
        synth_(workload.trace_block_size),
        dispatch_timer_(io),
        progress_timer_(io) {
    total_turns_ = workload.numTurns();
    text_tokenizer_ = options.tokenizer ? options.tokenizer.get()
                      : options.chat    ? &builtin_
                                        : nullptr;
  }

  OpenAiReplayStats run() {
    start_ = Clock::now();
    dispatchDue();
    if (options_.progress) armProgress();
    io_.restart();
    io_.run();
    stats_.wall_ms = nowMs();
    stats_.dispatch_lag_ms = summarize(std::move(dispatch_lags_));
    stats_.warnings.insert(stats_.warnings.end(), synth_.warnings().begin(),
                           synth_.warnings().end());
    if (options_.progress) reportProgress();
    return std::move(stats_);
  }

 private:
  double nowMs() const {
    return std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
  }

  void dispatchDue() {
    while (auto next = scheduler_.popDue(nowMs())) dispatch(*next);
    stats_.max_in_flight = std::max(stats_.max_in_flight, scheduler_.inFlight());
    const double due = scheduler_.nextDueMs();
    if (!std::isfinite(due)) {
      dispatch_timer_.cancel();
      if (scheduler_.finished()) progress_timer_.cancel();
      return;
    }
    dispatch_timer_.expires_at(start_ + toDuration(due));
    dispatch_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) dispatchDue();
    });
  }

  void armProgress() {
    progress_timer_.expires_after(toDuration(kProgressEveryMs));
    progress_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      reportProgress();
      if (!scheduler_.finished()) armProgress();
    });
  }

  void reportProgress() {
    options_.progress({.dispatched = calls_.size(),
                       .ended = ended_,
                       .total = total_turns_,
                       .elapsed_ms = nowMs()});
  }

  /// The prompt of a turn in token ids (mooncake-delta: the session's history, then the delta).
  std::vector<std::uint32_t> promptOf(const detail::EligibleTurn& next) {
    const Session& session = workload_.sessions[next.session];
    return scheduler_.prompt(next, synth_.synthesize(session.turns[next.turn]));
  }

  void dispatch(const detail::EligibleTurn& next) {
    const Session& session = workload_.sessions[next.session];
    const Turn& turn = session.turns[next.turn];
    const std::size_t index = calls_.size();
    const std::vector<std::uint32_t> prompt = promptOf(next);
    // A trace row's LoRA adapter is the request's `model` (vLLM's OpenAI server: an adapter is
    // served under its own model name).
    OpenAiRequestSpec spec{.model = turn.lora.value_or(stats_.model),
                           .chat = options_.chat,
                           .prompt_ids = prompt,
                           .max_tokens = turn.output_length,
                           .stream = options_.stream};
    if (text_tokenizer_) spec.text = text_tokenizer_->decode(prompt);
    const double send_ms = nowMs();
    if (!options_.concurrency) dispatch_lags_.push_back(std::max(0.0, send_ms - next.time_ms));
    auto& call = calls_.emplace_back(std::make_unique<Call>());
    call->handle = collector_.onArrival({.session_id = session.session_id,
                                         .turn_index = next.turn,
                                         .request_id = turn.request_id,
                                         .input_length = static_cast<std::uint32_t>(prompt.size()),
                                         .requested_output_length = turn.output_length,
                                         .lora = turn.lora},
                                        send_ms);
    MOCKER_CHECK(call->handle == index);
    call->session = next.session;
    call->turn = next.turn;
    call->stream = OpenAiStream(turn.output_length);
    call->prompt_length = static_cast<std::uint32_t>(prompt.size());
    Headers headers = headers_;
    headers.emplace_back("X-Request-Id", "r" + std::to_string(index));
    const std::string target =
        url_.base_path + (options_.chat ? "/chat/completions" : "/completions");
    call->timeout =
        std::make_unique<asio::steady_timer>(io_, toDuration(options_.request_timeout_ms));
    call->timeout->async_wait([this, index](const boost::system::error_code& ec) {
      if (!ec) onTimeout(index);
    });
    call->http = client_.request(
        "POST", target, openAiRequestBody(spec), headers,
        {.on_status = [this, index](unsigned s) { calls_[index]->status = s; },
         .on_body = [this, index](std::string_view bytes) { onBody(index, bytes); },
         .on_end = [this, index](std::optional<std::string> e) { onEnd(index, std::move(e)); }});
  }

  void onBody(std::size_t index, std::string_view bytes) {
    Call& c = *calls_[index];
    if (!c.live || c.malformed) return;
    if (c.status != 200) {
      if (c.error_body.size() < kMaxErrorBody) c.error_body.append(bytes);
      return;
    }
    if (!options_.stream) {
      const std::size_t limit =
          kMaxResponseBase + kMaxResponsePerToken * std::size_t{c.stream.maxTokens()};
      if (c.body.size() + bytes.size() > limit) {
        c.malformed = "a response body over " + std::to_string(limit) + " bytes";
        c.http->abort();  // on_end follows: the request is recorded failed there
        return;
      }
      c.body.append(bytes);
      return;
    }
    events_.clear();
    if (const Status s = c.sse.feed(bytes, events_); !s) {
      c.malformed = s.error().message;
      c.http->abort();  // on_end follows: the request is recorded failed there
      return;
    }
    const double now = nowMs();
    for (const std::string& e : events_) {
      if (const Status s = c.stream.onEvent(e, now); !s) {
        c.malformed = s.error().message;
        c.http->abort();  // on_end follows: the request is recorded failed there
        return;
      }
    }
  }

  void onTimeout(std::size_t index) {
    Call& c = *calls_[index];
    if (!c.live) return;
    ++stats_.timeouts;
    end(c, nowMs(), TerminalStatus::Cancelled);
    c.http->abort();  // the server sees the client go and cancels the request
  }

  void noteError(const std::string& message) {
    for (auto& [m, n] : stats_.error_messages) {
      if (m == message) {
        ++n;
        return;
      }
    }
    if (stats_.error_messages.size() < kMaxErrorMessages) {
      stats_.error_messages.emplace_back(message, 1);
    }
  }

  void onEnd(std::size_t index, std::optional<std::string> error) {
    Call& c = *calls_[index];
    if (!c.live) return;
    const double now = nowMs();
    TerminalStatus status = TerminalStatus::Failed;
    std::string message;
    if (!options_.stream && !error && !c.malformed && c.status == 200) {
      if (const Status s = c.stream.onResponse(c.body, now); !s) c.malformed = s.error().message;
    }
    if (c.malformed) {
      ++stats_.malformed_streams;
      message = "malformed stream: " + *c.malformed;
    } else if (c.status == 0) {
      ++stats_.connection_failures;
      message = error.value_or("no response");
    } else if (c.status != 200) {
      ++stats_.http_errors[c.status];
      if (c.status == 429) status = TerminalStatus::Rejected;
      message = "HTTP " + std::to_string(c.status) + ": " + openAiErrorMessage(c.error_body);
    } else if (c.stream.error()) {
      ++stats_.error_frames;
      message = "error event: " + *c.stream.error();
    } else if (!c.stream.done()) {
      ++stats_.cut_streams;
      message = std::string(options_.stream ? "stream ended before data: [DONE]"
                                            : "response body cut before its end") +
                (error ? " (" + *error + ")" : std::string());
    } else {
      status = TerminalStatus::Completed;
    }
    if (!message.empty()) noteError(message);
    end(c, now, status);
  }

  /// Hands the request's events to the collector and frees its slot.
  void end(Call& c, double now, TerminalStatus status) {
    c.live = false;
    if (c.timeout) c.timeout->cancel();
    c.stream.finish();
    if (const auto prompt = c.stream.promptTokens()) {
      collector_.onInputLength(c.handle, *prompt);
      if (*prompt != c.prompt_length) ++stats_.prompt_length_differs;
    } else if (status == TerminalStatus::Completed) {
      ++stats_.missing_usage;
    }
    const std::vector<double>& times = c.stream.tokenTimes();
    if (status == TerminalStatus::Completed || !times.empty()) {
      collector_.onAdmission(c.handle, times.empty() ? now : times.front(),
                             c.stream.cachedTokens().value_or(0), false);
    }
    for (const double t : times) collector_.onToken(c.handle, t);
    collector_.onTerminal(c.handle, now, status);
    if (workload_.cumulative_prompts && c.turn + 1 < workload_.sessions[c.session].turns.size()) {
      const gateway::Tokenizer& t = text_tokenizer_ ? *text_tokenizer_ : builtin_;
      scheduler_.received(c.session, c.turn, t.encode(c.stream.text()));
    }
    c.error_body = {};
    c.body = {};
    ++ended_;
    scheduler_.ended(c.session, c.turn, now);
    dispatchDue();
  }

  const Workload& workload_;
  const OpenAiReplayOptions& options_;
  ReplayCollector& collector_;
  asio::io_context& io_;
  HttpClient& client_;
  OpenAiUrl url_;
  Headers headers_;
  OpenAiReplayStats stats_;
  TurnScheduler scheduler_;
  PromptSynthesizer synth_;
  gateway::BuiltinTokenizer builtin_;
  const gateway::Tokenizer* text_tokenizer_ = nullptr;
  asio::steady_timer dispatch_timer_;
  asio::steady_timer progress_timer_;
  Clock::time_point start_{};
  std::deque<std::unique_ptr<Call>> calls_;
  std::vector<double> dispatch_lags_;
  std::vector<std::string> events_;  // scratch
  std::uint64_t ended_ = 0;
  std::uint64_t total_turns_ = 0;
};

}  // namespace

Result<OpenAiReplayStats> runOpenAiReplay(const Workload& workload,
                                          const OpenAiReplayOptions& options,
                                          ReplayCollector& collector) {
  MOCKER_TRY_VOID(checkSchedulable(workload, options.concurrency));
  if (!(options.request_timeout_ms > 0) || !std::isfinite(options.request_timeout_ms)) {
    return invalidArgument("request timeout must be finite and > 0");
  }
  if (!(options.connect_timeout_ms > 0) || !std::isfinite(options.connect_timeout_ms)) {
    return invalidArgument("connect timeout must be finite and > 0");
  }
  MOCKER_TRY(OpenAiUrl url, parseOpenAiUrl(options.url));
  asio::io_context io(1);
  MOCKER_TRY(std::unique_ptr<HttpClient> client, HttpClient::create(io, url.host, url.port));
  Headers headers;
  if (!options.api_key.empty()) headers.emplace_back("Authorization", "Bearer " + options.api_key);
  OpenAiReplayStats stats;
  stats.model = options.model;
  if (stats.model.empty()) {
    MOCKER_TRY(stats.model, discoverModel(io, *client, url, headers, options.connect_timeout_ms));
  }
  if (options.connections > 0) {
    // Before the clock starts: requests then find a connection open instead of waiting for a
    // handshake while the number in flight grows (a failed connect is retried by its request).
    bool opened = false;
    client->preconnect(options.connections, [&](std::size_t) { opened = true; });
    io.restart();
    while (!opened && io.run_one_for(toDuration(options.connect_timeout_ms)) > 0) {
    }
  }
  stats.prompt_form = options.tokenizer ? "text (" + options.tokenizer_name + ")"
                      : options.chat    ? std::string("text (built-in tokenizer)")
                                        : std::string("token ids");
  OpenAiReplay replay(workload, options, collector, io, *client, std::move(url), std::move(headers),
                      std::move(stats));
  return replay.run();
}

std::string formatOpenAiReplay(const OpenAiReplayOptions& options, const OpenAiReplayStats& stats,
                               bool closed_loop) {
  std::ostringstream out;
  out << "Live OpenAI: " << options.url << " ("
      << (options.chat ? "chat completions" : "completions")
      << (options.stream ? "" : ", not streamed") << ", model " << stats.model << ", prompts as "
      << stats.prompt_form << "); max in flight " << stats.max_in_flight;
  if (!closed_loop) out << "; max dispatch lag " << stats.dispatch_lag_ms.max << " ms";
  out << "\n";
  std::uint64_t http = 0;
  for (const auto& [status, n] : stats.http_errors) http += n;
  if (http + stats.connection_failures + stats.error_frames + stats.malformed_streams +
          stats.cut_streams + stats.timeouts >
      0) {
    out << "OpenAI issues: " << http << " HTTP errors";
    for (const auto& [status, n] : stats.http_errors) out << " (" << n << " x " << status << ")";
    out << ", " << stats.connection_failures << " connection failures, " << stats.error_frames
        << " error events, " << stats.malformed_streams << " malformed streams, "
        << stats.cut_streams << " cut streams, " << stats.timeouts << " timed out (closed)\n";
    for (const auto& [message, n] : stats.error_messages) {
      out << "  " << n << " x " << message << "\n";
    }
  }
  if (stats.prompt_length_differs > 0) {
    out << "OpenAI usage: " << stats.prompt_length_differs
        << " requests whose usage.prompt_tokens differs from the prompt sent (the report counts "
           "the server's)\n";
  }
  if (stats.missing_usage > 0) {
    out << "OpenAI usage: " << stats.missing_usage
        << " completed requests without usage (prompt length and cached tokens from the client)\n";
  }
  return out.str();
}

}  // namespace mocker::replay
