// service_throughput_bench — output tokens/s a live service::Server delivers over TCP loopback,
// next to a raw libzmq baseline (one ROUTER thread sending one small message per token to N
// DEALERs), both measured in the same run.
//
//   service_throughput_bench [--clients N] [--concurrency C] [--requests M] [--max-tokens T]
//                            [--prompt-len P] [--events off|on|both] [--baseline-messages K]
//                            [--rounds R]
//
// Service: an in-process Server (speedup_ratio 0, max_num_seqs 1024, ephemeral endpoints) runs
// on its own thread; N client threads (one service::Client each) keep C requests of T tokens in
// flight until each has finished M. A stream abandoned by backpressure is counted and reported
// (its tokens still count as delivered). Each round measures the baseline and then the service
// back to back; the summary gives each round's ratio (service tokens/s ÷ baseline messages/s)
// and the worst and median over the rounds, so host noise shows instead of hiding in one run.
// Prints figures; asserts nothing about timing.
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <variant>
#include <vector>
#include <zmq.hpp>

#include "service/client.h"
#include "service/config.h"
#include "service/logging.h"
#include "service/server.h"

namespace {

using namespace mocker;
using Clock = std::chrono::steady_clock;

struct Options {
  int clients = 4;
  int concurrency = 256;
  int requests = 512;  // per client
  std::uint32_t max_tokens = 1000;
  std::uint32_t prompt_len = 16;
  std::string events = "both";
  long baseline_messages = 2'000'000;  // in total, across the DEALERs
  int rounds = 3;
};

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double loadAverage() {
  double avg[1] = {0};
  return getloadavg(avg, 1) == 1 ? avg[0] : -1.0;
}

struct ClientResult {
  std::uint64_t tokens = 0;
  std::uint64_t messages = 0;
  std::uint64_t finished = 0;
  std::uint64_t abandoned = 0;  // terminal other than length
  std::string error;
};

void runClient(const std::string& submit, const std::string& cancel, int index, const Options& opt,
               ClientResult& result) {
  auto client = service::Client::connect(
      {.submit_endpoint = submit, .cancel_endpoint = cancel, .rcvhwm = 100000});
  if (!client) {
    result.error = client.error().message;
    return;
  }
  int submitted = 0;
  int open = 0;
  auto submitOne = [&] {
    protocol::SubmitRequest r;
    r.id = std::to_string(index);
    r.id += '-';
    r.id += std::to_string(submitted++);
    r.prompt.resize(opt.prompt_len);
    for (std::uint32_t i = 0; i < opt.prompt_len; ++i) {
      r.prompt[i] = static_cast<std::uint32_t>(index * 100003 + submitted * 1009) + i;
    }
    r.max_tokens = opt.max_tokens;
    if (auto s = (*client)->submit(r); !s) result.error = s.error().message;
    ++open;
  };
  while (submitted < opt.requests && open < opt.concurrency) submitOne();
  while (open > 0 && result.error.empty()) {
    auto msg = (*client)->receive(std::chrono::seconds(30));
    if (!msg) {
      result.error = msg.error().message;
      return;
    }
    if (!*msg) {
      result.error = "no message for 30 s";
      return;
    }
    if (const auto* batch = std::get_if<protocol::OutputBatch>(&**msg)) {
      ++result.messages;
      for (const auto& o : batch->outputs) {
        result.tokens += o.tokens.size();
        if (!o.finish) continue;
        --open;
        ++result.finished;
        if (*o.finish != protocol::FinishReason::Length) ++result.abandoned;
        if (submitted < opt.requests) submitOne();
      }
    } else if (const auto* reject = std::get_if<protocol::SubmitReject>(&**msg)) {
      result.error = "rejected: " + reject->reason;
    } else if (const auto* error = std::get_if<protocol::ErrorReply>(&**msg)) {
      result.error = "error: " + error->message;
    }
  }
}

/// Delivered tokens/s, or a negative value on failure.
double runService(const Options& opt, bool events) {
  service::ServiceConfig config;
  config.engine.speedup_ratio = 0;
  config.engine.max_num_seqs = 1024;
  config.engine.max_num_batched_tokens = std::nullopt;
  config.kv_events.enabled = events;
  config.fpm.enabled = events;
  config.service.submit_sndhwm = 100000;
  config.service.submit_rcvhwm = 100000;
  config.endpoints.submit.endpoint = "tcp://127.0.0.1:*";
  config.endpoints.cancel.endpoint = "tcp://127.0.0.1:*";
  config.endpoints.kv_events.endpoint = "tcp://127.0.0.1:*";
  config.endpoints.kv_replay.endpoint = "tcp://127.0.0.1:*";
  config.endpoints.fpm.endpoint = "tcp://127.0.0.1:*";
  auto server = service::Server::create(config);
  if (!server) {
    std::fprintf(stderr, "server: %s\n", server.error().message.c_str());
    return -1.0;
  }
  const std::string submit = (*server)->endpoints().submit;
  const std::string cancel = (*server)->endpoints().cancel;
  Status run_status;
  std::thread server_thread([&] {
    pthread_setname_np(pthread_self(), "mocker-serve");  // so profiles can single it out
    run_status = (*server)->run();
  });

  std::vector<ClientResult> results(static_cast<std::size_t>(opt.clients));
  std::vector<std::thread> threads;
  const auto cpu0 = std::clock();
  const auto t0 = Clock::now();
  for (int i = 0; i < opt.clients; ++i) {
    threads.emplace_back(runClient, submit, cancel, i, std::cref(opt),
                         std::ref(results[static_cast<std::size_t>(i)]));
  }
  for (auto& t : threads) t.join();
  const double wall = seconds(t0, Clock::now());
  const double cpu = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  (*server)->requestStop();
  server_thread.join();

  ClientResult total;
  for (const auto& r : results) {
    total.tokens += r.tokens;
    total.messages += r.messages;
    total.finished += r.finished;
    total.abandoned += r.abandoned;
    if (!r.error.empty()) total.error = r.error;
  }
  const auto& c = (*server)->counters();
  std::printf(
      "service (events+fpm %s): %d clients x %d requests (%d in flight each) x %u tokens\n"
      "  delivered %llu tokens in %llu messages (%.1f tokens/message) in %.3f s\n"
      "  => %.0f tokens/s, %.0f output messages/s; %llu passes (%.0f passes/s); "
      "%llu streams not ended by length; process CPU %.2f s\n",
      events ? "on" : "off", opt.clients, opt.requests, opt.concurrency, opt.max_tokens,
      static_cast<unsigned long long>(total.tokens),
      static_cast<unsigned long long>(total.messages),
      total.messages ? static_cast<double>(total.tokens) / static_cast<double>(total.messages)
                     : 0.0,
      wall, static_cast<double>(total.tokens) / wall, static_cast<double>(total.messages) / wall,
      static_cast<unsigned long long>(c.passes), static_cast<double>(c.passes) / wall,
      static_cast<unsigned long long>(total.abandoned), cpu);
  if (!total.error.empty()) std::fprintf(stderr, "client error: %s\n", total.error.c_str());
  if (!run_status) std::fprintf(stderr, "server: %s\n", run_status.error().message.c_str());
  const bool ok = total.error.empty() && static_cast<bool>(run_status) &&
                  total.finished == static_cast<std::uint64_t>(opt.clients) *
                                        static_cast<std::uint64_t>(opt.requests);
  return ok ? static_cast<double>(total.tokens) / wall : -1.0;
}

/// Raw libzmq: one ROUTER thread sends `total` small messages round-robin to N DEALERs.
/// Returns messages/s.
double runBaseline(const Options& opt) {
  zmq::context_t ctx(1);
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::router_mandatory, 1);
  router.set(zmq::sockopt::sndhwm, 100000);
  router.bind("tcp://127.0.0.1:*");
  const std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  const int n = opt.clients;
  const long per_dealer = opt.baseline_messages / n;
  std::atomic<int> connected{0};
  std::vector<std::thread> dealers;
  for (int i = 0; i < n; ++i) {
    dealers.emplace_back([&, i] {
      zmq::socket_t d(ctx, zmq::socket_type::dealer);
      std::string id = std::to_string(i);
      id.insert(id.begin(), 'd');
      d.set(zmq::sockopt::routing_id, id);
      d.set(zmq::sockopt::rcvhwm, 100000);
      d.connect(endpoint);
      d.send(zmq::str_buffer("hello"), zmq::send_flags::none);
      zmq::message_t m;
      for (long k = 0; k < per_dealer; ++k) (void)d.recv(m, zmq::recv_flags::none);
    });
  }
  zmq::message_t hello;
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) {
    (void)router.recv(hello, zmq::recv_flags::none);
    ids.push_back(hello.to_string());
    (void)router.recv(hello, zmq::recv_flags::none);
    ++connected;
  }
  // A message shaped like a one-token output (~40 bytes).
  const std::string payload(40, 'x');
  const auto t0 = Clock::now();
  for (long k = 0; k < per_dealer; ++k) {
    for (const auto& id : ids) {
      router.send(zmq::buffer(id), zmq::send_flags::sndmore);
      router.send(zmq::buffer(payload), zmq::send_flags::none);  // blocks at the HWM
    }
  }
  for (auto& t : dealers) t.join();
  const double wall = seconds(t0, Clock::now());
  const double total = static_cast<double>(per_dealer) * n;
  std::printf(
      "baseline (raw ROUTER -> %d DEALERs, one 40-byte message per token): %.0f "
      "messages in %.3f s => %.0f messages/s\n",
      n, total, wall, total / wall);
  return total / wall;
}

bool parse(int argc, char** argv, Options& opt) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (a == "--clients") {
      opt.clients = std::atoi(v);
    } else if (a == "--concurrency") {
      opt.concurrency = std::atoi(v);
    } else if (a == "--requests") {
      opt.requests = std::atoi(v);
    } else if (a == "--max-tokens") {
      opt.max_tokens = static_cast<std::uint32_t>(std::atol(v));
    } else if (a == "--prompt-len") {
      opt.prompt_len = static_cast<std::uint32_t>(std::atol(v));
    } else if (a == "--events") {
      opt.events = v;
    } else if (a == "--baseline-messages") {
      opt.baseline_messages = std::atol(v);
    } else if (a == "--rounds") {
      opt.rounds = std::atoi(v);
    } else {
      return false;
    }
  }
  return opt.clients >= 1 && opt.concurrency >= 1 && opt.requests >= 1 && opt.max_tokens >= 1 &&
         opt.prompt_len >= 1 && opt.baseline_messages >= opt.clients && opt.rounds >= 1 &&
         (opt.events == "on" || opt.events == "off" || opt.events == "both");
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parse(argc, argv, opt)) {
    std::fprintf(stderr,
                 "usage: service_throughput_bench [--clients N] [--concurrency C] [--requests M] "
                 "[--max-tokens T] [--prompt-len P] [--events off|on|both] "
                 "[--baseline-messages K] [--rounds R]\n");
    return 2;
  }
  mocker::service::setupLogging(spdlog::level::warn);
  std::printf("load average (1 min) at start: %.2f, hardware threads: %u\n", loadAverage(),
              std::thread::hardware_concurrency());
  bool ok = true;
  std::vector<double> ratios[2];  // [events off, events on]
  for (int round = 1; round <= opt.rounds; ++round) {
    std::printf("-- round %d of %d\n", round, opt.rounds);
    const double baseline = runBaseline(opt);
    for (const bool events : {false, true}) {
      if (opt.events == (events ? "off" : "on")) continue;
      const double tokens_per_s = runService(opt, events);
      if (tokens_per_s < 0) {
        ok = false;
        continue;
      }
      ratios[events].push_back(tokens_per_s / baseline);
      std::printf("  ratio to this round's baseline: %.2f\n", tokens_per_s / baseline);
    }
  }
  for (const bool events : {false, true}) {
    auto& r = ratios[events];
    if (r.empty()) continue;
    std::sort(r.begin(), r.end());
    std::printf(
        "summary (events+fpm %s): service tokens/s / baseline messages/s over %zu round(s): "
        "worst %.2f, median %.2f, best %.2f\n",
        events ? "on" : "off", r.size(), r.front(), r[r.size() / 2], r.back());
  }
  std::printf("load average (1 min) at end: %.2f\n", loadAverage());
  return ok ? 0 : 1;
}
