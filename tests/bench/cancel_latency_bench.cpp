// cancel_latency_bench — cancel round-trip latency of a live service::Server under a submit flood.
//
//   cancel_latency_bench [--flood N] [--cancels K] [--speedup S] [--blocks B] [--max-seqs M]
//                        [--phase backlog|admission] [--submit EP --cancel EP]
//   (--flood 0: no flood, an idle service answering not_found: the machine's round-trip floor)
//
// An in-process Server (ephemeral endpoints, small KV pool, passes running) gets N submits
// (default 100,000) from a flooding DEALER; with max_submit_backlog (10,000) waiting requests the
// service stops reading submits, so most of the flood sits in ZeroMQ queues — that is the point.
// Meanwhile a second client measures K (default 1,000) cancel round trips on the cancel socket:
// send a cancel naming one of the flood's requests (from the flood's routing id), wait for
// the cancel_reply. Prints p50 / p99 / max and how many were applied; asserts nothing on timing.
//
// --phase backlog (default) starts timing once the whole flood is sent (the service has paused
// reading submits: its loop is mostly idle); --phase admission starts with the flood, so the
// cancels race the service reading and admitting submits — the case a cancel must not wait
// behind. --submit/--cancel aim both clients at a running service (e.g. `mocker serve` in
// another process) instead of an in-process one: measured from outside the service's process.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <variant>
#include <vector>
#include <zmq.hpp>

#include "net/client.h"
#include "protocol/client.h"
#include "service/config.h"
#include "service/logging.h"
#include "service/server.h"

namespace {

using namespace mocker;
using Clock = std::chrono::steady_clock;

struct Options {
  int flood = 100'000;
  int cancels = 1'000;
  double speedup = 1.0;
  std::uint32_t blocks = 256;
  std::uint32_t max_seqs = 64;
  bool admission = false;       // --phase admission
  std::string submit_endpoint;  // --submit: an external service
  std::string cancel_endpoint;  // --cancel
};

constexpr char kUsage[] =
    "usage: cancel_latency_bench [--flood N] [--cancels K] [--speedup S] [--blocks B] "
    "[--max-seqs M] [--phase backlog|admission] [--submit EP --cancel EP]\n";

double loadAverage() {
  double avg[1] = {0};
  return getloadavg(avg, 1) == 1 ? avg[0] : -1.0;
}

const char kFloodId[] = "flood";

std::string floodId(int i) {
  std::string id = std::to_string(i);
  id.insert(id.begin(), 'f');
  return id;
}

/// Sends `n` submits as fast as the pipes take them while draining everything sent back, until
/// `stop`. Outputs are read (and dropped) so the flood is never abandoned for not reading.
void flood(const std::string& endpoint, int n, const std::atomic<bool>& stop,
           std::atomic<int>& sent, std::atomic<long>& received) {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::routing_id, kFloodId);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, 0);  // unlimited: the backlog queues here and in the service
  s.set(zmq::sockopt::rcvhwm, 0);
  s.connect(endpoint);
  protocol::SubmitRequest r;
  r.prompt.resize(64);
  r.max_tokens = 64;
  zmq::message_t m;
  while (!stop.load()) {
    if (sent.load() < n) {
      const int i = sent.load();
      r.id = floodId(i);
      for (std::size_t t = 0; t < r.prompt.size(); ++t) {
        r.prompt[t] = static_cast<std::uint32_t>(i * 131 + static_cast<int>(t));
      }
      const auto bytes = protocol::encodeClientMessage(r);
      if (s.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::dontwait)) ++sent;
    }
    while (s.recv(m, zmq::recv_flags::dontwait)) ++received;
    if (sent.load() >= n) {
      zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(10));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (argc == 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::printf(
        "%s"
        "  N submits (default 100000) flood an in-process service (speedup S, B KV blocks,\n"
        "  max_num_seqs M); K cancel round trips (default 1000) are timed on the cancel\n"
        "  socket, from sending the cancel to receiving its cancel_reply: p50 / p99 / max.\n"
        "  --phase backlog (default): timing starts once the flood is sent (the service has\n"
        "  paused reading submits); --phase admission: timing starts with the flood, while the\n"
        "  service reads and admits it. --submit EP --cancel EP: use a running service (e.g.\n"
        "  `mocker serve` in another process; S, B and M are then its own) instead.\n",
        kUsage);
    return 0;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--flood") {
      opt.flood = std::atoi(v);
    } else if (a == "--cancels") {
      opt.cancels = std::atoi(v);
    } else if (a == "--speedup") {
      opt.speedup = std::atof(v);
    } else if (a == "--blocks") {
      opt.blocks = static_cast<std::uint32_t>(std::atol(v));
    } else if (a == "--max-seqs") {
      opt.max_seqs = static_cast<std::uint32_t>(std::atol(v));
    } else if (a == "--phase" && (std::string(v) == "admission" || std::string(v) == "backlog")) {
      opt.admission = std::string(v) == "admission";
    } else if (a == "--submit") {
      opt.submit_endpoint = v;
    } else if (a == "--cancel") {
      opt.cancel_endpoint = v;
    } else {
      std::fprintf(stderr, "%s", kUsage);
      return 2;
    }
  }
  if (argc % 2 == 0 || opt.flood < 0 || opt.cancels < 1 || opt.blocks < 1 || opt.max_seqs < 1 ||
      opt.submit_endpoint.empty() != opt.cancel_endpoint.empty()) {
    std::fprintf(stderr, "cancel_latency_bench: bad arguments\n");
    return 2;
  }
  service::setupLogging(spdlog::level::warn);
  std::printf("load average (1 min) at start: %.2f, hardware threads: %u\n", loadAverage(),
              std::thread::hardware_concurrency());

  service::ServiceConfig config;
  config.engine.speedup_ratio = opt.speedup;
  config.engine.num_gpu_blocks = opt.blocks;
  config.engine.block_size = 16;
  config.engine.max_num_seqs = opt.max_seqs;
  config.kv_events.enabled = false;
  config.fpm.enabled = false;
  config.endpoints.submit.endpoint = "tcp://127.0.0.1:*";
  config.endpoints.cancel.endpoint = "tcp://127.0.0.1:*";
  config.endpoints.http.endpoint = "127.0.0.1:0";
  const bool external = !opt.submit_endpoint.empty();
  std::unique_ptr<service::Server> server;
  if (!external) {
    auto created = service::Server::create(config);
    if (!created) {
      std::fprintf(stderr, "server: %s\n", created.error().message.c_str());
      return 1;
    }
    server = std::move(*created);
  }
  const std::string submit = external ? opt.submit_endpoint : server->endpoints().submit;
  const std::string cancel = external ? opt.cancel_endpoint : server->endpoints().cancel;
  Status run_status;
  std::thread server_thread;
  if (server) server_thread = std::thread([&] { run_status = server->run(); });

  std::atomic<bool> stop{false};
  std::atomic<int> sent{0};
  std::atomic<long> received{0};
  std::thread flood_thread(flood, submit, opt.flood, std::cref(stop), std::ref(sent),
                           std::ref(received));

  // A cancel applies only to the sender's own requests, so the canceller speaks as the flood: its
  // cancel socket carries the flood's routing id. Its submit socket is never used; it points
  // nowhere so that it cannot take that routing id from the flood on the submit ROUTER.
  auto client = net::Client::connect({.submit_endpoint = "inproc://cancel-latency-bench-unused",
                                      .cancel_endpoint = cancel,
                                      .routing_id = kFloodId});
  if (!client) {
    std::fprintf(stderr, "client: %s\n", client.error().message.c_str());
    return 1;
  }
  // Backlog: start measuring once the flood is fully queued (the service has paused reading
  // submits). Admission: once the first submits are on their way.
  const auto flood_deadline = Clock::now() + std::chrono::seconds(60);
  const int start_at = opt.admission ? std::min(opt.flood, 1000) : opt.flood;
  while (sent.load() < start_at && Clock::now() < flood_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // progress poll, not a wait
  }
  std::printf("flood: %d submits sent (%ld replies read so far)\n", sent.load(), received.load());

  std::vector<double> latencies_us;
  const int sent_at_start = sent.load();
  const long replies_at_start = received.load();
  int applied = 0;
  int not_found = 0;
  bool ok = true;
  for (int k = 0; k < opt.cancels && ok; ++k) {
    // Spread over the first 10,000 (the ones the service has read; some may have finished).
    // During admission, among those sent so far.
    const int pool = std::min(opt.admission ? sent.load() : opt.flood, 10000);
    const std::string id = floodId((k * 7919) % std::max(1, pool));
    const auto t0 = Clock::now();
    if (auto s = (*client)->cancel(id); !s) {
      std::fprintf(stderr, "cancel: %s\n", s.error().message.c_str());
      ok = false;
      break;
    }
    while (true) {
      auto msg = (*client)->receive(std::chrono::seconds(10));
      if (!msg || !*msg) {
        std::fprintf(stderr, "no cancel_reply within 10 s\n");
        ok = false;
        break;
      }
      if (const auto* reply = std::get_if<protocol::CancelReply>(&**msg)) {
        if (reply->id != id) continue;
        latencies_us.push_back(
            std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        (reply->result == protocol::CancelResult::Applied ? applied : not_found) += 1;
        break;
      }
    }
  }
  // How far admission got while the cancels were timed: flood replies (acks, outputs) read.
  const int sent_at_end = sent.load();
  const long replies_at_end = received.load();
  stop = true;
  flood_thread.join();
  if (server) {
    server->requestStop();
    server_thread.join();
  }

  if (!latencies_us.empty()) {
    std::sort(latencies_us.begin(), latencies_us.end());
    const auto at = [&](double q) {
      const auto i = static_cast<std::size_t>(q * static_cast<double>(latencies_us.size() - 1));
      return latencies_us[i];
    };
    std::printf(
        "cancel round trip during the %s of a %d-submit flood (%s): %zu cancels (%d applied, "
        "%d not_found)\n  p50 %.1f us, p99 %.1f us, max %.1f us\n"
        "  while timing: flood sent %d -> %d, flood replies read %ld -> %ld\n",
        opt.admission ? "admission" : "backlog", opt.flood,
        external
            ? ("external service " + submit).c_str()
            : ("in-process, speedup " + std::to_string(opt.speedup) + ", " +
               std::to_string(opt.blocks) + " blocks, max_num_seqs " + std::to_string(opt.max_seqs))
                  .c_str(),
        latencies_us.size(), applied, not_found, at(0.5), at(0.99), latencies_us.back(),
        sent_at_start, sent_at_end, replies_at_start, replies_at_end);
    if (server) {
      const auto& c = server->counters();
      std::printf("  service: %llu submits read, %llu passes\n",
                  static_cast<unsigned long long>(c.submits),
                  static_cast<unsigned long long>(c.passes));
    }
  }
  std::printf("load average (1 min) at end: %.2f\n", loadAverage());
  return ok && run_status ? 0 : 1;
}
