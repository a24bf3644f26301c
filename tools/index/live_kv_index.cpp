#include "tools/index/live_kv_index.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <variant>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "base/endpoint.h"

namespace mocker::index {
namespace {

/// The endpoint of `rank` among a server's `endpoints` (one per rank, or only rank 0's).
Result<std::string> rankEndpoint(const std::vector<std::string>& endpoints, std::uint32_t rank,
                                 const char* what, const std::string& server) {
  if (endpoints.empty()) {
    return invalidArgument(std::string("the kv router needs the ") + what + " endpoint of server " +
                           server);
  }
  if (rank < endpoints.size()) return endpoints[rank];
  if (endpoints.size() == 1) return offsetEndpoint(endpoints.front(), rank);
  return invalidArgument("server " + server + " has more DP ranks than " + what +
                         " endpoints given");
}

}  // namespace

Result<std::vector<WorkerEndpoint>> liveKvSubscriptions(const std::vector<LiveKvServer>& servers) {
  std::vector<WorkerEndpoint> workers;
  for (std::uint32_t s = 0; s < servers.size(); ++s) {
    const LiveKvServer& server = servers[s];
    for (std::uint32_t r = 0; r < server.ranks; ++r) {
      WorkerEndpoint w{.worker_id = s, .dp_rank = r, .snapshot = server.submit_endpoint};
      MOCKER_TRY(w.events, rankEndpoint(server.kv_events, r, "KV-event", server.submit_endpoint));
      MOCKER_TRY(w.replay, rankEndpoint(server.kv_replay, r, "KV replay", server.submit_endpoint));
      workers.push_back(std::move(w));
    }
  }
  return workers;
}

std::vector<std::uint32_t> liveKvRankOffsets(const std::vector<LiveKvServer>& servers) {
  std::vector<std::uint32_t> offsets;
  offsets.reserve(servers.size());
  std::uint32_t offset = 0;
  for (const LiveKvServer& server : servers) {
    offsets.push_back(offset);
    offset += server.ranks;
  }
  return offsets;
}

void spreadOverlaps(const OverlapReply& reply, const std::vector<LiveKvServer>& servers,
                    std::span<std::uint32_t> overlaps, std::span<std::uint64_t> cached) {
  std::fill(overlaps.begin(), overlaps.end(), 0);
  std::fill(cached.begin(), cached.end(), 0);
  const std::vector<std::uint32_t> offsets = liveKvRankOffsets(servers);
  for (const WorkerOverlap& w : reply.workers) {
    if (w.worker_id >= servers.size()) continue;
    const auto s = static_cast<std::size_t>(w.worker_id);
    for (const RankOverlap& r : w.ranks) {
      if (r.dp_rank >= servers[s].ranks) continue;
      const std::size_t g = offsets[s] + r.dp_rank;
      if (g < overlaps.size()) overlaps[g] = r.blocks;
      if (g < cached.size()) cached[g] = r.cached.value_or(0);
    }
  }
}

class LiveKvIndex::Impl {
 public:
  Impl(LiveKvIndexConfig config, std::unique_ptr<IndexService> service)
      : config_(std::move(config)), service_(std::move(service)) {
    for (const LiveKvServer& s : config_.servers) num_ranks_ += s.ranks;
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(service_->queryEndpoint());
    thread_ = std::thread([this] { status_ = service_->run(); });
  }
  ~Impl() {
    service_->requestStop();
    if (thread_.joinable()) thread_.join();
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  Status waitCaughtUp(Clock::time_point deadline) {
    while (true) {
      Result<QueryReply> reply = ask(StatsQuery{}, deadline);
      if (!reply) return reply.error();
      if (const auto* stats = std::get_if<StatsReply>(&*reply)) {
        for (const auto& [name, value] : stats->counters) {
          if (name == "caught_up" && value == 1) return {};
        }
      }
      // Not yet: look again in a few milliseconds (a poll on the idle socket, bounded).
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(5));
      if (Clock::now() >= deadline) {
        return Error{ErrorCode::IoError,
                     "the KV index did not catch up with the servers' KV events in time (are "
                     "their kv_events / kv_replay endpoints right?)"};
      }
    }
  }

  Status overlaps(std::span<const std::uint64_t> hashes, std::vector<std::uint32_t>& overlaps,
                  std::vector<std::uint64_t>& cached) {
    overlaps.assign(num_ranks_, 0);
    cached.assign(num_ranks_, 0);
    MOCKER_TRY(
        const QueryReply reply,
        ask(OverlapQuery{.block_hashes = std::vector<std::uint64_t>(hashes.begin(), hashes.end()),
                         .with_cached = true},
            Clock::now() + config_.query_timeout));
    const auto* overlap = std::get_if<OverlapReply>(&reply);
    if (!overlap) return Error{ErrorCode::Internal, "the KV index did not answer an overlap"};
    spreadOverlaps(*overlap, config_.servers, overlaps, cached);
    return {};
  }

  std::uint32_t numRanks() const { return num_ranks_; }
  IndexStats stats() const { return service_->stats(); }

 private:
  /// One request, one reply (matched by id; stale replies of an earlier timed-out request are
  /// skipped).
  Result<QueryReply> ask(QueryRequest request, Clock::time_point deadline) {
    // Built by appending: GCC 12 reports a false -Wrestrict on "q" + to_string.
    std::string id(1, 'q');
    id.append(std::to_string(next_id_++));
    std::visit([&id](auto& q) { q.id = id; }, request);
    const std::vector<std::byte> frame = encodeQueryRequest(request);
    if (!socket_.send(zmq::buffer(frame.data(), frame.size()), zmq::send_flags::dontwait)) {
      return Error{ErrorCode::IoError, "cannot send a query to the KV index"};
    }
    while (true) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      if (left <= std::chrono::milliseconds::zero()) {
        return Error{ErrorCode::IoError, "no answer from the KV index in time"};
      }
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, left);
      if (!(item.revents & ZMQ_POLLIN)) continue;
      std::vector<zmq::message_t> parts;
      if (!zmq::recv_multipart(socket_, std::back_inserter(parts), zmq::recv_flags::dontwait) ||
          parts.empty()) {
        continue;
      }
      const zmq::message_t& p = parts.back();
      Result<QueryReply> reply =
          decodeQueryReply({static_cast<const std::byte*>(p.data()), p.size()});
      if (!reply) return reply.error();
      const std::optional<std::string> reply_id =
          std::visit([](const auto& r) { return r.id; }, *reply);
      if (reply_id != id) continue;
      if (const auto* err = std::get_if<QueryError>(&*reply)) {
        return Error{ErrorCode::Internal, "the KV index answered: " + err->message};
      }
      return reply;
    }
  }

  LiveKvIndexConfig config_;
  std::uint32_t num_ranks_ = 0;
  std::unique_ptr<IndexService> service_;
  std::thread thread_;
  Status status_;
  zmq::context_t context_{1};
  zmq::socket_t socket_{context_, zmq::socket_type::dealer};
  std::uint64_t next_id_ = 0;
};

Result<std::unique_ptr<LiveKvIndex>> LiveKvIndex::start(LiveKvIndexConfig config) {
  if (config.servers.empty()) return invalidArgument("the KV index needs at least one server");
  if (config.block_size == 0) return invalidArgument("the KV index needs a block size > 0");
  IndexServiceConfig service_config;
  service_config.query_endpoint = "tcp://127.0.0.1:*";
  service_config.block_size = config.block_size;
  service_config.seeds = config.seeds;
  service_config.linger_ms = 0;
  MOCKER_TRY(service_config.workers, liveKvSubscriptions(config.servers));
  MOCKER_TRY(auto service, IndexService::create(std::move(service_config)));
  return std::unique_ptr<LiveKvIndex>(
      new LiveKvIndex(std::make_unique<Impl>(std::move(config), std::move(service))));
}

LiveKvIndex::LiveKvIndex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LiveKvIndex::~LiveKvIndex() = default;

Status LiveKvIndex::waitCaughtUp(Clock::time_point deadline) {
  return impl_->waitCaughtUp(deadline);
}

Status LiveKvIndex::overlaps(std::span<const std::uint64_t> hashes,
                             std::vector<std::uint32_t>& overlaps,
                             std::vector<std::uint64_t>& cached) {
  return impl_->overlaps(hashes, overlaps, cached);
}

std::uint32_t LiveKvIndex::numRanks() const { return impl_->numRanks(); }
IndexStats LiveKvIndex::stats() const { return impl_->stats(); }

}  // namespace mocker::index
