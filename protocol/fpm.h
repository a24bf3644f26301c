// Forward-pass metrics record in Dynamo's wire format, version 1 (docs/wire.md): a msgpack
// map with every standard key present, in Dynamo's order, followed by our optional `x_`
// extension keys (off unless set). Frame 2 of an FPM message.
//
// Pure functions on plain value types; thread-safe. Never throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"

namespace mocker::protocol {

/// The only FPM schema version we write and accept.
inline constexpr std::uint64_t kFpmVersion = 1;

/// Work scheduled in the pass (docs/engine.md, FPM fields).
struct FpmScheduled {
  std::uint64_t num_prefill_requests = 0;
  std::uint64_t sum_prefill_tokens = 0;
  double var_prefill_length = 0.0;
  std::uint64_t sum_prefill_kv_tokens = 0;
  std::uint64_t num_decode_requests = 0;
  std::uint64_t sum_decode_kv_tokens = 0;
  double var_decode_kv_tokens = 0.0;
  friend bool operator==(const FpmScheduled&, const FpmScheduled&) = default;
};

/// Work still queued after the pass (docs/engine.md, FPM fields).
struct FpmQueued {
  std::uint64_t num_prefill_requests = 0;
  std::uint64_t sum_prefill_tokens = 0;
  double var_prefill_length = 0.0;
  std::uint64_t num_decode_requests = 0;
  std::uint64_t sum_decode_kv_tokens = 0;
  double var_decode_kv_tokens = 0.0;
  friend bool operator==(const FpmQueued&, const FpmQueued&) = default;
};

/// Our extension keys (docs/wire.md, FPM extension keys), written after the standard keys when set:
///   x_pass_start_ms (float64)  modelled pass start on the engine clock, milliseconds
///   x_pass_end_ms   (float64)  modelled pass end on the engine clock, milliseconds
///   x_preemptions_total (uint) cumulative preemptions of the rank
struct FpmExtensions {
  std::optional<double> pass_start_ms;
  std::optional<double> pass_end_ms;
  std::optional<std::uint64_t> preemptions_total;
  friend bool operator==(const FpmExtensions&, const FpmExtensions&) = default;
};

struct FpmRecord {
  std::uint64_t version = kFpmVersion;
  std::string worker_id = "0";  ///< decimal u64 (Dynamo parses it as u64)
  std::uint32_t dp_rank = 0;
  std::uint64_t counter_id = 0;  ///< equals the frame-1 sequence number
  double wall_time = 0.0;        ///< seconds; 0.0 in heartbeats
  FpmScheduled scheduled;
  FpmQueued queued;
  FpmExtensions extensions;
  friend bool operator==(const FpmRecord&, const FpmRecord&) = default;
};

/// Encodes the record (version as given: callers leave it at kFpmVersion).
std::vector<std::byte> encodeFpm(const FpmRecord& record);

/// Decodes a record. Keys may come in any order; every standard key must be present with the
/// right type; `version` must be 1 (else Unsupported); unknown keys are ignored except known
/// `x_` keys, which are type-checked. Errors name the key ("queued_requests.var_prefill_length:
/// expected number, got str").
Result<FpmRecord> decodeFpm(std::span<const std::byte> payload);

/// True if `s` is a decimal u64 without sign or leading zeros ("0" allowed).
bool isDecimalU64(std::string_view s);

}  // namespace mocker::protocol
