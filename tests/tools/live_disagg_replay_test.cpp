// Live disaggregated replay (tools/replay/README.md, Disaggregated replay): the driver's two hops
// against scripted prefill and decode workers — ROUTER pairs on ephemeral loopback ports, on
// threads of their own, speaking client protocol v1 (handoff, submit.handoff) — so every routing,
// pass-through, rejection and cancel rule is pinned exactly, whatever the service does; and the
// command line. Nothing sleeps; every wait is a poll with a deadline.
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "protocol/client.h"
#include "protocol/limits.h"
#include "replay_test_util.h"
#include "service/fleet.h"
#include "tests/service/live_service.h"
#include "tests/tools/live_replay_test_util.h"
#include "tools/cli.h"
#include "tools/replay/live_replay.h"
#include "tools/replay/mooncake_trace.h"

namespace mocker::replay {
namespace {

/// A scripted worker: a submit ROUTER and a cancel ROUTER on ephemeral ports, served by a thread.
///   * Prefill: a submit → submit_ack, then a `handoff` whose ticket's key is the request id
///     (padded to 16 bytes) and whose prompt_len is the prompt's length — or, for a prompt of
///     `reject_prompt_len` tokens, a terminal entry `rejected` instead. A submit carrying a
///     ticket is refused (submit_reject), as the service does.
///   * Decode: a submit with a ticket → submit_ack, then `max_tokens` tokens, one `output` message
///     each, token 0 carrying the ticket's cached_tokens, the last one `finish: length`. Without a
///     ticket: submit_reject. `reject_handoffs`: every submit_reject ("block_size 16 != 32").
///     `silent`: submit_ack, then nothing (the request only ends by a cancel).
/// A cancel → cancel_reply (applied for a request it still holds). Records every submit and
/// cancel it received.
class ScriptedWorker {
 public:
  enum class Role { Prefill, Decode };
  struct Options {
    Role role = Role::Prefill;
    std::uint32_t reject_prompt_len = 0;  ///< prefill: prompts of this length are rejected
    bool reject_handoffs = false;         ///< decode
    bool silent = false;                  ///< decode
  };

  explicit ScriptedWorker(Options options) : options_(options) {
    for (zmq::socket_t* s : {&submit_, &cancel_}) {
      s->set(zmq::sockopt::linger, 0);
      s->bind("tcp://127.0.0.1:*");
    }
    // Read before the thread starts: a socket belongs to one thread.
    target_ = {.submit_endpoint = submit_.get(zmq::sockopt::last_endpoint),
               .cancel_endpoint = cancel_.get(zmq::sockopt::last_endpoint)};
    thread_ = std::thread([this] { loop(); });
  }
  ~ScriptedWorker() {
    stop_ = true;
    thread_.join();
  }
  ScriptedWorker(const ScriptedWorker&) = delete;
  ScriptedWorker& operator=(const ScriptedWorker&) = delete;

  const LiveTarget& target() const { return target_; }
  std::vector<protocol::SubmitRequest> submits() const {
    std::lock_guard lock(mu_);
    return submits_;
  }
  std::vector<std::string> cancels() const {
    std::lock_guard lock(mu_);
    return cancels_;
  }
  /// The ticket this worker (a prefill worker) sends for request `id`.
  static protocol::HandoffTicket ticketFor(const protocol::SubmitRequest& r) {
    std::string key = r.id;
    key.resize(protocol::kHandoffKeyBytes, '.');
    return {.source = "tcp://127.0.0.1:9",
            .key = key,
            .source_rank = 0,
            .block_size = 16,
            .prompt_len = static_cast<std::uint32_t>(r.prompt.size()),
            .cached_tokens = 3,
            .transfer_ms = 0.25};
  }

 private:
  void send(zmq::socket_t& s, const zmq::message_t& rid, const protocol::ClientMessage& m) {
    const std::vector<std::byte> frame = protocol::encodeClientMessage(m);
    s.send(zmq::buffer(rid.data(), rid.size()), zmq::send_flags::sndmore);
    s.send(zmq::buffer(frame.data(), frame.size()), zmq::send_flags::none);
  }

  void onSubmit(const zmq::message_t& rid, const protocol::SubmitRequest& r) {
    {
      std::lock_guard lock(mu_);
      submits_.push_back(r);
    }
    const bool prefill = options_.role == Role::Prefill;
    if (prefill == r.handoff.has_value()) {
      send(submit_, rid,
           protocol::SubmitReject{.id = r.id,
                                  .reason = prefill ? "a prefill worker takes no handoff"
                                                    : "a decode worker needs a handoff"});
      return;
    }
    if (!prefill && options_.reject_handoffs) {
      send(submit_, rid,
           protocol::SubmitReject{.id = r.id, .reason = "handoff block_size 16 != 32"});
      return;
    }
    send(submit_, rid, protocol::SubmitAck{.id = r.id, .dp_rank = 0});
    if (prefill) {
      if (r.prompt.size() == options_.reject_prompt_len) {
        send(submit_, rid,
             protocol::OutputBatch{{{.id = r.id,
                                     .finish = protocol::FinishReason::Rejected,
                                     .reason = "kv capacity: prompt larger than the pool"}}});
        return;
      }
      held_.insert(r.id);
      send(submit_, rid, protocol::Handoff{.id = r.id, .ticket = ticketFor(r)});
      return;
    }
    if (options_.silent) {
      held_.insert(r.id);
      return;
    }
    for (std::uint32_t i = 0; i < r.max_tokens; ++i) {
      protocol::RequestOutput o{.id = r.id, .index = i, .tokens = {100 + i}};
      if (i == 0) o.cached_tokens = r.handoff->cached_tokens;
      if (i + 1 == r.max_tokens) o.finish = protocol::FinishReason::Length;
      send(submit_, rid, protocol::OutputBatch{{o}});
    }
    if (r.max_tokens == 0) {
      send(submit_, rid,
           protocol::OutputBatch{{{.id = r.id, .finish = protocol::FinishReason::Length}}});
    }
  }

  void loop() {
    while (!stop_) {
      std::array<zmq::pollitem_t, 2> items{
          {{submit_.handle(), 0, ZMQ_POLLIN, 0}, {cancel_.handle(), 0, ZMQ_POLLIN, 0}}};
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(10));
      for (std::size_t k = 0; k < items.size(); ++k) {
        if (!(items[k].revents & ZMQ_POLLIN)) continue;
        zmq::socket_t& s = k == 0 ? submit_ : cancel_;
        std::vector<zmq::message_t> frames;
        if (!zmq::recv_multipart(s, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
          continue;
        }
        if (frames.size() != 2) continue;
        auto msg = protocol::decodeClientMessage(
            std::span(static_cast<const std::byte*>(frames[1].data()), frames[1].size()));
        if (!msg) continue;
        if (const auto* r = std::get_if<protocol::SubmitRequest>(&*msg)) {
          onSubmit(frames[0], *r);
        } else if (std::get_if<protocol::StatsRequest>(&*msg)) {
          send(s, frames[0], protocol::StatsReply{.ranks = {protocol::RankStats{}}});
        } else if (const auto* c = std::get_if<protocol::CancelRequest>(&*msg)) {
          {
            std::lock_guard lock(mu_);
            cancels_.push_back(c->id);
          }
          const bool held = held_.erase(c->id) > 0;
          send(s, frames[0],
               protocol::CancelReply{.id = c->id,
                                     .result = held ? protocol::CancelResult::Applied
                                                    : protocol::CancelResult::NotFound});
          if (held && options_.role == Role::Decode) {
            send(submit_, frames[0],
                 protocol::OutputBatch{
                     {{.id = c->id, .finish = protocol::FinishReason::Cancelled}}});
          }
        }
      }
    }
  }

  Options options_;
  LiveTarget target_;
  zmq::context_t context_{1};
  zmq::socket_t submit_{context_, zmq::socket_type::router};
  zmq::socket_t cancel_{context_, zmq::socket_type::router};
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::set<std::string> held_;  // worker thread only
  mutable std::mutex mu_;
  std::vector<protocol::SubmitRequest> submits_;
  std::vector<std::string> cancels_;
};

using Role = ScriptedWorker::Role;

/// `n` single-turn requests 1 ms apart, prompts of 16, 32, 48 tokens in turn, 1..3 output tokens.
Workload smallTrace(int n) {
  std::ostringstream t;
  for (int i = 0; i < n; ++i) {
    t << R"({"timestamp": )" << i << R"(, "output_length": )" << 1 + i % 3 << R"(, "hash_ids": [)";
    for (int b = 0; b <= i % 3; ++b) t << (b ? ", " : "") << 100 * i + b;
    t << "]}\n";
  }
  auto w = parseMooncakeTrace(t.str(), {.trace_block_size = 16, .require_timestamps = true});
  EXPECT_TRUE(w.has_value()) << (w ? "" : w.error().toString());
  return w ? std::move(*w) : Workload{};
}

struct Workers {
  std::vector<std::unique_ptr<ScriptedWorker>> prefill;
  std::vector<std::unique_ptr<ScriptedWorker>> decode;
  Workers(std::uint32_t p, std::uint32_t d, ScriptedWorker::Options prefill_options = {},
          ScriptedWorker::Options decode_options = {.role = Role::Decode}) {
    for (std::uint32_t i = 0; i < p; ++i) {
      prefill.push_back(std::make_unique<ScriptedWorker>(prefill_options));
    }
    for (std::uint32_t i = 0; i < d; ++i) {
      decode.push_back(std::make_unique<ScriptedWorker>(decode_options));
    }
  }
  LiveReplayOptions options() const {
    LiveReplayOptions o;
    for (const auto& w : prefill) o.targets.push_back(w->target());
    for (const auto& w : decode) o.decode_targets.push_back(w->target());
    o.request_timeout_ms = 30'000.0 * service::testing::kSlowdown;
    return o;
  }
  /// Request ids each decode worker received.
  std::vector<std::vector<std::string>> decodeIds() const {
    std::vector<std::vector<std::string>> ids;
    for (const auto& w : decode) {
      auto& v = ids.emplace_back();
      for (const auto& s : w->submits()) v.push_back(s.id);
      std::sort(v.begin(), v.end());
    }
    return ids;
  }
};

using testing::LiveRun;
using testing::runLive;

// Every request crosses both hops: the decode submit repeats the prefill submit (id, prompt,
// max_tokens) and carries the prefill worker's ticket unchanged; the report is the client's view
// (admission at the prefill ack, reuse = token 0's cached_tokens, tokens from the decode
// stream), and the handoff figures count every step.
TEST(LiveDisaggReplayTest, EveryRequestCrossesBothHopsWithTheTicketUnchanged) {
  Workers ws(1, 1);
  const Workload w = smallTrace(6);
  const LiveRun run = runLive(w, ws.options());
  const Report report = run.collector.buildReport({.wall_time_ms = run.stats.wall_ms});
  EXPECT_EQ(report.num_requests, 6u);
  EXPECT_EQ(report.completed_requests, 6u);
  EXPECT_EQ(report.total_output_tokens, 2u * (1 + 2 + 3));
  const auto prefill = ws.prefill[0]->submits();
  const auto decode = ws.decode[0]->submits();
  ASSERT_EQ(prefill.size(), 6u);
  ASSERT_EQ(decode.size(), 6u);
  std::map<std::string, protocol::SubmitRequest> first_hop;
  for (const auto& s : prefill) {
    EXPECT_FALSE(s.handoff.has_value());
    first_hop[s.id] = s;
  }
  for (const auto& d : decode) {
    const protocol::SubmitRequest& p = first_hop.at(d.id);
    EXPECT_EQ(d.prompt, p.prompt);
    EXPECT_EQ(d.max_tokens, p.max_tokens);
    ASSERT_TRUE(d.handoff.has_value());
    EXPECT_EQ(*d.handoff, ScriptedWorker::ticketFor(p));
  }
  for (const RequestRecord& r : run.collector.requests()) {
    EXPECT_EQ(r.status, TerminalStatus::Completed);
    EXPECT_EQ(r.first_reused_input_tokens, 3u);  // the ticket's cached_tokens
    ASSERT_TRUE(r.first_admit_ms.has_value());
    ASSERT_FALSE(r.token_times_ms.empty());
    EXPECT_LE(*r.first_admit_ms, r.token_times_ms.front());
  }
  ASSERT_TRUE(run.stats.handoff.has_value());
  const LiveHandoffStats& h = *run.stats.handoff;
  EXPECT_EQ(h.handoffs, 6u);
  EXPECT_EQ(h.decode_acks, 6u);
  EXPECT_EQ(h.activations, 6u);
  EXPECT_EQ(h.decode_rejects + h.ended_on_prefill + h.prefill_cancels + h.prefill_tokens, 0u);
  EXPECT_EQ(h.handoff_ms.size(), 6u);
  EXPECT_EQ(h.decode_ack_ms.size(), 6u);
  EXPECT_EQ(h.first_token_ms.size(), 6u);
  EXPECT_EQ(h.wait_ms.size(), 6u);
  EXPECT_EQ(h.transfer_ms, std::vector<double>(6, 0.25));
  EXPECT_EQ(run.stats.per_target, std::vector<std::uint64_t>{6});
  EXPECT_EQ(h.per_decode_target, std::vector<std::uint64_t>{6});
  EXPECT_EQ(run.stats.ranks_per_target, (std::vector<std::uint32_t>{1, 1}));
  const HandoffReport hr = summarizeLiveHandoffs(h);
  EXPECT_EQ(hr.handoffs, 6u);
  EXPECT_EQ(hr.activations, 6u);
  EXPECT_EQ(hr.transfer_ms.count, 6u);
  EXPECT_EQ(hr.wait_ms.count, 6u);
  EXPECT_EQ(hr.queue_ms.count, 0u);  // not visible to a client
  const std::string text = formatLiveHandoffs(h);
  EXPECT_NE(text.find("6 handoffs, 6 decode acks, 6 decode streams started, 0 decode rejects"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Live handoff: handoff received - dispatch (ms, n 6)"), std::string::npos)
      << text;
  const LiveTimingSummary timing = summarizeLiveTiming(run.stats, false, 1);
  EXPECT_NE(timing.text.find("prefill server 0 reports no pass timing"), std::string::npos)
      << timing.text;
  EXPECT_NE(timing.text.find("decode server 0 reports no pass timing"), std::string::npos)
      << timing.text;
}

// P = 2, D = 2. Round robin on both hops = dispatch index mod servers, exactly; the random
// decode router mixes the seed with the dispatch index: the same seed gives the same request →
// decode server map on every run, another seed another map; kv = the fewest in flight.
TEST(LiveDisaggReplayTest, BothHopsRouteDeterministically) {
  Workers ws(2, 2);
  const Workload w = smallTrace(12);
  const LiveRun rr = runLive(w, ws.options());
  EXPECT_EQ(rr.collector.buildReport({}).completed_requests, 12u);
  EXPECT_EQ(rr.stats.per_target, (std::vector<std::uint64_t>{6, 6}));
  EXPECT_EQ(rr.stats.handoff->per_decode_target, (std::vector<std::uint64_t>{6, 6}));
  const std::vector<std::vector<std::string>> even_odd = ws.decodeIds();
  for (std::size_t d = 0; d < 2; ++d) {
    for (const std::string& id : even_odd[d]) {
      EXPECT_EQ(std::stoul(id.substr(1)) % 2, d) << id;
    }
  }

  const auto randomRun = [&](std::uint64_t seed) {
    Workers fresh(2, 2);
    LiveReplayOptions o = fresh.options();
    o.router = RouterKind::Random;
    o.decode_router = RouterKind::Random;
    o.router_seed = seed;
    const LiveRun run = runLive(w, o);
    EXPECT_EQ(run.collector.buildReport({}).completed_requests, 12u);
    std::vector<std::vector<std::string>> prefill_ids;
    for (const auto& p : fresh.prefill) {
      auto& v = prefill_ids.emplace_back();
      for (const auto& s : p->submits()) v.push_back(s.id);
      std::sort(v.begin(), v.end());
    }
    return std::pair{prefill_ids, fresh.decodeIds()};
  };
  const auto a = randomRun(7);
  const auto b = randomRun(7);
  const auto c = randomRun(8);
  EXPECT_EQ(a, b) << "same seed, different routing";
  EXPECT_NE(a.second, c.second) << "the decode router ignores the seed";
  EXPECT_FALSE(a.second[0].empty());
  EXPECT_FALSE(a.second[1].empty());

  Workers kv_ws(1, 2, {}, {.role = Role::Decode, .silent = true});
  LiveReplayOptions kv = kv_ws.options();
  kv.decode_router = RouterKind::Kv;
  kv.request_timeout_ms = 300.0 * service::testing::kSlowdown;  // silent decoders: timeouts
  const LiveRun k = runLive(smallTrace(4), kv);
  // All four are in flight on the decode servers at once: the fewest-in-flight choice
  // alternates 0, 1, 0, 1.
  EXPECT_EQ(k.stats.handoff->per_decode_target, (std::vector<std::uint64_t>{2, 2}));
  EXPECT_EQ(k.stats.timeouts, 4u);
}

// A prefill worker's terminal entry (its scheduler rejected the prompt) ends the request
// without a decode submit; a decode worker's submit_reject ends it too, and the driver cancels
// the request on its prefill worker (the held KV is freed at once). Both are recorded rejected.
TEST(LiveDisaggReplayTest, RejectionsAtEitherHopAreRecorded) {
  {
    Workers ws(1, 1, {.role = Role::Prefill, .reject_prompt_len = 32});
    const LiveRun run = runLive(smallTrace(3), ws.options());  // prompts of 16, 32, 48
    const Report report = run.collector.buildReport({});
    EXPECT_EQ(report.completed_requests, 2u);
    EXPECT_EQ(report.rejected_requests, 1u);
    EXPECT_EQ(run.collector.requests()[1].status, TerminalStatus::Rejected);
    EXPECT_EQ(run.collector.requests()[1].stop_reason, StopReason::KvCapacity);
    EXPECT_EQ(run.stats.handoff->ended_on_prefill, 1u);
    EXPECT_EQ(run.stats.finish_rejected, 1u);
    EXPECT_EQ(run.stats.handoff->handoffs, 2u);
    EXPECT_EQ(ws.decode[0]->submits().size(), 2u);
  }
  {
    Workers ws(1, 1, {}, {.role = Role::Decode, .reject_handoffs = true});
    const LiveRun run = runLive(smallTrace(2), ws.options());
    const Report report = run.collector.buildReport({});
    EXPECT_EQ(report.rejected_requests, 2u);
    EXPECT_EQ(run.stats.handoff->decode_rejects, 2u);
    EXPECT_EQ(run.stats.handoff->prefill_cancels, 2u);
    EXPECT_EQ(run.stats.submit_rejects, 2u);
    EXPECT_EQ(run.stats.handoff->activations, 0u);
    // The cancels reach the prefill worker (sent before the run ends; poll for their arrival).
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(5 * service::testing::kSlowdown);
    while (ws.prefill[0]->cancels().size() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    auto cancels = ws.prefill[0]->cancels();
    std::sort(cancels.begin(), cancels.end());
    EXPECT_EQ(cancels, (std::vector<std::string>{"r0", "r1"}));
    bool named = false;
    for (const std::string& warning : run.stats.warnings) {
      named = named || warning.find(
                           "decode server 0 rejected a handoff: handoff block_size 16 "
                           "!= 32") != std::string::npos;
    }
    EXPECT_TRUE(named) << "no warning naming the decode reject";
  }
}

// A request timeout cancels where the request is: on the decode worker once the decode submit
// was sent (never on the prefill worker, whose part ended with the handoff).
TEST(LiveDisaggReplayTest, TimeoutCancelsOnTheDecodeWorkerAfterTheHandoff) {
  Workers ws(1, 1, {}, {.role = Role::Decode, .silent = true});
  LiveReplayOptions o = ws.options();
  o.request_timeout_ms = 200.0 * service::testing::kSlowdown;
  const LiveRun run = runLive(smallTrace(2), o);
  EXPECT_EQ(run.collector.buildReport({}).cancelled_requests, 2u);
  EXPECT_EQ(run.stats.timeouts, 2u);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(5 * service::testing::kSlowdown);
  while (ws.decode[0]->cancels().size() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(ws.decode[0]->cancels().size(), 2u);
  EXPECT_TRUE(ws.prefill[0]->cancels().empty());
}

// Hop 1 to a decode worker (no ticket) is refused there and recorded rejected: a misconfigured
// fleet shows up in the report, not as a hang.
TEST(LiveDisaggReplayTest, SwappedRolesAreRejectedNotHung) {
  Workers ws(1, 1, {.role = Role::Decode}, {.role = Role::Prefill});
  const LiveRun run = runLive(smallTrace(2), ws.options());
  EXPECT_EQ(run.collector.buildReport({}).rejected_requests, 2u);
  EXPECT_EQ(run.stats.handoff->handoffs, 0u);
}

TEST(LiveDisaggReplayTest, OptionErrorsNameTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--connect-prefill", "tcp://127.0.0.1:5555"}, "need the decode servers"},
      {{"--connect-decode", "tcp://127.0.0.1:5555"}, "need the prefill servers"},
      {{"--connect-prefill", "tcp://127.0.0.1:5555", "--connect", "tcp://127.0.0.1:6000",
        "--connect-decode", "tcp://127.0.0.1:7000"},
       "replace --connect"},
      {{"--connect-prefill", "tcp://127.0.0.1:5555", "--connect-decode", "tcp://127.0.0.1:7000",
        "--connect-decode-cancel", "tcp://127.0.0.1:1", "--connect-decode-cancel",
        "tcp://127.0.0.1:2"},
       "--connect-decode-cancel: give one per --connect-decode"},
      {{"--connect-prefill", "tcp://127.0.0.1:5555", "--connect-decode", "ipc:///tmp/x"},
       "--connect-decode: cannot derive the cancel endpoint"},
      {{"--connect", "tcp://127.0.0.1:5555", "--decode-router", "kv"},
       "--decode-router needs decode servers"},
      {{"--decode-router", "kv"}, "--decode-router needs --num-prefill-workers"},
      {{"--connect-prefill", "tcp://127.0.0.1:5555", "--decode-fleet", "/nonexistent/fleet"},
       "--decode-fleet: "},
      {{"--mode", "offline", "--connect-prefill", "tcp://127.0.0.1:5555", "--connect-decode",
        "tcp://127.0.0.1:7000"},
       "are for --mode live"},
  };
  for (const auto& [flags, needle] : cases) {
    std::vector<std::string> args{"mocker", "replay",
                                  testing::sourceDir() + "/tests/data/tiny_trace.jsonl"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::ostringstream out, err;
    EXPECT_EQ(tools::runCli(args, out, err), 2) << flags.front();
    EXPECT_NE(err.str().find(needle), std::string::npos) << err.str();
  }
}

// `mocker replay --connect-prefill … --connect-decode …` end to end: the footer names both
// fleets and the handoff figures, the JSON report carries the handoff section and the identity
// both routers.
TEST(LiveDisaggReplayCliTest, ReplaysThroughPrefillAndDecodeServers) {
  Workers ws(2, 1);
  char tmpl[] = "/tmp/mocker_live_disagg_cliXXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::filesystem::path dir(tmpl);
  const std::string json = (dir / "r.json").string();
  std::vector<std::string> args{"mocker",
                                "replay",
                                testing::sourceDir() + "/tests/data/tiny_trace.jsonl",
                                "--arrival-speedup-ratio",
                                "10",
                                "--report-json",
                                json,
                                "--no-progress",
                                "--decode-router",
                                "kv"};
  for (const auto& p : ws.prefill) {
    args.insert(args.end(), {"--connect-prefill", p->target().submit_endpoint, "--connect-cancel",
                             p->target().cancel_endpoint});
  }
  for (const auto& d : ws.decode) {
    args.insert(args.end(), {"--connect-decode", d->target().submit_endpoint,
                             "--connect-decode-cancel", d->target().cancel_endpoint});
  }
  std::ostringstream out, err;
  EXPECT_EQ(tools::runCli(args, out, err), 0) << err.str();
  const std::string text = out.str();
  EXPECT_NE(text.find("Live disaggregated: 2 prefill + 1 decode server(s); requests per prefill "
                      "server (round_robin): 4 4; handoffs per decode server (kv): 8"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Live handoff: handoff received - dispatch (ms, n 8)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("Live timing: prefill server 1 reports no pass timing"), std::string::npos)
      << text;
  EXPECT_NE(text.find("Live timing: decode server 0 reports no pass timing"), std::string::npos)
      << text;
  std::ifstream in(json);
  const nlohmann::json report = nlohmann::json::parse(in);
  EXPECT_EQ(report["num_requests"], 8);
  EXPECT_EQ(report["completed_requests"], 8);
  EXPECT_EQ(report["handoffs"], 8);
  EXPECT_EQ(report["handoff_activations"], 8);
  EXPECT_EQ(report["handoffs_refused"], 0);
  EXPECT_EQ(report["identity"]["num_workers"], 3);
  EXPECT_EQ(report["identity"]["router"], "round_robin (prefill), kv (decode)");
  std::filesystem::remove_all(dir);
}

// --prefill-fleet / --decode-fleet: the servers come from fleet files (every worker's submit and
// cancel endpoints), two of each.
TEST(LiveDisaggReplayCliTest, FleetFilesNameBothSides) {
  Workers ws(2, 2);
  char tmpl[] = "/tmp/mocker_live_disagg_fleetXXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::filesystem::path dir(tmpl);
  const auto writeFleet = [&dir](const std::string& name,
                                 const std::vector<std::unique_ptr<ScriptedWorker>>& workers) {
    service::FleetManifest m{
        .mocker_version = "test", .model_name = "m", .engine_type = "vllm", .block_size = 16};
    for (std::size_t i = 0; i < workers.size(); ++i) {
      m.workers.push_back({.worker_id = i,
                           .submit = workers[i]->target().submit_endpoint,
                           .cancel = workers[i]->target().cancel_endpoint,
                           .ranks = {service::FleetManifest::Rank{}}});
    }
    const std::string path = (dir / name).string();
    EXPECT_TRUE(service::writeFileAtomically(path, service::fleetManifestJson(m)).has_value());
    return path;
  };
  const std::string prefill = writeFleet("prefill.json", ws.prefill);
  const std::string decode = writeFleet("decode.json", ws.decode);
  std::ostringstream out, err;
  EXPECT_EQ(
      tools::runCli({"mocker", "replay", testing::sourceDir() + "/tests/data/tiny_trace.jsonl",
                     "--arrival-speedup-ratio", "10", "--no-progress", "--prefill-fleet", prefill,
                     "--decode-fleet", decode},
                    out, err),
      0)
      << err.str();
  EXPECT_NE(out.str().find("Live disaggregated: 2 prefill + 2 decode server(s); requests per "
                           "prefill server (round_robin): 4 4; handoffs per decode server "
                           "(round_robin): 4 4; max in flight"),
            std::string::npos)
      << out.str();
  for (const auto& w : ws.decode) EXPECT_EQ(w->submits().size(), 4u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mocker::replay
