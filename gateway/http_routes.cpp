#include "gateway/http_routes.h"

#include <algorithm>
#include <array>
#include <utility>

namespace mocker::gateway {
namespace {

struct Route {
  std::string_view path;
  std::string_view method;
  bool lora_update = false;
};

constexpr std::array kRoutes = {
    Route{"/v1/models", "GET"},
    Route{"/v1/completions", "POST"},
    Route{"/v1/chat/completions", "POST"},
    Route{"/tokenize", "POST"},
    Route{"/detokenize", "POST"},
    Route{"/health", "GET"},
    Route{"/ready", "GET"},
    Route{"/metrics", "GET"},
    Route{"/v1/load_lora_adapter", "POST", true},
    Route{"/v1/unload_lora_adapter", "POST", true},
};

}  // namespace

RouteLookup lookupRoute(std::string_view method, std::string_view path, bool allow_lora_updates) {
  const auto it = std::find_if(kRoutes.begin(), kRoutes.end(), [&](const Route& r) {
    return r.path == path && (!r.lora_update || allow_lora_updates);
  });
  RouteLookup out;
  if (it == kRoutes.end()) {
    out.endpoint = "unknown";
    out.error = ApiError{.status = 404, .message = "no route " + std::string(path)};
    return out;
  }
  if (method != it->method) {
    out.endpoint = "unknown";
    out.allow = std::string(it->method);
    out.error = ApiError{
        .status = 405,
        .message = "method " + std::string(method) + " not allowed on " + std::string(path)};
    return out;
  }
  out.endpoint = std::string(path.substr(path.starts_with("/v1/") ? 4 : 1));
  std::replace(out.endpoint.begin(), out.endpoint.end(), '/', '_');
  out.lora_update = it->lora_update;
  return out;
}

bool bearerAuthorized(std::string_view authorization, const std::set<std::string>& keys) {
  constexpr std::string_view kBearer = "Bearer ";
  return authorization.starts_with(kBearer) &&
         keys.contains(std::string(authorization.substr(kBearer.size())));
}

}  // namespace mocker::gateway
