// The client protocol's encoders and names (contract in client.h, wire form in
// protocol/README.md); the decoders are in client_decode.cpp.
#include "protocol/client.h"

#include <algorithm>
#include <cmath>

#include "base/enum_names.h"
#include "protocol/detail/client_names.h"
#include "protocol/detail/msgpack_io.h"
#include "protocol/detail/output_fast_path.h"
#include "protocol/limits.h"

namespace mocker::protocol {
namespace {

using detail::packBin;
using detail::Packer;
using detail::packStr;

// ---------------------------------------------------------------------------------------------
// Encoding

// Appends to a fresh vector; `fn(pk)` writes the fields after "v" and "type".
template <typename Fn>
std::vector<std::byte> encodeMap(std::string_view type, std::uint32_t num_fields, Fn&& fn,
                                 std::size_t reserve = 64) {
  std::vector<std::byte> out;
  out.reserve(reserve);
  detail::ByteSink sink(out);
  Packer pk(sink);
  pk.pack_map(2 + num_fields);
  packStr(pk, "v");
  pk.pack_uint64(kClientProtocolVersion);
  packStr(pk, "type");
  packStr(pk, type);
  fn(pk);
  sink.finish();
  return out;
}

void packTokens(Packer& pk, std::span<const std::uint32_t> tokens) {
  pk.pack_array(static_cast<std::uint32_t>(tokens.size()));
  for (std::uint32_t t : tokens) pk.pack_uint32(t);
}

void packTicket(Packer& pk, const HandoffTicket& t) {
  pk.pack_map(7);
  packStr(pk, "source");
  packStr(pk, t.source);
  packStr(pk, "key");
  packBin(pk, t.key);
  packStr(pk, "source_rank");
  pk.pack_uint32(t.source_rank);
  packStr(pk, "block_size");
  pk.pack_uint32(t.block_size);
  packStr(pk, "prompt_len");
  pk.pack_uint32(t.prompt_len);
  packStr(pk, "cached_tokens");
  pk.pack_uint32(t.cached_tokens);
  packStr(pk, "transfer_ms");
  pk.packF64(t.transfer_ms);
}

}  // namespace

std::string_view toString(FinishReason reason) {
  return enumName(detail::kFinishReasonNames, reason);
}

Result<FinishReason> parseFinishReason(std::string_view s) {
  // Exact spelling on the wire (enumFromName would accept any case).
  if (const auto reason = detail::exactEnum(detail::kFinishReasonNames, s)) return *reason;
  return corruption("finish: '" + std::string(detail::clipUtf8(s, 64)) + "' is not one of " +
                    enumNameList(detail::kFinishReasonNames, ", "));
}

std::string_view messageType(const ClientMessage& message) {
  static constexpr std::string_view kNames[] = {"submit",
                                                "submit_ack",
                                                "submit_reject",
                                                "output",
                                                "cancel",
                                                "cancel_reply",
                                                "error",
                                                "stats",
                                                "stats_reply",
                                                "kv_snapshot",
                                                "kv_snapshot_reply",
                                                "handoff",
                                                "kv_fetch",
                                                "kv_fetch_reply",
                                                "kv_release",
                                                "lora_load",
                                                "lora_unload",
                                                "lora_reply"};
  static_assert(std::size(kNames) == std::variant_size_v<ClientMessage>);
  return kNames[message.index()];
}

std::vector<std::byte> encodeClientMessage(const ClientMessage& message) {
  return std::visit([](const auto& m) { return encodeClientMessage(m); }, message);
}

std::vector<std::byte> encodeClientMessage(const SubmitRequest& m) {
  const std::uint32_t n = 3 + (m.output_tokens ? 1u : 0u) + (m.dp_rank ? 1u : 0u) +
                          (m.arrival_ms ? 1u : 0u) + (m.priority ? 1u : 0u) +
                          (m.handoff ? 1u : 0u) + (m.lora ? 1u : 0u);
  const std::size_t reserve =
      64 + m.id.size() + 5 * (m.prompt.size() + (m.output_tokens ? m.output_tokens->size() : 0)) +
      (m.handoff ? 160 + m.handoff->source.size() : 0) + (m.lora ? 8 + m.lora->size() : 0);
  return encodeMap(
      "submit", n,
      [&](Packer& pk) {
        packStr(pk, "id");
        packStr(pk, m.id);
        packStr(pk, "prompt");
        packTokens(pk, m.prompt);
        packStr(pk, "max_tokens");
        pk.pack_uint32(m.max_tokens);
        if (m.output_tokens) {
          packStr(pk, "output_tokens");
          packTokens(pk, *m.output_tokens);
        }
        if (m.dp_rank) {
          packStr(pk, "dp_rank");
          pk.pack_uint32(*m.dp_rank);
        }
        if (m.arrival_ms) {
          packStr(pk, "arrival_ms");
          pk.packF64(*m.arrival_ms);
        }
        if (m.priority) {
          packStr(pk, "priority");
          pk.pack_int64(*m.priority);
        }
        if (m.handoff) {
          packStr(pk, "handoff");
          packTicket(pk, *m.handoff);
        }
        if (m.lora) {
          packStr(pk, "lora");
          packStr(pk, *m.lora);
        }
      },
      reserve);
}

std::vector<std::byte> encodeClientMessage(const SubmitAck& m) {
  return encodeMap("submit_ack", 2, [&](Packer& pk) {
    packStr(pk, "id");
    packStr(pk, m.id);
    packStr(pk, "dp_rank");
    pk.pack_uint32(m.dp_rank);
  });
}

std::vector<std::byte> encodeClientMessage(const SubmitReject& m) {
  return encodeMap("submit_reject", 2, [&](Packer& pk) {
    packStr(pk, "id");
    packStr(pk, m.id);
    packStr(pk, "reason");
    packStr(pk, m.reason);
  });
}

std::vector<std::byte> encodeOutputBatch(std::span<const RequestOutputView> outputs) {
  return detail::encodeCanonicalOutput(outputs);
}

std::size_t outputBatchSize(std::span<const RequestOutputView> outputs) {
  return detail::canonicalOutputSize(outputs);
}

void encodeOutputBatchInto(std::span<const RequestOutputView> outputs, std::span<std::byte> out) {
  detail::encodeCanonicalOutputInto(outputs, out);
}

std::vector<std::byte> encodeClientMessage(const OutputBatch& m) {
  std::vector<RequestOutputView> views;
  views.reserve(m.outputs.size());
  for (const RequestOutput& o : m.outputs) {
    views.push_back({o.id, o.index, o.tokens, o.finish, o.reason, o.cached_tokens});
  }
  return encodeOutputBatch(views);
}

std::vector<std::byte> encodeClientMessage(const CancelRequest& m) {
  return encodeMap("cancel", m.client ? 2 : 1, [&](Packer& pk) {
    packStr(pk, "id");
    packStr(pk, m.id);
    if (m.client) {
      packStr(pk, "client");
      packBin(pk, *m.client);
    }
  });
}

std::vector<std::byte> encodeClientMessage(const CancelReply& m) {
  return encodeMap("cancel_reply", 2, [&](Packer& pk) {
    packStr(pk, "id");
    packStr(pk, m.id);
    packStr(pk, "result");
    packStr(pk, enumName(detail::kCancelResultNames, m.result));
  });
}

std::vector<std::byte> encodeClientMessage(const ErrorReply& m) {
  return encodeMap("error", m.id ? 3 : 2, [&](Packer& pk) {
    packStr(pk, "code");
    packStr(pk, errorCodeName(m.code));
    packStr(pk, "message");
    packStr(pk, m.message);
    if (m.id) {
      packStr(pk, "id");
      packStr(pk, *m.id);
    }
  });
}

std::vector<std::byte> encodeClientMessage(const StatsRequest& /*m*/) {
  return encodeMap("stats", 0, [](Packer& /*pk*/) {});
}

std::vector<std::byte> encodeClientMessage(const StatsReply& m) {
  return encodeMap(
      "stats_reply",
      3u + (m.client_entries ? 1u : 0u) + (m.timing ? 1u : 0u) + (m.engine ? 1u : 0u) +
          (m.faults ? 1u : 0u),
      [&](Packer& pk) {
        packStr(pk, "ranks");
        pk.pack_array(static_cast<std::uint32_t>(m.ranks.size()));
        for (const RankStats& r : m.ranks) {
          pk.pack_map(9u + (r.held ? 1u : 0u) + (r.pending_handoffs ? 1u : 0u) +
                      (r.handoff_expired ? 1u : 0u));
          packStr(pk, "dp_rank");
          pk.pack_uint32(r.dp_rank);
          packStr(pk, "active_blocks");
          pk.pack_uint64(r.active_blocks);
          packStr(pk, "total_blocks");
          pk.pack_uint64(r.total_blocks);
          packStr(pk, "kv_usage");
          pk.packF64(r.kv_usage);
          packStr(pk, "running");
          pk.pack_uint64(r.running);
          packStr(pk, "waiting");
          pk.pack_uint64(r.waiting);
          packStr(pk, "preemptions");
          pk.pack_uint64(r.preemptions);
          packStr(pk, "prefix_queries_tokens");
          pk.pack_uint64(r.prefix_queries_tokens);
          packStr(pk, "prefix_hit_tokens");
          pk.pack_uint64(r.prefix_hit_tokens);
          for (const auto& [name, value] :
               {std::pair{"held", r.held}, std::pair{"pending_handoffs", r.pending_handoffs},
                std::pair{"handoff_expired", r.handoff_expired}}) {
            if (!value) continue;
            packStr(pk, name);
            pk.pack_uint64(*value);
          }
        }
        packStr(pk, "routes");
        pk.pack_uint64(m.routes);
        packStr(pk, "clients");
        pk.pack_array(static_cast<std::uint32_t>(m.clients.size()));
        for (const ClientRoutes& c : m.clients) {
          pk.pack_map(2);
          packStr(pk, "client");
          packBin(pk, c.client);
          packStr(pk, "routes");
          pk.pack_uint64(c.routes);
        }
        if (m.client_entries) {
          packStr(pk, "client_entries");
          pk.pack_uint64(*m.client_entries);
        }
        if (m.timing) {
          packStr(pk, "timing");
          pk.pack_map(6);
          packStr(pk, "passes");
          pk.pack_uint64(m.timing->passes);
          packStr(pk, "resyncs");
          pk.pack_uint64(m.timing->resyncs);
          packStr(pk, "lateness_mean_ms");
          pk.packF64(m.timing->lateness_mean_ms);
          packStr(pk, "lateness_p50_ms");
          pk.packF64(m.timing->lateness_p50_ms);
          packStr(pk, "lateness_p99_ms");
          pk.packF64(m.timing->lateness_p99_ms);
          packStr(pk, "lateness_max_ms");
          pk.packF64(m.timing->lateness_max_ms);
        }
        if (m.engine) {
          packStr(pk, "engine");
          pk.pack_map(m.engine->length_limit != 0 ? 6 : 4);
          packStr(pk, "engine_type");
          packStr(pk, m.engine->engine_type);
          packStr(pk, "worker_type");
          packStr(pk, m.engine->worker_type);
          packStr(pk, "block_size");
          pk.pack_uint32(m.engine->block_size);
          packStr(pk, "speedup_ratio");
          pk.packF64(m.engine->speedup_ratio);
          if (m.engine->length_limit != 0) {
            packStr(pk, "length_limit");
            pk.pack_uint64(m.engine->length_limit);
            packStr(pk, "length_limit_name");
            packStr(pk, m.engine->length_limit_name);
          }
        }
        if (m.faults) {
          packStr(pk, "faults");
          pk.pack_map(static_cast<std::uint32_t>(detail::kFaultCountKeys.size()));
          for (const auto& [key, member] : detail::kFaultCountKeys) {
            packStr(pk, key);
            pk.pack_uint64((*m.faults).*member);
          }
        }
      },
      384 + 200 * m.ranks.size() + 32 * m.clients.size());
}

std::vector<std::byte> encodeClientMessage(const KvSnapshotRequest& m) {
  return encodeMap("kv_snapshot", m.dp_rank ? 1 : 0, [&](Packer& pk) {
    if (m.dp_rank) {
      packStr(pk, "dp_rank");
      pk.pack_uint32(*m.dp_rank);
    }
  });
}

std::vector<std::byte> encodeClientMessage(const KvSnapshotReply& m) {
  std::size_t reserve = 64;
  for (const RankBlocks& r : m.ranks) reserve += 48 + 9 * r.block_hashes.size();
  return encodeMap(
      "kv_snapshot_reply", 1,
      [&](Packer& pk) {
        packStr(pk, "ranks");
        pk.pack_array(static_cast<std::uint32_t>(m.ranks.size()));
        for (const RankBlocks& r : m.ranks) {
          // REQUIRES: strictly ascending hashes (the decoder refuses anything else).
          MOCKER_DCHECK(std::adjacent_find(r.block_hashes.begin(), r.block_hashes.end(),
                                           std::greater_equal<>()) == r.block_hashes.end());
          pk.pack_map(r.last_seq ? 3 : 2);
          packStr(pk, "dp_rank");
          pk.pack_uint32(r.dp_rank);
          packStr(pk, "block_hashes");
          pk.pack_array(static_cast<std::uint32_t>(r.block_hashes.size()));
          for (std::uint64_t h : r.block_hashes) pk.pack_uint64(h);
          if (r.last_seq) {
            packStr(pk, "last_seq");
            pk.pack_uint64(*r.last_seq);
          }
        }
      },
      reserve);
}

std::vector<std::byte> encodeClientMessage(const Handoff& m) {
  return encodeMap(
      "handoff", 2,
      [&](Packer& pk) {
        packStr(pk, "id");
        packStr(pk, m.id);
        packStr(pk, "ticket");
        packTicket(pk, m.ticket);
      },
      192 + m.id.size() + m.ticket.source.size());
}

std::vector<std::byte> encodeClientMessage(const KvFetch& m) {
  return encodeMap("kv_fetch", 2, [&](Packer& pk) {
    packStr(pk, "key");
    packBin(pk, m.key);
    packStr(pk, "tokens");
    pk.pack_uint32(m.tokens);
  });
}

std::vector<std::byte> encodeClientMessage(const KvFetchReply& m) {
  return encodeMap("kv_fetch_reply", 2, [&](Packer& pk) {
    packStr(pk, "key");
    packBin(pk, m.key);
    packStr(pk, "result");
    packStr(pk, enumName(detail::kKvFetchResultNames, m.result));
  });
}

std::vector<std::byte> encodeClientMessage(const KvRelease& m) {
  return encodeMap("kv_release", 1, [&](Packer& pk) {
    packStr(pk, "key");
    packBin(pk, m.key);
  });
}

std::vector<std::byte> encodeClientMessage(const LoraLoad& m) {
  return encodeMap(
      "lora_load", 1,
      [&](Packer& pk) {
        packStr(pk, "name");
        packStr(pk, m.name);
      },
      48 + m.name.size());
}

std::vector<std::byte> encodeClientMessage(const LoraUnload& m) {
  return encodeMap(
      "lora_unload", 1,
      [&](Packer& pk) {
        packStr(pk, "name");
        packStr(pk, m.name);
      },
      48 + m.name.size());
}

std::vector<std::byte> encodeClientMessage(const LoraReply& m) {
  const bool with_message = m.error && !m.message.empty();
  return encodeMap(
      "lora_reply", with_message ? 5 : 4,
      [&](Packer& pk) {
        packStr(pk, "op");
        packStr(pk, enumName(detail::kLoraOpNames, m.op));
        packStr(pk, "name");
        packStr(pk, m.name);
        packStr(pk, "result");
        packStr(pk, m.error ? std::string_view(errorCodeName(*m.error)) : "ok");
        packStr(pk, "changed");
        if (m.changed && !m.error) {
          pk.pack_true();
        } else {
          pk.pack_false();
        }
        if (with_message) {
          packStr(pk, "message");
          packStr(pk, m.message);
        }
      },
      96 + m.name.size() + m.message.size());
}

}  // namespace mocker::protocol
