// Shared by the configuration's validation units (service/config_validate.cpp and
// service/config_endpoints.cpp): a broken rule as data, and the endpoint checks.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "service/config.h"

namespace mocker::service::detail {

/// The rule about `key` (and the `related` keys) is broken: "<key> <what>".
inline ConfigError issue(const std::string& key, const std::string& what,
                         std::vector<std::string> related = {}) {
  related.insert(related.begin(), key);
  return {std::move(related), invalidArgument(key + " " + what)};
}

/// Every bound socket's endpoint per DP rank (scheme, DP offset, no two on one address, the HTTP
/// endpoint included) and a prefill worker's advertised handoff endpoint. Only for a service:
/// an engine-only user opens no socket.
std::optional<ConfigError> checkEndpoints(const ServiceConfig& c);

}  // namespace mocker::service::detail
