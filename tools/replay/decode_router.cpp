#include "tools/replay/decode_router.h"

#include <algorithm>

#include "base/check.h"
#include "tools/replay/random.h"

namespace mocker::replay {

std::uint32_t pickDecodeWorker(DecodeRouterKind kind, std::uint64_t seed, std::uint64_t index,
                               std::span<const std::uint32_t> in_flight) {
  MOCKER_CHECK(!in_flight.empty());
  const auto n = static_cast<std::uint32_t>(in_flight.size());
  switch (kind) {
    case DecodeRouterKind::Random: {
      SplitMix64 mix(seed ^ (0xD1B5'4A32'D192'ED03ull * (index + 1)));
      return static_cast<std::uint32_t>(mix.uniformIndex(n));
    }
    case DecodeRouterKind::LeastLoaded:
      return static_cast<std::uint32_t>(std::min_element(in_flight.begin(), in_flight.end()) -
                                        in_flight.begin());
    case DecodeRouterKind::RoundRobin:
      break;
  }
  return static_cast<std::uint32_t>(index % n);
}

DecodeRouterKind decodeRouterKindFor(RouterKind kind) {
  switch (kind) {
    case RouterKind::Random:
      return DecodeRouterKind::Random;
    case RouterKind::Kv:
      return DecodeRouterKind::LeastLoaded;
    case RouterKind::RoundRobin:
    case RouterKind::KvPrefix:
      break;
  }
  return DecodeRouterKind::RoundRobin;
}

}  // namespace mocker::replay
