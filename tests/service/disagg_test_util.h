// Shared helpers of the live disaggregation tests: a prefill/decode worker's config and the
// first hop of a request (submit to a prefill worker, wait for its handoff).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "protocol/client.h"
#include "tests/service/live_service.h"

namespace mocker::service::testing {

/// A paced worker of `type` with its handoff ROUTER on an ephemeral port; the KV transfer takes
/// kv_bytes_per_token / 1e6 ms per token (1 GB/s).
inline ServiceConfig disaggWorker(engine::WorkerType type, double prefill_ms = 10,
                                  double decode_ms = 2,
                                  std::uint64_t kv_bytes_per_token = 1000000) {
  ServiceConfig c = TestConfig().paced(prefill_ms, decode_ms).build();
  c.engine.worker_type = type;
  c.engine.kv_bytes_per_token = kv_bytes_per_token;
  c.engine.kv_transfer_bandwidth_gbps = 1.0;
  c.endpoints.handoff.endpoint = "tcp://127.0.0.1:*";
  return c;
}

/// Prompt length of disaggRequest: 5 blocks of 4.
inline constexpr std::uint32_t kDisaggPrompt = 20;

inline protocol::SubmitRequest disaggRequest(const std::string& id, std::uint32_t max_tokens) {
  return {.id = id, .prompt = prompt(kDisaggPrompt), .max_tokens = max_tokens};
}

/// Submits `id` to a prefill worker and returns its handoff (after the ack); a prefill worker
/// sends no output tokens.
inline std::optional<protocol::Handoff> prefillHop(net::Client& client, const std::string& id,
                                                   std::uint32_t max_tokens) {
  EXPECT_TRUE(client.submit(disaggRequest(id, max_tokens)).has_value());
  std::map<std::string, Stream> streams;
  std::vector<protocol::ClientMessage> others;
  EXPECT_TRUE(awaitAck(client, id, streams, &others));
  for (auto& m : others) {
    if (auto* h = std::get_if<protocol::Handoff>(&m)) return *h;
  }
  auto h = awaitMessage<protocol::Handoff>(client, std::chrono::seconds(10) * kSlowdown);
  EXPECT_TRUE(streams[id].tokens.empty()) << "a prefill worker sends no output tokens";
  return h;
}

}  // namespace mocker::service::testing
