// The routers of `mocker replay`, offline and live (tools/replay/README.md, Routers): one enum and
// one name table. What each does is said where it runs: offline_replay.h (every kind) and
// live_replay.h (every kind but KvPrefix).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/enum_names.h"
#include "base/result.h"

namespace mocker::replay {

enum class RouterKind : std::uint8_t { RoundRobin, Kv, Random, KvPrefix };

/// Canonical names first; "round-robin" is an accepted alias.
inline constexpr EnumNames<RouterKind, 5> kRouterKindNames{{{"round_robin", RouterKind::RoundRobin},
                                                            {"round-robin", RouterKind::RoundRobin},
                                                            {"kv", RouterKind::Kv},
                                                            {"random", RouterKind::Random},
                                                            {"kv_prefix", RouterKind::KvPrefix}}};

/// "round_robin", "kv", "random", "kv_prefix".
inline std::string_view toString(RouterKind kind) { return enumName(kRouterKindNames, kind); }

/// The router named `text` (canonical names and aliases, any ASCII case). Error: any other text.
inline Result<RouterKind> parseRouterKind(std::string_view text) {
  if (const auto kind = enumFromName(kRouterKindNames, text)) return *kind;
  return invalidArgument("router: expected round_robin | kv | kv_prefix | random (got '" +
                         std::string(text) + "')");
}

}  // namespace mocker::replay
