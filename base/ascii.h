// ASCII helpers for parsing names from configs, flags and wire enums (locale-independent).
//
// Header-only; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace mocker {

/// `s` with A–Z mapped to a–z; other bytes unchanged.
inline std::string asciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace mocker
