// `mocker submit`'s handling of the messages about its request (contract in submit_stream.h).
#include "tools/submit_stream.h"

#include <cstdio>
#include <utility>
#include <variant>

namespace mocker::tools {
namespace {

/// The handoff ticket on `out` (one line, without its secret key) and what happened on `err`.
void printHandoff(const protocol::Handoff& h, double ms, bool second_hop, std::ostream& out,
                  std::ostream& err) {
  const protocol::HandoffTicket& t = h.ticket;
  out << "handoff source " << t.source << " source_rank " << t.source_rank << " prompt_len "
      << t.prompt_len << " cached_tokens " << t.cached_tokens << " block_size " << t.block_size
      << " transfer_ms " << t.transfer_ms << "\n";
  out.flush();
  err << "mocker submit: '" << h.id << "' prefilled in " << formatMs(ms)
      << " ms and handed off to decode; ticket from " << t.source << " (rank " << t.source_rank
      << ", " << t.cached_tokens << " of " << t.prompt_len << " prompt tokens from the cache)"
      << (second_hop ? "; submitting it to the decode worker\n"
                     : "; give --decode-endpoint to run the decode hop too\n");
}

}  // namespace

std::string formatMs(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", ms);
  return buf;
}

SubmitStream::SubmitStream(std::string id, std::size_t prompt_len, bool second_hop,
                           std::ostream& out, std::ostream& err)
    : id_(std::move(id)), prompt_len_(prompt_len), second_hop_(second_hop), out_(out), err_(err) {}

SubmitStream::Step SubmitStream::onMessage(const protocol::ClientMessage& message,
                                           double ms_since_sent, bool cancel_sent) {
  if (const auto* ack = std::get_if<protocol::SubmitAck>(&message)) {
    if (ack->id == id_)
      err_ << "mocker submit: '" << id_ << "' accepted on dp_rank " << ack->dp_rank << "\n";
  } else if (const auto* reject = std::get_if<protocol::SubmitReject>(&message)) {
    if (reject->id == id_) {
      err_ << "mocker submit: rejected: " << reject->reason << "\n";
      return {.exit = kSubmitExitFailed};
    }
  } else if (const auto* error = std::get_if<protocol::ErrorReply>(&message)) {
    err_ << "mocker submit: error from the service: " << errorCodeName(error->code) << ": "
         << error->message << "\n";
    return {.exit = kSubmitExitFailed};
  } else if (const auto* reply = std::get_if<protocol::CancelReply>(&message)) {
    if (reply->result == protocol::CancelResult::NotFound) {
      err_ << "mocker submit: cancel: request not found (already finishing)\n";
    }
  } else if (const auto* handoff = std::get_if<protocol::Handoff>(&message)) {
    if (handoff->id != id_ || handed_off_) return {};
    handed_off_ = true;
    printHandoff(*handoff, ms_since_sent, second_hop_, out_, err_);
    if (!second_hop_) return {.exit = kSubmitExitOk};
    return {.hop = handoff->ticket};
  } else if (const auto* batch = std::get_if<protocol::OutputBatch>(&message)) {
    return onOutputs(*batch, ms_since_sent, cancel_sent);
  }
  return {};
}

SubmitStream::Step SubmitStream::onOutputs(const protocol::OutputBatch& batch, double ms_since_sent,
                                           bool cancel_sent) {
  for (const protocol::RequestOutput& o : batch.outputs) {
    if (o.id != id_) continue;
    if (o.cached_tokens) cached_tokens_ = o.cached_tokens;
    if (!o.tokens.empty() && !ttft_ms_) ttft_ms_ = ms_since_sent;
    num_tokens_ += o.tokens.size();
    if (!o.tokens.empty()) {
      out_ << o.index;
      for (std::uint32_t t : o.tokens) out_ << ' ' << t;
      out_ << '\n';
    }
    if (!o.finish) continue;
    out_ << "finish " << protocol::toString(*o.finish);
    if (!o.reason.empty()) out_ << " (" << o.reason << ")";
    out_ << '\n';
    out_.flush();
    err_ << "mocker submit: " << num_tokens_ << " tokens in " << formatMs(ms_since_sent)
         << " ms; TTFT " << (ttft_ms_ ? formatMs(*ttft_ms_) + " ms" : std::string("-"))
         << "; prefix-cache hits "
         << (cached_tokens_ ? std::to_string(*cached_tokens_) : std::string("-")) << " of "
         << prompt_len_ << " prompt tokens\n";
    if (*o.finish == protocol::FinishReason::Length) return {.exit = kSubmitExitOk};
    if (*o.finish == protocol::FinishReason::Cancelled && cancel_sent) {
      return {.exit = kSubmitExitInterrupted};
    }
    return {.exit = kSubmitExitFailed};
  }
  out_.flush();
  return {};
}

}  // namespace mocker::tools
