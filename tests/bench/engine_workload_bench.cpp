// engine_workload_bench — the engine's end-to-end figure on a Mooncake-shaped workload.
//
//   engine_workload_bench [TRACE.jsonl] [--repeat K] [--engine-type T] [--block-size B]
//                                                       simulate the trace (default: the shipped
//                                                       mooncake synthetic trace, vllm), print
//                                                       figures and a digest of every KV event
//   engine_workload_bench --waiting N [--tokens T]     queue N requests of T tokens (default
//                                                       100000 × 1000), print RSS and one pass
//
// Times the simulation only (parsing and prompt synthesis are excluded and reported apart).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

#include "engine/offline_driver.h"
#include "tools/replay/mooncake_trace.h"

namespace {

using namespace mocker;
using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Order-sensitive digest of the KV events: kind, hashes, parent, tokens and block size, so two
// builds' event streams can be compared (equal digests) without storing them.
struct EventDigest {
  std::uint64_t value = 0xcbf29ce484222325ull;
  void add(std::uint64_t v) {
    value ^= v;
    value *= 0x100000001b3ull;
    value ^= value >> 29;
  }
  void add(const engine::KvEvent& e) {
    add(e.index());
    if (const auto* s = std::get_if<engine::BlockStored>(&e)) {
      add(s->parent_block_hash.value_or(~std::uint64_t{0}));
      add(s->block_hashes.size());
      for (const std::uint64_t h : s->block_hashes) add(h);
      add(s->token_ids.size());
      for (const std::uint32_t t : s->token_ids) add(t);
      add(s->block_size);
    } else if (const auto* r = std::get_if<engine::BlockRemoved>(&e)) {
      add(r->block_hash);
    }
  }
};

long maxRssMiB() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024;
}

int runWaiting(std::uint32_t num_requests, std::uint32_t num_tokens) {
  engine::Engine engine(engine::EngineConfig{});
  const long rss_before = maxRssMiB();
  const auto t0 = Clock::now();
  for (std::uint32_t i = 0; i < num_requests; ++i) {
    std::vector<std::uint32_t> tokens(num_tokens);
    for (std::uint32_t t = 0; t < num_tokens; ++t) tokens[t] = i * 7919u + t;
    if (!engine.submit({.tokens = std::move(tokens), .max_output_tokens = 16})) return 1;
  }
  const auto t1 = Clock::now();
  const engine::PassResult pass = engine.step(0, 0.0);
  const auto t2 = Clock::now();
  std::printf(
      "waiting_requests %u tokens_each %u submit_s %.3f first_pass_ms %.3f admitted %zu "
      "rss_before_MiB %ld max_rss_MiB %ld\n",
      num_requests, num_tokens, seconds(t0, t1), 1e3 * seconds(t1, t2), pass.admissions.size(),
      rss_before, maxRssMiB());
  return 0;
}

int runTrace(const std::string& path, int repeat, const engine::EngineConfig& config) {
  const auto t0 = Clock::now();
  auto workload = replay::loadMooncakeTrace(path, {});
  if (!workload) {
    std::fprintf(stderr, "%s\n", workload.error().toString().c_str());
    return 1;
  }
  for (int rep = 0; rep < repeat; ++rep) {
    std::vector<engine::TimedArrival> arrivals;
    std::uint64_t input_tokens = 0;
    for (const auto& session : workload->sessions) {
      for (const auto& turn : session.turns) {
        engine::TimedArrival a;
        a.arrival_ms = session.first_arrival_ms.value_or(0.0);
        a.request.tokens.reserve(std::size_t{turn.input_length} + turn.output_length);
        a.request.tokens = replay::synthesizePrompt(turn, workload->trace_block_size).tokens;
        a.request.max_output_tokens = std::max<std::uint32_t>(turn.output_length, 1);
        input_tokens += a.request.tokens.size();
        arrivals.push_back(std::move(a));
      }
    }
    const auto t1 = Clock::now();
    const std::clock_t c1 = std::clock();
    engine::Engine engine(config);
    engine::OfflineDriver driver(engine);
    for (auto& a : arrivals) driver.add(std::move(a));
    std::uint64_t events = 0, stored_blocks = 0;
    EventDigest digest;
    const std::uint64_t passes = driver.run([&](const engine::PassResult& p, auto&) {
      events += p.kv_events.size();
      for (const auto& e : p.kv_events) {
        digest.add(e);
        if (const auto* s = std::get_if<engine::BlockStored>(&e)) {
          stored_blocks += s->block_hashes.size();
        }
      }
    });
    const auto t2 = Clock::now();
    const double cpu_s = static_cast<double>(std::clock() - c1) / CLOCKS_PER_SEC;
    std::printf(
        "requests %zu input_tokens %llu passes %llu kv_events %llu stored_blocks %llu "
        "virtual_s %.1f load_s %.3f simulate_wall_s %.3f simulate_cpu_s %.3f "
        "simulated_requests_per_s %.0f max_rss_MiB %ld events_digest %016llx\n",
        driver.timelines().size(), static_cast<unsigned long long>(input_tokens),
        static_cast<unsigned long long>(passes), static_cast<unsigned long long>(events),
        static_cast<unsigned long long>(stored_blocks), driver.nowMs() / 1e3, seconds(t0, t1),
        seconds(t1, t2), cpu_s, static_cast<double>(driver.timelines().size()) / seconds(t1, t2),
        maxRssMiB(), static_cast<unsigned long long>(digest.value));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string trace = MOCKER_DEFAULT_TRACE;
  int repeat = 1;
  std::uint32_t waiting = 0, tokens = 1000;
  engine::EngineConfig config;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--repeat" && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
    } else if (arg == "--waiting" && i + 1 < argc) {
      waiting = static_cast<std::uint32_t>(std::atol(argv[++i]));
    } else if (arg == "--tokens" && i + 1 < argc) {
      tokens = static_cast<std::uint32_t>(std::atol(argv[++i]));
    } else if (arg == "--engine-type" && i + 1 < argc) {
      const std::string type = argv[++i];
      if (type == "vllm") {
        config.engine_type = engine::EngineType::Vllm;
      } else if (type == "sglang") {
        config.engine_type = engine::EngineType::Sglang;
      } else if (type == "trtllm") {
        config.engine_type = engine::EngineType::Trtllm;
      } else {
        std::fprintf(stderr, "--engine-type: vllm | sglang | trtllm, not '%s'\n", type.c_str());
        return 2;
      }
    } else if (arg == "--block-size" && i + 1 < argc) {
      config.block_size = static_cast<std::uint32_t>(std::atol(argv[++i]));
    } else if (arg == "-h" || arg == "--help") {
      std::printf(
          "usage: engine_workload_bench [TRACE.jsonl] [--repeat K] [--engine-type vllm|sglang|"
          "trtllm] [--block-size B] | --waiting N [--tokens T]\n");
      return 0;
    } else {
      trace = arg;
    }
  }
  return waiting > 0 ? runWaiting(waiting, tokens) : runTrace(trace, repeat, config);
}
