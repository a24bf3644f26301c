#include "tools/replay/detail/agentic_graph.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace mocker::replay::detail {
namespace {

/// The error for a cycle reachable from `start`: follow unordered dependencies until a row
/// repeats; name the cycle's row with the smallest line.
Error cycleError(const std::vector<AgenticRow>& rows, std::uint32_t start,
                 const std::vector<std::vector<std::uint32_t>>& deps,
                 const std::vector<bool>& ordered) {
  std::unordered_map<std::uint32_t, std::size_t> position;
  std::vector<std::uint32_t> path;
  std::uint32_t at = start;
  while (!position.contains(at)) {
    position.emplace(at, path.size());
    path.push_back(at);
    for (std::uint32_t d : deps[at]) {
      if (!ordered[d]) {
        at = d;
        break;
      }
    }
  }
  std::vector<std::uint32_t> cycle(path.begin() + static_cast<std::ptrdiff_t>(position[at]),
                                   path.end());
  const auto first = std::min_element(cycle.begin(), cycle.end());  // rows are in file order
  std::rotate(cycle.begin(), first, cycle.end());
  std::string text;
  constexpr std::size_t kShown = 8;
  for (std::size_t k = 0; k < cycle.size() && k < kShown; ++k) {
    text += "'" + rows[cycle[k]].request_id + "' waits for ";
  }
  text += cycle.size() > kShown ? "… (" + std::to_string(cycle.size()) + " rows) … '" +
                                      rows[cycle.front()].request_id + "'"
                                : "'" + rows[cycle.front()].request_id + "'";
  return invalidArgument("line " + std::to_string(rows[cycle.front()].line) +
                         ": 'wait_for' forms a cycle: " + text);
}

}  // namespace

Result<std::vector<Session>> resolveAgenticGraph(std::vector<AgenticRow>& rows,
                                                 const TraceOptions& options,
                                                 std::vector<LineError>& skipped) {
  const std::size_t n = rows.size();
  std::unordered_map<std::string_view, std::uint32_t> index;  // request_id → row
  for (std::uint32_t i = 0; i < n; ++i) index.emplace(rows[i].request_id, i);
  std::vector<bool> dead(n, false);
  std::vector<std::vector<std::uint32_t>> deps(n);        // row → rows it waits for
  std::vector<std::vector<std::uint32_t>> dependents(n);  // row → rows waiting for it
  std::vector<std::uint32_t> to_kill;
  const auto fail = [&](std::uint32_t i, std::string message) -> Status {
    if (!options.skip_invalid) {
      return invalidArgument("line " + std::to_string(rows[i].line) + ": " + message);
    }
    skipped.push_back(LineError{rows[i].line, std::move(message)});
    dead[i] = true;
    to_kill.push_back(i);
    return {};
  };
  for (std::uint32_t i = 0; i < n; ++i) {
    const AgenticRow& r = rows[i];
    bool ok = true;
    for (const std::string& id : r.branches) {
      if (!index.contains(id)) {
        MOCKER_TRY_VOID(fail(i, "'branches' names unknown request_id '" + id + "'"));
        ok = false;
        break;
      }
    }
    for (const std::string& id : r.wait_for) {
      if (!ok) break;
      auto it = index.find(id);
      if (it == index.end()) {
        MOCKER_TRY_VOID(fail(i, "'wait_for' names unknown request_id '" + id + "'"));
        ok = false;
        break;
      }
      deps[i].push_back(it->second);
      dependents[it->second].push_back(i);
    }
  }
  // Rows waiting (transitively) for a skipped row are skipped too.
  while (!to_kill.empty()) {
    const std::uint32_t d = to_kill.back();
    to_kill.pop_back();
    for (std::uint32_t i : dependents[d]) {
      if (dead[i]) continue;
      MOCKER_TRY_VOID(
          fail(i, "'wait_for' names request_id '" + rows[d].request_id + "', which was skipped"));
    }
  }
  // Kahn's algorithm over the live rows: what cannot be ordered is on or behind a cycle.
  std::vector<std::uint32_t> pending(n, 0);
  std::vector<std::uint32_t> queue;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (dead[i]) continue;
    pending[i] = static_cast<std::uint32_t>(deps[i].size());
    if (pending[i] == 0) queue.push_back(i);
  }
  std::vector<bool> ordered(n, false);
  for (std::size_t q = 0; q < queue.size(); ++q) {
    ordered[queue[q]] = true;
    for (std::uint32_t i : dependents[queue[q]]) {
      if (!dead[i] && --pending[i] == 0) queue.push_back(i);
    }
  }
  for (std::uint32_t start = 0; start < n; ++start) {
    if (dead[start] || ordered[start]) continue;
    if (!options.skip_invalid) return cycleError(rows, start, deps, ordered);
    for (std::uint32_t i = start; i < n; ++i) {
      if (!dead[i] && !ordered[i]) {
        skipped.push_back(LineError{rows[i].line, "'wait_for' is on or behind a dependency cycle"});
        dead[i] = true;
      }
    }
    break;
  }
  // Line errors, rows skipped for their dependencies and cycle members: back to file order.
  std::stable_sort(skipped.begin(), skipped.end(),
                   [](const LineError& a, const LineError& b) { return a.line < b.line; });

  std::vector<std::uint32_t> session_of(n, 0);
  std::vector<Session> sessions;
  std::optional<double> min_arrival;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (dead[i]) continue;
    session_of[i] = static_cast<std::uint32_t>(sessions.size());
    Session& s = sessions.emplace_back(std::move(rows[i].session));
    if (!deps[i].empty()) {
      s.first_arrival_ms.reset();  // released by its dependencies
    } else if (s.first_arrival_ms) {
      min_arrival = std::min(min_arrival.value_or(*s.first_arrival_ms), *s.first_arrival_ms);
    }
  }
  const double ratio = options.arrival_speedup_ratio;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (dead[i]) continue;
    Session& s = sessions[session_of[i]];
    for (std::uint32_t d : deps[i]) s.wait_for.push_back(session_of[d]);
    s.dependency_delay_ms = rows[i].dependency_delay_ms / ratio;
    if (s.first_arrival_ms) s.first_arrival_ms = (*s.first_arrival_ms - *min_arrival) / ratio;
  }
  return sessions;
}

}  // namespace mocker::replay::detail
