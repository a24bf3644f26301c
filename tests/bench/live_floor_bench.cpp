// live_floor_bench — the live path's floor next to libzmq's own, same client, same messages.
//
//   live_floor_bench --mocker PATH [--requests N] [--rate R] [--prompt-tokens T] [--rounds K]
//                    [--serve-flag F]... [--raw-gap-us G]
//
// One request at a time (N per round, default 300, paced at R per second, default 100): a
// submit of a T-token prompt (default 2,000, distinct per request) with max_tokens 1, timed
// from just before net::Client::submit (encode + send) to the decoded output that carries the
// token (TTFT). Two servers answer, in alternating rounds:
//   service  `mocker serve` in its own process, 0 ms modelled passes (`--timing-model fixed`),
//            KV events and FPM on with nobody subscribed — the live_fidelity.py floor's set-up;
//   raw      a plain ROUTER in a forked process that answers each submit, without decoding it,
//            with the messages the service sends for it (same encoder and fields; only the
//            token differs): a submit_ack, then the one-token output.
// raw is what libzmq over loopback TCP costs (both processes' I/O threads and wake-ups) for
// the same messages; service − raw is what the serve loop adds (decode, admission, hashing
// the prompt's blocks, the pass, encode). Prints p50 / p99 / mean per round; asserts nothing.
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "net/client.h"
#include "protocol/client.h"
#include "tests/testing/serve_child.h"

namespace {

using namespace mocker;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string mocker;
  int requests = 300;
  double rate = 100.0;
  std::uint32_t prompt_tokens = 2000;
  int rounds = 3;
  std::vector<std::string> serve_flags;  // --serve-flag, repeatable
  int raw_gap_us = 0;                    // --raw-gap-us: raw waits this long between its two
                                         // replies, as the service does its work between them
};

std::string requestId(int i) {
  std::string id = std::to_string(i);
  id.insert(id.begin(), 'q');  // not "q" + …: g++ 12's -Wrestrict false positive
  return id;
}

/// The raw server: answers the i-th submit it reads (modulo `n`) with the service's two
/// messages for request i. Runs until killed.
[[noreturn]] void rawServer(int ready_fd, int n, int gap_us) {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::router);
  s.set(zmq::sockopt::linger, 0);
  s.bind("tcp://127.0.0.1:*");
  const std::string ep = s.get(zmq::sockopt::last_endpoint);
  std::vector<std::vector<std::byte>> acks, outputs;
  for (int i = 0; i < n; ++i) {
    acks.push_back(protocol::encodeClientMessage(protocol::SubmitAck{requestId(i), 0}));
    protocol::OutputBatch b;
    b.outputs.push_back({.id = requestId(i),
                         .index = 0,
                         .tokens = {static_cast<std::uint32_t>(1000 + i)},
                         .finish = protocol::FinishReason::Length,
                         .reason = "",
                         .cached_tokens = 0});
    outputs.push_back(protocol::encodeClientMessage(protocol::ClientMessage{b}));
  }
  if (::write(ready_fd, ep.data(), ep.size()) < 0) std::_Exit(1);
  ::close(ready_fd);
  zmq::message_t rid, payload;
  for (int i = 0;; i = (i + 1) % n) {
    if (!s.recv(rid) || !s.recv(payload)) continue;
    const auto& ack = acks[static_cast<std::size_t>(i)];
    const auto& output = outputs[static_cast<std::size_t>(i)];
    s.send(zmq::buffer(rid.data(), rid.size()), zmq::send_flags::sndmore);
    s.send(zmq::buffer(ack.data(), ack.size()));
    const auto until = Clock::now() + std::chrono::microseconds(gap_us);
    while (gap_us > 0 && Clock::now() < until) {
    }
    s.send(zmq::buffer(rid.data(), rid.size()), zmq::send_flags::sndmore);
    s.send(zmq::buffer(output.data(), output.size()));
  }
}

struct Child {
  pid_t pid = -1;
  std::string endpoint;
};

// The raw server, killed however this process exits (std::exit on an error included).
pid_t g_raw = -1;
void killRaw() {
  if (g_raw <= 0) return;
  ::kill(g_raw, SIGKILL);
  ::waitpid(g_raw, nullptr, 0);
  g_raw = -1;
}

Child forkRaw(int n, int gap_us) {
  int fds[2];
  if (::pipe(fds) != 0) std::exit(1);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    rawServer(fds[1], n, gap_us);
  }
  g_raw = pid;
  ::close(fds[1]);
  char buf[256];
  const ssize_t got = ::read(fds[0], buf, sizeof buf);
  ::close(fds[0]);
  if (got <= 0) std::exit(1);
  return {pid, std::string(buf, static_cast<std::size_t>(got))};
}

/// `mocker serve` with 0 ms passes on ephemeral endpoints, killed when this process exits (a
/// static's destructor: std::exit too).
std::unique_ptr<mocker::testing::ServeChild> g_serve;

/// Starts it; its submit endpoint, from the lines it prints before `ready`.
std::string spawnServe(const std::string& mocker, const std::vector<std::string>& extra) {
  std::vector<std::string> flags = {"--timing-model",    "fixed", "--fixed-prefill-ms", "0",
                                    "--fixed-decode-ms", "0",     "--log-level",        "warn"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  g_serve = std::make_unique<mocker::testing::ServeChild>(mocker, flags);
  const bool ready = g_serve->awaitReady(std::chrono::seconds(30));
  const auto submit = g_serve->endpoints.find("submit");
  if (!ready || submit == g_serve->endpoints.end()) {
    std::fprintf(stderr, "mocker serve did not print its endpoints and `ready`%s%s\n",
                 g_serve->spawnError().empty() ? "" : ": ", g_serve->spawnError().c_str());
    std::exit(1);
  }
  return submit->second;
}

struct Figures {
  double p50 = 0, p99 = 0, mean = 0;
};

/// One round: N paced requests, one at a time; TTFT of each in milliseconds.
Figures round(const std::string& endpoint, const Options& opt, std::uint32_t salt) {
  auto client = net::Client::connect({.submit_endpoint = endpoint, .cancel_endpoint = ""});
  if (!client) {
    std::fprintf(stderr, "connect: %s\n", client.error().message.c_str());
    std::exit(1);
  }
  std::vector<double> ttft;
  const auto period =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / opt.rate));
  auto next = Clock::now() + period;
  for (int i = 0; i < opt.requests; ++i) {
    protocol::SubmitRequest r{.id = requestId(i), .prompt = {}, .max_tokens = 1};
    r.prompt.resize(opt.prompt_tokens);
    for (std::uint32_t t = 0; t < opt.prompt_tokens; ++t) {
      r.prompt[t] = salt * 7919u + static_cast<std::uint32_t>(i) * 104729u + t;
    }
    std::this_thread::sleep_until(next);
    next += period;
    const auto t0 = Clock::now();
    if (!(*client)->submit(r)) std::exit(1);
    bool done = false;
    while (!done) {
      auto m = (*client)->receive(std::chrono::seconds(30));
      if (!m || !*m) {
        std::fprintf(stderr, "no reply for %s\n", r.id.c_str());
        std::exit(1);
      }
      if (const auto* b = std::get_if<protocol::OutputBatch>(&**m)) {
        for (const auto& o : b->outputs) done = done || (o.id == r.id && !o.tokens.empty());
      }
    }
    ttft.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ttft.begin(), ttft.end());
  Figures f;
  f.p50 = ttft[ttft.size() / 2];
  f.p99 = ttft[std::min(ttft.size() - 1, ttft.size() * 99 / 100)];
  for (double v : ttft) f.mean += v / static_cast<double>(ttft.size());
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: live_floor_bench --mocker PATH [--requests N] [--rate R] "
          "[--prompt-tokens T] [--rounds K] [--serve-flag F]... [--raw-gap-us G]\n"
          "  TTFT of one-token requests, one at a time, against `mocker serve` (0 ms passes)\n"
          "  and against a raw ROUTER sending the same replies, alternating rounds.\n"
          "  --serve-flag F adds F to `mocker serve`'s command line (e.g. --no-kv-events).\n"
          "  --raw-gap-us G: raw busy-waits G us between its ack and its output (the service\n"
          "  sends its ack, then works on the pass before the output).\n");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    if (a == "--mocker") {
      opt.mocker = v;
    } else if (a == "--requests") {
      opt.requests = std::max(1, std::atoi(v));
    } else if (a == "--rate") {
      opt.rate = std::max(1.0, std::atof(v));
    } else if (a == "--prompt-tokens") {
      opt.prompt_tokens = static_cast<std::uint32_t>(std::max(1, std::atoi(v)));
    } else if (a == "--rounds") {
      opt.rounds = std::max(1, std::atoi(v));
    } else if (a == "--raw-gap-us") {
      opt.raw_gap_us = std::max(0, std::atoi(v));
    } else if (a == "--serve-flag") {
      opt.serve_flags.emplace_back(v);
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (opt.mocker.empty()) {
    std::fprintf(stderr, "--mocker PATH is required\n");
    return 2;
  }
  std::atexit(killRaw);
  // Before any thread: the raw server is a fork of this process.
  const Child raw = forkRaw(opt.requests, opt.raw_gap_us);
  const std::string serve_endpoint = spawnServe(opt.mocker, opt.serve_flags);
  (void)prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);  // as the live driver waits
  double load[1] = {0};
  (void)getloadavg(load, 1);
  std::printf("%d requests per round at %.0f/s, %u-token prompts, load average %.2f\n",
              opt.requests, opt.rate, opt.prompt_tokens, load[0]);
  for (int k = 0; k < opt.rounds; ++k) {
    const Figures s = round(serve_endpoint, opt, static_cast<std::uint32_t>(2 * k + 1));
    const Figures r = round(raw.endpoint, opt, static_cast<std::uint32_t>(2 * k + 2));
    std::printf(
        "round %d: service TTFT p50 %.3f p99 %.3f mean %.3f ms | raw p50 %.3f p99 %.3f mean "
        "%.3f ms | service - raw p50 %.3f ms\n",
        k + 1, s.p50, s.p99, s.mean, r.p50, r.p99, r.mean, s.p50 - r.p50);
  }
  return 0;  // killRaw and g_serve's destructor end both servers
}
