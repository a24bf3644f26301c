#include "tools/index/query_protocol.h"

#include <msgpack.hpp>

#include <cstring>
#include <string_view>

namespace mocker::index {
namespace {

// ---------------------------------------------------------------------------------------------
// Encoding

class Sink {
 public:
  explicit Sink(std::vector<std::byte>& out) : out_(&out) {}
  void write(const char* data, std::size_t size) {
    const std::size_t at = out_->size();
    out_->resize(at + size);
    std::memcpy(out_->data() + at, data, size);
  }

 private:
  std::vector<std::byte>* out_;
};
using Packer = msgpack::packer<Sink>;

void packStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<std::uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<std::uint32_t>(s.size()));
}

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

// ---------------------------------------------------------------------------------------------
// Decoding

const msgpack::unpack_limit kLimits(kMaxQueryTokens, 64, 64 * 1024, 0, 0, 8);

Error corrupt(std::string message) { return Error{ErrorCode::Corruption, std::move(message)}; }
Error invalid(std::string message) { return Error{ErrorCode::InvalidArgument, std::move(message)}; }

struct Unpacked {
  msgpack::object_handle handle;
};

Result<Unpacked> unpack(std::span<const std::byte> payload) {
  if (payload.size() > kMaxQueryBytes) {
    return invalid("message of " + std::to_string(payload.size()) + " bytes exceeds the limit");
  }
  Unpacked u;
  try {
    std::size_t off = 0;
    u.handle = msgpack::unpack(reinterpret_cast<const char*>(payload.data()), payload.size(), off,
                               nullptr, nullptr, kLimits);
    if (off != payload.size()) return corrupt("trailing bytes after the msgpack message");
  } catch (const std::exception& e) {
    return corrupt(std::string("not a msgpack message: ") + e.what());
  }
  return u;
}

/// A msgpack map view with lookups by string key.
class MapView {
 public:
  static Result<MapView> of(const msgpack::object& o, std::string_view what) {
    if (o.type != msgpack::type::MAP) return corrupt(std::string(what) + ": expected a map");
    return MapView(o);
  }
  const msgpack::object* get(std::string_view key) const {
    for (std::uint32_t i = 0; i < o_->via.map.size; ++i) {
      const msgpack::object_kv& kv = o_->via.map.ptr[i];
      if (kv.key.type == msgpack::type::STR &&
          std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == key) {
        return &kv.val;
      }
    }
    return nullptr;
  }
  Result<const msgpack::object*> require(std::string_view key) const {
    const msgpack::object* o = get(key);
    if (o == nullptr) return corrupt("missing key \"" + std::string(key) + "\"");
    return o;
  }

 private:
  explicit MapView(const msgpack::object& o) : o_(&o) {}
  const msgpack::object* o_;
};

Result<std::uint64_t> asU64(const msgpack::object& o, std::string_view field) {
  if (o.type != msgpack::type::POSITIVE_INTEGER) {
    return corrupt(std::string(field) + ": expected a non-negative integer");
  }
  return o.via.u64;
}

Result<std::uint64_t> asHash(const msgpack::object& o, std::string_view field) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) return o.via.u64;
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return static_cast<std::uint64_t>(o.via.i64);
  return corrupt(std::string(field) + ": expected an integer hash");
}

Result<std::uint32_t> asU32(const msgpack::object& o, std::string_view field) {
  MOCKER_TRY(const std::uint64_t v, asU64(o, field));
  if (v > 0xFFFF'FFFFu) return invalid(std::string(field) + ": value out of range");
  return static_cast<std::uint32_t>(v);
}

Result<std::string> asStr(const msgpack::object& o, std::string_view field) {
  if (o.type != msgpack::type::STR) return corrupt(std::string(field) + ": expected a string");
  return std::string(o.via.str.ptr, o.via.str.size);
}

Result<bool> asBool(const msgpack::object& o, std::string_view field) {
  if (o.type != msgpack::type::BOOLEAN) return corrupt(std::string(field) + ": expected a bool");
  return o.via.boolean;
}

Result<std::span<const msgpack::object>> asArray(const msgpack::object& o, std::string_view field) {
  if (o.type != msgpack::type::ARRAY) return corrupt(std::string(field) + ": expected an array");
  return std::span<const msgpack::object>(o.via.array.ptr, o.via.array.size);
}

std::string indexed(std::string_view field, std::size_t i) {
  return std::string(field) + "[" + std::to_string(i) + "]";
}

Result<std::vector<std::uint64_t>> asHashes(const msgpack::object& o, std::string_view field) {
  MOCKER_TRY(const auto items, asArray(o, field));
  std::vector<std::uint64_t> out;
  out.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    MOCKER_TRY(const std::uint64_t h, asHash(items[i], indexed(field, i)));
    out.push_back(h);
  }
  return out;
}

Result<std::optional<std::string>> optId(const MapView& m) {
  const msgpack::object* o = m.get("id");
  if (o == nullptr || o->type == msgpack::type::NIL) return std::optional<std::string>{};
  MOCKER_TRY(std::string s, asStr(*o, "id"));
  if (s.size() > 256) return invalid("id: longer than 256 bytes");
  return std::optional<std::string>(std::move(s));
}

template <typename T>
Result<std::optional<T>> optU(const MapView& m, std::string_view key) {
  const msgpack::object* o = m.get(key);
  if (o == nullptr || o->type == msgpack::type::NIL) return std::optional<T>{};
  if constexpr (std::is_same_v<T, std::uint32_t>) {
    MOCKER_TRY(const std::uint32_t v, asU32(*o, key));
    return std::optional<T>(v);
  } else {
    MOCKER_TRY(const std::uint64_t v, asU64(*o, key));
    return std::optional<T>(v);
  }
}

Result<OverlapQuery> decodeOverlap(const MapView& m) {
  OverlapQuery q;
  MOCKER_TRY(q.id, optId(m));
  const msgpack::object* tokens = m.get("tokens");
  const msgpack::object* hashes = m.get("block_hashes");
  if ((tokens == nullptr) == (hashes == nullptr)) {
    return invalid("overlap: give exactly one of \"tokens\" and \"block_hashes\"");
  }
  if (tokens != nullptr) {
    MOCKER_TRY(const auto items, asArray(*tokens, "tokens"));
    if (items.size() > kMaxQueryTokens) return invalid("tokens: too many tokens");
    std::vector<std::uint32_t> t;
    t.reserve(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      MOCKER_TRY(const std::uint32_t v, asU32(items[i], indexed("tokens", i)));
      t.push_back(v);
    }
    q.tokens = std::move(t);
  } else {
    MOCKER_TRY(auto h, asHashes(*hashes, "block_hashes"));
    if (h.size() > kMaxQueryHashes) return invalid("block_hashes: too many hashes");
    q.block_hashes = std::move(h);
  }
  MOCKER_TRY(q.block_size, optU<std::uint32_t>(m, "block_size"));
  if (q.block_size && (*q.block_size == 0 || *q.block_size > kMaxQueryBlockSize)) {
    return invalid("block_size: must be in 1.." + std::to_string(kMaxQueryBlockSize) + " (got " +
                   std::to_string(*q.block_size) + ")");
  }
  MOCKER_TRY(q.hash_seed, optU<std::uint64_t>(m, "hash_seed"));
  MOCKER_TRY(q.chain_seed, optU<std::uint64_t>(m, "chain_seed"));
  return q;
}

Result<std::vector<std::uint64_t>> asSortedHashes(const msgpack::object& o,
                                                  std::string_view field) {
  return asHashes(o, field);
}

}  // namespace

Result<QueryRequest> decodeQueryRequest(std::span<const std::byte> payload) {
  MOCKER_TRY(const Unpacked u, unpack(payload));
  MOCKER_TRY(const MapView m, MapView::of(u.handle.get(), "request"));
  MOCKER_TRY(const msgpack::object* type_obj, m.require("type"));
  MOCKER_TRY(const std::string type, asStr(*type_obj, "type"));
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
  return invalid("unknown request type \"" + type + "\" (expected overlap, stats or verify)");
}

std::optional<std::string> peekQueryId(std::span<const std::byte> payload) {
  auto u = unpack(payload);
  if (!u) return std::nullopt;
  auto m = MapView::of(u->handle.get(), "request");
  if (!m) return std::nullopt;
  auto id = optId(*m);
  if (!id) return std::nullopt;
  return *id;
}

std::vector<std::byte> encodeQueryRequest(const QueryRequest& request) {
  std::vector<std::byte> out;
  Sink sink(out);
  Packer pk(sink);
  std::visit(
      [&](const auto& r) {
        using T = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<T, OverlapQuery>) {
          const auto n = static_cast<std::uint32_t>(1 + (r.block_size ? 1 : 0) +
                                                    (r.hash_seed ? 1 : 0) + (r.chain_seed ? 1 : 0));
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
        } else if constexpr (std::is_same_v<T, StatsQuery>) {
          beginMap(pk, "stats", r.id, 0);
        } else {
          beginMap(pk, "verify", r.id, 0);
        }
      },
      request);
  return out;
}

std::vector<std::byte> encodeQueryReply(const QueryReply& reply) {
  std::vector<std::byte> out;
  Sink sink(out);
  Packer pk(sink);
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
              pk.pack_map(2);
              packStr(pk, "dp_rank");
              pk.pack(ro.dp_rank);
              packStr(pk, "blocks");
              pk.pack(ro.blocks);
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
  return out;
}

Result<QueryReply> decodeQueryReply(std::span<const std::byte> payload) {
  MOCKER_TRY(const Unpacked u, unpack(payload));
  MOCKER_TRY(const MapView m, MapView::of(u.handle.get(), "reply"));
  MOCKER_TRY(const msgpack::object* type_obj, m.require("type"));
  MOCKER_TRY(const std::string type, asStr(*type_obj, "type"));
  MOCKER_TRY(auto id, optId(m));
  if (type == "overlap_reply") {
    OverlapReply r;
    r.id = std::move(id);
    MOCKER_TRY(const msgpack::object* nb, m.require("num_blocks"));
    MOCKER_TRY(r.num_blocks, asU32(*nb, "num_blocks"));
    MOCKER_TRY(const msgpack::object* ws, m.require("workers"));
    MOCKER_TRY(const auto items, asArray(*ws, "workers"));
    for (const msgpack::object& item : items) {
      MOCKER_TRY(const MapView wm, MapView::of(item, "workers[]"));
      WorkerOverlap w;
      MOCKER_TRY(const msgpack::object* wid, wm.require("worker_id"));
      MOCKER_TRY(w.worker_id, asU64(*wid, "worker_id"));
      MOCKER_TRY(const msgpack::object* b, wm.require("blocks"));
      MOCKER_TRY(w.blocks, asU32(*b, "blocks"));
      MOCKER_TRY(const msgpack::object* rs, wm.require("ranks"));
      MOCKER_TRY(const auto ranks, asArray(*rs, "ranks"));
      for (const msgpack::object& ro : ranks) {
        MOCKER_TRY(const MapView rm, MapView::of(ro, "ranks[]"));
        RankOverlap x;
        MOCKER_TRY(const msgpack::object* dr, rm.require("dp_rank"));
        MOCKER_TRY(x.dp_rank, asU32(*dr, "dp_rank"));
        MOCKER_TRY(const msgpack::object* rb, rm.require("blocks"));
        MOCKER_TRY(x.blocks, asU32(*rb, "blocks"));
        w.ranks.push_back(x);
      }
      r.workers.push_back(std::move(w));
    }
    return QueryReply{std::move(r)};
  }
  if (type == "stats_reply") {
    StatsReply r;
    r.id = std::move(id);
    MOCKER_TRY(const msgpack::object* s, m.require("stats"));
    if (s->type != msgpack::type::MAP) return corrupt("stats: expected a map");
    for (std::uint32_t i = 0; i < s->via.map.size; ++i) {
      MOCKER_TRY(std::string k, asStr(s->via.map.ptr[i].key, "stats key"));
      MOCKER_TRY(const std::uint64_t v, asU64(s->via.map.ptr[i].val, k));
      r.counters.emplace_back(std::move(k), v);
    }
    return QueryReply{std::move(r)};
  }
  if (type == "verify_reply") {
    VerifyReply r;
    r.id = std::move(id);
    MOCKER_TRY(const msgpack::object* ok, m.require("ok"));
    MOCKER_TRY(r.ok, asBool(*ok, "ok"));
    MOCKER_TRY(const msgpack::object* ss, m.require("sources"));
    MOCKER_TRY(const auto items, asArray(*ss, "sources"));
    for (const msgpack::object& item : items) {
      MOCKER_TRY(const MapView sm, MapView::of(item, "sources[]"));
      SourceDiff d;
      MOCKER_TRY(const msgpack::object* wid, sm.require("worker_id"));
      MOCKER_TRY(d.worker_id, asU64(*wid, "worker_id"));
      MOCKER_TRY(const msgpack::object* dr, sm.require("dp_rank"));
      MOCKER_TRY(d.dp_rank, asU32(*dr, "dp_rank"));
      MOCKER_TRY(const msgpack::object* ib, sm.require("index_blocks"));
      MOCKER_TRY(d.index_blocks, asU64(*ib, "index_blocks"));
      MOCKER_TRY(const msgpack::object* wb, sm.require("worker_blocks"));
      MOCKER_TRY(d.worker_blocks, asU64(*wb, "worker_blocks"));
      MOCKER_TRY(const msgpack::object* mi, sm.require("missing"));
      MOCKER_TRY(d.missing, asSortedHashes(*mi, "missing"));
      MOCKER_TRY(const msgpack::object* ex, sm.require("extra"));
      MOCKER_TRY(d.extra, asSortedHashes(*ex, "extra"));
      r.sources.push_back(std::move(d));
    }
    MOCKER_TRY(const msgpack::object* es, m.require("errors"));
    MOCKER_TRY(const auto errs, asArray(*es, "errors"));
    for (const msgpack::object& e : errs) {
      MOCKER_TRY(std::string s, asStr(e, "errors[]"));
      r.errors.push_back(std::move(s));
    }
    return QueryReply{std::move(r)};
  }
  if (type == "error") {
    QueryError r;
    r.id = std::move(id);
    MOCKER_TRY(const msgpack::object* msg, m.require("message"));
    MOCKER_TRY(r.message, asStr(*msg, "message"));
    return QueryReply{std::move(r)};
  }
  return corrupt("unknown reply type \"" + type + "\"");
}

}  // namespace mocker::index
