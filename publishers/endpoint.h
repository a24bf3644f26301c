// ZeroMQ endpoint arithmetic for data-parallel ranks (docs/wire.md, Endpoints; vLLM
// `offset_endpoint_port`): rank 0 uses the endpoint unchanged; rank r > 0 gets `port + r` for
// tcp:// endpoints and the suffix `_dp<r>` for ipc:// and inproc:// endpoints.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace mocker::publishers {

/// The endpoint rank `dp_rank` uses. Errors name the endpoint and what is wrong (no port, port
/// out of range after the offset, unknown scheme).
Result<std::string> offsetEndpoint(std::string_view endpoint, std::uint32_t dp_rank);

}  // namespace mocker::publishers
