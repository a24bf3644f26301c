// index_bench: how many KV-event blocks per second `mocker index`'s subscriber logic
// (tools/index/index_service.h) decodes and applies, fed by a local PUB with pre-encoded batches.
//
//   index_bench [--batches N] [--blocks B] [--block-size S] [--layout p8|map] [--rate BLOCKS/S]
//               [--sndhwm H]
//
// Batches alternate: a Stored of B consecutive blocks (B × S real token ids) of chain k, then a
// batch of B single-hash Removed events for the same chain (as the engine emits them), so the
// index stays small and every hash is touched twice. --rate 0 (default) publishes as fast as the
// PUB accepts; otherwise it paces to that many blocks per second. Reports blocks/s published and
// applied, and whether any gap occurred (a gap means the subscriber fell behind the PUB's
// high-water mark and lost batches). Exit code 1 on a gap or if not everything was applied.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "protocol/framing.h"
#include "protocol/kv_events.h"
#include "tools/index/index_service.h"

using namespace mocker;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::uint64_t batches = 200000;
  std::uint32_t blocks = 16;
  std::uint32_t block_size = 16;
  std::string layout = "p8";
  double rate = 0;  // blocks/s, 0 = max
  int sndhwm = 100000;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (v == nullptr) return false;
    if (a == "--batches") {
      o.batches = std::strtoull(v, nullptr, 10);
    } else if (a == "--blocks") {
      o.blocks = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (a == "--block-size") {
      o.block_size = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (a == "--layout") {
      o.layout = v;
    } else if (a == "--rate") {
      o.rate = std::strtod(v, nullptr);
    } else if (a == "--sndhwm") {
      o.sndhwm = std::atoi(v);
    } else {
      return false;
    }
    ++i;
  }
  return o.batches >= 2 && o.blocks >= 1 && o.block_size >= 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: index_bench [--batches N>=2] [--blocks B] [--block-size S] "
                 "[--layout p8|map] [--rate BLOCKS/S] [--sndhwm H]\n");
    return 2;
  }
  auto layout = protocol::parseKvLayout(o.layout);
  if (!layout) {
    std::fprintf(stderr, "index_bench: %s\n", layout.error().message.c_str());
    return 2;
  }
  // Pre-encode a cycle of payloads: chains 0..kChains-1, each a Stored then its Removeds.
  constexpr std::uint32_t kChains = 512;
  std::vector<std::vector<std::byte>> payloads;
  std::size_t payload_bytes = 0;
  for (std::uint32_t k = 0; k < kChains; ++k) {
    protocol::BlockStoredEvent st;
    st.block_size = o.block_size;
    for (std::uint32_t b = 0; b < o.blocks; ++b) {
      st.block_hashes.push_back(0x9e3779b97f4a7c15ull * (std::uint64_t{k} * o.blocks + b + 1));
      for (std::uint32_t t = 0; t < o.block_size; ++t) st.token_ids.push_back(k * 1000 + b + t);
    }
    protocol::KvEventBatch stored;
    stored.ts = 1.0;
    stored.events.emplace_back(std::in_place_type<protocol::BlockStoredEvent>, std::move(st));
    const auto& stored_hashes = std::get<protocol::BlockStoredEvent>(stored.events[0]).block_hashes;
    protocol::KvEventBatch removed;
    removed.ts = 1.0;
    for (auto it = stored_hashes.rbegin(); it != stored_hashes.rend(); ++it) {
      protocol::BlockRemovedEvent rm;
      rm.block_hashes.push_back(*it);
      removed.events.emplace_back(std::in_place_type<protocol::BlockRemovedEvent>, std::move(rm));
    }
    payloads.push_back(protocol::encodeKvEventBatch(stored, {.layout = *layout}));
    payloads.push_back(protocol::encodeKvEventBatch(removed, {.layout = *layout}));
    payload_bytes += payloads[payloads.size() - 2].size() + payloads.back().size();
  }
  protocol::KvEventBatch empty_batch;
  empty_batch.ts = 1.0;
  const auto empty = protocol::encodeKvEventBatch(empty_batch);

  zmq::context_t context(1);
  zmq::socket_t pub(context, zmq::socket_type::pub);
  pub.set(zmq::sockopt::sndhwm, o.sndhwm);
  pub.set(zmq::sockopt::linger, 0);
  pub.bind("tcp://127.0.0.1:*");
  const std::string endpoint = pub.get(zmq::sockopt::last_endpoint);

  index::IndexServiceConfig config;
  config.workers = {{.worker_id = 1, .dp_rank = 0, .events = endpoint}};
  config.query_endpoint = "";
  config.replay_at_start = false;
  config.probe_interval = std::chrono::milliseconds(0);
  config.linger_ms = 0;
  auto service = index::IndexService::create(config);
  if (!service) {
    std::fprintf(stderr, "index_bench: %s\n", service.error().message.c_str());
    return 1;
  }
  std::thread runner([&] { (void)(*service)->run(); });

  const auto send = [&](std::uint64_t seq, const std::vector<std::byte>& payload) {
    const auto s = protocol::encodeSeqNo(seq);
    pub.send(zmq::message_t(), zmq::send_flags::sndmore);
    pub.send(zmq::buffer(s.data(), s.size()), zmq::send_flags::sndmore);
    pub.send(zmq::buffer(payload.data(), payload.size()), zmq::send_flags::none);
  };
  // Slow-joiner handshake: repeat the empty batch 0 until the subscriber has it.
  const auto join_deadline = Clock::now() + std::chrono::seconds(10);
  while ((*service)->stats().batches_applied == 0 && Clock::now() < join_deadline) {
    send(0, empty);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const index::IndexStats before = (*service)->stats();

  const std::uint64_t n = o.batches;
  const auto t0 = Clock::now();
  for (std::uint64_t i = 0; i < n; ++i) {
    if (o.rate > 0 && i % 64 == 0) {
      const double due_s = static_cast<double>(i) * o.blocks / o.rate;
      std::this_thread::sleep_until(
          t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(due_s)));
    }
    send(i + 1, payloads[i % payloads.size()]);
  }
  const auto t_published = Clock::now();
  // Wait until everything is applied, or no progress for 3 s.
  index::IndexStats s = (*service)->stats();
  std::uint64_t last_applied = s.batches_applied;
  auto last_progress = Clock::now();
  auto t_done = last_progress;  // when the last batch was applied
  while (s.batches_applied - before.batches_applied < n) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    s = (*service)->stats();
    if (s.batches_applied != last_applied) {
      last_applied = s.batches_applied;
      last_progress = Clock::now();
      t_done = last_progress;
    } else if (Clock::now() - last_progress > std::chrono::seconds(3)) {
      break;
    }
  }
  (*service)->requestStop();
  runner.join();

  const std::uint64_t applied = s.batches_applied - before.batches_applied;
  const std::uint64_t blocks = s.blocks_applied - before.blocks_applied;
  const double pub_s = std::chrono::duration<double>(t_published - t0).count();
  const double all_s = std::chrono::duration<double>(t_done - t0).count();
  const bool gap = s.gaps_detected != before.gaps_detected;
  std::printf("index_bench: layout %s, %llu batches of %u blocks (block size %u, avg %.0f B)\n",
              o.layout.c_str(), static_cast<unsigned long long>(n), o.blocks, o.block_size,
              static_cast<double>(payload_bytes) / static_cast<double>(payloads.size()));
  std::printf("  published %.0f blocks/s (%.3f s)%s\n", static_cast<double>(n) * o.blocks / pub_s,
              pub_s, o.rate > 0 ? " (paced)" : "");
  std::printf("  applied   %llu/%llu batches, %llu blocks in %.3f s = %.0f blocks/s\n",
              static_cast<unsigned long long>(applied), static_cast<unsigned long long>(n),
              static_cast<unsigned long long>(blocks), all_s, static_cast<double>(blocks) / all_s);
  std::printf("  gaps %llu, decode errors %llu, index now holds %llu blocks\n",
              static_cast<unsigned long long>(s.gaps_detected - before.gaps_detected),
              static_cast<unsigned long long>(s.decode_errors),
              static_cast<unsigned long long>(s.blocks_indexed));
  return gap || applied != n ? 1 : 0;
}
