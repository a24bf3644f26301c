#include "tools/replay/stats.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

#include "base/check.h"

namespace mocker::replay {
namespace {

/// Below this many samples std::sort beats the fixed cost of the linear sorts (tables, buffers).
constexpr std::size_t kRadixSortMinSamples = 4096;

constexpr unsigned kDigitBits = 8;
constexpr std::size_t kNumBuckets = std::size_t{1} << kDigitBits;
constexpr std::size_t kNumDigits = 64 / kDigitBits;
constexpr std::uint64_t kSignBit = std::uint64_t{1} << 63;

/// A key whose unsigned order is the numeric order of the double: positive numbers get the sign
/// bit set, negative numbers have every bit flipped (so larger magnitudes sort first).
std::uint64_t orderedKey(double x) {
  const auto bits = std::bit_cast<std::uint64_t>(x);
  return (bits & kSignBit) != 0 ? ~bits : bits | kSignBit;
}

double fromOrderedKey(std::uint64_t key) {
  return std::bit_cast<double>((key & kSignBit) != 0 ? key & ~kSignBit : ~key);
}

/// LSD radix sort of the keys, one byte per pass, least significant first. A pass whose byte is
/// the same for every key is skipped (typical for the exponent bytes of latencies).
void radixSortKeys(std::vector<std::uint64_t>& keys) {
  std::array<std::array<std::size_t, kNumBuckets>, kNumDigits> counts{};
  for (const std::uint64_t k : keys) {
    for (std::size_t d = 0; d < kNumDigits; ++d)
      ++counts[d][(k >> (d * kDigitBits)) & (kNumBuckets - 1)];
  }
  std::vector<std::uint64_t> scratch(keys.size());
  for (std::size_t d = 0; d < kNumDigits; ++d) {
    std::array<std::size_t, kNumBuckets>& count = counts[d];
    const std::uint64_t first_digit = (keys.front() >> (d * kDigitBits)) & (kNumBuckets - 1);
    if (count[first_digit] == keys.size()) continue;
    std::size_t offset = 0;
    for (std::size_t& c : count) {
      const std::size_t n = c;
      c = offset;
      offset += n;
    }
    for (const std::uint64_t k : keys)
      scratch[count[(k >> (d * kDigitBits)) & (kNumBuckets - 1)]++] = k;
    keys.swap(scratch);
  }
}

/// The key of one NaN bit pattern only (0x7FF…F); marks an empty hash slot.
constexpr std::uint64_t kEmptyKey = ~std::uint64_t{0};
/// Counting sort is tried when at most this fraction (1/8) of the samples are distinct.
constexpr std::size_t kMaxDistinctDivisor = 8;

std::size_t slotOf(std::uint64_t key, unsigned table_bits) {
  return static_cast<std::size_t>((key * 0x9E37'79B9'7F4A'7C15ull) >> (64 - table_bits));
}

/// Counting sort over the distinct values: one pass counts each bit pattern in a small
/// open-addressing table (grown by doubling, so it stays cache-sized when values repeat), then
/// the distinct values are sorted and written back `count` times each. Pooled inter-token gaps
/// repeat heavily (every request of a batch sees the same pass duration), which makes this far
/// cheaper than any comparison or radix sort over all samples. Returns false, with `samples`
/// untouched, as soon as more than 1/kMaxDistinctDivisor of them are distinct.
bool tryCountingSort(std::vector<double>& samples) {
  struct Slot {
    std::uint64_t key = kEmptyKey;
    std::size_t count = 0;
  };
  const std::size_t max_distinct = samples.size() / kMaxDistinctDivisor;
  unsigned table_bits = 10;
  std::vector<Slot> table(std::size_t{1} << table_bits);
  std::size_t num_distinct = 0;
  const auto probe = [](const std::vector<Slot>& t, std::uint64_t key, unsigned bits) {
    std::size_t i = slotOf(key, bits);
    while (t[i].key != key && t[i].key != kEmptyKey) i = (i + 1) & (t.size() - 1);
    return i;
  };
  for (const double x : samples) {
    const std::uint64_t key = orderedKey(x);
    if (key == kEmptyKey) return false;  // a NaN; not sortable anyway
    std::size_t i = probe(table, key, table_bits);
    if (table[i].key == kEmptyKey) {
      if (++num_distinct > max_distinct) return false;
      if (2 * num_distinct > table.size()) {  // keep the load factor <= 1/2
        ++table_bits;
        std::vector<Slot> bigger(std::size_t{1} << table_bits);
        for (const Slot& slot : table) {
          if (slot.key != kEmptyKey) bigger[probe(bigger, slot.key, table_bits)] = slot;
        }
        table.swap(bigger);
        i = probe(table, key, table_bits);
      }
      table[i].key = key;
    }
    ++table[i].count;
  }
  std::vector<Slot> distinct;
  distinct.reserve(num_distinct);
  for (const Slot& slot : table) {
    if (slot.key != kEmptyKey) distinct.push_back(slot);
  }
  std::sort(distinct.begin(), distinct.end(),
            [](const Slot& a, const Slot& b) { return a.key < b.key; });
  auto out = samples.begin();
  for (const Slot& slot : distinct) {
    out = std::fill_n(out, slot.count, fromOrderedKey(slot.key));
  }
  return true;
}

}  // namespace

double percentileLinear(std::span<const double> sorted, double p) {
  MOCKER_CHECK(!sorted.empty() && p >= 0.0 && p <= 100.0);
  const double h = static_cast<double>(sorted.size() - 1) * p / 100.0;
  const double lo_h = std::floor(h);
  const auto lo = static_cast<std::size_t>(lo_h);
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - lo_h) * (sorted[hi] - sorted[lo]);
}

void sortSamples(std::vector<double>& samples) {
  if (samples.size() < kRadixSortMinSamples) {
    std::sort(samples.begin(), samples.end());
    return;
  }
  if (tryCountingSort(samples)) return;
  std::vector<std::uint64_t> keys(samples.size());
  std::transform(samples.begin(), samples.end(), keys.begin(), orderedKey);
  radixSortKeys(keys);
  std::transform(keys.begin(), keys.end(), samples.begin(), fromOrderedKey);
}

Distribution summarizeSorted(std::span<const double> sorted) {
  Distribution d;
  d.count = sorted.size();
  if (sorted.empty()) return d;
  double sum = 0.0;
  for (const double x : sorted) sum += x;
  const auto n = static_cast<double>(sorted.size());
  d.mean = sum / n;
  double squares = 0.0;
  for (const double x : sorted) squares += (x - d.mean) * (x - d.mean);
  d.std = std::sqrt(squares / n);
  d.min = sorted.front();
  d.max = sorted.back();
  d.p50 = percentileLinear(sorted, 50);
  d.p75 = percentileLinear(sorted, 75);
  d.p90 = percentileLinear(sorted, 90);
  d.p95 = percentileLinear(sorted, 95);
  d.p99 = percentileLinear(sorted, 99);
  d.quantiles.reserve(kQuantilePoints);
  for (std::size_t p = 0; p < kQuantilePoints; ++p) {
    d.quantiles.push_back(percentileLinear(sorted, static_cast<double>(p)));
  }
  return d;
}

Distribution summarize(std::vector<double> samples) {
  sortSamples(samples);
  return summarizeSorted(samples);
}

}  // namespace mocker::replay
