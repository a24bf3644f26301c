// The wire names of the client protocol's enums (protocol/README.md), shared by the encoders
// (client.cpp) and the decoders (client_decode.cpp). Wire names are exact: decoders match them
// with exactEnum (enumFromName would accept any case).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include "base/enum_names.h"
#include "protocol/client.h"

namespace mocker::protocol::detail {

/// The value named exactly `name` (same case), or nullopt.
template <typename Enum, std::size_t N>
constexpr std::optional<Enum> exactEnum(const EnumNames<Enum, N>& names, std::string_view name) {
  for (const auto& [n, value] : names) {
    if (name == n) return value;
  }
  return std::nullopt;
}

inline constexpr EnumNames<FinishReason, 5> kFinishReasonNames{
    {{"length", FinishReason::Length},
     {"cancelled", FinishReason::Cancelled},
     {"rejected", FinishReason::Rejected},
     {"error", FinishReason::Error},
     {"shutdown", FinishReason::Shutdown}}};
inline constexpr EnumNames<CancelResult, 2> kCancelResultNames{
    {{"applied", CancelResult::Applied}, {"not_found", CancelResult::NotFound}}};
inline constexpr EnumNames<KvFetchResult, 2> kKvFetchResultNames{
    {{"ready", KvFetchResult::Ready}, {"not_found", KvFetchResult::NotFound}}};
inline constexpr EnumNames<LoraOp, 2> kLoraOpNames{
    {{"load", LoraOp::Load}, {"unload", LoraOp::Unload}}};
/// stats_reply.faults: the wire key of each FaultCounts field, in wire order; the first
/// kRequiredFaultCountKeys are required, the KV-event, metrics, kv_fetch, restart and silent
/// ones after them optional (newer).
inline constexpr std::array<std::pair<std::string_view, std::uint64_t FaultCounts::*>, 19>
    kFaultCountKeys{{
        {"crash", &FaultCounts::crash},
        {"hang", &FaultCounts::hang},
        {"slow", &FaultCounts::slow},
        {"error", &FaultCounts::error},
        {"abort", &FaultCounts::abort},
        {"drop", &FaultCounts::drop},
        {"drop_unhealable", &FaultCounts::drop_unhealable},
        {"suppress", &FaultCounts::suppress},
        {"duplicate", &FaultCounts::duplicate},
        {"reorder", &FaultCounts::reorder},
        {"delay", &FaultCounts::delay},
        {"truncate_ring", &FaultCounts::truncate_ring},
        {"fpm_stop", &FaultCounts::fpm_stop},
        {"metrics_freeze", &FaultCounts::metrics_freeze},
        {"fetch_not_found", &FaultCounts::fetch_not_found},
        {"fetch_late", &FaultCounts::fetch_late},
        {"fetch_never", &FaultCounts::fetch_never},
        {"restart", &FaultCounts::restart},
        {"silent", &FaultCounts::silent},
    }};
inline constexpr std::size_t kRequiredFaultCountKeys = 5;

}  // namespace mocker::protocol::detail
