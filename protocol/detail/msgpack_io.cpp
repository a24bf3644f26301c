#include "protocol/detail/msgpack_io.h"

#include <array>
#include <cmath>
#include <cstring>
#include <exception>
#include <new>

#include "base/enum_names.h"
#include "protocol/limits.h"

namespace mocker::protocol::detail {
namespace {

std::string hexByte(unsigned b) {
  static constexpr char kDigits[] = "0123456789abcdef";
  return std::string{'0', 'x', kDigits[(b >> 4) & 0xf], kDigits[b & 0xf]};
}

// Reads a big-endian unsigned integer of `n` bytes at `pos` (caller checked the bounds).
std::uint64_t readBe(std::span<const std::byte> bytes, std::size_t pos, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v = (v << 8) | std::to_integer<std::uint64_t>(bytes[pos + i]);
  return v;
}

bool referenceInput(msgpack::type::object_type /*type*/, std::size_t /*size*/, void* /*user*/) {
  return true;  // strings and bins point into the caller's buffer: no copies
}

Error utf8Error(std::string_view s, std::size_t offset, std::string_view field) {
  return corruption(std::string(field) + ": not valid UTF-8 (byte " +
                    hexByte(static_cast<unsigned char>(s[offset])) + " at offset " +
                    std::to_string(offset) + ")");
}

}  // namespace

void ByteSink::grow(std::size_t size) {
  out_->resize(std::max({size_ + size, 2 * out_->size(), out_->capacity(), std::size_t{256}}));
  data_ = out_->data();
  capacity_ = out_->size();
}

Status prescan(std::span<const std::byte> bytes, std::string_view what) {
  const std::string name(what);
  if (bytes.size() > kMaxMessageBytes) {
    return invalidArgument(name + ": message of " + std::to_string(bytes.size()) +
                           " bytes exceeds the limit of " + std::to_string(kMaxMessageBytes));
  }
  if (bytes.empty()) return corruption(name + ": empty message");
  // remaining[d] = objects still expected at nesting level d (level 0 = the top-level object).
  std::array<std::uint64_t, kMaxNestingDepth + 1> remaining{};
  std::size_t depth = 0;
  remaining[0] = 1;
  std::size_t pos = 0;
  std::size_t num_objects = 0;
  const std::size_t size = bytes.size();
  const auto truncated = [&](std::size_t at, std::uint64_t need) {
    return corruption(name + ": truncated at byte " + std::to_string(at) + " (" +
                      std::to_string(need) + " more bytes needed, " +
                      std::to_string(size - std::min(at, size)) + " left)");
  };
  for (;;) {
    while (remaining[depth] == 0) {
      if (depth == 0) {
        if (pos != size) {
          return corruption(name + ": " + std::to_string(size - pos) +
                            " trailing bytes after the message (at byte " + std::to_string(pos) +
                            ")");
        }
        return {};
      }
      --depth;
    }
    if (pos >= size) return truncated(pos, remaining[depth]);
    --remaining[depth];
    if (++num_objects > kMaxObjectsPerMessage) {
      return invalidArgument(name + ": more than " + std::to_string(kMaxObjectsPerMessage) +
                             " msgpack objects");
    }
    const unsigned b = std::to_integer<unsigned>(bytes[pos]);
    const std::size_t at = pos;
    ++pos;
    std::uint64_t skip = 0;       // payload bytes after the header
    std::uint64_t container = 0;  // elements of an array/map (map: 2 × entries)
    bool is_container = false;
    std::size_t len_bytes = 0;  // size of a length field to read
    enum class Kind { Scalar, Str, Bin, Array, Map, Ext } kind = Kind::Scalar;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
      // fixint, nil, bool
    } else if (b <= 0x8f) {
      is_container = true;
      kind = Kind::Map;
      container = 2 * std::uint64_t{b & 0x0fu};
    } else if (b <= 0x9f) {
      is_container = true;
      kind = Kind::Array;
      container = b & 0x0fu;
    } else if (b <= 0xbf) {
      kind = Kind::Str;
      skip = b & 0x1fu;
    } else {
      switch (b) {
        case 0xc4:
          kind = Kind::Bin;
          len_bytes = 1;
          break;
        case 0xc5:
          kind = Kind::Bin;
          len_bytes = 2;
          break;
        case 0xc6:
          kind = Kind::Bin;
          len_bytes = 4;
          break;
        case 0xc7:
        case 0xc8:
        case 0xc9:
        case 0xd4:
        case 0xd5:
        case 0xd6:
        case 0xd7:
        case 0xd8:
          kind = Kind::Ext;
          break;
        case 0xca:
          skip = 4;
          break;
        case 0xcb:
          skip = 8;
          break;
        case 0xcc:
        case 0xd0:
          skip = 1;
          break;
        case 0xcd:
        case 0xd1:
          skip = 2;
          break;
        case 0xce:
        case 0xd2:
          skip = 4;
          break;
        case 0xcf:
        case 0xd3:
          skip = 8;
          break;
        case 0xd9:
          kind = Kind::Str;
          len_bytes = 1;
          break;
        case 0xda:
          kind = Kind::Str;
          len_bytes = 2;
          break;
        case 0xdb:
          kind = Kind::Str;
          len_bytes = 4;
          break;
        case 0xdc:
          kind = Kind::Array;
          is_container = true;
          len_bytes = 2;
          break;
        case 0xdd:
          kind = Kind::Array;
          is_container = true;
          len_bytes = 4;
          break;
        case 0xde:
          kind = Kind::Map;
          is_container = true;
          len_bytes = 2;
          break;
        case 0xdf:
          kind = Kind::Map;
          is_container = true;
          len_bytes = 4;
          break;
        default:  // 0xc1
          return corruption(name + ": invalid msgpack byte " + hexByte(b) + " at byte " +
                            std::to_string(at));
      }
    }
    if (kind == Kind::Ext) {
      return corruption(name + ": msgpack ext type (byte " + hexByte(b) + ") at byte " +
                        std::to_string(at) + " is not used by this protocol");
    }
    if (len_bytes > 0) {
      if (size - pos < len_bytes) return truncated(pos, len_bytes);
      const std::uint64_t n = readBe(bytes, pos, len_bytes);
      pos += len_bytes;
      if (kind == Kind::Map) {
        container = 2 * n;
      } else if (kind == Kind::Array) {
        container = n;
      } else {
        skip = n;
      }
    }
    if (is_container) {
      const std::uint64_t entries = kind == Kind::Map ? container / 2 : container;
      // Every element takes at least one byte: a declared length the input cannot back is a
      // truncation, reported before anything is allocated for it.
      if (container > size - pos) {
        return corruption(name + ": " + (kind == Kind::Map ? "map" : "array") + " at byte " +
                          std::to_string(at) + " declares " + std::to_string(entries) +
                          " entries but only " + std::to_string(size - pos) +
                          " bytes follow (truncated)");
      }
      if (container == 0) continue;
      if (depth + 1 > kMaxNestingDepth) {
        return invalidArgument(name + ": nesting deeper than " + std::to_string(kMaxNestingDepth) +
                               " levels at byte " + std::to_string(at));
      }
      remaining[++depth] = container;
      continue;
    }
    if (size - pos < skip) return truncated(pos, skip);
    pos += static_cast<std::size_t>(skip);
  }
}

Result<Unpacked> unpackMessage(std::span<const std::byte> bytes, std::string_view what) {
  MOCKER_TRY_VOID(prescan(bytes, what));
  try {
    std::size_t offset = 0;
    // The pre-scan already bounds every length by the input size; the limits are a second line
    // of defence against msgpack-c allocating for a declared length.
    const msgpack::unpack_limit limit(kMaxArrayElements, kMaxArrayElements, kMaxMessageBytes,
                                      kMaxMessageBytes, 0, kMaxNestingDepth + 1);
    Unpacked out{msgpack::unpack(reinterpret_cast<const char*>(bytes.data()), bytes.size(), offset,
                                 &referenceInput, nullptr, limit)};
    if (offset != bytes.size()) {
      return corruption(std::string(what) + ": trailing bytes after the message");
    }
    return out;
  } catch (const std::bad_alloc&) {
    // Not the input's fault: the receiver ran out of memory (the input's declared lengths are
    // already bounded by the pre-scan).
    return Error{ErrorCode::ResourceExhausted,
                 std::string(what) + ": out of memory while decoding"};
  } catch (const std::exception& e) {
    return corruption(std::string(what) + ": msgpack decode failed: " + e.what());
  } catch (...) {
    return corruption(std::string(what) + ": msgpack decode failed");
  }
}

const char* typeName(const msgpack::object& o) {
  static constexpr EnumNames<msgpack::type::object_type, 11> kTypeNames{
      {{"nil", msgpack::type::NIL},
       {"bool", msgpack::type::BOOLEAN},
       {"positive integer", msgpack::type::POSITIVE_INTEGER},
       {"negative integer", msgpack::type::NEGATIVE_INTEGER},
       {"float32", msgpack::type::FLOAT32},
       {"float64", msgpack::type::FLOAT64},
       {"str", msgpack::type::STR},
       {"bin", msgpack::type::BIN},
       {"array", msgpack::type::ARRAY},
       {"map", msgpack::type::MAP},
       {"ext", msgpack::type::EXT}}};
  return enumName(kTypeNames, o.type).data();
}

Error typeError(std::string_view field, std::string_view want, const msgpack::object& got) {
  return corruption(std::string(field) + ": expected " + std::string(want) + ", got " +
                    typeName(got));
}

Result<std::uint64_t> getUint(const msgpack::object& o, std::string_view field, std::uint64_t max) {
  if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    return invalidArgument(std::string(field) + ": must be >= 0 (got " + std::to_string(o.via.i64) +
                           ")");
  }
  if (o.type != msgpack::type::POSITIVE_INTEGER) return typeError(field, "unsigned integer", o);
  if (o.via.u64 > max) {
    return invalidArgument(std::string(field) + ": " + std::to_string(o.via.u64) +
                           " exceeds the maximum " + std::to_string(max));
  }
  return o.via.u64;
}

Result<std::int64_t> getInt(const msgpack::object& o, std::string_view field) {
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return o.via.i64;
  if (o.type != msgpack::type::POSITIVE_INTEGER) return typeError(field, "integer", o);
  if (o.via.u64 > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return invalidArgument(std::string(field) + ": " + std::to_string(o.via.u64) +
                           " exceeds the int64 range");
  }
  return static_cast<std::int64_t>(o.via.u64);
}

Result<std::uint64_t> getHash(const msgpack::object& o, std::string_view field) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) return o.via.u64;
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return static_cast<std::uint64_t>(o.via.i64);
  return typeError(field, "integer hash", o);
}

Result<double> getNumber(const msgpack::object& o, std::string_view field) {
  double v = 0.0;
  switch (o.type) {
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      v = o.via.f64;
      break;
    case msgpack::type::POSITIVE_INTEGER:
      v = static_cast<double>(o.via.u64);
      break;
    case msgpack::type::NEGATIVE_INTEGER:
      v = static_cast<double>(o.via.i64);
      break;
    default:
      return typeError(field, "number", o);
  }
  if (std::isnan(v)) return invalidArgument(std::string(field) + ": NaN is not allowed");
  return v;
}

Status checkUtf8(std::string_view s, std::string_view field) {
  const std::optional<std::size_t> bad = findInvalidUtf8(s);
  if (!bad) return {};
  return utf8Error(s, *bad, field);
}

Result<std::string_view> getStr(const msgpack::object& o, std::string_view field,
                                std::size_t max_bytes) {
  if (o.type != msgpack::type::STR) return typeError(field, "str", o);
  if (o.via.str.size > max_bytes) {
    return invalidArgument(std::string(field) + ": string of " + std::to_string(o.via.str.size) +
                           " bytes exceeds the limit of " + std::to_string(max_bytes));
  }
  const std::string_view s(o.via.str.ptr, o.via.str.size);
  MOCKER_TRY_VOID(checkUtf8(s, field));
  return s;
}

Result<std::string_view> getBytes(const msgpack::object& o, std::string_view field,
                                  std::size_t max_bytes) {
  if (o.type == msgpack::type::STR) return getStr(o, field, max_bytes);
  if (o.type != msgpack::type::BIN) return typeError(field, "bin or str", o);
  if (o.via.bin.size > max_bytes) {
    return invalidArgument(std::string(field) + ": " + std::to_string(o.via.bin.size) +
                           " bytes exceed the limit of " + std::to_string(max_bytes));
  }
  return std::string_view(o.via.bin.ptr, o.via.bin.size);
}

Result<std::span<const msgpack::object>> getArray(const msgpack::object& o, std::string_view field,
                                                  std::size_t max_elements) {
  if (o.type != msgpack::type::ARRAY) return typeError(field, "array", o);
  if (o.via.array.size > max_elements) {
    return invalidArgument(std::string(field) + ": " + std::to_string(o.via.array.size) +
                           " elements exceed the limit of " + std::to_string(max_elements));
  }
  return std::span<const msgpack::object>(o.via.array.ptr, o.via.array.size);
}

Result<std::vector<std::uint32_t>> getU32Array(const msgpack::object& o, std::string_view field,
                                               std::size_t max_elements) {
  MOCKER_TRY(const auto items, getArray(o, field, max_elements));
  std::vector<std::uint32_t> out;
  out.reserve(items.size());
  for (const msgpack::object& item : items) {
    if (item.type == msgpack::type::POSITIVE_INTEGER &&
        item.via.u64 <= std::numeric_limits<std::uint32_t>::max()) {
      out.push_back(static_cast<std::uint32_t>(item.via.u64));
      continue;
    }
    // Slow path only for errors: getUint names the element and the problem.
    auto checked =
        getUint(item, indexed(field, out.size()), std::numeric_limits<std::uint32_t>::max());
    if (!checked) return checked.error();
    return corruption(indexed(field, out.size()) + ": not a u32");  // unreachable
  }
  return out;
}

Result<bool> getBool(const msgpack::object& o, std::string_view field) {
  if (o.type != msgpack::type::BOOLEAN) return typeError(field, "bool", o);
  return o.via.boolean;
}

Result<std::uint64_t> uintKey(const MapView& m, std::string_view key, std::uint64_t max) {
  MOCKER_TRY(const msgpack::object* o, m.require(key));
  return getUint(*o, key, max);
}

Result<std::uint32_t> u32Key(const MapView& m, std::string_view key) {
  MOCKER_TRY(const std::uint64_t v, uintKey(m, key, std::numeric_limits<std::uint32_t>::max()));
  return static_cast<std::uint32_t>(v);
}

Result<std::optional<std::uint32_t>> optU32Key(const MapView& m, std::string_view key) {
  const msgpack::object* o = m.findNonNil(key);
  if (o == nullptr) return std::optional<std::uint32_t>{};
  MOCKER_TRY(const std::uint64_t v, getUint(*o, key, std::numeric_limits<std::uint32_t>::max()));
  return std::optional<std::uint32_t>{static_cast<std::uint32_t>(v)};
}

Result<std::optional<std::uint64_t>> optU64Key(const MapView& m, std::string_view key) {
  const msgpack::object* o = m.findNonNil(key);
  if (o == nullptr) return std::optional<std::uint64_t>{};
  MOCKER_TRY(const std::uint64_t v, getUint(*o, key));
  return std::optional<std::uint64_t>{v};
}

Result<std::string> strKey(const MapView& m, std::string_view key) {
  MOCKER_TRY(const msgpack::object* o, m.require(key));
  MOCKER_TRY(const std::string_view s, getStr(*o, key, kMaxStringBytes));
  return std::string(s);
}

Result<MapView> MapView::create(const msgpack::object& o, std::string_view field) {
  if (o.type != msgpack::type::MAP) return typeError(field, "map", o);
  const msgpack::object_map& map = o.via.map;
  if (map.size > kMaxMapEntries) {
    return invalidArgument(std::string(field) + ": map of " + std::to_string(map.size) +
                           " entries exceeds the limit of " + std::to_string(kMaxMapEntries));
  }
  for (std::uint32_t i = 0; i < map.size; ++i) {
    const msgpack::object& key = map.ptr[i].key;
    if (key.type != msgpack::type::STR) {
      return corruption(std::string(field) + ": map key " + std::to_string(i) +
                        " must be a str, got " + typeName(key));
    }
    const std::string_view key_text(key.via.str.ptr, key.via.str.size);
    if (const std::optional<std::size_t> bad = findInvalidUtf8(key_text)) {
      return utf8Error(key_text, *bad, std::string(field) + ": map key " + std::to_string(i));
    }
    for (std::uint32_t j = 0; j < i; ++j) {
      const msgpack::object& other = map.ptr[j].key;
      if (other.via.str.size == key.via.str.size &&
          (key.via.str.size == 0 ||
           std::memcmp(other.via.str.ptr, key.via.str.ptr, key.via.str.size) == 0)) {
        return corruption(std::string(field) + ": duplicate key '" +
                          std::string(key.via.str.ptr, key.via.str.size) + "'");
      }
    }
  }
  return MapView(map);
}

const msgpack::object* MapView::find(std::string_view key) const {
  for (std::uint32_t i = 0; i < map_->size; ++i) {
    const msgpack::object& k = map_->ptr[i].key;
    if (k.via.str.size == key.size() &&
        (key.empty() || std::memcmp(k.via.str.ptr, key.data(), key.size()) == 0)) {
      return &map_->ptr[i].val;
    }
  }
  return nullptr;
}

Result<const msgpack::object*> MapView::require(std::string_view key) const {
  const msgpack::object* v = find(key);
  if (v == nullptr) return corruption(std::string(key) + ": missing");
  return v;
}

const msgpack::object* MapView::findNonNil(std::string_view key) const {
  const msgpack::object* v = find(key);
  return v == nullptr || v->type == msgpack::type::NIL ? nullptr : v;
}

std::string indexed(std::string_view prefix, std::size_t index) {
  return std::string(prefix) + "[" + std::to_string(index) + "]";
}

}  // namespace mocker::protocol::detail
