// Decoder limits of every wire format in protocol/ (documented in protocol/README.md "Limits").
// Decoders refuse anything larger with an error naming the field, before allocating for it.
//
// Constants only; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mocker::protocol {

/// Largest msgpack payload any decoder accepts (one ZeroMQ data frame). The service should set
/// ZMQ_MAXMSGSIZE to the same value on sockets that receive client messages.
inline constexpr std::size_t kMaxMessageBytes = std::size_t{16} << 20;  // 16 MiB

/// Deepest container nesting accepted (the deepest legal message nests 5 levels).
inline constexpr std::size_t kMaxNestingDepth = 8;

/// Most msgpack objects (scalars and containers) in one message. Bounds the decoder's memory to
/// about 16 bytes per object whatever the declared lengths say.
inline constexpr std::size_t kMaxObjectsPerMessage = std::size_t{1} << 22;

/// Longest array in any message (a per-field limit below may be tighter).
inline constexpr std::size_t kMaxArrayElements = std::size_t{1} << 22;

/// Most entries in any map (all our maps have a handful of keys).
inline constexpr std::size_t kMaxMapEntries = 64;

/// Longest string (reason texts, error messages).
inline constexpr std::size_t kMaxStringBytes = 64 * 1024;

/// Prompt tokens and planned output tokens per request (client protocol).
inline constexpr std::size_t kMaxTokensPerRequest = std::size_t{1} << 20;

/// Longest client request id (bytes of UTF-8).
inline constexpr std::size_t kMaxRequestIdBytes = 256;

/// Longest LoRA adapter name in a submit (bytes of UTF-8; the engine's limit too).
inline constexpr std::size_t kMaxLoraNameBytes = 256;

/// Longest ZeroMQ routing id (libzmq's own limit is 255 bytes).
inline constexpr std::size_t kMaxRoutingIdBytes = 255;

/// Requests per output message (one message per client per pass).
inline constexpr std::size_t kMaxOutputsPerMessage = std::size_t{1} << 16;

/// Events per KV-event batch and blocks per event.
inline constexpr std::size_t kMaxEventsPerBatch = std::size_t{1} << 16;
inline constexpr std::size_t kMaxBlocksPerEvent = std::size_t{1} << 16;

/// Tokens per BlockStored event (kMaxBlocksPerEvent blocks of up to 64 tokens each).
inline constexpr std::size_t kMaxTokensPerEvent = std::size_t{1} << 22;

/// Cached block hashes per rank in a kv_snapshot reply, and DP ranks per stats/snapshot reply.
inline constexpr std::size_t kMaxSnapshotBlocksPerRank = std::size_t{1} << 22;
inline constexpr std::size_t kMaxRanks = 1024;

/// Bytes of a handoff key (exactly), and the longest handoff source endpoint.
inline constexpr std::size_t kHandoffKeyBytes = 16;
inline constexpr std::size_t kMaxEndpointBytes = 1024;

/// Client entries in a stats reply.
inline constexpr std::size_t kMaxStatsClients = std::size_t{1} << 16;

}  // namespace mocker::protocol
