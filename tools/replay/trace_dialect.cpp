#include "tools/replay/trace_dialect.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <optional>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace mocker::replay {
namespace {

using json = nlohmann::json;

constexpr const char* kAgenticKeys[] = {"wait_for", "branches", "prefix_reset", "tool_wait_ms"};

/// The hash_ids of a row, nullopt when absent or not a list of unsigned integers.
std::optional<std::vector<std::uint64_t>> hashIds(const json& row) {
  const auto it = row.find("hash_ids");
  if (it == row.end() || !it->is_array()) return std::nullopt;
  std::vector<std::uint64_t> ids;
  ids.reserve(it->size());
  for (const json& v : *it) {
    if (!v.is_number_unsigned()) return std::nullopt;
    ids.push_back(v.get<std::uint64_t>());
  }
  return ids;
}

/// True when `later` starts with every block of `earlier` but its last (which a longer prompt may
/// have filled with other tokens).
bool repeatsPrompt(const std::vector<std::uint64_t>& earlier,
                   const std::vector<std::uint64_t>& later) {
  const std::size_t n = earlier.size() - 1;
  return later.size() >= n &&
         std::equal(earlier.begin(), earlier.begin() + static_cast<long>(n), later.begin());
}

}  // namespace

namespace {

// Whether parsing `line` can change the guess: only rows with a session id or an agentic key
// can. Without a backslash a JSON key is spelled literally, so a line lacking every such name as
// a quoted string is skipped unparsed (a plain Mooncake trace: no line is parsed twice).
bool mayMatter(std::string_view line) {
  if (line.find('\\') != std::string_view::npos) return true;
  const auto has = [&](std::string_view key) {
    for (std::size_t at = line.find(key); at != std::string_view::npos;
         at = line.find(key, at + 1)) {
      if (at > 0 && line[at - 1] == '"' && at + key.size() < line.size() &&
          line[at + key.size()] == '"') {
        return true;
      }
    }
    return false;
  };
  if (has("session_id")) return true;
  for (const char* key : kAgenticKeys) {
    if (has(key)) return true;
  }
  return false;
}

}  // namespace

Result<DialectGuess> detectJsonlDialect(std::string_view head) {
  std::unordered_map<std::string, std::vector<std::uint64_t>> last_prompt;  // per session
  std::optional<std::size_t> first_full, first_delta;
  std::size_t full = 0, delta = 0;
  std::size_t line_no = 0;
  while (!head.empty()) {
    const std::size_t end = head.find('\n');
    if (end == std::string_view::npos) break;  // a cut last line
    const std::string_view line = head.substr(0, end);
    head.remove_prefix(end + 1);
    ++line_no;
    if (!mayMatter(line)) continue;
    const json row = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!row.is_object()) continue;
    for (const char* key : kAgenticKeys) {
      if (row.contains(key)) {
        return DialectGuess{"agentic", "line " + std::to_string(line_no) + " has '" + key + "'"};
      }
    }
    const auto sid = row.find("session_id");
    const std::optional<std::vector<std::uint64_t>> ids = hashIds(row);
    if (sid == row.end() || !sid->is_string() || !ids) continue;
    auto [it, first_turn] = last_prompt.try_emplace(sid->get<std::string>(), *ids);
    if (first_turn) continue;
    if (it->second.size() >= 2) {  // one block says nothing: every prompt starts with "nothing"
      if (repeatsPrompt(it->second, *ids)) {
        ++full;
        if (!first_full) first_full = line_no;
      } else {
        ++delta;
        if (!first_delta) first_delta = line_no;
      }
    }
    it->second = *ids;
  }
  if (full > 0 && delta > 0) {
    return invalidArgument(
        "cannot tell the trace's dialect: " + std::to_string(full) +
        " later turns repeat their session's previous prompt (mooncake; first on line " +
        std::to_string(*first_full) + ") and " + std::to_string(delta) +
        " carry only a new part (mooncake-delta; first on line " + std::to_string(*first_delta) +
        "): give --format mooncake or --format mooncake-delta");
  }
  if (delta > 0) {
    return DialectGuess{"mooncake-delta",
                        std::to_string(delta) +
                            " later turns carry only their new hash_ids (first on line " +
                            std::to_string(*first_delta) + ")"};
  }
  if (full > 0) {
    return DialectGuess{
        "mooncake", std::to_string(full) + " later turns repeat their session's previous prompt"};
  }
  return DialectGuess{"mooncake", "no session with two turns of two or more blocks"};
}

std::optional<std::string> readTraceHead(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string head(kDialectProbeBytes, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  if (in.bad()) return std::nullopt;
  head.resize(static_cast<std::size_t>(in.gcount()));
  if (in.eof() && !head.empty() && head.back() != '\n') head += '\n';  // the whole last line
  return head;
}

}  // namespace mocker::replay
