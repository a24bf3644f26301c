// ZeroMQ endpoints, parsed once: "tcp://HOST:PORT" (HOST may be a name, an address, "[::1]" or
// the wildcard "*"; PORT a number or the wildcard "*"), "ipc://PATH", "inproc://NAME". Every
// place that reads, checks or derives an endpoint (the service's configuration, per-rank
// offsets, the exposure warning, the replay and index tools' defaults) goes through here.
//
// Pure functions; thread-safe.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace mocker {

struct Endpoint {
  enum class Scheme : std::uint8_t { Tcp, Ipc, Inproc };
  Scheme scheme = Scheme::Tcp;
  std::string host;  ///< tcp: between "tcp://" and the last ':' (as written; may be empty)
  std::string port;  ///< tcp: after the last ':' (as written: a number, "*", or anything)
  std::string path;  ///< ipc, inproc: after the scheme

  bool isTcp() const { return scheme == Scheme::Tcp; }
  /// tcp with port "*": the system picks a free port at bind.
  bool wildcardPort() const { return isTcp() && port == "*"; }
  /// tcp with a host that binds every interface (*, 0.0.0.0, [::], ::, [*]): bindable, not
  /// connectable.
  bool wildcardHost() const {
    return isTcp() &&
           (host == "*" || host == "0.0.0.0" || host == "[::]" || host == "::" || host == "[*]");
  }
  /// Reachable from this host only: ipc, inproc, or a loopback tcp host.
  bool loopbackOnly() const {
    return !isTcp() || host == "localhost" || host.starts_with("127.") || host == "[::1]" ||
           host == "::1";
  }
  /// The port as a number, when it is all digits (and fits 32 bits; not checked against
  /// 65535: offsetEndpoint and the configuration's validation say "out of range").
  std::optional<std::uint32_t> numericPort() const {
    std::uint32_t n = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), n);
    if (!isTcp() || port.empty() || ec != std::errc{} || end != port.data() + port.size()) {
      return std::nullopt;
    }
    return n;
  }
  /// This tcp endpoint with port `p`.
  std::string withPort(std::uint32_t p) const { return "tcp://" + host + ":" + std::to_string(p); }
};

/// Splits `text` into an Endpoint. Errors name the endpoint and what is missing: a text without
/// a scheme ("localhost:5555": missing tcp://), an unknown scheme, a tcp endpoint without
/// ":PORT". (An empty ipc or inproc name is left to ZeroMQ, which refuses it at bind.)
inline Result<Endpoint> parseEndpoint(std::string_view text) {
  const auto fail = [&](const std::string& why) -> Result<Endpoint> {
    return invalidArgument("endpoint '" + std::string(text) + "': " + why);
  };
  constexpr std::string_view kForms = "tcp://HOST:PORT, ipc://PATH or inproc://NAME";
  Endpoint ep;
  if (text.starts_with("tcp://")) {
    const std::size_t colon = text.rfind(':');
    if (colon < 6) return fail("no port (expected tcp://HOST:PORT)");
    ep.host = std::string(text.substr(6, colon - 6));
    ep.port = std::string(text.substr(colon + 1));
    return ep;
  }
  for (const auto& [prefix, scheme] :
       {std::pair{std::string_view("ipc://"), Endpoint::Scheme::Ipc},
        std::pair{std::string_view("inproc://"), Endpoint::Scheme::Inproc}}) {
    if (!text.starts_with(prefix)) continue;
    ep.scheme = scheme;
    ep.path = std::string(text.substr(prefix.size()));
    return ep;
  }
  if (text.find("://") == std::string_view::npos) {
    return fail("missing tcp:// (expected " + std::string(kForms) + ")");
  }
  return fail("unsupported scheme (expected " + std::string(kForms) + ")");
}

/// The endpoint `offset` places after `endpoint` (docs/wire.md, Endpoints; vLLM
/// `offset_endpoint_port`): offset 0 is the endpoint unchanged; otherwise `port + offset` for
/// tcp, the suffix `_dp<offset>` for ipc and inproc. Used for DP ranks. Errors name the endpoint
/// and what is wrong (no numeric port, a wildcard port, out of range after the offset, unknown
/// scheme).
inline Result<std::string> offsetEndpoint(std::string_view endpoint, std::uint32_t offset) {
  const auto fail = [&](const std::string& why) {
    return invalidArgument("endpoint '" + std::string(endpoint) + "': " + why);
  };
  const auto ep = parseEndpoint(endpoint);
  if (ep && ep->isTcp()) {
    if (ep->wildcardPort()) {
      if (offset == 0) return std::string(endpoint);
      return fail("a wildcard port cannot be offset for dp_rank " + std::to_string(offset));
    }
    const std::optional<std::uint32_t> port = ep->numericPort();
    if (!port) return fail("expected tcp://host:port with a numeric port");
    if (*port > 65535) return fail("port out of range");
    if (offset == 0) return std::string(endpoint);
    const std::uint64_t shifted = std::uint64_t{*port} + offset;
    if (shifted > 65535) {
      return fail("port " + std::to_string(*port) + " + dp_rank " + std::to_string(offset) +
                  " exceeds 65535");
    }
    return ep->withPort(static_cast<std::uint32_t>(shifted));
  }
  if (ep) {
    if (offset == 0) return std::string(endpoint);
    return std::string(endpoint) + "_dp" + std::to_string(offset);
  }
  if (endpoint.starts_with("tcp://")) return fail("expected tcp://host:port with a numeric port");
  return fail("unsupported scheme (expected tcp://, ipc:// or inproc://)");
}

}  // namespace mocker
