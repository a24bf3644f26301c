// Helpers for the protocol tests: hex conversion, golden files from tests/data/protocol/, and
// building (possibly malformed) msgpack inputs from nlohmann::ordered_json values.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/result.h"

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mocker::protocol::testing {

using Json = nlohmann::ordered_json;
using Bytes = std::vector<std::byte>;

inline Bytes fromHex(std::string_view hex) {
  Bytes out;
  int hi = -1;
  for (char c : hex) {
    int v = -1;
    if (c >= '0' && c <= '9') v = c - '0';
    if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    if (v < 0) continue;  // spaces and newlines
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<std::byte>(hi * 16 + v));
      hi = -1;
    }
  }
  if (hi >= 0) throw std::invalid_argument("odd number of hex digits");
  return out;
}

inline std::string toHex(std::span<const std::byte> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (std::byte b : bytes) {
    const auto v = std::to_integer<unsigned>(b);
    out += kDigits[v >> 4];
    out += kDigits[v & 0xf];
  }
  return out;
}

/// Bytes of tests/data/protocol/<name>.hex (written by tests/data/gen_protocol_goldens.py).
inline Bytes readGolden(std::string_view name) {
  const std::string path =
      std::string(MOCKER_TEST_DATA_DIR) + "/protocol/" + std::string(name) + ".hex";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open golden file " + path);
  std::stringstream text;
  text << in.rdbuf();
  return fromHex(text.str());
}

/// msgpack of a JSON value (keys in insertion order; doubles may come out as float32).
inline Bytes mp(const Json& j) {
  const std::vector<std::uint8_t> raw = Json::to_msgpack(j);
  Bytes out(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) out[i] = static_cast<std::byte>(raw[i]);
  return out;
}

inline Json bin(std::initializer_list<std::uint8_t> bytes) {
  return Json::binary(std::vector<std::uint8_t>(bytes));
}

inline Bytes concat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// The first `n` bytes of `b`.
inline Bytes prefix(const Bytes& b, std::size_t n) {
  return Bytes(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
}

/// A malformed input and what the decoder must say about it.
struct DamageCase {
  std::string name;
  Bytes input;
  ErrorCode code;
  std::string mentions;  ///< substring the error message must contain
};

/// Feeds every case of a damage catalogue (at least 30) to `decode` and checks that each is
/// refused with the expected code and a message naming the field.
template <typename Decode>
void expectEveryCaseRefused(const std::vector<DamageCase>& cases, Decode decode) {
  EXPECT_GE(cases.size(), 30u);
  for (const DamageCase& c : cases) {
    SCOPED_TRACE(c.name);
    const auto r = decode(c.input);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, c.code) << r.error().toString();
    EXPECT_NE(r.error().message.find(c.mentions), std::string::npos) << r.error().toString();
  }
}

}  // namespace mocker::protocol::testing
