// Disaggregated prefill/decode in the engine (engine/README.md, "Disaggregated prefill/decode"):
// the prefill worker's hold / release / cancel / timeout lifecycle and its handoff delay, the
// decode worker's FIFO reservations, page rounding, resident-prefix reuse, blocked fresh
// admission and activation with the prompt already computed; plus a randomized two-worker soak.
// Expected values are worked out by hand from the rules (the timing figures are those of the
// single-request reference scenario: prefill of 8 tokens 16.6229144639296 ms, decode at u = 8/64
// 12.0890625 ms and at u = 12/64 14.961953125 ms). The scenarios run for every engine type
// (vllm, trtllm, sglang); where SGLang mode differs — its prefill worker charges decode time,
// a sampled token takes its KV slot at once, decode load is logical — the expectation says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "engine/engine.h"
#include "engine/timing_model.h"
#include "tests/engine/engine_harness.h"

namespace mocker::engine {
namespace {

using testing::Harness;
using testing::range;
using testing::specConfig;
using testing::storedEvents;

constexpr double kPrefill8 = 16.6229144639296;
constexpr double kDecodeU8 = 12.0890625;
constexpr double kDecodeU12 = 14.961953125;

EngineConfig workerConfig(WorkerType type, EngineType engine = EngineType::Vllm) {
  EngineConfig c = specConfig(engine);
  c.worker_type = type;
  c.kv_bytes_per_token = 1000000;
  c.kv_transfer_bandwidth_gbps = 1.0;
  return c;
}

class DisaggTest : public ::testing::TestWithParam<EngineType> {
 protected:
  bool sglang() const { return GetParam() == EngineType::Sglang; }
  EngineConfig worker(WorkerType type) const { return workerConfig(type, GetParam()); }
  /// The modelled decode time of one request of `len` tokens (u = len / pool tokens).
  static double decodeOne(std::uint64_t len, const EngineConfig& config) {
    const std::uint64_t total = std::uint64_t{effectiveNumGpuBlocks(config)} * 4;
    return TimingModel(config).decodeMs(1, len, len, total);
  }
};

/// A ticket as a prefill worker would produce it, ready at `ready_ms`.
HandoffTicket ticketFor(std::vector<std::uint32_t> prompt, std::uint32_t max_output,
                        double ready_ms = 0.0, std::uint64_t source = 1000) {
  HandoffTicket t;
  t.source_id = RequestId{source};
  t.tokens = std::move(prompt);
  t.max_output_tokens = max_output;
  t.block_size = 4;
  t.prefill_end_ms = 0.0;
  t.ready_ms = ready_ms;
  return t;
}

/// Runs a prefill worker until its only request has handed off; returns that pass.
PassResult prefillOne(Harness& h, std::vector<std::uint32_t> prompt, std::uint32_t max_output) {
  h.submit(std::move(prompt), max_output);
  for (int i = 0; i < 100 && h.engine().hasWork(); ++i) {
    const PassResult& p = h.step();
    if (!p.handoffs.empty()) return p;
  }
  ADD_FAILURE() << "no handoff";
  return {};
}

// Handoff delay: tokens · bytes / bandwidth. 8 tokens · 1e6 B at 1 GB/s = 8 ms after the
// prefill pass ends; 128 tokens = 128 ms. The prefill pass charges no decode time (SGLang mode:
// the usual decode time of its first token, Dynamo's difference), emits no signal, and the
// request's blocks stay active (held).
TEST_P(DisaggTest, HandoffDelayFromBytesAndBandwidth) {
  struct Case {
    std::uint32_t prompt;
    double transfer_ms;
  };
  for (const Case c : {Case{8, 8.0}, Case{128, 128.0}}) {
    EngineConfig config = worker(WorkerType::Prefill);
    config.num_gpu_blocks = 64;
    Harness h(config);
    const PassResult p = prefillOne(h, range(1, c.prompt), 5);
    ASSERT_EQ(p.handoffs.size(), 1u);
    const HandoffTicket& t = p.handoffs.front();
    EXPECT_TRUE(p.outputs.empty()) << "the prefill worker's token is internal";
    EXPECT_EQ(p.decode_ms, sglang() ? decodeOne(c.prompt, config) : 0.0);
    EXPECT_EQ(t.prefill_end_ms, p.end_ms);
    EXPECT_DOUBLE_EQ(t.transfer_ms, c.transfer_ms);
    EXPECT_DOUBLE_EQ(t.ready_ms - t.prefill_end_ms, c.transfer_ms);
    EXPECT_EQ(t.max_output_tokens, 5u) << "the requested output travels in the ticket";
    EXPECT_EQ(t.tokens, range(1, c.prompt));
    EXPECT_EQ(t.block_size, 4u);
    EXPECT_EQ(p.load.active_blocks, c.prompt / 4) << "held blocks stay active";
    EXPECT_EQ(p.load.held_requests, 1u);
    EXPECT_FALSE(h.engine().hasWork());
  }
  // The 8-token prefill is the reference prefill time, with no decode part (SGLang: plus the
  // decode at u = 8/64).
  Harness h(worker(WorkerType::Prefill));
  EXPECT_DOUBLE_EQ(prefillOne(h, range(1, 8), 3).end_ms, kPrefill8 + (sglang() ? kDecodeU8 : 0.0));
  // speedup_ratio divides the transfer time like any modelled time.
  EngineConfig fast = worker(WorkerType::Prefill);
  fast.speedup_ratio = 2.0;
  EXPECT_DOUBLE_EQ(kvTransferMs(fast, 8), 4.0);
}

// Destination rounding: a 10-token prompt at block size 4 reserves 3 blocks and transfers
// 12 tokens; with its first 4 tokens resident on the decode worker, 8 (and the resident block is
// claimed as a cache hit: it stays active — SGLang mode: its radix node is locked — so it cannot
// be evicted). missing_blocks charges the transfer for those 8 tokens only.
TEST_P(DisaggTest, DestinationRoundingAndResidentPrefix) {
  {
    Harness h(worker(WorkerType::Decode));
    const auto id = h.engine().submitHandoff(ticketFor(range(1, 10), 2), 0, 0.0);
    ASSERT_TRUE(id.has_value()) << id.error().message;
    EXPECT_EQ(h.engine().loadMetrics(0).active_blocks, 3u);
    const PassResult& p = h.step();
    ASSERT_EQ(p.activations.size(), 1u);
    EXPECT_EQ(p.activations[0].transferable_tokens, 12u);
    EXPECT_EQ(p.activations[0].resident_tokens, 0u);
    EXPECT_EQ(p.activations[0].source_id, RequestId{1000});
  }
  EngineConfig config = worker(WorkerType::Decode);
  config.kv_transfer_charge = KvTransferCharge::MissingBlocks;
  Harness h(config);
  // Make [1..4] resident: a plain request on the decode worker leaves its block cached.
  h.submit(testing::concat(range(1, 4), {77, 78}), 1);
  h.runUntilIdle();
  EXPECT_EQ(h.engine().loadMetrics(0).active_blocks, 0u);
  const double now = h.now();
  HandoffTicket t = ticketFor(range(1, 10), 2);
  t.prefill_end_ms = now;
  ASSERT_TRUE(h.engine().submitHandoff(t, 0, now).has_value());
  EXPECT_EQ(h.engine().loadMetrics(0).active_blocks, 3u);
  EXPECT_EQ(*h.engine().nextTimerMs(0), now + 8.0) << "8 transferable tokens at 1 ms each";
  h.advanceTo(now + 8.0);
  const PassResult& p = h.step();
  ASSERT_EQ(p.activations.size(), 1u);
  EXPECT_EQ(p.activations[0].transferable_tokens, 8u);
  EXPECT_EQ(p.activations[0].resident_tokens, 4u);
  EXPECT_EQ(p.activations[0].reserved_ms, now);
  EXPECT_DOUBLE_EQ(p.activations[0].ready_ms, now + 8.0);
  ASSERT_EQ(p.admissions.size(), 1u);
  EXPECT_EQ(p.admissions[0].reused_input_tokens, 4u);
  // Only the transferred full block becomes newly visible: Stored [s_1] with parent s_0.
  const auto stored = storedEvents(p);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].block_hashes.size(), 1u);
  EXPECT_TRUE(stored[0].parent_block_hash.has_value());
  EXPECT_EQ(stored[0].token_ids, range(5, 8));
}

// Activation: the request enters with num_computed = prompt, so its first decode pass computes no
// prompt token (prefill_ms 0) and emits output token 0; from then on it decodes as usual.
// End to end with a prefill worker: TTFT = prefill 16.62… + transfer 8 + decode 12.09….
TEST_P(DisaggTest, TwoHopTimelineOfOneRequest) {
  Harness pre(worker(WorkerType::Prefill));
  Harness dec(worker(WorkerType::Decode));
  const PassResult handoff = prefillOne(pre, range(1, 8), 3);
  ASSERT_EQ(handoff.handoffs.size(), 1u);
  const HandoffTicket& t = handoff.handoffs[0];
  // SGLang: the prefill worker's pass also charges its first token's decode time.
  const double prefill_end = kPrefill8 + (sglang() ? kDecodeU8 : 0.0);
  EXPECT_DOUBLE_EQ(t.prefill_end_ms, prefill_end);
  EXPECT_DOUBLE_EQ(t.ready_ms, prefill_end + 8.0);

  dec.advanceTo(t.prefill_end_ms);
  const auto id = dec.engine().submitHandoff(t, 0, t.prefill_end_ms);
  ASSERT_TRUE(id.has_value());
  EXPECT_FALSE(dec.engine().hasWork()) << "reserved, waiting for the transfer";
  EXPECT_FALSE(dec.step().did_work);
  ASSERT_TRUE(dec.engine().nextTimerMs(0).has_value());
  EXPECT_DOUBLE_EQ(*dec.engine().nextTimerMs(0), prefill_end + 8.0);
  dec.advanceTo(*dec.engine().nextTimerMs(0));

  const PassResult& p1 = dec.step();
  ASSERT_EQ(p1.activations.size(), 1u);
  EXPECT_DOUBLE_EQ(p1.activations[0].activated_ms, prefill_end + 8.0);
  EXPECT_DOUBLE_EQ(p1.activations[0].reserved_ms, prefill_end);
  EXPECT_EQ(p1.prefill_ms, 0.0);
  EXPECT_EQ(p1.decode_ms, kDecodeU8);
  ASSERT_EQ(p1.outputs.size(), 1u);
  EXPECT_EQ(p1.outputs[0].index, 0u);
  EXPECT_DOUBLE_EQ(p1.outputs[0].time_ms, prefill_end + 8.0 + kDecodeU8);
  EXPECT_EQ(storedEvents(p1).size(), 1u) << "the transferred blocks become visible";
  ASSERT_EQ(p1.admissions.size(), 1u);
  EXPECT_EQ(p1.admissions[0].reused_input_tokens, 0u);
  const PassResult& p2 = dec.step();
  // vLLM/TRT-LLM: 3 physical blocks after the second token's block (u = 12/64); SGLang: the
  // logical 9 tokens (u = 9/64).
  EXPECT_EQ(p2.decode_ms, sglang() ? decodeOne(9, dec.engine().config()) : kDecodeU12);
  const PassResult& p3 = dec.step();
  ASSERT_EQ(p3.outputs.size(), 1u);
  EXPECT_EQ(p3.outputs[0].terminal, Terminal::Completed);
  EXPECT_EQ(p3.outputs[0].index, 2u);

  // The caller releases the source on activation: applied once, then noop.
  EXPECT_EQ(pre.engine().releaseHandoff(t.source_id), CancelResult::Applied);
  EXPECT_EQ(pre.engine().loadMetrics(0).active_blocks, 0u);
  EXPECT_EQ(pre.engine().cachedBlockHashes(0).size(), 2u) << "released blocks stay cached";
  EXPECT_EQ(pre.engine().releaseHandoff(t.source_id), CancelResult::Noop);
}

// Source lifecycle: release ⇒ applied, blocks inactive; a second release ⇒ noop; cancel of a
// held request ⇒ applied; cancel before completion ⇒ applied and no handoff ever; a hold not
// released within kv_hold_timeout_ms is released and counted as expired.
TEST_P(DisaggTest, SourceHoldReleaseCancelAndTimeout) {
  {
    Harness h(worker(WorkerType::Prefill));
    const PassResult p = prefillOne(h, range(1, 8), 3);
    const RequestId src = p.handoffs[0].source_id;
    EXPECT_EQ(h.engine().loadMetrics(0).active_blocks, 2u);
    EXPECT_EQ(h.engine().releaseHandoff(src), CancelResult::Applied);
    EXPECT_EQ(h.engine().loadMetrics(0).active_blocks, 0u);
    EXPECT_EQ(h.engine().cachedBlockHashes(0).size(), 2u);
    EXPECT_EQ(h.engine().releaseHandoff(src), CancelResult::Noop);
    EXPECT_EQ(h.engine().cancel(src), CancelResult::Noop);
    EXPECT_EQ(h.engine().releaseHandoff(RequestId{999}), CancelResult::Noop);
  }
  {
    Harness h(worker(WorkerType::Prefill));
    const RequestId src = prefillOne(h, range(1, 8), 3).handoffs[0].source_id;
    EXPECT_EQ(h.engine().cancel(src), CancelResult::Applied);
    EXPECT_EQ(h.engine().loadMetrics(0).active_blocks, 0u);
    EXPECT_EQ(h.engine().loadMetrics(0).held_requests, 0u);
    EXPECT_EQ(h.engine().releaseHandoff(src), CancelResult::Noop);
  }
  {
    EngineConfig config = worker(WorkerType::Prefill);
    config.max_num_batched_tokens = 4;  // the prompt takes two passes
    config.sglang.chunked_prefill_size = 4;
    Harness h(config);
    const RequestId id = h.submit(range(1, 8), 3);
    EXPECT_TRUE(h.step().handoffs.empty());
    EXPECT_EQ(h.engine().cancel(id), CancelResult::Applied);
    while (h.engine().hasWork()) EXPECT_TRUE(h.step().handoffs.empty());
    EXPECT_EQ(h.engine().loadMetrics(0).active_blocks, 0u);
    EXPECT_FALSE(h.engine().nextTimerMs(0).has_value());
  }
  {
    EngineConfig config = worker(WorkerType::Prefill);
    config.kv_hold_timeout_ms = 100.0;
    Harness h(config);
    const PassResult p = prefillOne(h, range(1, 8), 3);
    const RequestId src = p.handoffs[0].source_id;
    ASSERT_TRUE(h.engine().nextTimerMs(0).has_value());
    EXPECT_EQ(*h.engine().nextTimerMs(0), p.end_ms + 100.0);
    h.advanceTo(p.end_ms + 99.0);
    EXPECT_TRUE(h.step().expired_holds.empty());
    h.advanceTo(p.end_ms + 100.0);
    const PassResult& q = h.step();
    ASSERT_EQ(q.expired_holds.size(), 1u);
    EXPECT_EQ(q.expired_holds[0], src);
    EXPECT_EQ(q.load.handoff_expired, 1u);
    EXPECT_EQ(q.load.held_requests, 0u);
    EXPECT_EQ(q.load.active_blocks, 0u);
    EXPECT_EQ(h.engine().releaseHandoff(src), CancelResult::Noop) << "cleanup happens once";
    EXPECT_FALSE(h.engine().nextTimerMs(0).has_value());
  }
  {
    // null timeout: held until released, however long.
    EngineConfig config = worker(WorkerType::Prefill);
    config.kv_hold_timeout_ms.reset();
    Harness h(config);
    const RequestId src = prefillOne(h, range(1, 8), 3).handoffs[0].source_id;
    EXPECT_FALSE(h.engine().nextTimerMs(0).has_value());
    h.advanceTo(1e12);
    EXPECT_TRUE(h.step().expired_holds.empty());
    EXPECT_EQ(h.engine().releaseHandoff(src), CancelResult::Applied);
  }
}

// Blocked destination (N = 4 blocks): with the reservation head not fitting, no fresh request is
// admitted and a smaller handoff behind the head is not reserved (FIFO); cancelling the head
// reserves the next one at once and lets the fresh request in. A holds 2 blocks after its first
// pass (its first token dangles), 3 in SGLang mode (the sampled token takes its slot at once).
TEST_P(DisaggTest, BlockedReservationHeadBlocksFreshAdmission) {
  EngineConfig config = worker(WorkerType::Decode);
  config.num_gpu_blocks = 4;
  Harness h(config);
  Engine& e = h.engine();
  const RequestId a = h.submit(range(1, 8), 4);  // 2 blocks, then a third for its 9th token
  EXPECT_EQ(h.step().admissions.size(), 1u);
  const std::uint64_t a_blocks = sglang() ? 3 : 2;
  const auto h1 = e.submitHandoff(ticketFor(range(101, 112), 2, 0.0, 501), 0, h.now());
  ASSERT_TRUE(h1.has_value());                           // needs 3 blocks, 2 free: queued
  const RequestId fresh = h.submit(range(201, 204), 1);  // 1 block: would fit
  const auto h2 = e.submitHandoff(ticketFor(range(301, 303), 2, 0.0, 502), 0, h.now());
  ASSERT_TRUE(h2.has_value());  // fits, but behind the head
  EXPECT_EQ(e.loadMetrics(0).pending_handoffs, 2u);
  EXPECT_EQ(e.loadMetrics(0).active_blocks, a_blocks) << "nothing reserved behind the blocked head";
  for (int i = 0; i < 2; ++i) {
    const PassResult& p = h.step();
    EXPECT_TRUE(p.admissions.empty()) << "pass " << i;
    EXPECT_TRUE(p.activations.empty()) << "pass " << i;
    EXPECT_LE(p.load.active_blocks, 3u) << "a free block would have fit the fresh request";
  }
  EXPECT_EQ(e.cancel(*h1), CancelResult::Applied);
  EXPECT_EQ(e.loadMetrics(0).pending_handoffs, 1u) << "the next head is reserved at once";
  const PassResult& p = h.step();
  ASSERT_EQ(p.activations.size(), 1u);
  EXPECT_EQ(p.activations[0].id, *h2);
  // H2 took the last free block (A holds 3), so the fresh request gets in once A completes.
  // TRT-LLM reserves every admission to completion: A keeps 3 blocks reserved and H2 needs a second
  // block for its output, so H2 is admitted only after A completes, together with the fresh one.
  const bool trtllm = GetParam() == EngineType::Trtllm;
  std::vector<RequestId> admitted;
  for (const Admission& x : p.admissions) admitted.push_back(x.id);
  EXPECT_EQ(admitted, trtllm ? std::vector<RequestId>{} : std::vector<RequestId>{*h2});
  ASSERT_EQ(h.signalsOf(a).back().terminal, Terminal::Completed);
  const PassResult& q = h.step();
  admitted.clear();
  for (const Admission& x : q.admissions) admitted.push_back(x.id);
  const std::vector<RequestId> then =
      trtllm ? std::vector<RequestId>{*h2, fresh} : std::vector<RequestId>{fresh};
  EXPECT_EQ(admitted, then);
  h.runUntilIdle();
  EXPECT_EQ(h.signalsOf(fresh).back().terminal, Terminal::Completed);
  EXPECT_EQ(h.signalsOf(*h2).size(), 2u);
  EXPECT_EQ(e.loadMetrics(0).active_blocks, 0u);
}

// Cancelling queued, reserved and activated handoffs releases what they hold.
TEST_P(DisaggTest, CancelHandoffInEveryState) {
  Harness h(worker(WorkerType::Decode));
  Engine& e = h.engine();
  const auto reserved = e.submitHandoff(ticketFor(range(1, 8), 2, 50.0), 0, 0.0);
  ASSERT_TRUE(reserved.has_value());
  EXPECT_EQ(e.loadMetrics(0).active_blocks, 2u);
  EXPECT_EQ(e.cancel(*reserved), CancelResult::Applied);
  EXPECT_EQ(e.loadMetrics(0).active_blocks, 0u);
  EXPECT_EQ(e.cancel(*reserved), CancelResult::Noop);
  EXPECT_FALSE(e.nextTimerMs(0).has_value());

  EngineConfig one_seq = worker(WorkerType::Decode);
  one_seq.max_num_seqs = 1;
  Harness g(one_seq);
  const auto x = g.engine().submitHandoff(ticketFor(range(1, 8), 3), 0, 0.0);
  const auto y = g.engine().submitHandoff(ticketFor(range(11, 18), 3, 0.0, 1001), 0, 0.0);
  const PassResult& p = g.step();
  EXPECT_EQ(p.activations.size(), 2u);
  ASSERT_EQ(p.admissions.size(), 1u) << "max_num_seqs 1: the second waits activated";
  EXPECT_EQ(p.admissions[0].id, *x);
  EXPECT_EQ(g.engine().loadMetrics(0).waiting_requests, 1u);
  EXPECT_EQ(g.engine().cancel(*y), CancelResult::Applied);
  g.runUntilIdle();
  EXPECT_EQ(g.engine().loadMetrics(0).active_blocks, 0u);
  EXPECT_TRUE(g.signalsOf(*y).empty());
}

// Live decode worker: a handoff submitted with its ready time unknown (+infinity) is reported
// once reserved (with its transferable tokens), is no timer, never activates by itself, and
// activates in the first pass at or after handoffReady's time. A cancelled reservation is not
// reported; handoffReady is Noop for it, for an unknown id and a second time.
TEST_P(DisaggTest, UnknownReadyTimeWaitsForHandoffReady) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  EngineConfig config = worker(WorkerType::Decode);
  config.kv_transfer_charge = KvTransferCharge::MissingBlocks;
  Harness h(config);
  Engine& e = h.engine();
  // A resident prefix of one block: a plain request on the decode worker leaves it cached.
  const RequestId warm = h.submit(testing::concat(range(1, 4), {77, 78}), 1);
  h.runUntilIdle();
  ASSERT_EQ(h.signalsOf(warm).back().terminal, Terminal::Completed);
  const auto id = e.submitHandoff(ticketFor(range(1, 10), 3, kInf), 0, h.now());
  ASSERT_TRUE(id.has_value()) << id.error().toString();
  const std::vector<HandoffReservation> got = e.takeReservations();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, *id);
  EXPECT_EQ(got[0].dp_rank, 0u);
  EXPECT_EQ(got[0].prompt_tokens, 10u);
  EXPECT_EQ(got[0].resident_tokens, 4u) << "block [1..4] is cached here";
  EXPECT_EQ(got[0].transferable_tokens, 8u) << "two fresh blocks of 4";
  EXPECT_TRUE(e.takeReservations().empty()) << "taken once";
  EXPECT_FALSE(e.nextTimerMs(0).has_value()) << "an unknown ready time is no timer";
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(h.step().activations.empty());
  EXPECT_EQ(e.loadMetrics(0).pending_handoffs, 1u);
  const double ready = h.now() + 5.0;
  EXPECT_EQ(e.handoffReady(*id, ready), CancelResult::Applied);
  EXPECT_EQ(e.handoffReady(*id, ready), CancelResult::Noop) << "applied once";
  EXPECT_EQ(e.handoffReady(RequestId{999}, ready), CancelResult::Noop);
  ASSERT_TRUE(e.nextTimerMs(0).has_value());
  EXPECT_DOUBLE_EQ(*e.nextTimerMs(0), ready);
  EXPECT_TRUE(e.step(0, ready - 1.0).activations.empty());
  const PassResult p = e.step(0, ready);
  ASSERT_EQ(p.activations.size(), 1u);
  EXPECT_DOUBLE_EQ(p.activations[0].ready_ms, ready);
  ASSERT_EQ(p.admissions.size(), 1u);
  ASSERT_EQ(p.outputs.size(), 1u) << "token 0 sampled in the activating pass";
  EXPECT_EQ(p.outputs[0].id, *id);

  // Cancelled before it was taken: not reported, and nothing to make ready.
  const auto gone = e.submitHandoff(ticketFor(range(21, 30), 2, kInf, 1001), 0, p.end_ms);
  ASSERT_TRUE(gone.has_value());
  EXPECT_EQ(e.cancel(*gone), CancelResult::Applied);
  EXPECT_TRUE(e.takeReservations().empty());
  EXPECT_EQ(e.handoffReady(*gone, p.end_ms), CancelResult::Noop);
  // A finite ready time is not reported (offline replays never drain reservations).
  ASSERT_TRUE(e.submitHandoff(ticketFor(range(31, 34), 2, 1.0, 1002), 0, p.end_ms).has_value());
  EXPECT_TRUE(e.takeReservations().empty());
  // NaN and -infinity are still refused.
  EXPECT_FALSE(e.submitHandoff(ticketFor(range(41, 44), 2, std::nan(""), 1003), 0, 0.0));
  EXPECT_FALSE(e.submitHandoff(ticketFor(range(41, 44), 2, -kInf, 1004), 0, 0.0));
  EXPECT_TRUE(e.checkInvariantsForTest(0).has_value());
}

// Refusals: a handoff to a non-decode worker, with another block size, an out-of-range rank, or a
// prompt at the effective limit; config ranges.
TEST_P(DisaggTest, RefusalsAndConfigRanges) {
  Engine agg(specConfig(GetParam()));
  EXPECT_FALSE(agg.submitHandoff(ticketFor(range(1, 8), 2), 0, 0.0).has_value());
  Engine dec(worker(WorkerType::Decode));
  HandoffTicket other = ticketFor(range(1, 8), 2);
  other.block_size = 16;
  const auto r = dec.submitHandoff(other, 0, 0.0);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("block_size 16"), std::string::npos) << r.error().message;
  EXPECT_FALSE(dec.submitHandoff(ticketFor(range(1, 8), 2), 1, 0.0).has_value());
  EXPECT_FALSE(dec.submitHandoff(ticketFor({}, 2), 0, 0.0).has_value());

  // SGLang's effective limit is (N − 1)·B + 1 = 61 tokens; vLLM's N·B = 64.
  const std::uint32_t limit = sglang() ? 61 : 64;
  const auto at_limit = dec.submitHandoff(ticketFor(range(1, limit), 2), 0, 0.0);
  ASSERT_FALSE(at_limit.has_value());
  EXPECT_NE(at_limit.error().message.find("kv capacity limit (" + std::to_string(limit)),
            std::string::npos)
      << at_limit.error().message;
  EXPECT_TRUE(dec.submitHandoff(ticketFor(range(1, limit - 1), 2), 0, 0.0).has_value());
  EngineConfig c = worker(WorkerType::Prefill);
  EXPECT_TRUE(validateEngineConfig(c).has_value()) << "every engine type has both worker types";
  c.kv_bytes_per_token = 0;
  EXPECT_FALSE(validateEngineConfig(c).has_value());
  c = specConfig();
  c.kv_transfer_bandwidth_gbps = 0.0;
  EXPECT_FALSE(validateEngineConfig(c).has_value());
  c = specConfig();
  c.kv_hold_timeout_ms = -1.0;
  EXPECT_FALSE(validateEngineConfig(c).has_value());
  EXPECT_EQ(*parseWorkerType("Decode"), WorkerType::Decode);
  EXPECT_EQ(*parseKvTransferCharge("missing_blocks"), KvTransferCharge::MissingBlocks);
  EXPECT_FALSE(parseWorkerType("both").has_value());
}

// TRT-LLM decode worker (N = 4 blocks): A (8-token prompt, 4 outputs) was admitted with 3 blocks
// to completion and holds 2; an 8-token handoff needs 2 blocks, and 2 are free, but one of them is
// A's — the reservation waits until A completes, so A never stalls (vLLM reserves at once and
// preempts if it must). Activation then admits the handoff only when its prompt + output fit.
TEST(DisaggTrtllmTest, ReservationLeavesRunningRequestsTheirBlocksToCompletion) {
  for (const EngineType type : {EngineType::Trtllm, EngineType::Vllm}) {
    EngineConfig config = workerConfig(WorkerType::Decode, type);
    config.num_gpu_blocks = 4;
    Harness h(config);
    Engine& e = h.engine();
    const RequestId a = h.submit(range(1, 8), 4);
    EXPECT_EQ(h.step().admissions.size(), 1u);
    EXPECT_EQ(e.loadMetrics(0).active_blocks, 2u);
    const auto id = e.submitHandoff(ticketFor(range(101, 108), 2), 0, h.now());
    ASSERT_TRUE(id.has_value());
    const bool trtllm = type == EngineType::Trtllm;
    EXPECT_EQ(e.loadMetrics(0).pending_handoffs, 1u);
    EXPECT_EQ(e.loadMetrics(0).active_blocks, trtllm ? 2u : 4u) << toString(type);
    // Until idle, waking up for the activation (trtllm: reserved when A completes).
    for (int i = 0; i < 100 && (e.hasWork() || e.nextTimerMs(0)); ++i) {
      if (!e.hasWork()) h.advanceTo(*e.nextTimerMs(0));
      h.step();
    }
    EXPECT_EQ(h.signalsOf(a).size(), 4u) << toString(type);
    EXPECT_EQ(h.signalsOf(a).back().terminal, Terminal::Completed);
    EXPECT_EQ(h.signalsOf(*id).size(), 2u) << toString(type);
    const LoadMetrics m = e.loadMetrics(0);
    EXPECT_EQ(m.preemptions_total, trtllm ? 0u : 1u) << toString(type);
    EXPECT_EQ(m.active_blocks, 0u);
  }
}

// SGLang mode, our rule: a lone decoding request that cannot grow because a reserved handoff pins
// the rest of the pool is retracted (vLLM would preempt it); the handoff activates at its ready
// time and both complete, leaving no page active.
TEST(DisaggSglangTest, LoneRequestRetractedWhenAHandoffPinsThePool) {
  EngineConfig config = workerConfig(WorkerType::Decode, EngineType::Sglang);
  config.num_gpu_blocks = 4;
  Harness h(config);
  Engine& e = h.engine();
  const RequestId r = h.submit(range(1, 7), 5);  // 7 + token 0 = 2 full pages
  EXPECT_EQ(h.step().admissions.size(), 1u);
  const auto id = e.submitHandoff(ticketFor(range(101, 108), 2, 1000.0), 0, h.now());
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(e.loadMetrics(0).active_blocks, 4u) << "reserved at once: the pool is full";
  const PassResult& p = h.step();
  EXPECT_TRUE(p.outputs.empty()) << "the 9th token needs a third page";
  EXPECT_EQ(p.load.preemptions_total, 1u);
  EXPECT_EQ(e.loadMetrics(0).active_blocks, 2u) << "only the reservation holds pages";
  EXPECT_FALSE(h.step().did_work) << "the retracted request does not fit beside the reservation";
  h.advanceTo(*e.nextTimerMs(0));
  h.runUntilIdle();
  EXPECT_EQ(h.signalsOf(r).back().terminal, Terminal::Completed);
  EXPECT_EQ(h.signalsOf(*id).size(), 2u);
  EXPECT_EQ(h.signalsOf(*id).back().terminal, Terminal::Completed);
  EXPECT_EQ(e.loadMetrics(0).active_blocks, 0u);
}

// SGLang mode: a queued reservation blocks a fresh request that SGLang's own budgets would admit
// (N = 8 pages: A holds 3, the 24-token handoff needs 6 of the 5 free); once A completes, the
// handoff is reserved at the pass end, then activated and admitted ahead of the fresh request.
TEST(DisaggSglangTest, QueuedReservationBlocksFreshAdmission) {
  EngineConfig config = workerConfig(WorkerType::Decode, EngineType::Sglang);
  config.num_gpu_blocks = 8;
  Harness h(config);
  Engine& e = h.engine();
  const RequestId a = h.submit(range(1, 8), 2);
  EXPECT_EQ(h.step().admissions.size(), 1u);
  const auto h1 = e.submitHandoff(ticketFor(range(101, 124), 2), 0, h.now());
  ASSERT_TRUE(h1.has_value());
  EXPECT_EQ(e.loadMetrics(0).pending_handoffs, 1u);
  EXPECT_EQ(e.loadMetrics(0).active_blocks, 3u);
  const RequestId fresh = h.submit(range(201, 204), 1);
  const PassResult& p = h.step();
  EXPECT_TRUE(p.admissions.empty()) << "the fresh request fits but the reservation is queued";
  ASSERT_EQ(h.signalsOf(a).back().terminal, Terminal::Completed);
  EXPECT_EQ(p.load.active_blocks, 6u) << "reserved at the end of the pass that freed A's pages";
  const PassResult& q = h.step();
  std::vector<RequestId> admitted;
  for (const Admission& x : q.admissions) admitted.push_back(x.id);
  EXPECT_EQ(admitted, (std::vector<RequestId>{*h1, fresh}));
  h.runUntilIdle();
  EXPECT_EQ(e.loadMetrics(0).active_blocks, 0u);
}

// A cancel frees pages, the queued reservation takes them by evicting cached pages (its Removed
// events go out with the next pass), and that next pass has nothing else to do (the handoff's KV
// is still in flight): it did work. With KV events off no event is built, and it still did.
TEST_P(DisaggTest, PassWhoseOnlyWorkIsAReservationsEvictionDidWorkWithEventsOff) {
  for (const bool events : {true, false}) {
    SCOPED_TRACE(events ? "events on" : "events off");
    EngineConfig config = worker(WorkerType::Decode);
    config.num_gpu_blocks = 8;
    Harness h(config);
    Engine& e = h.engine();
    e.setKvEvents(events);
    h.submit(range(1, 12), 1);  // 3 pages, cached and unlocked once it completes
    h.runUntilIdle();
    const RequestId a = h.submit(range(301, 316), 20);  // 4 prompt pages + its first token's
    h.step();
    const auto ticket = e.submitHandoff(ticketFor(range(101, 120), 2, 1e6), 0, h.now());
    ASSERT_TRUE(ticket.has_value());
    ASSERT_EQ(e.loadMetrics(0).pending_handoffs, 1u) << "the reservation waits for 5 pages";
    ASSERT_EQ(e.cancel(a), CancelResult::Applied);  // frees A's pages: the reservation evicts
    const PassResult& p = h.step();
    EXPECT_TRUE(p.admissions.empty());
    EXPECT_TRUE(p.outputs.empty());
    EXPECT_TRUE(p.activations.empty());
    EXPECT_TRUE(p.did_work);
    EXPECT_EQ(testing::removedHashes(p).empty(), !events);
  }
}

// Randomized soak over one prefill and one decode worker (every engine type, small pools, chunked
// prefill, random cancels on both sides, some sources never released so their holds time out):
// invariants after every pass, every request ends, no block leaks, every hold is released by its
// timeout, and reservations follow submission order (FIFO). For trtllm the per-pass invariants
// include "active blocks + every running request's blocks to completion <= N": no running request
// can ever stall on either worker.
class DisaggSoakTest : public ::testing::TestWithParam<EngineType> {};

// One pass of the soak as it is observable without KV events.
struct SoakPass {
  bool decode;
  bool did_work;
  double start_ms;
  double end_ms;
  std::vector<OutputSignal> outputs;
  std::size_t handoffs;
  std::size_t activations;
  friend bool operator==(const SoakPass&, const SoakPass&) = default;
};

// The soak with both workers' KV events on or off; returns every pass.
std::vector<SoakPass> runSoak(EngineType type, std::uint64_t seed, bool kv_events);

TEST_P(DisaggSoakTest, NoLeaksHoldsExpireReservationsFifo) {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    const std::vector<SoakPass> with = runSoak(GetParam(), seed, true);
    // KV events off (offline replay without a KV router) changes no pass, in particular not
    // did_work of a decode worker's pass whose only work was evicting for a reservation.
    EXPECT_EQ(with, runSoak(GetParam(), seed, false)) << "seed " << seed;
  }
}

std::vector<SoakPass> runSoak(EngineType type, std::uint64_t seed, bool kv_events) {
  std::vector<SoakPass> trace;
  {
    std::mt19937_64 rng(seed);
    EngineConfig pc = workerConfig(WorkerType::Prefill, type);
    pc.sglang.chunked_prefill_size = 24;
    pc.num_gpu_blocks = 40;
    pc.max_num_batched_tokens = 24;
    pc.kv_hold_timeout_ms = 400.0;
    pc.kv_bytes_per_token = 2000000;
    EngineConfig dc = pc;
    dc.worker_type = WorkerType::Decode;
    dc.num_gpu_blocks = 24;
    dc.kv_transfer_charge =
        seed == 2 ? KvTransferCharge::MissingBlocks : KvTransferCharge::FullPrompt;
    Harness pre(pc);
    Harness dec(dc);
    pre.engine().setKvEvents(kv_events);
    dec.engine().setKvEvents(kv_events);
    const auto record = [&](bool decode, const PassResult& p) {
      trace.push_back({decode, p.did_work, p.start_ms, p.end_ms, p.outputs, p.handoffs.size(),
                       p.activations.size()});
    };
    const int kRequests = 150;
    std::set<RequestId> pre_live;            // submitted to the prefill worker, not ended there
    std::map<RequestId, RequestId> dec_src;  // decode id → source id
    std::set<RequestId> dec_live;
    std::vector<RequestId> submit_order;      // decode ids in submission order
    std::map<RequestId, double> reserved_at;  // from activations
    std::set<RequestId> never_release;        // sources left to time out
    std::uint64_t expired = 0, handed_off = 0;
    int submitted = 0;
    double t_pre = 0.0, t_dec = 0.0;
    for (int iter = 0; iter < 200000; ++iter) {
      if (submitted < kRequests && rng() % 3 == 0) {
        const std::uint32_t len = 1 + static_cast<std::uint32_t>(rng() % 30);
        std::vector<std::uint32_t> prompt(len);
        const std::uint32_t family = static_cast<std::uint32_t>(rng() % 4);
        for (std::uint32_t i = 0; i < len; ++i)
          prompt[i] = i < 8 ? family * 100 + i : 1000 + static_cast<std::uint32_t>(rng() % 50);
        const auto id = pre.engine().submit(
            Request{.tokens = prompt, .max_output_tokens = static_cast<std::uint32_t>(rng() % 12)});
        if (id) pre_live.insert(*id);
        // Zero-output requests are refused without allow_empty_output: not submitted.
        ++submitted;
      }
      if (!pre_live.empty() && rng() % 40 == 0) {  // cancel on the prefill side (maybe held)
        auto it = pre_live.begin();
        std::advance(it, static_cast<long>(rng() % pre_live.size()));
        pre.engine().cancel(*it);
        pre_live.erase(it);
      }
      if (!dec_live.empty() && rng() % 50 == 0) {  // cancel on the decode side (any state)
        auto it = dec_live.begin();
        std::advance(it, static_cast<long>(rng() % dec_live.size()));
        if (dec.engine().cancel(*it) == CancelResult::Applied) {
          pre.engine().cancel(dec_src.at(*it));  // either way the source goes
          pre_live.erase(dec_src.at(*it));
        }
        dec_live.erase(it);
      }
      // Advance whichever worker is earlier (with pending timers it wakes on them).
      const auto next = [](Harness& h) {
        double t = h.engine().hasWork() ? h.now() : 1e300;
        if (const auto timer = h.engine().nextTimerMs(0))
          t = std::min(t, std::max(h.now(), *timer));
        return t;
      };
      t_pre = next(pre);
      t_dec = next(dec);
      if (t_pre >= 1e300 && t_dec >= 1e300) {
        if (submitted >= kRequests) break;
        continue;
      }
      if (t_pre <= t_dec) {
        pre.advanceTo(t_pre);
        const PassResult& p = pre.step();
        record(false, p);
        expired += p.expired_holds.size();
        for (RequestId x : p.expired_holds) pre_live.erase(x);
        for (const OutputSignal& s : p.outputs) {
          if (s.terminal != Terminal::None) pre_live.erase(s.id);
        }
        for (const HandoffTicket& t : p.handoffs) {
          ++handed_off;
          if (rng() % 10 == 0) never_release.insert(t.source_id);
          dec.advanceTo(t.prefill_end_ms);
          const auto id = dec.engine().submitHandoff(t, 0, dec.now());
          if (!id) {  // beyond the decode worker's limit
            pre.engine().cancel(t.source_id);
            pre_live.erase(t.source_id);
            continue;
          }
          dec_src[*id] = t.source_id;
          dec_live.insert(*id);
          submit_order.push_back(*id);
        }
      } else {
        dec.advanceTo(t_dec);
        const PassResult& p = dec.step();
        record(true, p);
        for (const HandoffActivation& a : p.activations) {
          reserved_at[a.id] = a.reserved_ms;
          EXPECT_GE(a.activated_ms, a.reserved_ms);
          EXPECT_GE(a.activated_ms, a.ready_ms);
          EXPECT_LE(a.activated_ms, p.start_ms);
          if (!never_release.contains(a.source_id)) {
            pre.engine().releaseHandoff(a.source_id);
            pre_live.erase(a.source_id);
          }
        }
        for (const OutputSignal& s : p.outputs) {
          if (s.terminal != Terminal::None) dec_live.erase(s.id);
        }
      }
    }
    EXPECT_EQ(submitted, kRequests);
    EXPECT_GT(handed_off, 50u) << "seed " << seed;
    EXPECT_TRUE(dec_live.empty()) << "seed " << seed << ": " << dec_live.size() << " never ended";
    // Holds left unreleased time out: the prefill worker ends with no active block.
    pre.advanceTo(pre.now() + 1000.0);
    expired += pre.step().expired_holds.size();
    for (Harness* h : {&pre, &dec}) {
      const LoadMetrics m = h->engine().loadMetrics(0);
      EXPECT_EQ(m.active_blocks, 0u) << "seed " << seed;
      EXPECT_EQ(m.held_requests, 0u);
      EXPECT_EQ(m.pending_handoffs, 0u);
      EXPECT_FALSE(h->engine().hasWork());
    }
    EXPECT_GT(expired, 0u) << "seed " << seed;
    EXPECT_EQ(pre.engine().loadMetrics(0).handoff_expired, expired);
    // FIFO: among activated handoffs, a later submission was never reserved earlier.
    double last = -1.0;
    for (RequestId id : submit_order) {
      const auto it = reserved_at.find(id);
      if (it == reserved_at.end()) continue;  // cancelled before activation
      EXPECT_GE(it->second, last) << "seed " << seed;
      last = it->second;
    }
  }
  return trace;
}

INSTANTIATE_TEST_SUITE_P(Engines, DisaggTest,
                         ::testing::Values(EngineType::Vllm, EngineType::Trtllm,
                                           EngineType::Sglang),
                         [](const auto& param_info) {
                           return std::string(toString(param_info.param));
                         });

INSTANTIATE_TEST_SUITE_P(Engines, DisaggSoakTest,
                         ::testing::Values(EngineType::Vllm, EngineType::Trtllm,
                                           EngineType::Sglang),
                         [](const auto& param_info) {
                           return std::string(toString(param_info.param));
                         });

}  // namespace
}  // namespace mocker::engine
