// The `[security]` section of the service configuration → CURVE keys (net/security.h): the
// server's key pair and allow-lists, and a decode worker's client keys toward prefill workers'
// handoff sockets (service/README.md, "Security").
//
// Pure functions plus key-file reads; thread-compatible.
#pragma once

#include "base/result.h"
#include "net/security.h"
#include "service/config.h"

namespace mocker::service {

/// Loads the server key pair (inline or file) and the allow-list (inline keys and key files).
/// REQUIRES: security.curve. Errors name the key or file.
Result<net::CurveServerKeys> loadCurveServerKeys(const SecurityConfig& security);

/// A decode worker's CURVE client side toward prefill workers' handoff sockets, from
/// security.worker_secret_key_file and security.handoff_server_key_file; disabled (all empty)
/// when neither is set. Errors name the key and the file.
Result<net::CurveClientKeys> loadHandoffClientKeys(const SecurityConfig& security);

}  // namespace mocker::service
