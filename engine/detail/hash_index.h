// HashIndex<V>: an open-addressing map from 64-bit block hashes to small values, used by the
// block pool for hash → copies. Block hashes are XXH3 outputs, i.e. already uniformly
// distributed, so the slot is the hash's low bits; linear probing with backward-shift deletion
// (no tombstones) keeps lookups short. Capacity is fixed at construction (a power of two at
// least twice the maximum number of keys), so no rehash ever happens on the hot path.
//
// REQUIRES: V has a member `count`; a slot is occupied iff count > 0 (callers erase at 0).
// Internal to engine/. Not thread-safe. Iteration order is unspecified: never use it for output.
#pragma once

#include <bit>
#include <cstdint>
#include <utility>
#include <vector>

#include "base/check.h"

namespace mocker::engine::detail {

template <typename V>
class HashIndex {
 public:
  explicit HashIndex(std::size_t max_keys)
      : slots_(std::bit_ceil(std::max<std::size_t>(16, 2 * max_keys))), mask_(slots_.size() - 1) {}

  std::size_t size() const { return size_; }

  V* find(std::uint64_t key) {
    for (std::size_t i = key & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.value.count == 0) return nullptr;
      if (s.key == key) return &s.value;
    }
  }
  const V* find(std::uint64_t key) const { return const_cast<HashIndex*>(this)->find(key); }

  /// The value for `key`, default-constructed (count 0) if absent; the caller must set count > 0
  /// before any other call. Second: true if it was inserted.
  std::pair<V*, bool> findOrInsert(std::uint64_t key) {
    for (std::size_t i = key & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.value.count == 0) {
        MOCKER_CHECK(size_ + 1 < slots_.size());
        ++size_;
        s.key = key;
        s.value = V{};
        return {&s.value, true};
      }
      if (s.key == key) return {&s.value, false};
    }
  }

  /// Removes `key` (REQUIRES: present), shifting later entries of its probe run back.
  void erase(std::uint64_t key) {
    std::size_t i = key & mask_;
    while (slots_[i].key != key || slots_[i].value.count == 0) i = (i + 1) & mask_;
    --size_;
    for (std::size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
      if (slots_[j].value.count == 0) break;
      const std::size_t home = slots_[j].key & mask_;
      // Move j into the hole at i unless j's home lies cyclically in (i, j].
      const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
      if (!stays) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i].value = V{};
  }

  void clear() {
    for (Slot& s : slots_) s.value = V{};
    size_ = 0;
  }

  /// Calls f(key, value) for every entry (unspecified order).
  template <typename F>
  void forEach(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.value.count != 0) f(s.key, s.value);
    }
  }

 private:
  struct Slot {
    std::uint64_t key = 0;
    V value{};
  };
  std::vector<Slot> slots_;
  std::size_t mask_;
  std::size_t size_ = 0;
};

}  // namespace mocker::engine::detail
