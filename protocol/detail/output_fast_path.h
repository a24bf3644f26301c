// The fast paths for "output" messages, the one message sent and received at token rate, and
// for plain "submit" messages, whose prompts are the largest arrays a service reads.
//
// Encoding: encodeOutputBatch computes the exact size (one pass over the views), then writes the
// bytes directly into a buffer of that size — the caller's, with encodeOutputBatchInto — without
// msgpack-c's packer (5x faster; the bytes are the same, pinned by the goldens and by a
// randomized comparison with an independent encoder in the tests).
//
// Decoding: the fast path of decodeClientMessage. It recognises only the layout encodeOutputBatch
// writes (keys in README order, no nil values, no unknown keys) and reads it in one bounds-checked
// pass without building a msgpack object tree. Anything else — another message type, another key
// order, a value the general decoder would refuse — makes it return nullopt, and
// decodeClientMessage falls back to the general decoder, which stays the single source of truth for
// semantics and error messages.
//
// Invariant (tested differentially in tests/protocol/output_fast_path_test.cpp): whenever a
// fast path returns a value, the general decoder accepts the same bytes and returns an equal one.
//
// Pure functions; thread-safe. Never throws.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "base/result.h"
#include "protocol/client.h"

namespace mocker::protocol::detail {

/// The "output" message of `outputs` (what encodeOutputBatch returns).
std::vector<std::byte> encodeCanonicalOutput(std::span<const RequestOutputView> outputs);
/// Its exact size, and the same bytes written into `out` (REQUIRES: out.size() is that size).
std::size_t canonicalOutputSize(std::span<const RequestOutputView> outputs);
void encodeCanonicalOutputInto(std::span<const RequestOutputView> outputs,
                               std::span<std::byte> out);

/// The batch, or nullopt when `bytes` is not a canonical, valid "output" message.
std::optional<OutputBatch> decodeCanonicalOutput(std::span<const std::byte> bytes);

/// The request, or nullopt when `bytes` is not a canonical, valid "submit" message with only
/// id, prompt, max_tokens and optionally output_tokens and dp_rank (what the C++ client sends
/// for a plain request: mocker replay --mode live, the gateway, the benches).
std::optional<SubmitRequest> decodeCanonicalSubmit(std::span<const std::byte> bytes);

/// decodeClientMessage without the fast paths (for differential tests and benchmarks).
Result<ClientMessage> decodeClientMessageGeneral(std::span<const std::byte> payload);

}  // namespace mocker::protocol::detail
