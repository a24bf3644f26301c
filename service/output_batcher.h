// OutputBatcher: turns one pass's output signals into one output message per client.
//
// Per pass: beginPass(), then add() for every signal whose route is Active (in the engine's
// signal order), then for each batch encode() it, send it, and report the outcome to the route
// table. A client's batch appears in order of the client's first signal in the pass; inside it
// a request's consecutive signals merge into one entry (tokens in order, a terminal ends the
// entry), so the message holds each request's tokens of the pass and its end of stream.
//
//   signals (id:index token)   r1:7 t  r1:8 t  r2:5 t  r3:9 t+Completed  r4:3 Cancelled, no token
//   (r1, r3 of client A; r2, r4 of client B)
//   batches  A: [{r1 index 7, 2 tokens} {r3 index 9, 1 token, finish length}]
//            B: [{r2 index 5, 1 token} {r4 index 3, no token, finish cancelled}]
//
// Hot path (runs for every token): no lookups, and no allocation once warm other than each
// encoded message (written once, in place, into the ZeroMQ message the loop sends) — entries
// point at
// their routes (borrowed from the RouteTable, which must not close them until the pass has been
// delivered), each client's batch is found through its ClientEntry::batch_slot, tokens go to one
// per-pass buffer, and batches, entries and encode views are scratch reused across passes.
//
// Not thread-safe. Owned and used by the service thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "engine/types.h"
#include "protocol/client.h"
#include "service/route_table.h"

namespace mocker::service {

/// The finish reason and explanation the client sees for an engine terminal (None ⇒ nullopt).
/// Every `length` finish short of max_tokens and every `rejected` one names the binding limit:
/// the reason starts with "max_model_len: ", "kv capacity: " or "max_num_batched_tokens: "
/// (the strings are listed in protocol/README.md §1.2).
struct WireFinish {
  std::optional<protocol::FinishReason> finish;
  std::string_view reason;  ///< static text, empty when the finish speaks for itself
};
WireFinish wireFinish(engine::Terminal terminal,
                      engine::LengthLimit limit = engine::LengthLimit::None);

/// Fills one output message within protocol/limits.h: at most kMaxOutputsPerMessage entries,
/// kMaxMessageBytes bytes and kMaxObjectsPerMessage msgpack objects, counted with an upper
/// bound per entry. Every message the service sends with outputs is cut with it.
class OutputMessageBudget {
 public:
  /// Takes one more entry if the message still fits with it; the first entry always fits (an
  /// entry alone is far below every limit: id ≤ 256 bytes, reason ≤ 64 KiB, a pass's tokens).
  bool tryAdd(std::size_t id_bytes, std::size_t reason_bytes, std::size_t num_tokens);
  std::size_t entries() const { return entries_; }

 private:
  std::size_t entries_ = 0;
  std::size_t bytes_ = 0;
  std::size_t objects_ = 0;
};

/// The "output" message of `outputs` as a ZeroMQ message ready to send: its exact size is
/// allocated by libzmq and the bytes are encoded straight into it (no intermediate buffer, no
/// copy, one allocation).
zmq::message_t encodeOutputMessage(std::span<const protocol::RequestOutputView> outputs);

/// Cuts a stats reply's `clients` list (ascending) to what one message may carry: at most
/// kMaxStatsClients entries and, with the ranks, at most kMaxMessageBytes.
void fitStatsReply(protocol::StatsReply& reply);

class OutputBatcher final {
 public:
  /// One request's outputs within one pass: tokens [token_begin, +token_count) of the pass's
  /// token buffer.
  struct Entry {
    engine::RequestId id;
    Route* route = nullptr;   ///< borrowed; never null
    std::uint32_t index = 0;  ///< output position of the first token
    std::size_t token_begin = 0;
    std::uint32_t token_count = 0;
    std::optional<protocol::FinishReason> finish;
    std::string_view reason;
    std::optional<std::uint32_t> cached_tokens;
  };
  /// One client's outputs of one pass.
  struct ClientBatch {
    std::string client;
    ClientEntry* owner = nullptr;             ///< borrowed; never null
    std::vector<Entry> entries;               ///< never empty
    std::vector<engine::RequestId> terminal;  ///< entries that end their stream, in order
  };

  OutputBatcher() = default;
  OutputBatcher(const OutputBatcher&) = delete;
  OutputBatcher& operator=(const OutputBatcher&) = delete;

  /// Starts a pass: forgets the previous pass's batches.
  void beginPass();
  /// Adds one signal of `route`'s request. REQUIRES: route.owner set, s.id is route's engine id.
  void add(const engine::OutputSignal& s, Route& route);

  std::span<ClientBatch> batches() { return {batches_.data(), num_batches_}; }
  std::span<const std::uint32_t> tokens(const Entry& e) const {
    return std::span(tokens_).subspan(e.token_begin, e.token_count);
  }
  /// The end of the entries from `begin` that fit one message (OutputMessageBudget).
  /// REQUIRES: begin < batch.entries.size().
  std::size_t messageEnd(const ClientBatch& batch, std::size_t begin) const;
  /// The output message of entries [begin, end) of `batch` (one of batches()), encoded by the
  /// output fast path (encodeOutputMessage).
  zmq::message_t encode(const ClientBatch& batch, std::size_t begin, std::size_t end);

 private:
  std::uint64_t epoch_ = 0;           // pass number; matches ClientEntry::batch_slot.epoch
  std::vector<ClientBatch> batches_;  // the first num_batches_ belong to this pass
  std::size_t num_batches_ = 0;
  std::vector<std::uint32_t> tokens_;
  std::vector<protocol::RequestOutputView> views_;
};

}  // namespace mocker::service
