// Client protocol v1 (documented for implementers in protocol/README.md): the messages a client
// exchanges with the service over a DEALER ↔ ROUTER pair — submit / ack / reject, batched
// streamed outputs, cancel / reply, error, stats and kv_snapshot. Every message is one msgpack
// map whose first keys are "v" (protocol version) and "type".
//
// Request ids are chosen by the client and scoped by its ZeroMQ routing id; the service maps
// them to internal engine ids. One OutputBatch carries every output of one client for one pass.
//
// Pure functions on plain value types; thread-safe. Never throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/result.h"

namespace mocker::protocol {

/// The protocol version this build speaks; a message with another "v" is refused (Unsupported).
inline constexpr std::uint64_t kClientProtocolVersion = 1;

/// A disaggregated request's capability to fetch its KV from the prefill worker that holds it
/// (protocol/README.md §1.2 "Disaggregated prefill/decode"). Sent by a prefill worker in a
/// `handoff`, passed through unchanged by the client in the decode worker's `submit`.
struct HandoffTicket {
  std::string source;  ///< the prefill worker's handoff ROUTER endpoint (tcp://HOST:PORT)
  std::string key;     ///< kHandoffKeyBytes unguessable bytes naming the held request there
  std::uint32_t source_rank = 0;    ///< the prefill worker's DP rank that holds it
  std::uint32_t block_size = 0;     ///< the prefill worker's KV block size (tokens)
  std::uint32_t prompt_len = 0;     ///< prompt tokens the KV covers
  std::uint32_t cached_tokens = 0;  ///< prompt tokens the prefill worker found in its cache
  double transfer_ms = 0.0;         ///< modelled full-prompt transfer time (informational)
  friend bool operator==(const HandoffTicket&, const HandoffTicket&) = default;
};

/// client → service: start a request.
struct SubmitRequest {
  std::string id;                     ///< 1..256 bytes, unique among the client's active ids
  std::vector<std::uint32_t> prompt;  ///< prompt token ids (≤ kMaxTokensPerRequest)
  std::uint32_t max_tokens = 0;       ///< output tokens to generate
  std::optional<std::vector<std::uint32_t>> output_tokens;  ///< planned output; its length wins
  std::optional<std::uint32_t> dp_rank;                     ///< absent: the service chooses
  std::optional<double> arrival_ms;                         ///< informational; serve ignores it
  std::optional<std::int64_t> priority;                     ///< informational (not modelled)
  /// LoRA adapter name: 1..kMaxLoraNameBytes bytes of UTF-8; absent = the base model.
  std::optional<std::string> lora;
  /// Decode workers only (and required there): the prefill worker's ticket.
  std::optional<HandoffTicket> handoff;
  friend bool operator==(const SubmitRequest&, const SubmitRequest&) = default;
};

/// service → client: the request was admitted to the engine.
struct SubmitAck {
  std::string id;
  std::uint32_t dp_rank = 0;  ///< the rank that runs it
  friend bool operator==(const SubmitAck&, const SubmitAck&) = default;
};

/// service → client: the request was refused before it ran (no outputs follow).
struct SubmitReject {
  std::string id;
  std::string reason;  ///< human-readable ("duplicate active id", "dp_rank 3 >= dp_size 2")
  friend bool operator==(const SubmitReject&, const SubmitReject&) = default;
};

/// Why a stream ended. Wire names: "length", "cancelled", "rejected", "error", "shutdown".
enum class FinishReason { Length, Cancelled, Rejected, Error, Shutdown };
std::string_view toString(FinishReason reason);
Result<FinishReason> parseFinishReason(std::string_view s);

/// The outputs of one request within one OutputBatch: consecutive tokens starting at output
/// position `index`, and, on the last message of the stream, a finish reason.
struct RequestOutput {
  std::string id;
  std::uint32_t index = 0;                     ///< output position of tokens[0] (0-based)
  std::vector<std::uint32_t> tokens;           ///< may be empty on a terminal message
  std::optional<FinishReason> finish;          ///< set ⇔ terminal: nothing follows for this id
  std::string reason;                          ///< optional text (omitted on the wire when empty)
  std::optional<std::uint32_t> cached_tokens;  ///< with the first token: prefix-cache hits
  friend bool operator==(const RequestOutput&, const RequestOutput&) = default;
};

/// A borrowed view of one RequestOutput for the service's per-pass hot path: no copies of ids
/// or tokens. The viewed data must outlive the encode call.
struct RequestOutputView {
  std::string_view id;
  std::uint32_t index = 0;
  std::span<const std::uint32_t> tokens;
  std::optional<FinishReason> finish;
  std::string_view reason;
  std::optional<std::uint32_t> cached_tokens;
};

/// service → client: every output of that client produced by one pass.
struct OutputBatch {
  std::vector<RequestOutput> outputs;
  friend bool operator==(const OutputBatch&, const OutputBatch&) = default;
};

/// client → service (cancel socket or submit socket): cancel a request of `client`, by default
/// the sender's own routing id.
struct CancelRequest {
  std::string id;
  std::optional<std::string> client;  ///< routing id bytes of the submitting client
  friend bool operator==(const CancelRequest&, const CancelRequest&) = default;
};

enum class CancelResult { Applied, NotFound };  ///< wire: "applied", "not_found"

struct CancelReply {
  std::string id;
  CancelResult result = CancelResult::NotFound;
  friend bool operator==(const CancelReply&, const CancelReply&) = default;
};

/// service → client: a message could not be accepted (malformed, unsupported version, limit).
struct ErrorReply {
  ErrorCode code = ErrorCode::Corruption;  ///< wire: errorCodeName(code)
  std::string message;                     ///< names what is wrong
  std::optional<std::string> id;           ///< request id, when it could be read
  friend bool operator==(const ErrorReply&, const ErrorReply&) = default;
};

/// client → service: ask for load metrics.
struct StatsRequest {
  friend bool operator==(const StatsRequest&, const StatsRequest&) = default;
};

struct RankStats {
  std::uint32_t dp_rank = 0;
  std::uint64_t active_blocks = 0;
  std::uint64_t total_blocks = 0;
  double kv_usage = 0.0;  ///< active / total, 0..1
  std::uint64_t running = 0;
  std::uint64_t waiting = 0;
  std::uint64_t preemptions = 0;            ///< cumulative
  std::uint64_t prefix_queries_tokens = 0;  ///< cumulative prompt tokens looked up
  std::uint64_t prefix_hit_tokens = 0;      ///< cumulative prompt tokens reused
  /// Disaggregated workers (absent otherwise and in replies of services that predate them):
  /// prefilled requests holding their KV for a decode worker (prefill), handoffs waiting for
  /// their KV (decode), holds that timed out (prefill, cumulative).
  std::optional<std::uint64_t> held;
  std::optional<std::uint64_t> pending_handoffs;
  std::optional<std::uint64_t> handoff_expired;
  friend bool operator==(const RankStats&, const RankStats&) = default;
};

struct ClientRoutes {
  std::string client;  ///< routing id bytes (bin on the wire)
  std::uint64_t routes = 0;
  friend bool operator==(const ClientRoutes&, const ClientRoutes&) = default;
};

/// How late the service published its passes against their modelled ends (wall time, since the
/// service started; service/README.md "Live timing"). Percentiles are histogram bounds, within
/// 1/16 of the value.
struct PassTiming {
  std::uint64_t passes = 0;   ///< passes timed (none with speedup_ratio 0)
  std::uint64_t resyncs = 0;  ///< passes that started "now": the loop was too far behind
  double lateness_mean_ms = 0.0;
  double lateness_p50_ms = 0.0;
  double lateness_p99_ms = 0.0;
  double lateness_max_ms = 0.0;
  friend bool operator==(const PassTiming&, const PassTiming&) = default;
};

/// What the service runs (protocol/README.md, `stats_reply.engine`): what a client needs to hash
/// prompts like its KV events and to put its latencies on the model's time scale.
struct EngineInfo {
  std::string engine_type;       ///< "vllm" | "sglang" | "trtllm"
  std::string worker_type;       ///< "aggregated" | "prefill" | "decode"
  std::uint32_t block_size = 0;  ///< KV block size in tokens (>= 1), what its KV events carry
  double speedup_ratio = 1.0;    ///< model time / wall time; 0 = live mode does not wait
  /// The effective length limit L in tokens (a prompt of >= L is rejected, a stream stops when
  /// prompt + output reaches L); 0 = not reported (a service that predates it).
  std::uint64_t length_limit = 0;
  /// Which limit L is: "max_model_len", "kv capacity" or "max_num_batched_tokens" (the prefix of
  /// the terminal reasons it causes); empty when length_limit is 0.
  std::string length_limit_name;
  friend bool operator==(const EngineInfo&, const EngineInfo&) = default;
};

/// Faults injected by failure drills, by kind (protocol/README.md, `stats_reply.faults`).
struct FaultCounts {
  std::uint64_t crash = 0;
  std::uint64_t hang = 0;
  std::uint64_t slow = 0;
  std::uint64_t error = 0;
  std::uint64_t abort = 0;
  // KV-event faults (absent in replies of services that predate them: 0).
  std::uint64_t drop = 0;
  std::uint64_t drop_unhealable = 0;
  std::uint64_t suppress = 0;
  std::uint64_t duplicate = 0;
  std::uint64_t reorder = 0;
  std::uint64_t delay = 0;
  std::uint64_t truncate_ring = 0;
  // Metrics faults (absent in replies of services that predate them: 0).
  std::uint64_t fpm_stop = 0;
  std::uint64_t metrics_freeze = 0;
  // kv_fetch faults (absent in replies of services that predate them: 0).
  std::uint64_t fetch_not_found = 0;
  std::uint64_t fetch_late = 0;
  std::uint64_t fetch_never = 0;
  // Worker restarts (absent in replies of services that predate them: 0).
  std::uint64_t restart = 0;
  // Requests acknowledged, then left silent (absent in replies of services that predate them).
  std::uint64_t silent = 0;
  friend bool operator==(const FaultCounts&, const FaultCounts&) = default;
};

struct StatsReply {
  std::vector<RankStats> ranks;
  std::uint64_t routes = 0;  ///< live requests across all clients
  std::vector<ClientRoutes> clients;
  /// Client entries the service holds (per-client state: a client with an open route or a
  /// message it is still owed). Absent in replies of services that predate it.
  std::optional<std::uint64_t> client_entries;
  /// Pass lateness. Absent in replies of services that predate it.
  std::optional<PassTiming> timing;
  /// The service's engine. Absent in replies of services that predate it.
  std::optional<EngineInfo> engine;
  /// Injected faults. Absent when the service has no faults configured (and in replies of
  /// services that predate it).
  std::optional<FaultCounts> faults;
  friend bool operator==(const StatsReply&, const StatsReply&) = default;
};

/// client → service: ask for the cached block hashes (of one rank, or all).
struct KvSnapshotRequest {
  std::optional<std::uint32_t> dp_rank;
  friend bool operator==(const KvSnapshotRequest&, const KvSnapshotRequest&) = default;
};

struct RankBlocks {
  std::uint32_t dp_rank = 0;
  std::vector<std::uint64_t> block_hashes;  ///< strictly ascending
  /// The hashes are the rank's cache right after its KV-event batch with this sequence number
  /// (which may still be in flight: published at the end of the pass that is running). Absent:
  /// before the rank's first batch, the rank publishes no KV events, or a service that predates
  /// the field.
  std::optional<std::uint64_t> last_seq;
  friend bool operator==(const RankBlocks&, const RankBlocks&) = default;
};

struct KvSnapshotReply {
  std::vector<RankBlocks> ranks;
  friend bool operator==(const KvSnapshotReply&, const KvSnapshotReply&) = default;
};

/// prefill worker → client: the request's prompt is prefilled and its KV is held for a decode
/// worker; replaces the output stream of `id` (no tokens, no terminal entry follow).
struct Handoff {
  std::string id;
  HandoffTicket ticket;
  friend bool operator==(const Handoff&, const Handoff&) = default;
};

/// decode worker → prefill worker's handoff ROUTER: transfer `tokens` tokens of the held KV.
struct KvFetch {
  std::string key;  ///< the ticket's key
  std::uint32_t tokens = 0;
  friend bool operator==(const KvFetch&, const KvFetch&) = default;
};

enum class KvFetchResult { Ready, NotFound };  ///< wire: "ready", "not_found"

/// prefill worker → decode worker: the KV is transferred (sent at the modelled transfer end),
/// or the key names nothing held (unknown, expired, cancelled, already fetched).
struct KvFetchReply {
  std::string key;
  KvFetchResult result = KvFetchResult::NotFound;
  friend bool operator==(const KvFetchReply&, const KvFetchReply&) = default;
};

/// decode worker → prefill worker: free the held KV now (no reply).
struct KvRelease {
  std::string key;
  friend bool operator==(const KvRelease&, const KvRelease&) = default;
};

/// client → service: make LoRA adapter `name` resident on every rank now (vLLM's add_lora;
/// protocol/README.md §1.2 "LoRA adapters").
struct LoraLoad {
  std::string name;  ///< 1..kMaxLoraNameBytes bytes of UTF-8
  friend bool operator==(const LoraLoad&, const LoraLoad&) = default;
};

/// client → service: drop LoRA adapter `name` from every rank's resident adapters (vLLM's
/// remove_lora).
struct LoraUnload {
  std::string name;  ///< 1..kMaxLoraNameBytes bytes of UTF-8
  friend bool operator==(const LoraUnload&, const LoraUnload&) = default;
};

enum class LoraOp { Load, Unload };  ///< wire: "load", "unload"

/// service → client: the answer to a lora_load / lora_unload.
struct LoraReply {
  LoraOp op = LoraOp::Load;
  std::string name;
  /// Absent: done ("ok" on the wire); else why it was refused (wire: errorCodeName).
  std::optional<ErrorCode> error;
  /// With an error: names what is wrong (omitted on the wire when empty).
  std::string message;
  /// Load: some rank loaded it (it was not resident there: lora_load_ms charged). Unload: some
  /// rank held it. Always false with an error.
  bool changed = false;
  friend bool operator==(const LoraReply&, const LoraReply&) = default;
};

using ClientMessage =
    std::variant<SubmitRequest, SubmitAck, SubmitReject, OutputBatch, CancelRequest, CancelReply,
                 ErrorReply, StatsRequest, StatsReply, KvSnapshotRequest, KvSnapshotReply, Handoff,
                 KvFetch, KvFetchReply, KvRelease, LoraLoad, LoraUnload, LoraReply>;

/// The wire "type" of a message ("submit", "submit_ack", ..., "lora_reply").
std::string_view messageType(const ClientMessage& message);

/// Encoders, one per message, plus one for the variant. Output follows the key order of
/// protocol/README.md (which golden tests pin).
std::vector<std::byte> encodeClientMessage(const ClientMessage& message);
std::vector<std::byte> encodeClientMessage(const SubmitRequest& m);
std::vector<std::byte> encodeClientMessage(const SubmitAck& m);
std::vector<std::byte> encodeClientMessage(const SubmitReject& m);
std::vector<std::byte> encodeClientMessage(const OutputBatch& m);
std::vector<std::byte> encodeClientMessage(const CancelRequest& m);
std::vector<std::byte> encodeClientMessage(const CancelReply& m);
std::vector<std::byte> encodeClientMessage(const ErrorReply& m);
std::vector<std::byte> encodeClientMessage(const StatsRequest& m);
std::vector<std::byte> encodeClientMessage(const StatsReply& m);
std::vector<std::byte> encodeClientMessage(const KvSnapshotRequest& m);
std::vector<std::byte> encodeClientMessage(const KvSnapshotReply& m);
std::vector<std::byte> encodeClientMessage(const Handoff& m);
std::vector<std::byte> encodeClientMessage(const KvFetch& m);
std::vector<std::byte> encodeClientMessage(const KvFetchReply& m);
std::vector<std::byte> encodeClientMessage(const KvRelease& m);
std::vector<std::byte> encodeClientMessage(const LoraLoad& m);
std::vector<std::byte> encodeClientMessage(const LoraUnload& m);
std::vector<std::byte> encodeClientMessage(const LoraReply& m);

/// Encodes an "output" message from views; the same bytes as encodeClientMessage(OutputBatch)
/// with the same content (which is implemented on top of this).
std::vector<std::byte> encodeOutputBatch(std::span<const RequestOutputView> outputs);
/// The exact size in bytes of encodeOutputBatch(outputs).
std::size_t outputBatchSize(std::span<const RequestOutputView> outputs);
/// Writes encodeOutputBatch(outputs) into `out`, a buffer the caller allocated (e.g. the send
/// buffer of a ZeroMQ message: the message is encoded once, in place). REQUIRES: out.size() ==
/// outputBatchSize(outputs).
void encodeOutputBatchInto(std::span<const RequestOutputView> outputs, std::span<std::byte> out);

/// Decodes any v1 message. Order of checks: size/structure, map, "v" (missing → Corruption,
/// ≠ 1 → Unsupported), "type" (unknown → Corruption), then fields. Unknown keys are ignored.
/// Errors name the field ("outputs[3].tokens[0]: expected unsigned integer, got str").
Result<ClientMessage> decodeClientMessage(std::span<const std::byte> payload);

/// Best effort: the "id" of a message that may otherwise be malformed (for ErrorReply.id).
std::optional<std::string> peekRequestId(std::span<const std::byte> payload);

}  // namespace mocker::protocol
