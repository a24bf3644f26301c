#include "gateway/exchange.h"

#include "base/check.h"

namespace mocker::gateway {
namespace {

/// The HTTP status of a stream the worker ended other than by its length: its scheduler refused
/// the request (400: too long for it), it shut down or dropped the request itself (503: try
/// again), it failed (500).
int finishStatus(protocol::FinishReason reason) {
  switch (reason) {
    case protocol::FinishReason::Rejected:
      return 400;
    case protocol::FinishReason::Shutdown:
    case protocol::FinishReason::Cancelled:
      return 503;
    case protocol::FinishReason::Length:
    case protocol::FinishReason::Error:
      break;
  }
  return 500;
}

}  // namespace

Exchange::Exchange(ExchangeHost& host, std::shared_ptr<HttpConnection> connection,
                   std::string endpoint, HttpHeaders headers, ResponseShaper&& shaper,
                   std::optional<std::string> lora)
    : host_(host),
      connection_(std::move(connection)),
      endpoint_(std::move(endpoint)),
      headers_(std::move(headers)),
      shaper_(std::move(shaper)),
      lora_(std::move(lora)),
      stream_(shaper_.streaming()) {}

void Exchange::addChoice(std::size_t worker, std::string wire_id,
                         std::optional<std::uint32_t> dp_rank) {
  MOCKER_CHECK(choices_.size() < shaper_.numChoices());
  choices_.push_back({.worker = worker, .wire_id = std::move(wire_id), .dp_rank = dp_rank});
}

void Exchange::start() {
  MOCKER_CHECK(choices_.size() == shaper_.numChoices());
  std::weak_ptr<Exchange> weak = shared_from_this();
  connection_->setOnClose([weak] {
    if (auto self = weak.lock()) self->onDisconnect();
  });
  // The workers first: the stream's head is a socket write (~tens of µs) that the request's
  // way to its worker need not wait for.
  for (std::size_t c = 0; c < choices_.size(); ++c)
    host_.submit(choices_[c].worker, submitRequest(c));
  if (stream_) {
    connection_->beginStream(headers_);
    send(shaper_.start());
  }
}

protocol::SubmitRequest Exchange::submitRequest(std::size_t c) const {
  return protocol::SubmitRequest{.id = choices_[c].wire_id,
                                 .prompt = shaper_.prompt(c),
                                 .max_tokens = shaper_.planned(c),
                                 .dp_rank = choices_[c].dp_rank,
                                 .lora = lora_};
}

void Exchange::handOff(std::size_t c, std::size_t decode_worker, protocol::HandoffTicket ticket) {
  Choice& choice = choices_.at(c);
  if (completed_ || !choice.open) return;
  choice.worker = decode_worker;
  choice.dp_rank.reset();
  protocol::SubmitRequest request = submitRequest(c);
  request.handoff = std::move(ticket);
  host_.submit(decode_worker, std::move(request));
}

void Exchange::send(const std::string& bytes) {
  if (bytes.empty() || completed_) return;
  // A false return means the connection closed (on-close already ran onDisconnect).
  (void)connection_->streamWrite(bytes);
}

void Exchange::onOutput(std::size_t c, const protocol::RequestOutput& output) {
  if (completed_ || !choices_.at(c).open) return;
  auto self = shared_from_this();  // completion below may drop the host's reference
  if (!output.tokens.empty()) {
    const auto now = Clock::now();
    if (!timing_.last_output) {
      host_.firstToken(*this, std::chrono::duration<double>(now - timing_.arrival).count());
    } else {
      const double gap = std::chrono::duration<double>(now - *timing_.last_output).count();
      const double per_token = gap / static_cast<double>(output.tokens.size());
      for (std::size_t i = 0; i < output.tokens.size(); ++i) host_.interToken(per_token);
    }
    timing_.last_output = now;
  }
  auto step = shaper_.onOutput(c, output.tokens, output.cached_tokens);
  if (stream_) send(step.body);
  if (step.stop_matched) {
    close(c, /*cancel=*/!output.finish.has_value());
  } else if (output.finish) {
    close(c, false);
    if (*output.finish == protocol::FinishReason::Length) {
      if (stream_)
        send(shaper_.onFinish(c, ChoiceEnd::Planned));
      else
        (void)shaper_.onFinish(c, ChoiceEnd::Planned);
    } else {
      const std::string why =
          "worker ended the request: " + std::string(protocol::toString(*output.finish)) +
          (output.reason.empty() ? "" : " (" + output.reason + ")");
      const int status = finishStatus(*output.finish);
      if (failure_status_ == 0) failure_status_ = status;
      const std::string body = shaper_.onFinish(c, ChoiceEnd::Failed, why, status);
      if (stream_) send(body);
    }
  }
  completeIfDone();
}

void Exchange::onFailure(std::size_t c, int status, const std::string& message, bool cancel) {
  if (completed_ || !choices_.at(c).open) return;
  auto self = shared_from_this();
  close(c, cancel);
  if (failure_status_ == 0) failure_status_ = status;
  const std::string body = shaper_.onFinish(c, ChoiceEnd::Failed, message, status);
  if (stream_) send(body);
  completeIfDone();
}

void Exchange::expire(const std::string& message) {
  if (completed_) return;
  auto self = shared_from_this();
  if (failure_status_ == 0) failure_status_ = 504;
  for (std::size_t c = 0; c < choices_.size(); ++c) {
    if (!choices_[c].open) continue;
    close(c, /*cancel=*/true);
    const std::string body = shaper_.onFinish(c, ChoiceEnd::Failed, message, 504);
    if (stream_) send(body);
  }
  completeIfDone();
}

void Exchange::close(std::size_t c, bool cancel) {
  Choice& choice = choices_[c];
  if (!choice.open) return;
  choice.open = false;
  if (cancel) host_.cancel(choice.worker, choice.wire_id);
  host_.forget(choice.wire_id);
}

void Exchange::completeIfDone() {
  if (completed_ || !shaper_.done()) return;
  completed_ = true;
  int status = 200;
  if (stream_) {
    (void)connection_->streamWrite(shaper_.finish());
    connection_->endStream();
  } else if (shaper_.failure()) {
    status = failure_status_ == 0 ? 500 : failure_status_;
    HttpReply reply{.status = status,
                    .body = errorBody(ApiError{.status = status, .message = *shaper_.failure()}),
                    .headers = headers_};
    connection_->reply(std::move(reply));
  } else {
    connection_->reply(HttpReply{.body = shaper_.finish(), .headers = headers_});
  }
  host_.finished(*this, status);
}

void Exchange::onDisconnect() {
  if (completed_) return;
  auto self = shared_from_this();
  disconnected_ = true;
  completed_ = true;
  for (std::size_t c = 0; c < choices_.size(); ++c) close(c, /*cancel=*/true);
  host_.finished(*this, 499);
}

}  // namespace mocker::gateway
