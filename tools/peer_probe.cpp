#include "tools/peer_probe.h"

#include <unistd.h>
#include <zmq.h>
#include <zmq.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace mocker::tools {

Result<bool> somethingAccepts(const std::string& endpoint, std::chrono::milliseconds wait,
                              const std::string& flag) {
  using Clock = std::chrono::steady_clock;
  try {
    zmq::context_t context;
    zmq::socket_t probe(context, zmq::socket_type::dealer);
    probe.set(zmq::sockopt::linger, 0);
    char monitor_endpoint[64];
    std::snprintf(monitor_endpoint, sizeof monitor_endpoint, "inproc://submit-probe-%d",
                  static_cast<int>(getpid()));
    if (zmq_socket_monitor(probe.handle(), monitor_endpoint, ZMQ_EVENT_CONNECTED) != 0) {
      throw zmq::error_t();
    }
    zmq::socket_t events(context, zmq::socket_type::pair);
    events.set(zmq::sockopt::linger, 0);
    events.connect(monitor_endpoint);
    probe.connect(endpoint);
    const auto deadline = Clock::now() + wait;
    for (auto now = Clock::now(); now < deadline; now = Clock::now()) {
      zmq::pollitem_t item{events.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now));
      if ((item.revents & ZMQ_POLLIN) == 0) continue;
      zmq::message_t event;
      if (!events.recv(event)) continue;
      std::uint16_t id = 0;
      if (event.size() >= sizeof id) std::memcpy(&id, event.data(), sizeof id);
      zmq::message_t address;
      if (event.more()) (void)events.recv(address);
      if (id == ZMQ_EVENT_CONNECTED) return true;
    }
    return false;
  } catch (const zmq::error_t& e) {
    return invalidArgument(flag + " '" + endpoint + "': " + e.what());
  }
}

}  // namespace mocker::tools
