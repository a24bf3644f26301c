// The client protocol's decoders (contract in client.h, wire form in protocol/README.md): a
// message's map checked field by field, every error naming the field. The encoders are in
// client.cpp; canonical output messages take the fast path (detail/output_fast_path.h).
#include <algorithm>
#include <cmath>

#include "base/enum_names.h"
#include "protocol/client.h"
#include "protocol/detail/client_names.h"
#include "protocol/detail/msgpack_io.h"
#include "protocol/detail/output_fast_path.h"
#include "protocol/limits.h"

namespace mocker::protocol {
namespace {

using detail::MapView;
using detail::optU32Key;
using detail::strKey;
using detail::u32Key;
using detail::uintKey;

// ---------------------------------------------------------------------------------------------
// Decoding helpers

/// `result` of a reply: one of `names`, exactly; the error lists them.
template <typename Enum, std::size_t N>
Result<Enum> resultKey(const EnumNames<Enum, N>& names, const std::string& result) {
  if (const auto v = detail::exactEnum(names, result)) return *v;
  return corruption("result: '" + std::string(detail::clipUtf8(result, 64)) + "' is not one of " +
                    enumNameList(names, ", "));
}

Result<std::string> requestId(const MapView& m, std::string_view key = "id") {
  MOCKER_TRY(const msgpack::object* o, m.require(key));
  MOCKER_TRY(const std::string_view id, detail::getStr(*o, key, kMaxRequestIdBytes));
  if (id.empty()) return invalidArgument(std::string(key) + ": must not be empty");
  return std::string(id);
}

// A handoff key: bin (or str) of exactly kHandoffKeyBytes bytes.
Result<std::string> handoffKey(const MapView& m) {
  MOCKER_TRY(const msgpack::object* o, m.require("key"));
  MOCKER_TRY(const std::string_view key, detail::getBytes(*o, "key", kMaxStringBytes));
  if (key.size() != kHandoffKeyBytes) {
    return invalidArgument("key: must be exactly " + std::to_string(kHandoffKeyBytes) +
                           " bytes, got " + std::to_string(key.size()));
  }
  return std::string(key);
}

Result<HandoffTicket> decodeTicketFields(const MapView& m);

// The ticket map `o` of field `field`; errors name both ("ticket: key: ...").
Result<HandoffTicket> decodeTicket(const msgpack::object& o, std::string_view field) {
  MOCKER_TRY(const MapView m, MapView::create(o, field));
  auto t = decodeTicketFields(m);
  if (!t) return t.error().withContext(std::string(field));
  return t;
}

Result<HandoffTicket> decodeTicketFields(const MapView& m) {
  HandoffTicket t;
  MOCKER_TRY(const msgpack::object* source, m.require("source"));
  MOCKER_TRY(const std::string_view src, detail::getStr(*source, "source", kMaxEndpointBytes));
  if (src.empty()) return invalidArgument("source: must not be empty");
  t.source = std::string(src);
  MOCKER_TRY(t.key, handoffKey(m));
  MOCKER_TRY(t.source_rank, u32Key(m, "source_rank"));
  MOCKER_TRY(t.block_size, u32Key(m, "block_size"));
  if (t.block_size == 0) return invalidArgument("block_size: must be > 0");
  MOCKER_TRY(t.prompt_len, u32Key(m, "prompt_len"));
  MOCKER_TRY(t.cached_tokens, u32Key(m, "cached_tokens"));
  if (t.cached_tokens > t.prompt_len) {
    return invalidArgument("cached_tokens: " + std::to_string(t.cached_tokens) +
                           " exceeds prompt_len " + std::to_string(t.prompt_len));
  }
  MOCKER_TRY(const msgpack::object* ms, m.require("transfer_ms"));
  MOCKER_TRY(t.transfer_ms, detail::getNumber(*ms, "transfer_ms"));
  if (!std::isfinite(t.transfer_ms) || t.transfer_ms < 0) {
    return invalidArgument("transfer_ms: expected a finite number >= 0");
  }
  return t;
}

Result<ClientMessage> decodeSubmit(const MapView& m) {
  SubmitRequest r;
  MOCKER_TRY(r.id, requestId(m));
  MOCKER_TRY(const msgpack::object* prompt, m.require("prompt"));
  MOCKER_TRY(r.prompt, detail::getU32Array(*prompt, "prompt", kMaxTokensPerRequest));
  MOCKER_TRY(r.max_tokens, u32Key(m, "max_tokens"));
  if (const auto* o = m.findNonNil("output_tokens")) {
    MOCKER_TRY(r.output_tokens, detail::getU32Array(*o, "output_tokens", kMaxTokensPerRequest));
  }
  MOCKER_TRY(r.dp_rank, optU32Key(m, "dp_rank"));
  if (const auto* o = m.findNonNil("arrival_ms")) {
    MOCKER_TRY(r.arrival_ms, detail::getNumber(*o, "arrival_ms"));
  }
  if (const auto* o = m.findNonNil("priority")) {
    MOCKER_TRY(r.priority, detail::getInt(*o, "priority"));
  }
  if (const auto* o = m.findNonNil("handoff")) {
    MOCKER_TRY(r.handoff, decodeTicket(*o, "handoff"));
  }
  if (const auto* o = m.findNonNil("lora")) {
    MOCKER_TRY(const std::string_view lora, detail::getStr(*o, "lora", kMaxLoraNameBytes));
    if (lora.empty()) return invalidArgument("lora: an adapter name must not be empty");
    r.lora = std::string(lora);
  }
  return ClientMessage{std::move(r)};
}

Result<ClientMessage> decodeHandoff(const MapView& m) {
  Handoff r;
  MOCKER_TRY(r.id, requestId(m));
  MOCKER_TRY(const msgpack::object* o, m.require("ticket"));
  MOCKER_TRY(r.ticket, decodeTicket(*o, "ticket"));
  return ClientMessage{std::move(r)};
}

Result<ClientMessage> decodeKvFetch(const MapView& m) {
  KvFetch r;
  MOCKER_TRY(r.key, handoffKey(m));
  MOCKER_TRY(r.tokens, u32Key(m, "tokens"));
  return ClientMessage{std::move(r)};
}

Result<ClientMessage> decodeKvFetchReply(const MapView& m) {
  KvFetchReply r;
  MOCKER_TRY(r.key, handoffKey(m));
  MOCKER_TRY(const std::string result, strKey(m, "result"));
  MOCKER_TRY(r.result, resultKey(detail::kKvFetchResultNames, result));
  return ClientMessage{std::move(r)};
}

Result<ClientMessage> decodeKvRelease(const MapView& m) {
  KvRelease r;
  MOCKER_TRY(r.key, handoffKey(m));
  return ClientMessage{std::move(r)};
}

// A LoRA adapter's `name`: 1..kMaxLoraNameBytes bytes of UTF-8 (the engine checks the rest).
Result<std::string> loraName(const MapView& m) {
  MOCKER_TRY(const msgpack::object* o, m.require("name"));
  MOCKER_TRY(const std::string_view name, detail::getStr(*o, "name", kMaxLoraNameBytes));
  if (name.empty()) return invalidArgument("name: an adapter name must not be empty");
  return std::string(name);
}

Result<ClientMessage> decodeLoraLoad(const MapView& m) {
  LoraLoad r;
  MOCKER_TRY(r.name, loraName(m));
  return ClientMessage{std::move(r)};
}

Result<ClientMessage> decodeLoraUnload(const MapView& m) {
  LoraUnload r;
  MOCKER_TRY(r.name, loraName(m));
  return ClientMessage{std::move(r)};
}

Result<ErrorCode> parseErrorCode(std::string_view s);

Result<ClientMessage> decodeLoraReply(const MapView& m) {
  LoraReply r;
  MOCKER_TRY(const std::string op, strKey(m, "op"));
  if (const auto v = detail::exactEnum(detail::kLoraOpNames, op)) {
    r.op = *v;
  } else {
    return corruption("op: '" + std::string(detail::clipUtf8(op, 64)) + "' is not one of " +
                      enumNameList(detail::kLoraOpNames, ", "));
  }
  MOCKER_TRY(r.name, loraName(m));
  MOCKER_TRY(const std::string result, strKey(m, "result"));
  if (result != "ok") {
    auto code = parseErrorCode(result);
    if (!code) {
      return corruption("result: '" + std::string(detail::clipUtf8(result, 64)) +
                        "' is neither 'ok' nor an error code");
    }
    r.error = *code;
  }
  MOCKER_TRY(const msgpack::object* changed, m.require("changed"));
  MOCKER_TRY(r.changed, detail::getBool(*changed, "changed"));
  if (r.changed && r.error) return invalidArgument("changed: true with result '" + result + "'");
  if (const auto* t = m.findNonNil("message")) {
    MOCKER_TRY(const std::string_view text, detail::getStr(*t, "message", kMaxStringBytes));
    r.message = std::string(text);
  }
  return ClientMessage{std::move(r)};
}

Result<ClientMessage> decodeSubmitAck(const MapView& m) {
  SubmitAck r;
  MOCKER_TRY(r.id, requestId(m));
  MOCKER_TRY(r.dp_rank, u32Key(m, "dp_rank"));
  return ClientMessage{std::move(r)};
}

Result<ClientMessage> decodeSubmitReject(const MapView& m) {
  SubmitReject r;
  MOCKER_TRY(r.id, requestId(m));
  MOCKER_TRY(r.reason, strKey(m, "reason"));
  return ClientMessage{std::move(r)};
}

Result<RequestOutput> decodeRequestOutput(const msgpack::object& o) {
  MOCKER_TRY(const MapView m, MapView::create(o, "output"));
  RequestOutput r;
  MOCKER_TRY(r.id, requestId(m));
  MOCKER_TRY(r.index, u32Key(m, "index"));
  MOCKER_TRY(const msgpack::object* tokens, m.require("tokens"));
  MOCKER_TRY(r.tokens, detail::getU32Array(*tokens, "tokens", kMaxTokensPerRequest));
  if (const auto* f = m.findNonNil("finish")) {
    MOCKER_TRY(const std::string_view name, detail::getStr(*f, "finish", kMaxStringBytes));
    MOCKER_TRY(r.finish, parseFinishReason(name));
  }
  if (const auto* t = m.findNonNil("reason")) {
    MOCKER_TRY(const std::string_view text, detail::getStr(*t, "reason", kMaxStringBytes));
    r.reason = std::string(text);
  }
  MOCKER_TRY(r.cached_tokens, optU32Key(m, "cached_tokens"));
  if (!r.finish && r.tokens.empty()) {
    return invalidArgument("tokens: empty on a non-terminal output (no 'finish')");
  }
  return r;
}

Result<ClientMessage> decodeOutput(const MapView& m) {
  MOCKER_TRY(const msgpack::object* list, m.require("outputs"));
  MOCKER_TRY(const auto items, detail::getArray(*list, "outputs", kMaxOutputsPerMessage));
  OutputBatch batch;
  batch.outputs.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto out = decodeRequestOutput(items[i]);
    if (!out) return out.error().withContext(detail::indexed("outputs", i));
    batch.outputs.push_back(std::move(out).value());
  }
  return ClientMessage{std::move(batch)};
}

Result<ClientMessage> decodeCancel(const MapView& m) {
  CancelRequest r;
  MOCKER_TRY(r.id, requestId(m));
  if (const auto* c = m.findNonNil("client")) {
    MOCKER_TRY(const std::string_view client, detail::getBytes(*c, "client", kMaxRoutingIdBytes));
    if (client.empty()) return invalidArgument("client: routing id must not be empty");
    r.client = std::string(client);
  }
  return ClientMessage{std::move(r)};
}

Result<ClientMessage> decodeCancelReply(const MapView& m) {
  CancelReply r;
  MOCKER_TRY(r.id, requestId(m));
  MOCKER_TRY(const std::string result, strKey(m, "result"));
  MOCKER_TRY(r.result, resultKey(detail::kCancelResultNames, result));
  return ClientMessage{std::move(r)};
}

Result<ErrorCode> parseErrorCode(std::string_view s) {
  for (ErrorCode c : {ErrorCode::InvalidArgument, ErrorCode::Corruption, ErrorCode::NotFound,
                      ErrorCode::Unsupported, ErrorCode::IoError, ErrorCode::Internal,
                      ErrorCode::PermissionDenied, ErrorCode::ResourceExhausted}) {
    if (s == errorCodeName(c)) return c;
  }
  return corruption("code: '" + std::string(detail::clipUtf8(s, 64)) +
                    "' is not a known error code");
}

Result<ClientMessage> decodeError(const MapView& m) {
  ErrorReply r;
  MOCKER_TRY(const std::string code, strKey(m, "code"));
  MOCKER_TRY(r.code, parseErrorCode(code));
  MOCKER_TRY(r.message, strKey(m, "message"));
  if (m.findNonNil("id") != nullptr) {
    MOCKER_TRY(r.id, requestId(m));
  }
  return ClientMessage{std::move(r)};
}

Result<RankStats> decodeRankStats(const msgpack::object& o) {
  MOCKER_TRY(const MapView m, MapView::create(o, "rank"));
  RankStats r;
  MOCKER_TRY(r.dp_rank, u32Key(m, "dp_rank"));
  MOCKER_TRY(r.active_blocks, uintKey(m, "active_blocks"));
  MOCKER_TRY(r.total_blocks, uintKey(m, "total_blocks"));
  MOCKER_TRY(const msgpack::object* usage, m.require("kv_usage"));
  MOCKER_TRY(r.kv_usage, detail::getNumber(*usage, "kv_usage"));
  MOCKER_TRY(r.running, uintKey(m, "running"));
  MOCKER_TRY(r.waiting, uintKey(m, "waiting"));
  MOCKER_TRY(r.preemptions, uintKey(m, "preemptions"));
  MOCKER_TRY(r.prefix_queries_tokens, uintKey(m, "prefix_queries_tokens"));
  MOCKER_TRY(r.prefix_hit_tokens, uintKey(m, "prefix_hit_tokens"));
  MOCKER_TRY(r.held, optU64Key(m, "held"));
  MOCKER_TRY(r.pending_handoffs, optU64Key(m, "pending_handoffs"));
  MOCKER_TRY(r.handoff_expired, optU64Key(m, "handoff_expired"));
  return r;
}

Result<ClientRoutes> decodeClientRoutes(const msgpack::object& o) {
  MOCKER_TRY(const MapView m, MapView::create(o, "client"));
  ClientRoutes r;
  MOCKER_TRY(const msgpack::object* c, m.require("client"));
  MOCKER_TRY(const std::string_view client, detail::getBytes(*c, "client", kMaxRoutingIdBytes));
  r.client = std::string(client);
  MOCKER_TRY(r.routes, uintKey(m, "routes"));
  return r;
}

// Decodes an array of T with `fn`, prefixing errors with "<field>[i]".
template <typename T, typename Fn>
Result<std::vector<T>> decodeList(const MapView& m, std::string_view field, std::size_t max,
                                  Fn&& fn) {
  MOCKER_TRY(const msgpack::object* list, m.require(field));
  MOCKER_TRY(const auto items, detail::getArray(*list, field, max));
  std::vector<T> out;
  out.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    Result<T> item = fn(items[i]);
    if (!item) return item.error().withContext(detail::indexed(field, i));
    out.push_back(std::move(item).value());
  }
  return out;
}

Result<PassTiming> decodePassTiming(const msgpack::object& o) {
  MOCKER_TRY(const MapView m, MapView::create(o, "timing"));
  PassTiming t;
  MOCKER_TRY(t.passes, uintKey(m, "passes"));
  MOCKER_TRY(t.resyncs, uintKey(m, "resyncs"));
  const auto ms = [&m](std::string_view key) -> Result<double> {
    MOCKER_TRY(const msgpack::object* v, m.require(key));
    MOCKER_TRY(const double d, detail::getNumber(*v, key));
    if (!std::isfinite(d) || d < 0) {
      return Error{ErrorCode::Corruption,
                   "timing." + std::string(key) + ": expected a finite number >= 0"};
    }
    return d;
  };
  MOCKER_TRY(t.lateness_mean_ms, ms("lateness_mean_ms"));
  MOCKER_TRY(t.lateness_p50_ms, ms("lateness_p50_ms"));
  MOCKER_TRY(t.lateness_p99_ms, ms("lateness_p99_ms"));
  MOCKER_TRY(t.lateness_max_ms, ms("lateness_max_ms"));
  return t;
}

Result<FaultCounts> decodeFaultCounts(const msgpack::object& o) {
  MOCKER_TRY(const MapView m, MapView::create(o, "faults"));
  FaultCounts f;
  for (std::size_t i = 0; i < detail::kFaultCountKeys.size(); ++i) {
    const auto& [key, member] = detail::kFaultCountKeys[i];
    if (i < detail::kRequiredFaultCountKeys) {
      auto v = uintKey(m, key);
      if (!v) return v.error().withContext("faults");
      f.*member = *v;
    } else {
      auto v = detail::optU64Key(m, key);
      if (!v) return v.error().withContext("faults");
      f.*member = v->value_or(0);
    }
  }
  return f;
}

Result<EngineInfo> decodeEngineInfo(const msgpack::object& o) {
  MOCKER_TRY(const MapView m, MapView::create(o, "engine"));
  EngineInfo e;
  MOCKER_TRY(e.engine_type, strKey(m, "engine_type"));
  MOCKER_TRY(e.worker_type, strKey(m, "worker_type"));
  MOCKER_TRY(e.block_size, u32Key(m, "block_size"));
  if (e.block_size == 0) return Error{ErrorCode::Corruption, "engine.block_size: expected >= 1"};
  MOCKER_TRY(const msgpack::object* v, m.require("speedup_ratio"));
  MOCKER_TRY(e.speedup_ratio, detail::getNumber(*v, "speedup_ratio"));
  if (!std::isfinite(e.speedup_ratio) || e.speedup_ratio < 0) {
    return Error{ErrorCode::Corruption, "engine.speedup_ratio: expected a finite number >= 0"};
  }
  auto limit = detail::optU64Key(m, "length_limit");
  if (!limit) return limit.error().withContext("engine");
  if (*limit) {
    if (**limit == 0) return Error{ErrorCode::Corruption, "engine.length_limit: expected >= 1"};
    e.length_limit = **limit;
    MOCKER_TRY(e.length_limit_name, strKey(m, "length_limit_name"));
    if (e.length_limit_name != "max_model_len" && e.length_limit_name != "kv capacity" &&
        e.length_limit_name != "max_num_batched_tokens") {
      return Error{ErrorCode::Corruption,
                   "engine.length_limit_name: expected \"max_model_len\", \"kv capacity\" or "
                   "\"max_num_batched_tokens\""};
    }
  }
  return e;
}

Result<ClientMessage> decodeStatsReply(const MapView& m) {
  StatsReply r;
  MOCKER_TRY(r.ranks, decodeList<RankStats>(m, "ranks", kMaxRanks, decodeRankStats));
  MOCKER_TRY(r.routes, uintKey(m, "routes"));
  MOCKER_TRY(r.clients,
             decodeList<ClientRoutes>(m, "clients", kMaxStatsClients, decodeClientRoutes));
  if (m.findNonNil("client_entries") != nullptr) {
    MOCKER_TRY(r.client_entries, uintKey(m, "client_entries"));
  }
  if (const msgpack::object* t = m.findNonNil("timing")) {
    MOCKER_TRY(r.timing, decodePassTiming(*t));
  }
  if (const msgpack::object* e = m.findNonNil("engine")) {
    MOCKER_TRY(r.engine, decodeEngineInfo(*e));
  }
  if (const msgpack::object* f = m.findNonNil("faults")) {
    MOCKER_TRY(r.faults, decodeFaultCounts(*f));
  }
  return ClientMessage{std::move(r)};
}

Result<ClientMessage> decodeKvSnapshotRequest(const MapView& m) {
  KvSnapshotRequest r;
  MOCKER_TRY(r.dp_rank, optU32Key(m, "dp_rank"));
  return ClientMessage{r};
}

Result<RankBlocks> decodeRankBlocks(const msgpack::object& o) {
  MOCKER_TRY(const MapView m, MapView::create(o, "rank"));
  RankBlocks r;
  MOCKER_TRY(r.dp_rank, u32Key(m, "dp_rank"));
  MOCKER_TRY(const msgpack::object* list, m.require("block_hashes"));
  MOCKER_TRY(const auto items, detail::getArray(*list, "block_hashes", kMaxSnapshotBlocksPerRank));
  r.block_hashes.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    MOCKER_TRY(const std::uint64_t h,
               detail::getUint(items[i], detail::indexed("block_hashes", i)));
    if (!r.block_hashes.empty() && h <= r.block_hashes.back()) {
      return invalidArgument(detail::indexed("block_hashes", i) +
                             ": hashes must be strictly ascending");
    }
    r.block_hashes.push_back(h);
  }
  MOCKER_TRY(r.last_seq, optU64Key(m, "last_seq"));
  return r;
}

Result<ClientMessage> decodeKvSnapshotReply(const MapView& m) {
  KvSnapshotReply r;
  MOCKER_TRY(r.ranks, decodeList<RankBlocks>(m, "ranks", kMaxRanks, decodeRankBlocks));
  return ClientMessage{std::move(r)};
}

}  // namespace

Result<ClientMessage> decodeClientMessage(std::span<const std::byte> payload) {
  // Output messages arrive at token rate; their canonical form skips the object tree.
  if (auto batch = detail::decodeCanonicalOutput(payload)) return ClientMessage{std::move(*batch)};
  // A plain submit's prompt (thousands of tokens) is read straight into its vector.
  if (auto submit = detail::decodeCanonicalSubmit(payload))
    return ClientMessage{std::move(*submit)};
  return detail::decodeClientMessageGeneral(payload);
}

Result<ClientMessage> detail::decodeClientMessageGeneral(std::span<const std::byte> payload) {
  MOCKER_TRY(const detail::Unpacked unpacked, detail::unpackMessage(payload, "message"));
  MOCKER_TRY(const MapView m, MapView::create(unpacked.root(), "message"));
  MOCKER_TRY(const msgpack::object* v, m.require("v"));
  // Any integer but 1 is another protocol version (a negative one too); a non-integer is not
  // a version at all.
  if (v->type == msgpack::type::NEGATIVE_INTEGER ||
      (v->type == msgpack::type::POSITIVE_INTEGER && v->via.u64 != kClientProtocolVersion)) {
    const std::string version = v->type == msgpack::type::NEGATIVE_INTEGER
                                    ? std::to_string(v->via.i64)
                                    : std::to_string(v->via.u64);
    return Error{ErrorCode::Unsupported, "v: protocol version " + version +
                                             " is not supported (this peer speaks version " +
                                             std::to_string(kClientProtocolVersion) + ")"};
  }
  MOCKER_TRY_VOID(detail::getUint(*v, "v"));
  MOCKER_TRY(const msgpack::object* type_obj, m.require("type"));
  MOCKER_TRY(const std::string_view type, detail::getStr(*type_obj, "type", kMaxStringBytes));
  if (type == "submit") return decodeSubmit(m);
  if (type == "output") return decodeOutput(m);
  if (type == "cancel") return decodeCancel(m);
  if (type == "submit_ack") return decodeSubmitAck(m);
  if (type == "submit_reject") return decodeSubmitReject(m);
  if (type == "cancel_reply") return decodeCancelReply(m);
  if (type == "error") return decodeError(m);
  if (type == "stats") return ClientMessage{StatsRequest{}};
  if (type == "stats_reply") return decodeStatsReply(m);
  if (type == "kv_snapshot") return decodeKvSnapshotRequest(m);
  if (type == "kv_snapshot_reply") return decodeKvSnapshotReply(m);
  if (type == "handoff") return decodeHandoff(m);
  if (type == "kv_fetch") return decodeKvFetch(m);
  if (type == "kv_fetch_reply") return decodeKvFetchReply(m);
  if (type == "kv_release") return decodeKvRelease(m);
  if (type == "lora_load") return decodeLoraLoad(m);
  if (type == "lora_unload") return decodeLoraUnload(m);
  if (type == "lora_reply") return decodeLoraReply(m);
  return corruption("type: unknown message type '" + std::string(detail::clipUtf8(type, 64)) + "'");
}

std::optional<std::string> peekRequestId(std::span<const std::byte> payload) {
  auto unpacked = detail::unpackMessage(payload, "message");
  if (!unpacked) return std::nullopt;
  auto m = MapView::create(unpacked->root(), "message");
  if (!m) return std::nullopt;
  auto id = requestId(*m);
  if (!id) return std::nullopt;
  return std::move(id).value();
}

}  // namespace mocker::protocol
