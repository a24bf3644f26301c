// service_throughput_bench — output messages/s and tokens/s a live service::Server delivers over
// TCP loopback, next to a raw libzmq baseline that delivers the very same encoded messages to
// the same clients, both measured in the same run with the same clock points.
//
//   service_throughput_bench [--clients N] [--client-threads K] [--concurrency C] [--requests M]
//                            [--max-tokens T] [--prompt-len P] [--events off|on|both]
//                            [--rounds R] [--label NAME]
//
// Run `service_throughput_bench --help` for what each side measures. Prints figures (and one
// `json:` summary line per events setting for scripts); asserts nothing about timing.
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <latch>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>
#include <zmq.hpp>

#include "net/client.h"
#include "service/config.h"
#include "service/logging.h"
#include "service/server.h"

namespace {

using namespace mocker;
using Clock = std::chrono::steady_clock;

constexpr char kHelp[] = R"(usage: service_throughput_bench [options]

  --clients N          client connections (default 4)
  --client-threads K   threads driving them (default min(N, 16)); a thread with several
                       clients waits on all with Client::waitReadable, then drains each
  --concurrency C      requests each client keeps in flight (default 256)
  --requests M         requests per client (default 512)
  --max-tokens T       output tokens per request (default 1000)
  --prompt-len P       prompt tokens per request (default 16)
  --events off|on|both KV events + forward-pass metrics publishing (default both)
  --rounds R           rounds; each runs the service, then the baseline (default 3)
  --label NAME         name of the case in the json summary line (default "live")

Service side: an in-process Server (speedup_ratio 0, max_num_seqs 1024, ephemeral loopback
endpoints) on its own thread. N net::Client connections (routing ids c0..cN-1), spread over
K threads, each keep C requests of T tokens in flight until each has finished M; every message
a client receives is decoded (net::Client::receive), its output tokens counted, and the
decoded message kept. The service side therefore includes everything the service does per
request and per pass: reading and queueing submits, engine passes, encoding one output message
per client per pass, sending it, and the clients' submits.

Baseline side: one thread with a raw ROUTER (ROUTER_MANDATORY, same high-water marks) sends each
client exactly the messages that client received in the service run just before (its
submit_acks and output messages, re-encoded with protocol::encodeClientMessage, which yields
the bytes the service's encoder produced), in the order received, interleaved round-robin over
the clients like the service's passes interleave them. Messages are encoded before the clock
starts and handed to libzmq without a copy. The clients are net::Client connections with
the same routing ids and options, on the same number of threads, running the same
receive/decode/count/keep code. The ROUTER's sends block at the high-water mark (the service's
would abandon the streams instead). After the clock stops,
every client checks that it received exactly the recorded messages.

Clocks (both sides): start when every client has connected and completed a stats round trip
with its peer (the service, or the baseline ROUTER) and all threads are released; stop at the
last message received by any client. Figures: messages (output messages, without acks), their
rate, tokens per message and tokens/s; ratio = service messages/s / baseline messages/s. Each
side also prints the CPU its threads spent in the clock's window, per output message: the
service's loop thread, the baseline's ROUTER thread, the client threads, and every ZeroMQ I/O
thread (the service's and each client's context's), read from /proc/self/task/*/schedstat and
the threads' own CPU clocks — on 2 cores it shows which side of the ratio the CPU goes to. Each
round measures the service and then the baseline on the service's messages; the summary gives
the worst, median and best ratio over the rounds so host noise shows.
)";

struct Options {
  int clients = 4;
  int client_threads = 0;  // 0 = min(clients, 16)
  int concurrency = 256;
  int requests = 512;  // per client
  std::uint32_t max_tokens = 1000;
  std::uint32_t prompt_len = 16;
  std::string events = "both";
  int rounds = 3;
  std::string label = "live";
};

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double cpuSeconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

/// CPU time of the calling thread.
double threadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double loadAverage() {
  double avg[1] = {0};
  return getloadavg(avg, 1) == 1 ? avg[0] : -1.0;
}

std::string routingId(int index) {
  std::string id = std::to_string(index);
  id.insert(id.begin(), 'c');  // not "c" + …: g++ 12 -Wrestrict false positive
  return id;
}

/// CPU time (ns, from /proc/self/task/*/schedstat: exact, unlike the tick counts of stat) of
/// the process's threads, grouped by thread name.
struct ThreadCpu {
  double serve_s = 0;    // "mocker-serve": the service's loop thread
  double clients_s = 0;  // "stb-client": the client threads
  double router_s = 0;   // "stb-router": the baseline's ROUTER thread
  double zmq_io_s = 0;   // "ZMQbg/*": every context's I/O threads (the service's, each client's)
  double other_s = 0;

  ThreadCpu operator-(const ThreadCpu& b) const {
    return {serve_s - b.serve_s, clients_s - b.clients_s, router_s - b.router_s,
            zmq_io_s - b.zmq_io_s, other_s - b.other_s};
  }
};

ThreadCpu threadCpuByName() {
  ThreadCpu cpu;
  const std::filesystem::path tasks = "/proc/self/task";
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    std::ifstream comm_in(task.path() / "comm");
    std::ifstream sched_in(task.path() / "schedstat");
    std::string comm;
    double ns = 0;
    if (!std::getline(comm_in, comm) || !(sched_in >> ns)) continue;  // the thread just ended
    const double s = ns * 1e-9;
    if (comm == "mocker-serve") {
      cpu.serve_s += s;
    } else if (comm == "stb-client") {
      cpu.clients_s += s;
    } else if (comm == "stb-router") {
      cpu.router_s += s;
    } else if (comm.starts_with("ZMQbg/")) {
      cpu.zmq_io_s += s;
    } else {
      cpu.other_s += s;
    }
  }
  return cpu;
}

/// What one side delivered, in total over the clients.
struct Tally {
  std::uint64_t messages = 0;  // output messages
  std::uint64_t acks = 0;
  std::uint64_t tokens = 0;
  std::uint64_t finished = 0;
  std::uint64_t abandoned = 0;  // streams ended other than by length
  double wall_s = 0;

  double messagesPerS() const { return static_cast<double>(messages) / wall_s; }
  double tokensPerS() const { return static_cast<double>(tokens) / wall_s; }
  double tokensPerMessage() const {
    return messages ? static_cast<double>(tokens) / static_cast<double>(messages) : 0.0;
  }
};

/// One client connection and everything it received. Used by exactly one driver thread.
struct ClientState {
  int index = 0;
  std::unique_ptr<net::Client> client;
  bool submits = false;                 // service side: submit requests, refill as they finish
  std::uint64_t expected_messages = 0;  // baseline side: done after this many
  int submitted = 0;
  int open = 0;
  bool connected = false;
  Tally tally;
  std::vector<protocol::ClientMessage> received;  // everything after the handshake, in order
  Clock::time_point last_message{};
  std::string error;

  bool done() const {
    if (!error.empty()) return true;
    if (submits) return submitted > 0 && open == 0;
    return received.size() >= expected_messages;
  }
};

void submitOne(ClientState& c, const Options& opt) {
  protocol::SubmitRequest r;
  r.id = std::to_string(c.index);
  r.id += '-';
  r.id += std::to_string(c.submitted++);
  r.prompt.resize(opt.prompt_len);
  for (std::uint32_t i = 0; i < opt.prompt_len; ++i) {
    r.prompt[i] = static_cast<std::uint32_t>(c.index * 100003 + c.submitted * 1009) + i;
  }
  r.max_tokens = opt.max_tokens;
  if (auto s = c.client->submit(r); !s) c.error = s.error().message;
  ++c.open;
}

/// The per-message work, identical on both sides: count, refill (service side), keep.
void handle(ClientState& c, protocol::ClientMessage&& msg, const Options& opt) {
  if (const auto* batch = std::get_if<protocol::OutputBatch>(&msg)) {
    c.last_message = Clock::now();
    ++c.tally.messages;
    for (const auto& o : batch->outputs) {
      c.tally.tokens += o.tokens.size();
      if (!o.finish) continue;
      --c.open;
      ++c.tally.finished;
      if (*o.finish != protocol::FinishReason::Length) ++c.tally.abandoned;
      if (c.submits && c.submitted < opt.requests) submitOne(c, opt);
    }
  } else if (std::holds_alternative<protocol::SubmitAck>(msg)) {
    ++c.tally.acks;
  } else if (std::holds_alternative<protocol::StatsReply>(msg) && !c.connected) {
    c.connected = true;  // the handshake; not kept
    return;
  } else if (const auto* reject = std::get_if<protocol::SubmitReject>(&msg)) {
    c.error = "rejected: " + reject->reason;
  } else if (const auto* error = std::get_if<protocol::ErrorReply>(&msg)) {
    c.error = "error: " + error->message;
  }
  c.received.push_back(std::move(msg));
}

/// Receives on `clients` until `until(c)` holds for every one (or an error / 30 s silence).
template <typename Until>
void receiveAll(std::vector<ClientState>& clients, const Options& opt, Until until) {
  constexpr auto kSilence = std::chrono::seconds(30);
  std::vector<net::Client*> active;
  std::vector<ClientState*> active_states;
  const auto refresh = [&] {
    active.clear();
    active_states.clear();
    for (auto& c : clients) {
      if (until(c)) continue;
      active.push_back(c.client.get());
      active_states.push_back(&c);
    }
  };
  refresh();
  while (!active.empty()) {
    if (active.size() == 1) {
      ClientState& c = *active_states[0];
      auto msg = c.client->receive(kSilence);
      if (!msg) c.error = msg.error().message;
      if (msg && !*msg) c.error = "no message for 30 s";
      if (msg && *msg) handle(c, std::move(**msg), opt);
    } else {
      auto ready = net::Client::waitReadable(active, kSilence);
      if (!ready || ready->empty()) {
        for (auto* c : active_states) {
          c->error = ready ? "no message for 30 s" : ready.error().message;
        }
      } else {
        for (const std::size_t i : *ready) {
          ClientState& c = *active_states[i];
          while (!until(c)) {
            auto msg = c.client->receive(std::chrono::milliseconds(0));
            if (!msg) c.error = msg.error().message;
            if (!msg || !*msg) break;
            handle(c, std::move(**msg), opt);
          }
        }
      }
    }
    bool changed = false;
    for (auto* c : active_states) changed = changed || until(*c);
    if (changed) refresh();
  }
}

/// One driver thread: connect its clients, handshake, wait for the start, run to completion.
void drive(std::vector<ClientState>& clients, const std::string& submit, const std::string& cancel,
           const Options& opt, std::latch& ready, std::latch& go, double& cpu_s) {
  pthread_setname_np(pthread_self(), "stb-client");  // named for the CPU breakdown
  for (auto& c : clients) {
    auto client = net::Client::connect({.submit_endpoint = submit,
                                        .cancel_endpoint = cancel,
                                        .routing_id = routingId(c.index),
                                        .rcvhwm = 100000});
    if (!client) {
      c.error = client.error().message;
      continue;
    }
    c.client = std::move(*client);
    if (auto s = c.client->send(protocol::StatsRequest{}); !s) c.error = s.error().message;
  }
  receiveAll(clients, opt, [](const ClientState& c) { return c.connected || !c.error.empty(); });
  ready.count_down();
  go.wait();
  const double cpu0 = threadCpuSeconds();
  for (auto& c : clients) {
    while (c.client && c.error.empty() && c.submits && c.submitted < opt.requests &&
           c.open < opt.concurrency) {
      submitOne(c, opt);
    }
  }
  receiveAll(clients, opt, [](const ClientState& c) { return c.done(); });
  cpu_s = threadCpuSeconds() - cpu0;
}

struct SideResult {
  Tally total;
  double cpu_s = 0;   // process CPU time from the clock start until every client thread ended
  ThreadCpu threads;  // the same window, by thread (threads alive at its end)
  std::string error;
  std::vector<std::vector<protocol::ClientMessage>> received;  // by client index
};

/// Runs the clients against (submit, cancel); `on_go` runs on the main thread right after the
/// clock starts (the baseline's ROUTER thread is released there).
template <typename OnGo>
SideResult runClients(const std::string& submit, const std::string& cancel, const Options& opt,
                      bool submits, const std::vector<std::uint64_t>& expected, OnGo on_go) {
  const int num_threads = opt.client_threads > 0 ? std::min(opt.client_threads, opt.clients)
                                                 : std::min(opt.clients, 16);
  std::vector<std::vector<ClientState>> groups(static_cast<std::size_t>(num_threads));
  for (int i = 0; i < opt.clients; ++i) {
    auto& group = groups[static_cast<std::size_t>(i % num_threads)];
    group.emplace_back();
    group.back().index = i;
    group.back().submits = submits;
    if (!expected.empty()) group.back().expected_messages = expected[static_cast<std::size_t>(i)];
  }
  std::latch ready(num_threads);
  std::latch go(1);
  std::vector<std::thread> threads;
  std::vector<double> client_cpu_s(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    threads.emplace_back(drive, std::ref(groups[g]), std::cref(submit), std::cref(cancel),
                         std::cref(opt), std::ref(ready), std::ref(go), std::ref(client_cpu_s[g]));
  }
  ready.wait();
  const ThreadCpu threads0 = threadCpuByName();
  const auto t0 = Clock::now();
  const double cpu0 = cpuSeconds();
  go.count_down();
  on_go();
  for (auto& t : threads) t.join();
  const double cpu_s = cpuSeconds() - cpu0;
  // The client threads have ended (their /proc entries with them): each recorded its own CPU.
  ThreadCpu by_thread = threadCpuByName() - threads0;
  by_thread.clients_s = 0;
  for (const double s : client_cpu_s) by_thread.clients_s += s;

  SideResult result;
  result.cpu_s = cpu_s;
  result.threads = by_thread;
  result.received.resize(static_cast<std::size_t>(opt.clients));
  Clock::time_point t_end = t0;
  for (auto& group : groups) {
    for (auto& c : group) {
      result.total.messages += c.tally.messages;
      result.total.acks += c.tally.acks;
      result.total.tokens += c.tally.tokens;
      result.total.finished += c.tally.finished;
      result.total.abandoned += c.tally.abandoned;
      t_end = std::max(t_end, c.last_message);
      if (!c.error.empty()) result.error = "client " + routingId(c.index) + ": " + c.error;
      result.received[static_cast<std::size_t>(c.index)] = std::move(c.received);
    }
  }
  result.total.wall_s = seconds(t0, t_end);
  return result;
}

void printSide(const char* name, const SideResult& r) {
  const Tally& t = r.total;
  std::printf(
      "  %-8s %9llu messages (+%llu acks) in %7.3f s = %10.0f messages/s, %7.1f tokens/message, "
      "%11.0f tokens/s; process CPU %.2f s\n",
      name, static_cast<unsigned long long>(t.messages), static_cast<unsigned long long>(t.acks),
      t.wall_s, t.messagesPerS(), t.tokensPerMessage(), t.tokensPerS(), r.cpu_s);
  const ThreadCpu& c = r.threads;
  const double per = t.messages ? 1e6 / static_cast<double>(t.messages) : 0.0;
  std::printf(
      "           CPU by thread (us per output message): serve loop %.2f, baseline router %.2f, "
      "client threads %.2f, ZeroMQ I/O threads %.2f, other %.2f; wall %.2f\n",
      c.serve_s * per, c.router_s * per, c.clients_s * per, c.zmq_io_s * per, c.other_s * per,
      t.wall_s * per);
}

/// The service side. Empty optional on failure (reported on stderr).
std::optional<SideResult> runService(const Options& opt, bool events) {
  service::ServiceConfig config;
  config.engine.speedup_ratio = 0;
  config.engine.max_num_seqs = 1024;
  config.engine.max_num_batched_tokens = std::nullopt;
  config.kv_events.enabled = events;
  config.fpm.enabled = events;
  config.service.submit_sndhwm = 100000;
  config.service.submit_rcvhwm = 100000;
  for (service::EndpointConfig* ep :
       {&config.endpoints.submit, &config.endpoints.cancel, &config.endpoints.kv_events,
        &config.endpoints.kv_replay, &config.endpoints.fpm}) {
    ep->endpoint = "tcp://127.0.0.1:*";
  }
  config.endpoints.http.endpoint = "127.0.0.1:0";  // HTTP on: the metrics recording is measured too
  auto server = service::Server::create(config);
  if (!server) {
    std::fprintf(stderr, "server: %s\n", server.error().message.c_str());
    return std::nullopt;
  }
  Status run_status;
  std::thread server_thread([&] {
    pthread_setname_np(pthread_self(), "mocker-serve");  // so profiles can single it out
    run_status = (*server)->run();
  });
  SideResult r = runClients((*server)->endpoints().submit, (*server)->endpoints().cancel, opt,
                            /*submits=*/true, {}, [] {});
  (*server)->requestStop();
  server_thread.join();
  printSide("service", r);
  const auto& c = (*server)->counters();
  std::printf("           %llu passes (%.0f passes/s), %llu streams not ended by length\n",
              static_cast<unsigned long long>(c.passes),
              static_cast<double>(c.passes) / r.total.wall_s,
              static_cast<unsigned long long>(r.total.abandoned));
  if (!r.error.empty()) std::fprintf(stderr, "service side: %s\n", r.error.c_str());
  if (!run_status) std::fprintf(stderr, "server: %s\n", run_status.error().message.c_str());
  const auto want =
      static_cast<std::uint64_t>(opt.clients) * static_cast<std::uint64_t>(opt.requests);
  if (!r.error.empty() || !run_status || r.total.finished != want) return std::nullopt;
  return r;
}

/// The raw ROUTER of the baseline: binds, answers each client's stats handshake, then (after
/// `go`) sends every client its recorded messages round-robin. Owns its sockets.
class BaselineRouter {
 public:
  BaselineRouter(const std::vector<std::vector<std::vector<std::byte>>>& messages, std::latch& go)
      : messages_(messages), go_(go) {
    router_.set(zmq::sockopt::router_mandatory, 1);
    router_.set(zmq::sockopt::sndhwm, 100000);
    router_.set(zmq::sockopt::rcvhwm, 100000);
    router_.set(zmq::sockopt::sndtimeo, 30000);  // bounded: a vanished client cannot hang us
    router_.set(zmq::sockopt::rcvtimeo, 30000);
    router_.set(zmq::sockopt::linger, 0);
    cancel_.set(zmq::sockopt::linger, 0);
    router_.bind("tcp://127.0.0.1:*");
    cancel_.bind("tcp://127.0.0.1:*");
    submit_endpoint_ = router_.get(zmq::sockopt::last_endpoint);
    cancel_endpoint_ = cancel_.get(zmq::sockopt::last_endpoint);
  }
  const std::string& submitEndpoint() const { return submit_endpoint_; }
  const std::string& cancelEndpoint() const { return cancel_endpoint_; }

  /// Runs on the baseline thread (the sockets move to it once, before any use there).
  void run() {
    try {
      const auto reply = protocol::encodeClientMessage(protocol::StatsReply{});
      for (std::size_t i = 0; i < messages_.size(); ++i) {
        zmq::message_t id;
        zmq::message_t payload;
        if (!router_.recv(id) || !router_.recv(payload)) throw zmq::error_t();
        router_.send(id, zmq::send_flags::sndmore);
        router_.send(zmq::buffer(reply.data(), reply.size()), zmq::send_flags::none);
      }
      go_.wait();
      const double cpu0 = threadCpuSeconds();
      struct RecordCpu {
        double cpu0;
        double& out;
        ~RecordCpu() { out = threadCpuSeconds() - cpu0; }
      } record{cpu0, cpu_s_};
      std::size_t longest = 0;
      for (const auto& m : messages_) longest = std::max(longest, m.size());
      for (std::size_t k = 0; k < longest; ++k) {
        for (std::size_t i = 0; i < messages_.size(); ++i) {
          if (k >= messages_[i].size()) continue;
          const std::string id = routingId(static_cast<int>(i));
          const auto& bytes = messages_[i][k];
          // Zero-copy, like the service's sends: libzmq references the pre-encoded buffer.
          zmq::message_t payload(const_cast<std::byte*>(bytes.data()), bytes.size(), nullptr);
          if (!router_.send(zmq::buffer(id), zmq::send_flags::sndmore) ||
              !router_.send(std::move(payload), zmq::send_flags::none)) {
            error_ = "send to " + id + " timed out";
            return;
          }
        }
      }
    } catch (const zmq::error_t& e) {
      error_ = std::string("baseline router: ") + e.what();
    }
  }
  const std::string& error() const { return error_; }
  /// CPU time of the thread that ran run(), from `go` to its last send.
  double cpuSeconds() const { return cpu_s_; }

 private:
  const std::vector<std::vector<std::vector<std::byte>>>& messages_;
  std::latch& go_;
  zmq::context_t ctx_{1};
  zmq::socket_t router_{ctx_, zmq::socket_type::router};
  zmq::socket_t cancel_{ctx_, zmq::socket_type::router};
  std::string submit_endpoint_;
  std::string cancel_endpoint_;
  std::string error_;
  double cpu_s_ = 0;
};

/// The baseline side on the messages `recorded` (by client index) of a service run.
std::optional<SideResult> runBaseline(
    const Options& opt, const std::vector<std::vector<protocol::ClientMessage>>& recorded) {
  std::vector<std::vector<std::vector<std::byte>>> messages(recorded.size());
  std::vector<std::uint64_t> expected(recorded.size());
  std::uint64_t output_bytes = 0;
  std::uint64_t num_outputs = 0;
  for (std::size_t i = 0; i < recorded.size(); ++i) {
    for (const auto& m : recorded[i]) {
      messages[i].push_back(protocol::encodeClientMessage(m));
      if (std::holds_alternative<protocol::OutputBatch>(m)) {
        output_bytes += messages[i].back().size();
        ++num_outputs;
      }
    }
    expected[i] = recorded[i].size();
  }
  std::latch go(1);
  BaselineRouter router(messages, go);
  std::thread router_thread([&] {
    pthread_setname_np(pthread_self(), "stb-router");  // named for the CPU breakdown
    router.run();
  });
  SideResult r = runClients(router.submitEndpoint(), router.cancelEndpoint(), opt,
                            /*submits=*/false, expected, [&] { go.count_down(); });
  router_thread.join();
  r.threads.router_s = router.cpuSeconds();  // the thread may have ended before the clients
  printSide("baseline", r);
  std::printf(
      "           output messages are %.1f bytes on average (msgpack payload)\n",
      num_outputs ? static_cast<double>(output_bytes) / static_cast<double>(num_outputs) : 0.0);
  if (!router.error().empty()) std::fprintf(stderr, "%s\n", router.error().c_str());
  if (!r.error.empty()) std::fprintf(stderr, "baseline side: %s\n", r.error.c_str());
  if (r.received != recorded) {
    std::fprintf(stderr, "baseline: clients did not receive exactly the recorded messages\n");
    return std::nullopt;
  }
  if (!router.error().empty() || !r.error.empty()) return std::nullopt;
  return r;
}

struct RoundFigures {
  Tally service;
  Tally baseline;
  ThreadCpu service_cpu;
  ThreadCpu baseline_cpu;
  double ratio() const { return service.messagesPerS() / baseline.messagesPerS(); }
};

/// CPU seconds as microseconds per output message of `t`.
double usPerMessage(double cpu_s, const Tally& t) {
  return t.messages ? cpu_s * 1e6 / static_cast<double>(t.messages) : 0.0;
}

bool parse(int argc, char** argv, Options& opt) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (a == "--clients") {
      opt.clients = std::atoi(v);
    } else if (a == "--client-threads") {
      opt.client_threads = std::atoi(v);
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
    } else if (a == "--rounds") {
      opt.rounds = std::atoi(v);
    } else if (a == "--label") {
      opt.label = v;
    } else {
      return false;
    }
  }
  return opt.clients >= 1 && opt.client_threads >= 0 && opt.concurrency >= 1 && opt.requests >= 1 &&
         opt.max_tokens >= 1 && opt.prompt_len >= 1 && opt.rounds >= 1 &&
         (opt.events == "on" || opt.events == "off" || opt.events == "both");
}

/// Each client holds two DEALERs (and its own context); raise the soft fd limit to the hard one.
void raiseFdLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(kHelp, stdout);
      return 0;
    }
  }
  if (!parse(argc, argv, opt)) {
    std::fputs(kHelp, stderr);
    return 2;
  }
  raiseFdLimit();
  mocker::service::setupLogging(spdlog::level::warn);
  std::printf("load average (1 min) at start: %.2f, hardware threads: %u\n", loadAverage(),
              std::thread::hardware_concurrency());
  std::printf(
      "%s: %d clients on %d threads, %d requests each (%d in flight) x %u tokens, prompt %u\n",
      opt.label.c_str(), opt.clients,
      opt.client_threads > 0 ? std::min(opt.client_threads, opt.clients)
                             : std::min(opt.clients, 16),
      opt.requests, opt.concurrency, opt.max_tokens, opt.prompt_len);
  bool ok = true;
  std::vector<RoundFigures> rounds[2];  // [events off, events on]
  for (int round = 1; round <= opt.rounds; ++round) {
    for (const bool events : {false, true}) {
      if (opt.events == (events ? "off" : "on")) continue;
      std::printf("-- round %d of %d, events+fpm %s\n", round, opt.rounds, events ? "on" : "off");
      const auto service = runService(opt, events);
      if (!service) {
        ok = false;
        continue;
      }
      const auto baseline = runBaseline(opt, service->received);
      if (!baseline) {
        ok = false;
        continue;
      }
      rounds[events].push_back(
          {service->total, baseline->total, service->threads, baseline->threads});
      std::printf("  ratio service/baseline messages/s: %.2f\n", rounds[events].back().ratio());
    }
  }
  for (const bool events : {false, true}) {
    auto& r = rounds[events];
    if (r.empty()) continue;
    std::sort(r.begin(), r.end(),
              [](const RoundFigures& a, const RoundFigures& b) { return a.ratio() < b.ratio(); });
    const RoundFigures& median = r[r.size() / 2];
    std::printf(
        "summary (%s, events+fpm %s), round with the median ratio of %zu: service %.0f "
        "messages/s (%.1f tokens/message, %.0f tokens/s), baseline %.0f messages/s of the same "
        "messages; ratio worst %.2f, median %.2f, best %.2f\n",
        opt.label.c_str(), events ? "on" : "off", r.size(), median.service.messagesPerS(),
        median.service.tokensPerMessage(), median.service.tokensPerS(),
        median.baseline.messagesPerS(), r.front().ratio(), median.ratio(), r.back().ratio());
    std::printf(
        "json: {\"label\":\"%s\",\"events\":%s,\"clients\":%d,\"rounds\":%zu,"
        "\"service_messages\":%llu,\"service_messages_per_s\":%.1f,"
        "\"service_tokens_per_s\":%.1f,\"tokens_per_message\":%.3f,"
        "\"baseline_messages_per_s\":%.1f,\"baseline_tokens_per_s\":%.1f,"
        "\"ratio_worst\":%.4f,\"ratio_median\":%.4f,\"ratio_best\":%.4f,"
        "\"serve_us_per_message\":%.2f,\"service_clients_us_per_message\":%.2f,"
        "\"service_zmq_io_us_per_message\":%.2f,\"baseline_clients_us_per_message\":%.2f,"
        "\"baseline_zmq_io_us_per_message\":%.2f,\"baseline_router_us_per_message\":%.2f}\n",
        opt.label.c_str(), events ? "true" : "false", opt.clients, r.size(),
        static_cast<unsigned long long>(median.service.messages), median.service.messagesPerS(),
        median.service.tokensPerS(), median.service.tokensPerMessage(),
        median.baseline.messagesPerS(), median.baseline.tokensPerS(), r.front().ratio(),
        median.ratio(), r.back().ratio(), usPerMessage(median.service_cpu.serve_s, median.service),
        usPerMessage(median.service_cpu.clients_s, median.service),
        usPerMessage(median.service_cpu.zmq_io_s, median.service),
        usPerMessage(median.baseline_cpu.clients_s, median.baseline),
        usPerMessage(median.baseline_cpu.zmq_io_s, median.baseline),
        usPerMessage(median.baseline_cpu.router_s, median.baseline));
  }
  std::printf("load average (1 min) at end: %.2f\n", loadAverage());
  return ok ? 0 : 1;
}
