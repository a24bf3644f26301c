// Whether anything accepts a connection at a ZeroMQ endpoint: the check `mocker submit` and
// `mocker stats` make before they send, so that a service that is not running is named within a
// second instead of after the whole timeout.
#pragma once

#include <chrono>
#include <string>

#include "base/result.h"

namespace mocker::tools {

/// A throwaway DEALER with a socket monitor waits up to `wait` for ZMQ_EVENT_CONNECTED. (A
/// ZeroMQ connect succeeds at once whether or not anything listens, and a DEALER queues what it
/// sends.) Error: an endpoint ZeroMQ refuses (the message names it, as `flag`).
Result<bool> somethingAccepts(const std::string& endpoint, std::chrono::milliseconds wait,
                              const std::string& flag = "--submit-endpoint");

}  // namespace mocker::tools
