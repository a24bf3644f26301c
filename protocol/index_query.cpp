#include "protocol/index_query.h"

#include <string_view>

#include "protocol/detail/msgpack_io.h"
#include "protocol/limits.h"

namespace mocker::index {
namespace {

using protocol::detail::getArray;
using protocol::detail::getBool;
using protocol::detail::getHash;
using protocol::detail::getStr;
using protocol::detail::getUint;
using protocol::detail::indexed;
using protocol::detail::MapView;
using protocol::detail::optU32Key;
using protocol::detail::optU64Key;
using protocol::detail::Packer;
using protocol::detail::packStr;
using protocol::detail::strKey;
using protocol::detail::u32Key;
using protocol::detail::uintKey;

// ---------------------------------------------------------------------------------------------
// Encoding

template <typename T>
void packArray(Packer& pk, const std::vector<T>& v) {
  pk.pack_array(static_cast<std::uint32_t>(v.size()));
  for (const T& x : v) pk.pack(x);
}

/// Map header for "type" + optional id + `n` further keys, then "type" and "id".
void beginMap(Packer& pk, std::string_view type, const std::optional<std::string>& id,
              std::uint32_t n) {
  pk.pack_map(1 + (id ? 1 : 0) + n);
  packStr(pk, "type");
  packStr(pk, type);
  if (id) {
    packStr(pk, "id");
    packStr(pk, *id);
  }
}

/// Packs into a fresh vector with `fn(pk)`.
template <typename Fn>
std::vector<std::byte> encode(Fn&& fn) {
  std::vector<std::byte> out;
  protocol::detail::ByteSink sink(out);
  Packer pk(sink);
  fn(pk);
  sink.finish();
  return out;
}

// ---------------------------------------------------------------------------------------------
// Decoding

/// A message over kMaxQueryBytes is refused before the structural pre-scan.
Result<protocol::detail::Unpacked> unpack(std::span<const std::byte> payload,
                                          std::string_view what) {
  if (payload.size() > kMaxQueryBytes) {
    return invalidArgument(std::string(what) + ": message of " + std::to_string(payload.size()) +
                           " bytes exceeds the limit of " + std::to_string(kMaxQueryBytes));
  }
  return protocol::detail::unpackMessage(payload, what);
}

Result<std::vector<std::uint64_t>> getHashes(const msgpack::object& o, std::string_view field,
                                             std::size_t max) {
  MOCKER_TRY(const auto items, getArray(o, field, max));
  std::vector<std::uint64_t> out;
  out.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    MOCKER_TRY(const std::uint64_t h, getHash(items[i], indexed(field, i)));
    out.push_back(h);
  }
  return out;
}

Result<std::vector<std::uint64_t>> hashesKey(const MapView& m, std::string_view key) {
  MOCKER_TRY(const msgpack::object* o, m.require(key));
  return getHashes(*o, key, protocol::kMaxArrayElements);
}

/// Absent or nil ⇒ nullopt; otherwise a str of at most 256 bytes.
Result<std::optional<std::string>> optId(const MapView& m) {
  const msgpack::object* o = m.findNonNil("id");
  if (o == nullptr) return std::optional<std::string>{};
  MOCKER_TRY(const std::string_view s, getStr(*o, "id", protocol::kMaxRequestIdBytes));
  return std::optional<std::string>(s);
}

/// "lora": absent or nil ⇒ nullopt; otherwise an adapter name as the engine accepts one
/// (1..kMaxLoraNameBytes bytes of UTF-8, no ASCII control characters).
Result<std::optional<std::string>> optLora(const MapView& m) {
  const msgpack::object* o = m.findNonNil("lora");
  if (o == nullptr) return std::optional<std::string>{};
  MOCKER_TRY(const std::string_view s, getStr(*o, "lora", protocol::kMaxLoraNameBytes));
  if (s.empty()) return invalidArgument("lora: an adapter name must not be empty");
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x20 || b == 0x7f) {
      return invalidArgument("lora: control character at byte " + std::to_string(i) +
                             " of the adapter name");
    }
  }
  return std::optional<std::string>(s);
}

/// A list of maps, each decoded with `fn`; errors are prefixed "<key>[i]".
template <typename T, typename Fn>
Result<std::vector<T>> listKey(const MapView& m, std::string_view key, Fn&& fn) {
  MOCKER_TRY(const msgpack::object* o, m.require(key));
  MOCKER_TRY(const auto items, getArray(*o, key, protocol::kMaxArrayElements));
  std::vector<T> out;
  out.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    Result<T> item = [&]() -> Result<T> {
      MOCKER_TRY(const MapView entry, MapView::create(items[i], "entry"));
      return fn(entry);
    }();
    if (!item) return item.error().withContext(indexed(key, i));
    out.push_back(std::move(item).value());
  }
  return out;
}

Result<OverlapQuery> decodeOverlap(const MapView& m) {
  OverlapQuery q;
  MOCKER_TRY(q.id, optId(m));
  const msgpack::object* tokens = m.find("tokens");
  const msgpack::object* hashes = m.find("block_hashes");
  if ((tokens == nullptr) == (hashes == nullptr)) {
    return invalidArgument("overlap: give exactly one of \"tokens\" and \"block_hashes\"");
  }
  if (tokens != nullptr) {
    MOCKER_TRY(q.tokens, protocol::detail::getU32Array(*tokens, "tokens", kMaxQueryTokens));
  } else {
    MOCKER_TRY(q.block_hashes, getHashes(*hashes, "block_hashes", kMaxQueryHashes));
  }
  MOCKER_TRY(q.block_size, optU32Key(m, "block_size"));
  if (q.block_size && (*q.block_size == 0 || *q.block_size > kMaxQueryBlockSize)) {
    return invalidArgument("block_size: must be in 1.." + std::to_string(kMaxQueryBlockSize) +
                           " (got " + std::to_string(*q.block_size) + ")");
  }
  MOCKER_TRY(q.hash_seed, optU64Key(m, "hash_seed"));
  MOCKER_TRY(q.chain_seed, optU64Key(m, "chain_seed"));
  MOCKER_TRY(q.lora, optLora(m));
  if (q.lora && hashes != nullptr) {
    return invalidArgument("lora: only with \"tokens\" (block hashes already carry their adapter)");
  }
  if (const msgpack::object* with_cached = m.find("with_cached")) {
    if (with_cached->type != msgpack::type::BOOLEAN) {
      return invalidArgument("with_cached: expected a boolean");
    }
    q.with_cached = with_cached->via.boolean;
  }
  if (const msgpack::object* tiers = m.find("tiers")) {
    if (tiers->type != msgpack::type::BOOLEAN) return invalidArgument("tiers: expected a boolean");
    q.tiers = tiers->via.boolean;
  }
  return q;
}

Result<RankOverlap> decodeRankOverlap(const MapView& m) {
  RankOverlap r;
  MOCKER_TRY(r.dp_rank, u32Key(m, "dp_rank"));
  MOCKER_TRY(r.blocks, u32Key(m, "blocks"));
  MOCKER_TRY(r.cached, optU64Key(m, "cached"));
  if (const msgpack::object* tiers = m.find("tiers")) {
    MOCKER_TRY(const MapView t, MapView::create(*tiers, "tiers"));
    TierBlocks b;
    MOCKER_TRY(b.gpu, u32Key(t, "GPU"));
    MOCKER_TRY(b.cpu, u32Key(t, "CPU"));
    MOCKER_TRY(b.disk, u32Key(t, "DISK"));
    r.tiers = b;
  }
  return r;
}

Result<WorkerOverlap> decodeWorkerOverlap(const MapView& m) {
  WorkerOverlap w;
  MOCKER_TRY(w.worker_id, uintKey(m, "worker_id"));
  MOCKER_TRY(w.blocks, u32Key(m, "blocks"));
  MOCKER_TRY(w.ranks, listKey<RankOverlap>(m, "ranks", decodeRankOverlap));
  return w;
}

Result<SourceDiff> decodeSourceDiff(const MapView& m) {
  SourceDiff d;
  MOCKER_TRY(d.worker_id, uintKey(m, "worker_id"));
  MOCKER_TRY(d.dp_rank, u32Key(m, "dp_rank"));
  MOCKER_TRY(d.index_blocks, uintKey(m, "index_blocks"));
  MOCKER_TRY(d.worker_blocks, uintKey(m, "worker_blocks"));
  MOCKER_TRY(d.missing, hashesKey(m, "missing"));
  MOCKER_TRY(d.extra, hashesKey(m, "extra"));
  return d;
}

}  // namespace

Result<QueryRequest> decodeQueryRequest(std::span<const std::byte> payload) {
  MOCKER_TRY(const auto u, unpack(payload, "request"));
  MOCKER_TRY(const MapView m, MapView::create(u.root(), "request"));
  MOCKER_TRY(const std::string type, strKey(m, "type"));
  if (type == "overlap") {
    MOCKER_TRY(OverlapQuery q, decodeOverlap(m));
    return QueryRequest{std::move(q)};
  }
  if (type == "stats") {
    MOCKER_TRY(auto id, optId(m));
    return QueryRequest{StatsQuery{std::move(id)}};
  }
  if (type == "verify") {
    MOCKER_TRY(auto id, optId(m));
    return QueryRequest{VerifyQuery{std::move(id)}};
  }
  return invalidArgument("unknown request type \"" + type +
                         "\" (expected overlap, stats or verify)");
}

std::optional<std::string> peekQueryId(std::span<const std::byte> payload) {
  auto u = unpack(payload, "request");
  if (!u) return std::nullopt;
  auto m = MapView::create(u->root(), "request");
  if (!m) return std::nullopt;
  auto id = optId(*m);
  if (!id) return std::nullopt;
  return *id;
}

std::vector<std::byte> encodeQueryRequest(const QueryRequest& request) {
  return encode([&](Packer& pk) {
    std::visit(
        [&](const auto& r) {
          using T = std::decay_t<decltype(r)>;
          if constexpr (std::is_same_v<T, OverlapQuery>) {
            const auto n = static_cast<std::uint32_t>(
                1 + (r.block_size ? 1 : 0) + (r.hash_seed ? 1 : 0) + (r.chain_seed ? 1 : 0) +
                (r.lora ? 1 : 0) + (r.with_cached ? 1 : 0) + (r.tiers ? 1 : 0));
            beginMap(pk, "overlap", r.id, n);
            if (r.tokens) {
              packStr(pk, "tokens");
              packArray(pk, *r.tokens);
            } else {
              packStr(pk, "block_hashes");
              packArray(pk, r.block_hashes.value_or(std::vector<std::uint64_t>{}));
            }
            if (r.block_size) {
              packStr(pk, "block_size");
              pk.pack(*r.block_size);
            }
            if (r.hash_seed) {
              packStr(pk, "hash_seed");
              pk.pack(*r.hash_seed);
            }
            if (r.chain_seed) {
              packStr(pk, "chain_seed");
              pk.pack(*r.chain_seed);
            }
            if (r.lora) {
              packStr(pk, "lora");
              packStr(pk, *r.lora);
            }
            if (r.with_cached) {
              packStr(pk, "with_cached");
              pk.pack(true);
            }
            if (r.tiers) {
              packStr(pk, "tiers");
              pk.pack(true);
            }
          } else if constexpr (std::is_same_v<T, StatsQuery>) {
            beginMap(pk, "stats", r.id, 0);
          } else {
            beginMap(pk, "verify", r.id, 0);
          }
        },
        request);
  });
}

std::vector<std::byte> encodeQueryReply(const QueryReply& reply) {
  return encode([&](Packer& pk) {
    std::visit(
        [&](const auto& r) {
          using T = std::decay_t<decltype(r)>;
          if constexpr (std::is_same_v<T, OverlapReply>) {
            beginMap(pk, "overlap_reply", r.id, 2);
            packStr(pk, "num_blocks");
            pk.pack(r.num_blocks);
            packStr(pk, "workers");
            pk.pack_array(static_cast<std::uint32_t>(r.workers.size()));
            for (const WorkerOverlap& w : r.workers) {
              pk.pack_map(3);
              packStr(pk, "worker_id");
              pk.pack(w.worker_id);
              packStr(pk, "blocks");
              pk.pack(w.blocks);
              packStr(pk, "ranks");
              pk.pack_array(static_cast<std::uint32_t>(w.ranks.size()));
              for (const RankOverlap& ro : w.ranks) {
                pk.pack_map(2u + (ro.cached ? 1u : 0u) + (ro.tiers ? 1u : 0u));
                packStr(pk, "dp_rank");
                pk.pack(ro.dp_rank);
                packStr(pk, "blocks");
                pk.pack(ro.blocks);
                if (ro.cached) {
                  packStr(pk, "cached");
                  pk.pack(*ro.cached);
                }
                if (ro.tiers) {
                  packStr(pk, "tiers");
                  pk.pack_map(3);
                  packStr(pk, "GPU");
                  pk.pack(ro.tiers->gpu);
                  packStr(pk, "CPU");
                  pk.pack(ro.tiers->cpu);
                  packStr(pk, "DISK");
                  pk.pack(ro.tiers->disk);
                }
              }
            }
          } else if constexpr (std::is_same_v<T, StatsReply>) {
            beginMap(pk, "stats_reply", r.id, 1);
            packStr(pk, "stats");
            pk.pack_map(static_cast<std::uint32_t>(r.counters.size()));
            for (const auto& [k, v] : r.counters) {
              packStr(pk, k);
              pk.pack(v);
            }
          } else if constexpr (std::is_same_v<T, VerifyReply>) {
            beginMap(pk, "verify_reply", r.id, 3);
            packStr(pk, "ok");
            pk.pack(r.ok);
            packStr(pk, "sources");
            pk.pack_array(static_cast<std::uint32_t>(r.sources.size()));
            for (const SourceDiff& d : r.sources) {
              pk.pack_map(6);
              packStr(pk, "worker_id");
              pk.pack(d.worker_id);
              packStr(pk, "dp_rank");
              pk.pack(d.dp_rank);
              packStr(pk, "index_blocks");
              pk.pack(d.index_blocks);
              packStr(pk, "worker_blocks");
              pk.pack(d.worker_blocks);
              packStr(pk, "missing");
              packArray(pk, d.missing);
              packStr(pk, "extra");
              packArray(pk, d.extra);
            }
            packStr(pk, "errors");
            pk.pack_array(static_cast<std::uint32_t>(r.errors.size()));
            for (const std::string& e : r.errors) packStr(pk, e);
          } else {
            beginMap(pk, "error", r.id, 1);
            packStr(pk, "message");
            packStr(pk, r.message);
          }
        },
        reply);
  });
}

Result<QueryReply> decodeQueryReply(std::span<const std::byte> payload) {
  MOCKER_TRY(const auto u, unpack(payload, "reply"));
  MOCKER_TRY(const MapView m, MapView::create(u.root(), "reply"));
  MOCKER_TRY(const std::string type, strKey(m, "type"));
  MOCKER_TRY(auto id, optId(m));
  if (type == "overlap_reply") {
    OverlapReply r;
    r.id = std::move(id);
    MOCKER_TRY(r.num_blocks, u32Key(m, "num_blocks"));
    MOCKER_TRY(r.workers, listKey<WorkerOverlap>(m, "workers", decodeWorkerOverlap));
    return QueryReply{std::move(r)};
  }
  if (type == "stats_reply") {
    // Counter names are the map's keys (any number of them), so not a MapView.
    StatsReply r;
    r.id = std::move(id);
    MOCKER_TRY(const msgpack::object* s, m.require("stats"));
    if (s->type != msgpack::type::MAP) return protocol::detail::typeError("stats", "map", *s);
    for (std::uint32_t i = 0; i < s->via.map.size; ++i) {
      MOCKER_TRY(const std::string_view k,
                 getStr(s->via.map.ptr[i].key, "stats key", protocol::kMaxStringBytes));
      MOCKER_TRY(const std::uint64_t v, getUint(s->via.map.ptr[i].val, k));
      r.counters.emplace_back(std::string(k), v);
    }
    return QueryReply{std::move(r)};
  }
  if (type == "verify_reply") {
    VerifyReply r;
    r.id = std::move(id);
    MOCKER_TRY(const msgpack::object* ok, m.require("ok"));
    MOCKER_TRY(r.ok, getBool(*ok, "ok"));
    MOCKER_TRY(r.sources, listKey<SourceDiff>(m, "sources", decodeSourceDiff));
    MOCKER_TRY(const msgpack::object* es, m.require("errors"));
    MOCKER_TRY(const auto errs, getArray(*es, "errors", protocol::kMaxArrayElements));
    for (std::size_t i = 0; i < errs.size(); ++i) {
      MOCKER_TRY(const std::string_view e,
                 getStr(errs[i], indexed("errors", i), protocol::kMaxStringBytes));
      r.errors.emplace_back(e);
    }
    return QueryReply{std::move(r)};
  }
  if (type == "error") {
    QueryError r;
    r.id = std::move(id);
    MOCKER_TRY(r.message, strKey(m, "message"));
    return QueryReply{std::move(r)};
  }
  return corruption("unknown reply type \"" + type + "\"");
}

}  // namespace mocker::index
