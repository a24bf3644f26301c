// CURVE keys for `mocker serve`, its clients, `mocker index`, the gateway and `mocker keygen`:
// Z85 checks, key files, the server's key set and the socket options that turn CURVE on
// (service/README.md, "Security"). Loading the server's keys from the service configuration's
// `[security]` section is service/security_keys.h.
//
// Keys are Z85 text, 40 characters for 32 bytes (ZeroMQ's zmq_curve_keypair form). A key file
// holds one key: its first line, surrounding whitespace ignored (`mocker keygen` writes NAME.key
// with the secret key, mode 0600, and NAME.pub with the public key).
//
// Pure functions plus file reads/writes; thread-compatible.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <zmq.hpp>

#include "base/result.h"

namespace mocker::net {

/// ZAP domain of every CURVE socket of `mocker serve` (sent to the ZAP handler).
inline constexpr const char* kZapDomain = "mocker";
/// ZAP domain of a prefill worker's handoff ROUTER: its allow-list is the worker keys
/// (security.worker_public_key_files), not the client keys.
inline constexpr const char* kHandoffZapDomain = "mocker-handoff";

/// Whether `text` is a 40-character Z85 string that decodes to a 32-byte key.
bool isZ85Key(std::string_view text);

/// Reads a key file (first line, trimmed); `what` names the key in errors ("server secret key").
/// Errors name the file: missing, unreadable, or not a Z85 key.
Result<std::string> readKeyFile(const std::string& path, std::string_view what);

/// The public key (Z85) of a secret key (Z85). REQUIRES: isZ85Key(secret).
std::string curvePublicKey(const std::string& secret);

/// The server side of CURVE, loaded from `[security]`: its key pair and the allow-list.
struct CurveServerKeys {
  std::string public_key;                 ///< Z85
  std::string secret_key;                 ///< Z85
  std::set<std::string> allowed_clients;  ///< Z85 public keys
  std::set<std::string> allowed_workers;  ///< Z85 public keys allowed on the handoff socket
};

/// Makes `socket` a CURVE server with `keys` and the ZAP domain (before bind/connect). Throws
/// zmq::error_t like any socket option.
void makeCurveServer(zmq::socket_t& socket, const CurveServerKeys& keys,
                     const char* zap_domain = kZapDomain);

/// A client's CURVE settings: its key pair and the server's public key, all Z85.
struct CurveClientKeys {
  std::string server_public_key;
  std::string public_key;
  std::string secret_key;
  bool enabled() const { return !server_public_key.empty(); }
};

/// Checks a client's settings: all three empty (no CURVE) or all three Z85 keys.
Status checkCurveClientKeys(const CurveClientKeys& keys);

/// Makes `socket` a CURVE client (before connect). No-op when !keys.enabled().
void makeCurveClient(zmq::socket_t& socket, const CurveClientKeys& keys);

/// Reads the server's public key file and this client's secret key file (`mocker keygen`'s
/// NAME.pub and NAME.key) and derives the client's public key. Errors name the file and the
/// flag that gave it (--curve-server-key-file, --curve-secret-key-file).
Result<CurveClientKeys> loadCurveClientKeys(const std::string& server_key_file,
                                            const std::string& secret_key_file);

/// Writes a new key pair: `prefix`.key (secret, mode 0600) and `prefix`.pub (public, 0644).
/// Refuses to overwrite an existing file unless `force`. Returns the public key.
Result<std::string> writeKeyPair(const std::string& prefix, bool force);

}  // namespace mocker::net
