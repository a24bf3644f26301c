// OutputBatcher: one pass's output signals → one encoded output message per client
// (contract in output_batcher.h).
#include "service/output_batcher.h"

#include "base/enum_names.h"
#include "protocol/limits.h"

namespace mocker::service {

namespace {

using engine::LengthLimit;

// Why a completed stream stopped short of max_tokens ("" for None: it did not).
constexpr EnumNames<LengthLimit, 4> kStoppedBy{
    {{"", LengthLimit::None},
     {"max_model_len: the sequence reached the model length limit before max_tokens",
      LengthLimit::MaxModelLen},
     {"kv capacity: the sequence reached the KV pool size (num_gpu_blocks x block_size) "
      "before max_tokens",
      LengthLimit::KvCapacity},
     {"max_num_batched_tokens: with chunked prefill off the sequence reached the per-pass "
      "token budget before max_tokens",
      LengthLimit::MaxNumBatchedTokens}}};

// Why a prompt was rejected (None: the scheduler did not name one limit).
constexpr EnumNames<LengthLimit, 4> kRejectedBy{
    {{"the request can never be scheduled (prompt longer than max_model_len, the KV pool or, "
      "with chunked prefill off, the token budget)",
      LengthLimit::None},
     {"max_model_len: the prompt is at least max_model_len tokens long", LengthLimit::MaxModelLen},
     {"kv capacity: the prompt leaves no room for an output token in the KV pool "
      "(num_gpu_blocks x block_size)",
      LengthLimit::KvCapacity},
     {"max_num_batched_tokens: with chunked prefill off the prompt is at least the "
      "per-pass token budget",
      LengthLimit::MaxNumBatchedTokens}}};

std::string_view stoppedBy(LengthLimit limit) { return enumName(kStoppedBy, limit); }
std::string_view rejectedBy(LengthLimit limit) { return enumName(kRejectedBy, limit); }

}  // namespace

WireFinish wireFinish(engine::Terminal terminal, engine::LengthLimit limit) {
  using protocol::FinishReason;
  switch (terminal) {
    case engine::Terminal::None:
      return {};
    case engine::Terminal::Completed:
      return {FinishReason::Length, stoppedBy(limit)};
    case engine::Terminal::Rejected:
      return {FinishReason::Rejected, rejectedBy(limit)};
    case engine::Terminal::Cancelled:
      return {FinishReason::Cancelled, {}};
    case engine::Terminal::Failed:
      return {FinishReason::Error, "the timing model produced a non-finite pass time"};
  }
  return {FinishReason::Error, "unknown engine terminal"};
}

bool OutputMessageBudget::tryAdd(std::size_t id_bytes, std::size_t reason_bytes,
                                 std::size_t num_tokens) {
  // Upper bounds: the message's own map, "v", "type", "outputs" and array header; per entry a
  // map of ≤ 6 keys (names ≤ 14 bytes), id and reason str headers ≤ 3 bytes, u32 values ≤ 5.
  constexpr std::size_t kMessageBytes = 64, kMessageObjects = 8;
  constexpr std::size_t kEntryBytes = 112, kEntryObjects = 16;
  const std::size_t bytes = kEntryBytes + id_bytes + reason_bytes + 5 * num_tokens;
  const std::size_t objects = kEntryObjects + num_tokens;
  if (entries_ == 0) {
    bytes_ = kMessageBytes;
    objects_ = kMessageObjects;
  } else if (entries_ == protocol::kMaxOutputsPerMessage ||
             bytes_ + bytes > protocol::kMaxMessageBytes ||
             objects_ + objects > protocol::kMaxObjectsPerMessage) {
    return false;
  }
  ++entries_;
  bytes_ += bytes;
  objects_ += objects;
  return true;
}

zmq::message_t encodeOutputMessage(std::span<const protocol::RequestOutputView> outputs) {
  zmq::message_t msg(protocol::outputBatchSize(outputs));
  protocol::encodeOutputBatchInto(outputs, {static_cast<std::byte*>(msg.data()), msg.size()});
  return msg;
}

void fitStatsReply(protocol::StatsReply& reply) {
  std::size_t bytes = 1024 + 256 * reply.ranks.size();  // bound of the map, keys and ranks
  std::size_t keep = 0;
  for (const protocol::ClientRoutes& c : reply.clients) {
    bytes += 32 + c.client.size();  // bound of {client bin, routes u64}
    if (keep == protocol::kMaxStatsClients || bytes > protocol::kMaxMessageBytes) break;
    ++keep;
  }
  reply.clients.resize(keep);
}

void OutputBatcher::beginPass() {
  ++epoch_;
  num_batches_ = 0;
  tokens_.clear();
}

void OutputBatcher::add(const engine::OutputSignal& s, Route& route) {
  BatchSlot& slot = route.owner->batch_slot;
  if (slot.epoch != epoch_) {
    slot.epoch = epoch_;
    slot.index = num_batches_;
    if (num_batches_ == batches_.size()) batches_.emplace_back();
    ClientBatch& fresh = batches_[num_batches_++];
    fresh.client = route.client;
    fresh.owner = route.owner;
    fresh.entries.clear();
    fresh.terminal.clear();
  }
  ClientBatch& batch = batches_[slot.index];
  // A request's signals within a pass are consecutive: extend its entry while its tokens are
  // the last ones in the buffer (otherwise, or after a terminal, a new entry starts).
  const bool extend =
      !batch.entries.empty() && batch.entries.back().id == s.id && !batch.entries.back().finish &&
      batch.entries.back().token_begin + batch.entries.back().token_count == tokens_.size();
  // Entries and views are written field by field into their slots: built on the stack and
  // copied in, each was stored in narrow pieces and reloaded 16 bytes at a time (a
  // store-forwarding stall per copy, most of this function's and encode()'s cost).
  if (!extend) {
    Entry& fresh = batch.entries.emplace_back();
    fresh.id = s.id;
    fresh.route = &route;
    fresh.index = s.index;
    fresh.token_begin = tokens_.size();
  }
  Entry& e = batch.entries.back();
  if (s.token) {
    tokens_.push_back(*s.token);
    ++e.token_count;
  }
  if (s.cached_tokens) e.cached_tokens = s.cached_tokens;
  if (s.terminal != engine::Terminal::None) {
    const WireFinish f = wireFinish(s.terminal, s.limit);
    e.finish = f.finish;
    e.reason = f.reason;
    batch.terminal.push_back(s.id);
  }
}

std::size_t OutputBatcher::messageEnd(const ClientBatch& batch, std::size_t begin) const {
  OutputMessageBudget budget;
  std::size_t end = begin;
  while (end < batch.entries.size()) {
    const Entry& e = batch.entries[end];
    if (!budget.tryAdd(e.route->id.size(), e.reason.size(), e.token_count)) break;
    ++end;
  }
  return end;
}

zmq::message_t OutputBatcher::encode(const ClientBatch& batch, std::size_t begin, std::size_t end) {
  views_.resize(end - begin);
  for (std::size_t i = begin; i < end; ++i) {
    const Entry& e = batch.entries[i];
    protocol::RequestOutputView& v = views_[i - begin];
    v.id = e.route->id;
    v.index = e.index;
    v.tokens = tokens(e);
    v.finish = e.finish;
    v.reason = e.reason;
    v.cached_tokens = e.cached_tokens;
  }
  return encodeOutputMessage(views_);
}

}  // namespace mocker::service
