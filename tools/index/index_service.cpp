// `mocker index`: the loop that owns the SUB, replay and snapshot sockets of every worker rank
// and the query ROUTER. It hands what it reads to the socket-free IndexCore (index_core.h) and
// sends what the core asks for (contract in index_service.h).
#include "tools/index/index_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "net/security.h"
#include "net/stop_event.h"
#include "net/zap_handler.h"
#include "net/zmq_io.h"
#include "protocol/client.h"
#include "protocol/framing.h"
#include "protocol/limits.h"
#include "publishers/zmq_sinks.h"
#include "service/logging.h"
#include "service/security_keys.h"
#include "tools/index/index_core.h"

namespace mocker::index {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSubBudget = 4096;   // messages read from one SUB per loop iteration
constexpr int kQueryBudget = 256;  // queries answered per loop iteration

Error invalid(std::string message) { return Error{ErrorCode::InvalidArgument, std::move(message)}; }

std::span<const std::byte> bytes(const zmq::message_t& m) {
  return {static_cast<const std::byte*>(m.data()), m.size()};
}

SendReport report(net::SendOutcome outcome, std::string error) {
  return {.sent = outcome == net::SendOutcome::Sent,
          .failed = outcome == net::SendOutcome::Failed,
          .outcome = net::sendOutcomeName(outcome),
          .error = std::move(error)};
}

}  // namespace

class IndexService::Impl final : public IndexOutbox {
 public:
  explicit Impl(IndexServiceConfig config) : config_(std::move(config)) {}

  Status init();
  Status run();
  void requestStop() { stop_event_.notify(); }
  IndexStats stats() const { return core_ ? core_->stats() : IndexStats{}; }

  std::string query_endpoint;

  SendReport replayRequest(std::size_t stream, std::uint64_t start) override;
  SendReport snapshotRequest(std::size_t channel,
                             const protocol::KvSnapshotRequest& request) override;
  SendReport queryReply(const std::string& identity, bool delimiter,
                        const QueryReply& reply) override;
  void reconnectChannel(std::size_t channel) override;

 private:
  /// `to_worker`: a connection to a worker, CURVE when worker keys are configured.
  Result<zmq::socket_t> makeSocket(zmq::socket_type type, const std::string& endpoint, bool bind,
                                   bool to_worker = false);
  Status initQuery();
  Status connectChannel(std::size_t ch);
  // Each drain returns true when it read the socket until it was empty (then its ZMQ_FD
  // announces the next message), false when it stopped at its budget or a failed receive.
  bool drainSub(std::size_t i);
  bool drainReplay(std::size_t i);
  bool drainChannel(std::size_t ch);
  void drainQueries();
  /// The poll set of one loop turn; returns the slot of the stop event.
  net::PollSet::Slot fillPollSet();
  /// The frames of the message last read, as byte spans (for the core).
  Frames frames(const std::vector<zmq::message_t>& parts);

  IndexServiceConfig config_;
  net::StopEvent stop_event_;
  zmq::context_t context_{1};
  std::unique_ptr<net::ZapHandler> zap_;  // before the sockets: destroyed after them
  net::CurveClientKeys worker_curve_;     // enabled() iff CURVE towards the workers
  zmq::socket_t query_;
  std::vector<zmq::socket_t> subs_;     // per stream
  std::vector<zmq::socket_t> replays_;  // per stream; not connected without a replay endpoint
  std::vector<zmq::socket_t> dealers_;  // per channel
  // Per socket: may hold messages its ZMQ_FD will not announce — new, sent on, or not read
  // until empty since — so the poll set asks it before each wait (PollSet::Wake::Always).
  std::vector<char> sub_may_hold_, replay_may_hold_, dealer_may_hold_;
  net::PollSet poll_;
  struct Slots {
    net::PollSet::Range subs, replays, dealers;
  } slots_;
  std::vector<zmq::message_t> parts_;
  std::vector<std::span<const std::byte>> frames_;
  std::unique_ptr<IndexCore> core_;
};

Result<zmq::socket_t> IndexService::Impl::makeSocket(zmq::socket_type type,
                                                     const std::string& endpoint, bool bind,
                                                     bool to_worker) {
  try {
    zmq::socket_t s(context_, type);
    s.set(zmq::sockopt::linger, config_.linger_ms);
    if (to_worker) net::makeCurveClient(s, worker_curve_);
    (void)publishers::openEndpoint(s, endpoint, /*connect=*/!bind);
    return s;
  } catch (const zmq::error_t& e) {
    return Error{ErrorCode::IoError, "endpoint '" + endpoint + "': " + e.what()};
  }
}

Status IndexService::Impl::connectChannel(std::size_t ch) {
  const std::string& endpoint = core_->channelEndpoint(ch);
  try {
    zmq::socket_t s(context_, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, config_.linger_ms);
    s.set(zmq::sockopt::rcvhwm, 0);
    s.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(protocol::kMaxMessageBytes));
    net::makeCurveClient(s, worker_curve_);
    s.connect(endpoint);
    dealers_[ch] = std::move(s);
  } catch (const zmq::error_t& e) {
    return Error{ErrorCode::IoError, "snapshot endpoint '" + endpoint + "': " + e.what()};
  }
  return {};
}

Status IndexService::Impl::initQuery() {
  if (config_.query_endpoint.empty()) return {};
  if (!config_.query_curve_secret_key.empty()) {
    service::SecurityConfig sec{.curve = true,
                                .server_secret_key = config_.query_curve_secret_key,
                                .client_public_keys = config_.query_curve_clients};
    auto keys = service::loadCurveServerKeys(sec);
    if (!keys) return invalid("query CURVE keys: " + keys.error().message);
    MOCKER_TRY(zap_, net::ZapHandler::start(context_, net::kZapDomain, keys->allowed_clients,
                                            service::defaultLoggerSink()));
    try {
      query_ = zmq::socket_t(context_, zmq::socket_type::router);
      query_.set(zmq::sockopt::linger, config_.linger_ms);
      net::makeCurveServer(query_, *keys);
      query_.bind(config_.query_endpoint);
    } catch (const zmq::error_t& e) {
      return Error{ErrorCode::IoError, "endpoint '" + config_.query_endpoint + "': " + e.what()};
    }
  } else {
    MOCKER_TRY(query_, makeSocket(zmq::socket_type::router, config_.query_endpoint, true));
  }
  query_.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(kMaxQueryBytes));
  // Replies to a peer that is gone or not reading fail visibly instead of vanishing.
  query_.set(zmq::sockopt::router_mandatory, true);
  query_endpoint = query_.get(zmq::sockopt::last_endpoint);
  return {};
}

Status IndexService::Impl::init() {
  if (!stop_event_.valid()) return Error{ErrorCode::IoError, "eventfd failed"};
  MOCKER_TRY(core_, IndexCore::create(config_, *this));
  if (!config_.worker_curve_secret_key.empty() || !config_.worker_curve_server_key.empty()) {
    worker_curve_ = {.server_public_key = config_.worker_curve_server_key,
                     .public_key = net::curvePublicKey(config_.worker_curve_secret_key),
                     .secret_key = config_.worker_curve_secret_key};
    if (auto st = net::checkCurveClientKeys(worker_curve_); !st) {
      return invalid("worker CURVE keys: " + st.error().message);
    }
  }
  MOCKER_TRY_VOID(initQuery());
  subs_.resize(core_->numStreams());
  replays_.resize(core_->numStreams());
  for (std::size_t i = 0; i < core_->numStreams(); ++i) {
    const WorkerEndpoint& spec = core_->streamSpec(i);
    MOCKER_TRY(subs_[i], makeSocket(zmq::socket_type::sub, spec.events, false,
                                    config_.worker_curve_publishers));
    try {
      subs_[i].set(zmq::sockopt::rcvhwm, config_.sub_rcvhwm);
      if (config_.sub_rcvbuf >= 0) subs_[i].set(zmq::sockopt::rcvbuf, config_.sub_rcvbuf);
      subs_[i].set(zmq::sockopt::subscribe, spec.topic);
    } catch (const zmq::error_t& e) {
      return Error{ErrorCode::IoError, "endpoint '" + spec.events + "': " + e.what()};
    }
    if (!spec.replay.empty()) {
      MOCKER_TRY(replays_[i], makeSocket(zmq::socket_type::dealer, spec.replay, false, true));
      replays_[i].set(zmq::sockopt::rcvhwm, 0);  // a replay is bounded by the worker's ring
    }
  }
  dealers_.resize(core_->numChannels());
  for (std::size_t ch = 0; ch < core_->numChannels(); ++ch) MOCKER_TRY_VOID(connectChannel(ch));
  return {};
}

// ---------------------------------------------------------------------------------------------
// Sends (IndexOutbox)

SendReport IndexService::Impl::replayRequest(std::size_t stream, std::uint64_t start) {
  const auto seq = protocol::encodeSeqNo(start);
  const std::array<zmq::const_buffer, 2> frames{zmq::const_buffer(),
                                                zmq::buffer(seq.data(), seq.size())};
  std::string error;
  if (stream < replay_may_hold_.size()) replay_may_hold_[stream] = 1;
  const net::SendOutcome outcome = net::trySendMultipart(replays_[stream], frames, &error);
  return report(outcome, std::move(error));
}

SendReport IndexService::Impl::snapshotRequest(std::size_t channel,
                                               const protocol::KvSnapshotRequest& request) {
  const auto payload = protocol::encodeClientMessage(request);
  const std::array<zmq::const_buffer, 1> frames{zmq::buffer(payload.data(), payload.size())};
  std::string error;
  if (channel < dealer_may_hold_.size()) dealer_may_hold_[channel] = 1;
  const net::SendOutcome outcome = net::trySendMultipart(dealers_[channel], frames, &error);
  return report(outcome, std::move(error));
}

SendReport IndexService::Impl::queryReply(const std::string& identity, bool delimiter,
                                          const QueryReply& reply) {
  const auto payload = encodeQueryReply(reply);
  std::string error;
  const net::SendOutcome outcome = net::trySendRouted(
      query_, identity, delimiter, zmq::message_t(payload.data(), payload.size()), &error);
  return report(outcome, std::move(error));
}

void IndexService::Impl::reconnectChannel(std::size_t channel) {
  if (channel < dealer_may_hold_.size()) dealer_may_hold_[channel] = 1;  // a new socket
  dealers_[channel].close();
  if (Status st = connectChannel(channel); !st) spdlog::error("index: {}", st.error().message);
}

// ---------------------------------------------------------------------------------------------
// Reads

Frames IndexService::Impl::frames(const std::vector<zmq::message_t>& parts) {
  frames_.clear();
  for (const zmq::message_t& m : parts) frames_.push_back(bytes(m));
  return frames_;
}

bool IndexService::Impl::drainSub(std::size_t i) {
  bool failed = false;
  const int n = net::drainSocket(
      subs_[i], parts_, kSubBudget,
      [&](const std::vector<zmq::message_t>& parts) {
        core_->onLiveMessage(i, parseLiveMessage(frames(parts)));
      },
      [&](std::string_view error) {
        failed = true;
        spdlog::warn("index: receive on {} failed: {}", core_->streamSpec(i).events, error);
      });
  return !failed && n < kSubBudget;
}

bool IndexService::Impl::drainReplay(std::size_t i) {
  bool failed = false;
  net::drainSocket(
      replays_[i], parts_, -1,
      [&](const std::vector<zmq::message_t>& parts) {
        core_->onReplayMessage(i, parseReplayMessage(frames(parts)));
      },
      [&](std::string_view error) {
        failed = true;
        spdlog::warn("index: receive on {} failed: {}", core_->streamSpec(i).replay, error);
      });
  return !failed;
}

bool IndexService::Impl::drainChannel(std::size_t ch) {
  bool failed = false;
  net::drainSocket(
      dealers_[ch], parts_, -1,
      [&](const std::vector<zmq::message_t>& parts) {
        if (!parts.empty()) core_->onChannelMessage(ch, bytes(parts.back()));
      },
      [&](std::string_view error) {
        failed = true;
        spdlog::warn("index: receive on {} failed: {}", core_->channelEndpoint(ch), error);
      });
  return !failed;
}

void IndexService::Impl::drainQueries() {
  net::drainSocket(
      query_, parts_, kQueryBudget,
      [&](const std::vector<zmq::message_t>& parts) { core_->onQuery(frames(parts)); },
      [&](std::string_view error) {
        spdlog::warn("index: receive on the query endpoint failed: {}", error);
      });
}

// ---------------------------------------------------------------------------------------------
// Loop

net::PollSet::Slot IndexService::Impl::fillPollSet() {
  using Wake = net::PollSet::Wake;
  const auto wake = [](char may_hold) { return may_hold ? Wake::Always : Wake::OnSignal; };
  poll_.clear();
  const net::PollSet::Slot stop = poll_.addFd(stop_event_.fd());
  // The query ROUTER is read in budgets and answered on: asked every turn (drainQueries reads
  // it whatever the poll says, as before).
  if (query_) poll_.add(query_.handle());
  slots_.subs.begin = poll_.next();
  for (std::size_t i = 0; i < subs_.size(); ++i) {
    poll_.add(subs_[i].handle(), true, wake(sub_may_hold_[i]));
  }
  slots_.subs.end = poll_.next();
  // One slot per stream (an unconnected replay socket is polled for nothing).
  slots_.replays.begin = poll_.next();
  for (std::size_t i = 0; i < replays_.size(); ++i) {
    poll_.add(replays_[i].handle(), static_cast<bool>(replays_[i]), wake(replay_may_hold_[i]));
  }
  slots_.replays.end = poll_.next();
  slots_.dealers.begin = poll_.next();
  for (std::size_t ch = 0; ch < dealers_.size(); ++ch) {
    poll_.add(dealers_[ch].handle(), true, wake(dealer_may_hold_[ch]));
  }
  slots_.dealers.end = poll_.next();
  return stop;
}

Status IndexService::Impl::run() {
  core_->start(Clock::now());
  auto tick = std::chrono::milliseconds(100);
  if (config_.probe_interval.count() > 0) tick = std::min(tick, config_.probe_interval);
  if (config_.stats_interval.count() > 0) tick = std::min(tick, config_.stats_interval);
  tick = std::max(tick, std::chrono::milliseconds(1));

  // Not zmq_poll: it asks every socket for ZMQ_EVENTS on both sides of the wait (libzmq's
  // mailbox check, a getpid and a poll each), and the loop then read every SUB — over a
  // 64-worker fleet, hundreds of system calls per KV-event batch. A socket is asked only when
  // it may hold messages its descriptor will not announce, and read only when found readable.
  sub_may_hold_.assign(subs_.size(), 1);
  replay_may_hold_.assign(replays_.size(), 1);
  dealer_may_hold_.assign(dealers_.size(), 1);
  while (!core_->stopRequested()) {
    const net::PollSet::Slot stop = fillPollSet();
    try {
      poll_.poll(tick);
    } catch (const zmq::error_t& e) {
      return Error{ErrorCode::IoError, std::string("poll: ") + e.what()};
    }
    if (poll_.readable(stop)) break;
    // A socket the poll set found not readable was asked (ZMQ_EVENTS found every pipe empty)
    // or its descriptor is exact: either way the descriptor announces its next message. (A
    // send below marks its socket again; a drain until empty clears it.)
    for (std::size_t i = 0; i < subs_.size(); ++i) {
      if (replays_[i] && !poll_.readable(slots_.replays.begin + i)) replay_may_hold_[i] = 0;
      if (!poll_.readable(slots_.subs.begin + i)) sub_may_hold_[i] = 0;
    }
    for (std::size_t ch = 0; ch < dealers_.size(); ++ch) {
      if (!poll_.readable(slots_.dealers.begin + ch)) dealer_may_hold_[ch] = 0;
    }
    // Replays first: they fill gaps that buffered live batches wait on.
    for (std::size_t i = 0; i < subs_.size(); ++i) {
      if (replays_[i] && poll_.readable(slots_.replays.begin + i)) {
        replay_may_hold_[i] = !drainReplay(i);
      }
      if (poll_.readable(slots_.subs.begin + i)) sub_may_hold_[i] = !drainSub(i);
    }
    for (std::size_t ch = 0; ch < dealers_.size(); ++ch) {
      if (poll_.readable(slots_.dealers.begin + ch)) dealer_may_hold_[ch] = !drainChannel(ch);
    }
    if (query_) drainQueries();
    core_->tick(Clock::now());
    core_->publishStats();
  }
  core_->publishStats();
  if (config_.on_stats) config_.on_stats(core_->counters());
  return {};
}

Result<std::unique_ptr<IndexService>> IndexService::create(IndexServiceConfig config) {
  auto impl = std::make_unique<Impl>(std::move(config));
  MOCKER_TRY_VOID(impl->init());
  return std::unique_ptr<IndexService>(new IndexService(std::move(impl)));
}

IndexService::IndexService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
IndexService::~IndexService() = default;
const std::string& IndexService::queryEndpoint() const { return impl_->query_endpoint; }
Status IndexService::run() { return impl_->run(); }
void IndexService::requestStop() { impl_->requestStop(); }
IndexStats IndexService::stats() const { return impl_->stats(); }

}  // namespace mocker::index
