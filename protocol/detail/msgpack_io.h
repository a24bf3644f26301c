// Internal msgpack helpers shared by the protocol encoders and decoders: a packer writing into a
// std::vector<std::byte>, a bounds-checked structural pre-scan, and typed accessors that turn
// msgpack::object values into Result errors naming the field. Only protocol/*.cpp include this
// header (msgpack-c is linked PRIVATE to mocker_protocol).
//
// Pure functions; thread-safe. Never throws: every msgpack-c call that can throw is wrapped.
#pragma once

#include <msgpack.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "protocol/detail/utf8.h"

namespace mocker::protocol::detail {

/// msgpack-c output stream appending to a byte vector. The vector grows geometrically and is
/// trimmed to the written size by finish(), which must be called before `out` is used.
// NOTE: neither vector::insert(range) nor a resize per write: both cost ~10 ns per call, which
// dominated encoding small fields (tests/bench/protocol_benchmark.cpp).
class ByteSink {
 public:
  explicit ByteSink(std::vector<std::byte>& out)
      : out_(&out), data_(out.data()), size_(out.size()), capacity_(out.size()) {}
  // Inlined into the packer: the common case is one compare and a small memcpy (the buffer's
  // pointer and size live in the sink, not behind the vector).
  void write(const char* data, std::size_t size) {
    if (capacity_ - size_ < size) grow(size);
    std::memcpy(data_ + size_, data, size);
    size_ += size;
  }
  void finish() { out_->resize(size_); }

 private:
  void grow(std::size_t size);  // out of line: rare

  std::vector<std::byte>* out_;
  std::byte* data_;
  std::size_t size_;
  std::size_t capacity_;  // == out_->size()
};

/// msgpack-c packer plus packF64. NOTE: msgpack-c 4.x `pack_double` writes integral values as
/// integers (0.0 → 0x00); docs/wire.md requires float64 (`cb`) for every float, so encoders must
/// use packF64 and never pack_double.
class Packer : public msgpack::packer<ByteSink> {
 public:
  explicit Packer(ByteSink& sink) : msgpack::packer<ByteSink>(sink), sink_(&sink) {}

  /// float64: 0xcb + 8 big-endian bytes of the IEEE-754 value.
  void packF64(double d) {
    std::uint64_t bits = 0;
    static_assert(sizeof(bits) == sizeof(d));
    std::memcpy(&bits, &d, sizeof(d));
    char buf[9];
    buf[0] = static_cast<char>(0xcb);
    for (int i = 0; i < 8; ++i) buf[1 + i] = static_cast<char>((bits >> (56 - 8 * i)) & 0xff);
    sink_->write(buf, sizeof(buf));
  }

 private:
  ByteSink* sink_;
};

/// Packs a msgpack str (never bin).
inline void packStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<std::uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<std::uint32_t>(s.size()));
}

/// Packs a msgpack bin.
inline void packBin(Packer& pk, std::string_view s) {
  pk.pack_bin(static_cast<std::uint32_t>(s.size()));
  pk.pack_bin_body(s.data(), static_cast<std::uint32_t>(s.size()));
}

/// A decoded message: the msgpack-c zone (owning the object tree; strings reference the input
/// buffer, which must outlive it) and its root object.
struct Unpacked {
  msgpack::object_handle handle;
  const msgpack::object& root() const { return handle.get(); }
};

/// Walks the bytes without allocating: exactly one complete msgpack object, no trailing bytes,
/// nesting ≤ kMaxNestingDepth, every declared length backed by input bytes, at most
/// kMaxObjectsPerMessage objects, no ext types, no reserved byte 0xc1. `what` names the message
/// kind in errors ("kv event batch").
Status prescan(std::span<const std::byte> bytes, std::string_view what);

/// prescan() followed by msgpack::unpack with limits; strings and bins reference `bytes`.
Result<Unpacked> unpackMessage(std::span<const std::byte> bytes, std::string_view what);

/// "str", "array", "positive integer", ...
const char* typeName(const msgpack::object& o);

/// Corruption error "<field>: expected <want>, got <type>".
Error typeError(std::string_view field, std::string_view want, const msgpack::object& got);

/// Unsigned integer ≤ `max`. Accepts only msgpack integers (a negative value is an error).
Result<std::uint64_t> getUint(const msgpack::object& o, std::string_view field,
                              std::uint64_t max = std::numeric_limits<std::uint64_t>::max());
/// Signed 64-bit integer (either msgpack integer family, within int64 range).
Result<std::int64_t> getInt(const msgpack::object& o, std::string_view field);
/// A 64-bit hash: unsigned integer, or a negative integer reinterpreted as two's complement
/// (i64 hashes as some encoders write them).
Result<std::uint64_t> getHash(const msgpack::object& o, std::string_view field);
/// Number: float32/float64 or integer, converted to double; NaN is refused.
Result<double> getNumber(const msgpack::object& o, std::string_view field);
/// Corruption "<field>: not valid UTF-8 (byte 0xff at offset 0)" unless `s` is UTF-8.
Status checkUtf8(std::string_view s, std::string_view field);
/// str of at most `max_bytes` bytes that is valid UTF-8 (else Corruption naming `field`).
Result<std::string_view> getStr(const msgpack::object& o, std::string_view field,
                                std::size_t max_bytes);
/// bin, or str (then valid UTF-8), of at most `max_bytes` bytes.
Result<std::string_view> getBytes(const msgpack::object& o, std::string_view field,
                                  std::size_t max_bytes);
/// Array of at most `max_elements` elements.
Result<std::span<const msgpack::object>> getArray(const msgpack::object& o, std::string_view field,
                                                  std::size_t max_elements);
/// Array of unsigned integers each ≤ UINT32_MAX (token ids).
Result<std::vector<std::uint32_t>> getU32Array(const msgpack::object& o, std::string_view field,
                                               std::size_t max_elements);

/// Read-only view of a msgpack map with string keys, no duplicate keys.
class MapView {
 public:
  /// Fails if `o` is not a map, has more than kMaxMapEntries entries, a non-str key, a key that
  /// is not valid UTF-8 or a duplicate key.
  static Result<MapView> create(const msgpack::object& o, std::string_view field);

  /// The value of `key`, or nullptr.
  const msgpack::object* find(std::string_view key) const;
  /// The value of `key`, or a Corruption error "<key>: missing".
  Result<const msgpack::object*> require(std::string_view key) const;
  /// The value of `key` unless it is absent or nil.
  const msgpack::object* findNonNil(std::string_view key) const;

 private:
  explicit MapView(const msgpack::object_map& map) : map_(&map) {}
  const msgpack::object_map* map_;
};

/// Typed values of required / optional map keys (errors name the key).
Result<std::uint64_t> uintKey(const MapView& m, std::string_view key,
                              std::uint64_t max = std::numeric_limits<std::uint64_t>::max());
Result<std::uint32_t> u32Key(const MapView& m, std::string_view key);
/// Absent or nil ⇒ nullopt.
Result<std::optional<std::uint32_t>> optU32Key(const MapView& m, std::string_view key);
Result<std::optional<std::uint64_t>> optU64Key(const MapView& m, std::string_view key);
/// A str of at most kMaxStringBytes.
Result<std::string> strKey(const MapView& m, std::string_view key);
/// A bool.
Result<bool> getBool(const msgpack::object& o, std::string_view field);

/// "<prefix>[<index>]".
std::string indexed(std::string_view prefix, std::size_t index);

}  // namespace mocker::protocol::detail
