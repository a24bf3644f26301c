// The [security] section → CURVE keys (contract in security_keys.h).
#include "service/security_keys.h"

#include <string>
#include <utility>

namespace mocker::service {

using net::curvePublicKey;
using net::isZ85Key;
using net::readKeyFile;

Result<net::CurveServerKeys> loadCurveServerKeys(const SecurityConfig& security) {
  net::CurveServerKeys keys;
  if (!security.server_secret_key_file.empty()) {
    MOCKER_TRY(keys.secret_key, net::readKeyFile(security.server_secret_key_file,
                                                 "security.server_secret_key_file"));
  } else {
    keys.secret_key = security.server_secret_key;
  }
  if (!net::isZ85Key(keys.secret_key)) {
    return invalidArgument("security.server_secret_key: not a Z85 key (40 characters)");
  }
  keys.public_key = net::curvePublicKey(keys.secret_key);
  if (keys.public_key.empty()) {
    return invalidArgument("security: cannot derive the server public key (libzmq without CURVE?)");
  }
  for (std::size_t i = 0; i < security.client_public_keys.size(); ++i) {
    const std::string& k = security.client_public_keys[i];
    if (!net::isZ85Key(k)) {
      return invalidArgument("security.client_public_keys[" + std::to_string(i) +
                             "]: not a Z85 key (40 characters)");
    }
    keys.allowed_clients.insert(k);
  }
  for (const std::string& path : security.client_public_key_files) {
    MOCKER_TRY(std::string k, net::readKeyFile(path, "security.client_public_key_files"));
    keys.allowed_clients.insert(std::move(k));
  }
  for (const std::string& path : security.worker_public_key_files) {
    MOCKER_TRY(std::string k, net::readKeyFile(path, "security.worker_public_key_files"));
    keys.allowed_workers.insert(std::move(k));
  }
  return keys;
}

Result<net::CurveClientKeys> loadHandoffClientKeys(const SecurityConfig& security) {
  if (security.worker_secret_key_file.empty() && security.handoff_server_key_file.empty()) {
    return net::CurveClientKeys{};
  }
  MOCKER_TRY(std::string server, net::readKeyFile(security.handoff_server_key_file,
                                                  "security.handoff_server_key_file"));
  MOCKER_TRY(std::string secret,
             net::readKeyFile(security.worker_secret_key_file, "security.worker_secret_key_file"));
  std::string pub = net::curvePublicKey(secret);
  if (pub.empty()) {
    return invalidArgument(
        "security.worker_secret_key_file: cannot derive its public key (libzmq without CURVE?)");
  }
  return net::CurveClientKeys{.server_public_key = std::move(server),
                              .public_key = std::move(pub),
                              .secret_key = std::move(secret)};
}

}  // namespace mocker::service
