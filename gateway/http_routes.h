// The gateway's HTTP routes: which method each path takes, the label its requests are counted
// under in /metrics, and the Bearer key check. Pure; no I/O.
//
//   const RouteLookup r = lookupRoute("POST", "/v1/chat/completions", allow_lora_updates);
//   if (r.error) { answer 404 / 405 (Allow: r.allow) counted as r.endpoint ("unknown") }
//   r.endpoint == "chat_completions"
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "gateway/api_error.h"

namespace mocker::gateway {

struct RouteLookup {
  /// Set: the request is answered with it — 404 for a path the gateway does not serve (the
  /// LoRA update routes too unless they are allowed, as vLLM without
  /// --allow-runtime-lora-updating), 405 for a served path asked with another method.
  std::optional<ApiError> error;
  std::string allow;  ///< with a 405: the path's method, for the `Allow` header
  /// The metrics label: the path without its "/v1/" (or "/") and with '/' as '_'
  /// ("chat_completions"); "unknown" with an error.
  std::string endpoint;
  bool lora_update = false;  ///< /v1/load_lora_adapter or /v1/unload_lora_adapter
};

/// The route of `method` `path` (the request target as given: a query string is part of it).
RouteLookup lookupRoute(std::string_view method, std::string_view path, bool allow_lora_updates);

/// Whether `authorization` (the header's value) is `Bearer KEY` with KEY one of `keys`.
bool bearerAuthorized(std::string_view authorization, const std::set<std::string>& keys);

}  // namespace mocker::gateway
