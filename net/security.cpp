// CURVE key handling (contract in security.h).
#include "net/security.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace mocker::net {
namespace {

constexpr std::size_t kZ85KeyChars = 40;

std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(first, last - first + 1));
}

// Writes `text` to `path` with `mode`; O_EXCL unless `force` (then the mode is reset too).
Status writeFile(const std::string& path, const std::string& text, mode_t mode, bool force) {
  const int flags = O_WRONLY | O_CREAT | (force ? O_TRUNC : O_EXCL) | O_CLOEXEC;
  const int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) {
    if (errno == EEXIST) {
      return Error{ErrorCode::InvalidArgument,
                   path + ": already exists (use --force to overwrite it)"};
    }
    return Error{ErrorCode::IoError, path + ": cannot create: " + std::strerror(errno)};
  }
  Status st;
  if (::fchmod(fd, mode) != 0) {
    st = Error{ErrorCode::IoError, path + ": cannot set mode: " + std::strerror(errno)};
  } else if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    st = Error{ErrorCode::IoError, path + ": write failed: " + std::strerror(errno)};
  }
  if (::close(fd) != 0 && st) {
    st = Error{ErrorCode::IoError, path + ": close failed: " + std::strerror(errno)};
  }
  return st;
}

}  // namespace

bool isZ85Key(std::string_view text) {
  if (text.size() != kZ85KeyChars) return false;
  const std::string copy(text);
  std::array<std::uint8_t, 32> bytes{};
  return zmq_z85_decode(bytes.data(), copy.c_str()) != nullptr;
}

Result<std::string> readKeyFile(const std::string& path, std::string_view what) {
  std::ifstream in(path);
  if (!in) {
    return Error{ErrorCode::NotFound, std::string(what) + " file '" + path + "': cannot open"};
  }
  std::string line;
  std::getline(in, line);
  std::string key = trim(line);
  if (!isZ85Key(key)) {
    return Error{ErrorCode::InvalidArgument,
                 std::string(what) + " file '" + path +
                     "': the first line is not a Z85 key (40 characters; `mocker keygen` writes "
                     "them)"};
  }
  return key;
}

Result<CurveClientKeys> loadCurveClientKeys(const std::string& server_key_file,
                                            const std::string& secret_key_file) {
  MOCKER_TRY(std::string server, readKeyFile(server_key_file, "--curve-server-key-file"));
  MOCKER_TRY(std::string secret, readKeyFile(secret_key_file, "--curve-secret-key-file"));
  std::string pub = curvePublicKey(secret);
  return CurveClientKeys{.server_public_key = std::move(server),
                         .public_key = std::move(pub),
                         .secret_key = std::move(secret)};
}

std::string curvePublicKey(const std::string& secret) {
  std::array<char, kZ85KeyChars + 1> pub{};
  const int rc = zmq_curve_public(pub.data(), secret.c_str());
  return rc == 0 ? std::string(pub.data()) : std::string();
}

void makeCurveServer(zmq::socket_t& socket, const CurveServerKeys& keys, const char* zap_domain) {
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, keys.secret_key);
  socket.set(zmq::sockopt::zap_domain, zap_domain);
}

Status checkCurveClientKeys(const CurveClientKeys& keys) {
  if (keys.server_public_key.empty() && keys.public_key.empty() && keys.secret_key.empty()) {
    return {};
  }
  if (!isZ85Key(keys.server_public_key)) {
    return invalidArgument("CURVE: the server public key is not a Z85 key (40 characters)");
  }
  if (!isZ85Key(keys.secret_key)) {
    return invalidArgument("CURVE: the client secret key is not a Z85 key (40 characters)");
  }
  if (!isZ85Key(keys.public_key) || curvePublicKey(keys.secret_key) != keys.public_key) {
    return invalidArgument("CURVE: the client public key does not belong to its secret key");
  }
  return {};
}

void makeCurveClient(zmq::socket_t& socket, const CurveClientKeys& keys) {
  if (!keys.enabled()) return;
  socket.set(zmq::sockopt::curve_serverkey, keys.server_public_key);
  socket.set(zmq::sockopt::curve_publickey, keys.public_key);
  socket.set(zmq::sockopt::curve_secretkey, keys.secret_key);
}

Result<std::string> writeKeyPair(const std::string& prefix, bool force) {
  std::array<char, kZ85KeyChars + 1> pub{};
  std::array<char, kZ85KeyChars + 1> sec{};
  if (zmq_curve_keypair(pub.data(), sec.data()) != 0) {
    return Error{ErrorCode::Unsupported,
                 std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno())};
  }
  const std::string secret_path = prefix + ".key";
  const std::string public_path = prefix + ".pub";
  if (!force) {
    for (const std::string& p : {secret_path, public_path}) {
      struct stat st {};
      if (::stat(p.c_str(), &st) == 0) {
        return Error{ErrorCode::InvalidArgument,
                     p + ": already exists (use --force to overwrite it)"};
      }
    }
  }
  MOCKER_TRY_VOID(writeFile(secret_path, std::string(sec.data()) + "\n", 0600, force));
  MOCKER_TRY_VOID(writeFile(public_path, std::string(pub.data()) + "\n", 0644, force));
  return std::string(pub.data());
}

}  // namespace mocker::net
