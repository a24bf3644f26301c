// HashIndex<V>: an open-addressing map from 64-bit block hashes to small values, used by the
// engine's block pool (hash → copies) and radix cache (first page hash → run), and by the KV
// router's active-block load (hash → holders). Block hashes are XXH3 outputs, i.e. already
// uniformly distributed, so the slot is the hash's low bits; linear probing with backward-shift
// deletion (no tombstones) keeps lookups short. The table starts small and doubles whenever it
// would become more than half full, so memory follows the keys actually present, not the pool size
// (an idle 1 Mi-page pool costs a few hundred bytes, not 32 MiB); growth is amortised O(1).
//
// REQUIRES: V has a member `count`; a slot is occupied iff count > 0 (callers erase at 0).
// Not thread-safe. Iteration order is unspecified: never use it for output.
#pragma once

#include <bit>
#include <cstdint>
#include <utility>
#include <vector>

#include "base/check.h"

namespace mocker {

template <typename V>
class HashIndex {
 public:
  /// `max_keys` bounds the number of keys ever present at once (checked).
  explicit HashIndex(std::size_t max_keys)
      : max_keys_(max_keys), slots_(kMinSlots), mask_(kMinSlots - 1) {}

  std::size_t size() const { return size_; }

  V* find(std::uint64_t key) {
    for (std::size_t i = key & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.value.count == 0) return nullptr;
      if (s.key == key) return &s.value;
    }
  }
  const V* find(std::uint64_t key) const { return const_cast<HashIndex*>(this)->find(key); }

  /// Hints the CPU to load the slot `key` probes first (a later find/insert/erase of it then
  /// rarely waits for memory). No effect on contents.
  void prefetch(std::uint64_t key) const { __builtin_prefetch(&slots_[key & mask_]); }

  /// The value for `key`, default-constructed (count 0) if absent; the caller must set count > 0
  /// before any other call. Second: true if it was inserted.
  std::pair<V*, bool> findOrInsert(std::uint64_t key) {
    if (V* v = find(key)) return {v, false};
    MOCKER_CHECK(size_ < max_keys_);
    if (2 * (size_ + 1) > slots_.size()) grow();
    for (std::size_t i = key & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.value.count == 0) {
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

  /// Removes every key and gives the table's memory back.
  void clear() {
    std::vector<Slot>(kMinSlots).swap(slots_);
    mask_ = kMinSlots - 1;
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
  static constexpr std::size_t kMinSlots = 16;
  struct Slot {
    std::uint64_t key = 0;
    V value{};
  };

  /// Doubles the table and reinserts every entry (the callers' V* are invalidated; none is held
  /// across an insert).
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.value.count == 0) continue;
      std::size_t i = s.key & mask_;
      while (slots_[i].value.count != 0) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::size_t max_keys_;
  std::vector<Slot> slots_;
  std::size_t mask_;
  std::size_t size_ = 0;
};

}  // namespace mocker
