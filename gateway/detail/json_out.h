// Appending JSON to a string without building a tree: the gateway's per-request response bodies
// (response_shaper.cpp) are written straight into one buffer. The bytes are exactly what
// nlohmann::json's compact dump(-1, ' ', false, error_handler_t::replace) writes for the same
// values: quotes, backslashes and control characters escaped (\b \f \n \r \t, else \u00xx with
// lowercase hex), everything else — DEL and non-ASCII — as is; invalid UTF-8 replaced by U+FFFD
// exactly as nlohmann replaces it (the rare invalid string goes through nlohmann itself).
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mocker::gateway::detail {

/// Appends `s` as a quoted JSON string.
void appendJsonString(std::string& out, std::string_view s);
/// Appends `v` as a JSON integer.
void appendJsonInt(std::string& out, std::int64_t v);
/// Appends `"key":` (`key` must need no escaping: a literal of the caller's).
inline void appendJsonKey(std::string& out, std::string_view key) {
  out += '"';
  out += key;
  out += "\":";
}

}  // namespace mocker::gateway::detail
