#include "tools/index/worker_spec.h"

#include <charconv>
#include <string>

#include "base/endpoint.h"

namespace mocker::index {
namespace {

Error invalid(std::string message) { return Error{ErrorCode::InvalidArgument, std::move(message)}; }

Result<std::uint64_t> parseU64(std::string_view s, std::string_view what) {
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || p != s.data() + s.size()) {
    return invalid(std::string(what) + ": expected a decimal unsigned integer, got '" +
                   std::string(s) + "'");
  }
  return v;
}

}  // namespace

Result<std::vector<WorkerEndpoint>> parseWorkerSpec(std::string_view spec) {
  const std::string where = "--worker '" + std::string(spec) + "'";
  const auto eq = spec.find('=');
  if (eq == std::string_view::npos) {
    return invalid(where +
                   ": expected ID[/RANK]=tcp://HOST:PORT[,replay=EP][,snapshot=EP]"
                   "[,dp=N][,topic=T]");
  }
  WorkerEndpoint base;
  std::string_view head = spec.substr(0, eq);
  if (const auto slash = head.find('/'); slash != std::string_view::npos) {
    MOCKER_TRY(const std::uint64_t rank, parseU64(head.substr(slash + 1), where + " RANK"));
    if (rank > 0xFFFF'FFFFu) return invalid(where + ": RANK out of range");
    base.dp_rank = static_cast<std::uint32_t>(rank);
    head = head.substr(0, slash);
  }
  MOCKER_TRY(base.worker_id, parseU64(head, where + " ID"));
  std::string_view rest = spec.substr(eq + 1);
  std::uint32_t dp = 0;
  bool first = true;
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    if (first) {
      if (item.empty()) return invalid(where + ": missing the KV-event endpoint");
      base.events = std::string(item);
      first = false;
    } else {
      const auto ieq = item.find('=');
      if (ieq == std::string_view::npos) {
        return invalid(where + ": option '" + std::string(item) + "' is not key=value");
      }
      const std::string_view key = item.substr(0, ieq);
      const std::string_view value = item.substr(ieq + 1);
      if (key == "replay") {
        base.replay = std::string(value);
      } else if (key == "snapshot") {
        base.snapshot = std::string(value);
      } else if (key == "topic") {
        base.topic = std::string(value);
      } else if (key == "dp") {
        MOCKER_TRY(const std::uint64_t n, parseU64(value, where + " dp"));
        if (n == 0 || n > 1024) return invalid(where + ": dp must be in 1..1024");
        dp = static_cast<std::uint32_t>(n);
      } else {
        return invalid(where + ": unknown option '" + std::string(key) +
                       "' (expected replay, snapshot, dp or topic)");
      }
      if (key != "topic" && value.empty()) {
        return invalid(where + ": option '" + std::string(key) + "' needs a value");
      }
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  if (dp != 0 && base.dp_rank) return invalid(where + ": give either /RANK or dp=N, not both");
  if (dp == 0) return std::vector<WorkerEndpoint>{base};
  std::vector<WorkerEndpoint> out;
  for (std::uint32_t r = 0; r < dp; ++r) {
    WorkerEndpoint w = base;
    w.dp_rank = r;
    MOCKER_TRY(w.events, offsetEndpoint(base.events, r));
    if (!base.replay.empty()) {
      MOCKER_TRY(w.replay, offsetEndpoint(base.replay, r));
    }
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace mocker::index
