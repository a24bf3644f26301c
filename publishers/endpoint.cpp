#include "publishers/endpoint.h"

#include <charconv>

namespace mocker::publishers {

Result<std::string> offsetEndpoint(std::string_view endpoint, std::uint32_t dp_rank) {
  const auto fail = [&](const std::string& why) {
    return invalidArgument("endpoint '" + std::string(endpoint) + "': " + why);
  };
  if (endpoint.starts_with("tcp://")) {
    const auto colon = endpoint.rfind(':');
    const std::string_view port_text = endpoint.substr(colon + 1);
    std::uint32_t port = 0;
    const auto [end, ec] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (colon < 6 || port_text.empty() || ec != std::errc{} ||
        end != port_text.data() + port_text.size()) {
      if (port_text == "*") {
        if (dp_rank == 0) return std::string(endpoint);
        return fail("a wildcard port cannot be offset for dp_rank " + std::to_string(dp_rank));
      }
      return fail("expected tcp://host:port with a numeric port");
    }
    if (port > 65535) return fail("port out of range");
    if (dp_rank == 0) return std::string(endpoint);
    const std::uint64_t shifted = std::uint64_t{port} + dp_rank;
    if (shifted > 65535) {
      return fail("port " + std::to_string(port) + " + dp_rank " + std::to_string(dp_rank) +
                  " exceeds 65535");
    }
    return std::string(endpoint.substr(0, colon + 1)) + std::to_string(shifted);
  }
  if (endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://")) {
    if (dp_rank == 0) return std::string(endpoint);
    return std::string(endpoint) + "_dp" + std::to_string(dp_rank);
  }
  return fail("unsupported scheme (expected tcp://, ipc:// or inproc://)");
}

}  // namespace mocker::publishers
