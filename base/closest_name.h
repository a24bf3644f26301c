// "Did you mean …?" for names typed by people: the candidate nearest to a misspelt name by edit
// distance (Levenshtein, with an adjacent transposition counting as one edit), if it is near
// enough to be a plausible typo. Used for unknown command-line flags (tools/cli_options.h) and
// unknown configuration keys (service/config_toml.cpp, service/config_keys.cpp).
//
//   closestName("--num-gpu-block", {"--num-gpu-blocks", "--block-size"}) == "--num-gpu-blocks"
//
// Pure functions; thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// The fuzzers' coverage instrumentation (clang's -fsanitize=fuzzer) is left out of the
// alignment loop: its comparisons are of no interest to a fuzzer, and tracing each of them made
// every unknown key in a fuzzed TOML file cost milliseconds.
#if defined(__clang__)
#define MOCKER_NO_COVERAGE __attribute__((no_sanitize("coverage")))
#else
#define MOCKER_NO_COVERAGE
#endif

namespace mocker {

/// Optimal string alignment distance between `a` and `b`: insertions, deletions, substitutions
/// and swaps of two adjacent characters each cost one. With `bound`, any distance above it comes
/// back as `bound + 1`, found as soon as two consecutive rows of the table exceed the bound (no
/// later cell can be smaller than the smaller of the two rows before it).
MOCKER_NO_COVERAGE inline std::size_t editDistance(
    std::string_view a, std::string_view b, std::size_t bound = static_cast<std::size_t>(-1) - 1) {
  const std::size_t n = a.size();
  const std::size_t m = b.size();
  // Three rows: i - 2, i - 1 and i.
  std::vector<std::size_t> prev2(m + 1), prev(m + 1), cur(m + 1);
  for (std::size_t j = 0; j <= m; ++j) prev[j] = j;
  bool prev_over = false;  // row 0 starts at 0
  for (std::size_t i = 1; i <= n; ++i) {
    cur[0] = i;
    std::size_t row_min = i;
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min(std::min(prev[j], cur[j - 1]) + 1, prev[j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
      }
      row_min = std::min(row_min, cur[j]);
    }
    const bool cur_over = row_min > bound;
    if (cur_over && prev_over) return bound + 1;
    prev_over = cur_over;
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return std::min(prev[m], bound + 1);
}

/// Whether `candidate` could be what was meant by `name` word for word: false when both have the
/// same number of words (split at '-', '_' and '.') and some aligned pair differs in more than
/// half of the longer word's characters — another word, not a typo ("--tensor-parallel-size" is
/// not "--data-parallel-size" misspelt). Names with different word counts pass.
inline bool wordsCouldBeTypos(std::string_view name, std::string_view candidate) {
  const auto words = [](std::string_view s) {
    std::vector<std::string_view> out;
    std::size_t start = 0;
    for (std::size_t i = 0; i <= s.size(); ++i) {
      if (i == s.size() || s[i] == '-' || s[i] == '_' || s[i] == '.') {
        out.push_back(s.substr(start, i - start));
        start = i + 1;
      }
    }
    return out;
  };
  const std::vector<std::string_view> a = words(name);
  const std::vector<std::string_view> b = words(candidate);
  if (a.size() != b.size()) return true;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::size_t longer = std::max(a[i].size(), b[i].size());
    if (editDistance(a[i], b[i]) > std::max<std::size_t>(1, longer / 2)) return false;
  }
  return true;
}

/// The candidate nearest to `name`, if at most max(2, |name| / 3) edits away and
/// wordsCouldBeTypos (ties: the first in `candidates`). A candidate that starts with `name` (a
/// truncated name: "--num-gpu") also counts when `name` has at least 4 characters.
inline std::optional<std::string> closestName(std::string_view name,
                                              const std::vector<std::string>& candidates) {
  const std::size_t limit = std::max<std::size_t>(2, name.size() / 3);
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    if (c == name) continue;
    const bool is_prefix =
        name.size() >= 4 && c.size() > name.size() && c.compare(0, name.size(), name) == 0;
    // The length difference is a lower bound on the distance: a candidate that cannot beat the
    // best so far is not aligned at all (a hostile 4 KB key in a TOML file costs nothing then).
    const std::size_t length_gap =
        c.size() > name.size() ? c.size() - name.size() : name.size() - c.size();
    if (!is_prefix && length_gap >= best_distance) continue;
    if (!wordsCouldBeTypos(name, c)) continue;
    std::size_t d = editDistance(name, c, best_distance - 1);
    if (is_prefix) d = std::min(d, limit);  // a prefix: as plausible as the furthest typo we accept
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

/// " (did you mean 'X'?)" for the closest candidate, or "" when none is close.
inline std::string didYouMean(std::string_view name, const std::vector<std::string>& candidates) {
  const auto best = closestName(name, candidates);
  return best ? " (did you mean '" + *best + "'?)" : std::string();
}

}  // namespace mocker
