#include "protocol/kv_events.h"

#include "protocol/detail/msgpack_io.h"
#include "protocol/limits.h"

namespace mocker::protocol {
namespace {

using detail::Packer;
using detail::packStr;

constexpr std::string_view kStored = "BlockStored";
constexpr std::string_view kRemoved = "BlockRemoved";
constexpr std::string_view kCleared = "AllBlocksCleared";
constexpr std::string_view kFullAttention = "full_attention";

// ---------------------------------------------------------------------------------------------
// Encoding

struct Encoder {
  Packer& pk;
  const KvEncodeOptions& options;

  bool isMap() const {
    return options.layout == KvLayout::Map || options.layout == KvLayout::Map26;
  }

  void hash(std::uint64_t h) const {
    if (options.force_uint64_hashes) {
      pk.pack_fix_uint64(h);
    } else {
      pk.pack_uint64(h);
    }
  }
  void hashes(const std::vector<std::uint64_t>& hs) const {
    pk.pack_array(static_cast<std::uint32_t>(hs.size()));
    for (std::uint64_t h : hs) hash(h);
  }
  void parent(const std::optional<std::uint64_t>& p) const {
    if (p.has_value()) {
      hash(*p);
    } else if (options.parent_root == ParentRoot::Zero) {
      hash(0);
    } else {
      pk.pack_nil();
    }
  }
  void optStr(const std::optional<std::string>& s) const {
    if (s.has_value()) {
      packStr(pk, *s);
    } else {
      pk.pack_nil();
    }
  }
  void tokens(const std::vector<std::uint32_t>& ts) const {
    pk.pack_array(static_cast<std::uint32_t>(ts.size()));
    for (std::uint32_t t : ts) pk.pack_uint32(t);
  }
  void loraId(const std::optional<std::int64_t>& id) const {
    if (id.has_value()) {
      pk.pack_int64(*id);
    } else {
      pk.pack_nil();
    }
  }

  void operator()(const BlockStoredEvent& e) const {
    if (isMap()) {
      const bool v26 = options.layout == KvLayout::Map26;
      pk.pack_map(v26 ? 11 : 8);
      packStr(pk, "type");
      packStr(pk, kStored);
      packStr(pk, "block_hashes");
      hashes(e.block_hashes);
      packStr(pk, "parent_block_hash");
      parent(e.parent_block_hash);
      packStr(pk, "token_ids");
      tokens(e.token_ids);
      packStr(pk, "block_size");
      pk.pack_uint32(e.block_size);
      packStr(pk, "lora_id");
      loraId(e.lora_id);
      packStr(pk, "medium");
      optStr(e.medium);
      packStr(pk, "lora_name");
      optStr(e.lora_name);
      if (v26) {
        packStr(pk, "extra_keys");
        pk.pack_array(static_cast<std::uint32_t>(e.block_hashes.size()));
        for (std::size_t i = 0; i < e.block_hashes.size(); ++i) pk.pack_nil();
        packStr(pk, "group_idx");
        pk.pack_uint32(0);
        packStr(pk, "kv_cache_spec_kind");
        packStr(pk, kFullAttention);
      }
      return;
    }
    std::uint32_t n = 0;
    switch (options.layout) {
      case KvLayout::P6:
        n = 6;
        break;
      case KvLayout::P7:
        n = 7;
        break;
      case KvLayout::P8:
        n = 8;
        break;
      case KvLayout::P9:
        n = 9;
        break;
      case KvLayout::P12:
        n = 12;
        break;
      case KvLayout::Map:
      case KvLayout::Map26:
        break;  // handled above
    }
    pk.pack_array(n);
    packStr(pk, kStored);
    hashes(e.block_hashes);
    parent(e.parent_block_hash);
    tokens(e.token_ids);
    pk.pack_uint32(e.block_size);
    loraId(e.lora_id);
    if (n >= 7) optStr(e.medium);
    if (n >= 8) optStr(e.lora_name);
    if (n >= 9) pk.pack_nil();  // extra_keys
    if (n >= 12) {
      pk.pack_uint32(0);  // group_idx
      packStr(pk, kFullAttention);
      pk.pack_nil();  // kv_cache_spec_sliding_window
    }
  }

  void operator()(const BlockRemovedEvent& e) const {
    if (isMap()) {
      const bool v26 = options.layout == KvLayout::Map26;
      pk.pack_map(v26 ? 4 : 3);
      packStr(pk, "type");
      packStr(pk, kRemoved);
      packStr(pk, "block_hashes");
      hashes(e.block_hashes);
      packStr(pk, "medium");
      optStr(e.medium);
      if (v26) {
        packStr(pk, "group_idx");
        pk.pack_uint32(0);
      }
      return;
    }
    const std::uint32_t n = options.layout == KvLayout::P6    ? 2
                            : options.layout == KvLayout::P12 ? 4
                                                              : 3;
    pk.pack_array(n);
    packStr(pk, kRemoved);
    hashes(e.block_hashes);
    if (n >= 3) optStr(e.medium);
    if (n >= 4) pk.pack_uint32(0);  // group_idx
  }

  void operator()(const AllBlocksClearedEvent& /*e*/) const {
    if (isMap()) {
      pk.pack_map(1);
      packStr(pk, "type");
    } else {
      pk.pack_array(1);
    }
    packStr(pk, kCleared);
  }
};

// ---------------------------------------------------------------------------------------------
// Decoding

Result<std::vector<std::uint64_t>> decodeHashes(const msgpack::object& o) {
  MOCKER_TRY(const auto items, detail::getArray(o, "block_hashes", kMaxBlocksPerEvent));
  if (items.empty()) return invalidArgument("block_hashes: must not be empty");
  std::vector<std::uint64_t> out;
  out.reserve(items.size());
  for (const msgpack::object& item : items) {
    if (item.type == msgpack::type::POSITIVE_INTEGER) {
      out.push_back(item.via.u64);
      continue;
    }
    MOCKER_TRY(const std::uint64_t h,
               detail::getHash(item, detail::indexed("block_hashes", out.size())));
    out.push_back(h);
  }
  return out;
}

Result<std::optional<std::uint64_t>> decodeParent(const msgpack::object* o) {
  if (o == nullptr || o->type == msgpack::type::NIL) return std::optional<std::uint64_t>{};
  MOCKER_TRY(const std::uint64_t h, detail::getHash(*o, "parent_block_hash"));
  return std::optional<std::uint64_t>{h};
}

Result<std::optional<std::string>> decodeOptStr(const msgpack::object* o, std::string_view field) {
  if (o == nullptr || o->type == msgpack::type::NIL) return std::optional<std::string>{};
  MOCKER_TRY(const std::string_view s, detail::getStr(*o, field, kMaxStringBytes));
  return std::optional<std::string>{std::string(s)};
}

Result<std::optional<std::int64_t>> decodeLoraId(const msgpack::object* o) {
  if (o == nullptr || o->type == msgpack::type::NIL) return std::optional<std::int64_t>{};
  MOCKER_TRY(const std::int64_t id, detail::getInt(*o, "lora_id"));
  return std::optional<std::int64_t>{id};
}

// Fields of a BlockStored, whether they came from positions or keys (nullptr = absent).
struct StoredFields {
  const msgpack::object* block_hashes = nullptr;
  const msgpack::object* parent = nullptr;
  const msgpack::object* token_ids = nullptr;
  const msgpack::object* block_size = nullptr;
  const msgpack::object* lora_id = nullptr;
  const msgpack::object* medium = nullptr;
  const msgpack::object* lora_name = nullptr;
};

Result<KvEvent> buildStored(const StoredFields& f) {
  BlockStoredEvent e;
  MOCKER_TRY(e.block_hashes, decodeHashes(*f.block_hashes));
  MOCKER_TRY(e.parent_block_hash, decodeParent(f.parent));
  MOCKER_TRY(e.token_ids, detail::getU32Array(*f.token_ids, "token_ids", kMaxTokensPerEvent));
  MOCKER_TRY(
      const std::uint64_t block_size,
      detail::getUint(*f.block_size, "block_size", std::numeric_limits<std::uint32_t>::max()));
  if (block_size == 0) return invalidArgument("block_size: must be >= 1");
  e.block_size = static_cast<std::uint32_t>(block_size);
  MOCKER_TRY(e.lora_id, decodeLoraId(f.lora_id));
  MOCKER_TRY(e.medium, decodeOptStr(f.medium, "medium"));
  MOCKER_TRY(e.lora_name, decodeOptStr(f.lora_name, "lora_name"));
  return KvEvent{std::move(e)};
}

Result<KvEvent> buildRemoved(const msgpack::object& hashes, const msgpack::object* medium) {
  BlockRemovedEvent e;
  MOCKER_TRY(e.block_hashes, decodeHashes(hashes));
  MOCKER_TRY(e.medium, decodeOptStr(medium, "medium"));
  return KvEvent{std::move(e)};
}

Error unknownTag(std::string_view field, std::string_view tag) {
  return corruption(std::string(field) + ": unknown event type '" +
                    std::string(detail::clipUtf8(tag, 64)) + "'");
}

Error tooShort(std::string_view tag, std::size_t got, std::size_t need, const char* fields) {
  return corruption(std::string(tag) + " event: " + std::to_string(got) + " elements, at least " +
                    std::to_string(need) + " needed (" + fields + ")");
}

Result<KvEvent> decodePositional(std::span<const msgpack::object> a) {
  if (a.empty()) return corruption("tag: missing (empty event array)");
  MOCKER_TRY(const std::string_view tag, detail::getStr(a[0], "tag", kMaxStringBytes));
  const auto at = [&](std::size_t i) { return i < a.size() ? &a[i] : nullptr; };
  if (tag == kStored) {
    if (a.size() < 5) {
      return tooShort(tag, a.size(), 5,
                      "tag, block_hashes, parent_block_hash, token_ids, block_size");
    }
    return buildStored(StoredFields{.block_hashes = &a[1],
                                    .parent = &a[2],
                                    .token_ids = &a[3],
                                    .block_size = &a[4],
                                    .lora_id = at(5),
                                    .medium = at(6),
                                    .lora_name = at(7)});
  }
  if (tag == kRemoved) {
    if (a.size() < 2) return tooShort(tag, a.size(), 2, "tag, block_hashes");
    return buildRemoved(a[1], at(2));
  }
  if (tag == kCleared) return KvEvent{AllBlocksClearedEvent{}};
  return unknownTag("tag", tag);
}

Result<KvEvent> decodeMapEvent(const msgpack::object& o) {
  MOCKER_TRY(const detail::MapView m, detail::MapView::create(o, "event"));
  MOCKER_TRY(const msgpack::object* type_obj, m.require("type"));
  MOCKER_TRY(const std::string_view type, detail::getStr(*type_obj, "type", kMaxStringBytes));
  if (type == kStored) {
    StoredFields f;
    MOCKER_TRY(f.block_hashes, m.require("block_hashes"));
    f.parent = m.find("parent_block_hash");
    MOCKER_TRY(f.token_ids, m.require("token_ids"));
    MOCKER_TRY(f.block_size, m.require("block_size"));
    f.lora_id = m.find("lora_id");
    f.medium = m.find("medium");
    f.lora_name = m.find("lora_name");
    return buildStored(f);
  }
  if (type == kRemoved) {
    MOCKER_TRY(const msgpack::object* hashes, m.require("block_hashes"));
    return buildRemoved(*hashes, m.find("medium"));
  }
  if (type == kCleared) return KvEvent{AllBlocksClearedEvent{}};
  return unknownTag("type", type);
}

}  // namespace

std::string_view toString(KvLayout layout) { return enumName(kKvLayoutNames, layout); }

Result<KvLayout> parseKvLayout(std::string_view s) {
  if (auto layout = enumFromName(kKvLayoutNames, s)) return *layout;
  return invalidArgument("layout: '" + std::string(s) + "' is not one of " +
                         enumNameList(kKvLayoutNames, ", "));
}

std::string_view toString(ParentRoot root) { return enumName(kParentRootNames, root); }

Result<ParentRoot> parseParentRoot(std::string_view s) {
  if (auto root = enumFromName(kParentRootNames, s)) return *root;
  return invalidArgument("parent_root: '" + std::string(s) + "' is not one of " +
                         enumNameList(kParentRootNames, ", "));
}

void appendKvEventBatch(const KvEventBatch& batch, const KvEncodeOptions& options,
                        std::vector<std::byte>& out) {
  detail::ByteSink sink(out);
  Packer pk(sink);
  pk.pack_array(3);
  pk.packF64(batch.ts);
  pk.pack_array(static_cast<std::uint32_t>(batch.events.size()));
  const Encoder encoder{pk, options};
  for (const KvEvent& e : batch.events) std::visit(encoder, e);
  pk.pack_uint32(batch.dp_rank);
  sink.finish();
}

std::vector<std::byte> encodeKvEventBatch(const KvEventBatch& batch,
                                          const KvEncodeOptions& options) {
  std::vector<std::byte> out;
  std::size_t estimate = 32;
  for (const KvEvent& e : batch.events) {
    if (const auto* s = std::get_if<BlockStoredEvent>(&e)) {
      estimate += 96 + 9 * s->block_hashes.size() + 5 * s->token_ids.size();
    } else {
      estimate += 48;
    }
  }
  out.reserve(estimate);
  appendKvEventBatch(batch, options, out);
  // NOTE: ByteSink grows by resize; the reserve above keeps that to one allocation.
  return out;
}

Result<KvEventBatch> decodeKvEventBatch(std::span<const std::byte> payload) {
  MOCKER_TRY(const detail::Unpacked unpacked, detail::unpackMessage(payload, "kv event batch"));
  const msgpack::object& root = unpacked.root();
  if (root.type != msgpack::type::ARRAY)
    return detail::typeError("batch", "array [ts, events, dp_rank]", root);
  if (root.via.array.size != 3) {
    return corruption("batch: expected 3 elements [ts, events, dp_rank], got " +
                      std::to_string(root.via.array.size));
  }
  const msgpack::object* a = root.via.array.ptr;
  KvEventBatch batch;
  MOCKER_TRY(batch.ts, detail::getNumber(a[0], "ts"));
  MOCKER_TRY(const auto events, detail::getArray(a[1], "events", kMaxEventsPerBatch));
  batch.events.reserve(events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    const msgpack::object& ev = events[i];
    Result<KvEvent> decoded = ev.type == msgpack::type::ARRAY
                                  ? decodePositional({ev.via.array.ptr, ev.via.array.size})
                              : ev.type == msgpack::type::MAP
                                  ? decodeMapEvent(ev)
                                  : Result<KvEvent>(detail::typeError("event", "array or map", ev));
    if (!decoded) return decoded.error().withContext(detail::indexed("events", i));
    batch.events.push_back(std::move(decoded).value());
  }
  if (a[2].type != msgpack::type::NIL) {
    MOCKER_TRY(const std::uint64_t rank,
               detail::getUint(a[2], "dp_rank", std::numeric_limits<std::uint32_t>::max()));
    batch.dp_rank = static_cast<std::uint32_t>(rank);
  }
  return batch;
}

}  // namespace mocker::protocol
