// What `mocker submit` makes of each message about its request: the lines it prints, when it
// exits and with which code, when it takes a prefill worker's handoff to the decode worker.
// Socket-free (the command's loop receives, this decides; tests/tools/submit_stream_test.cpp).
//
//   SubmitStream stream(request_id, prompt_len, /*second_hop=*/false, out, err);
//   SubmitStream::Step step = stream.onMessage(message, ms_since_sent, cancel_sent);
//   if (step.exit) return *step.exit;  if (step.hop) { …submit *step.hop to decode… }
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "protocol/client.h"

namespace mocker::tools {

inline constexpr int kSubmitExitOk = 0;
inline constexpr int kSubmitExitFailed = 1;
inline constexpr int kSubmitExitInterrupted = 130;

/// "12.3": a wall-clock duration in ms with one decimal.
std::string formatMs(double ms);

class SubmitStream {
 public:
  /// `second_hop`: a handoff is taken to a decode worker (--decode-endpoint), not the end.
  SubmitStream(std::string id, std::size_t prompt_len, bool second_hop, std::ostream& out,
               std::ostream& err);

  struct Step {
    std::optional<int> exit;                     ///< the command ends with this code
    std::optional<protocol::HandoffTicket> hop;  ///< submit this ticket to the decode worker
  };
  /// One message from the service (`cancel_sent`: the user's Ctrl-C cancel went out).
  Step onMessage(const protocol::ClientMessage& message, double ms_since_sent, bool cancel_sent);

 private:
  Step onOutputs(const protocol::OutputBatch& batch, double ms_since_sent, bool cancel_sent);

  std::string id_;
  std::size_t prompt_len_;
  bool second_hop_;
  bool handed_off_ = false;
  std::ostream& out_;
  std::ostream& err_;
  std::optional<double> ttft_ms_;
  std::optional<std::uint32_t> cached_tokens_;
  std::uint64_t num_tokens_ = 0;
};

}  // namespace mocker::tools
