// LoRA adapters (docs/engine.md, "LoRA adapters"): the per-pass adapter limit with hand-computed
// schedules (vLLM's rule: skipped, not preempted, and the requests behind still admitted), the
// adapter in the block hash (no prefix hit across adapters), resident adapters and their load
// time, hostile adapter names and config validation.
//
// Settings: vllm, block_size 4, 16 blocks, timing_model fixed (prefill 10 ms, decode 5 ms);
// lora_load_ms is 0 unless a test sets it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/block_hash.h"
#include "engine/engine.h"
#include "engine/lora.h"
#include "tests/engine/engine_harness.h"

namespace mocker::engine {
namespace {

using testing::Harness;
using testing::range;

EngineConfig loraConfig(std::uint32_t max_loras, double load_ms = 0.0) {
  EngineConfig c = testing::specConfig();
  c.timing_model = TimingModelKind::Fixed;
  c.fixed_prefill_ms = 10.0;
  c.fixed_decode_ms = 5.0;
  c.max_loras = max_loras;
  c.lora_load_ms = load_ms;
  return c;
}

RequestId submit(Harness& h, std::vector<std::uint32_t> tokens, std::uint32_t max_output,
                 std::optional<std::string> lora) {
  auto id = h.engine().submit(
      Request{.tokens = std::move(tokens), .max_output_tokens = max_output, .lora = lora});
  EXPECT_TRUE(id.has_value()) << (id ? "" : id.error().toString());
  return id ? *id : RequestId{};
}

std::vector<RequestId> admitted(const PassResult& p) {
  std::vector<RequestId> ids;
  for (const Admission& a : p.admissions) ids.push_back(a.id);
  return ids;
}

TEST(LoraUnitTest, BatchAdmitsItsAdaptersAndNewOnesWhileThereIsRoom) {
  LoraBatch b(2);
  EXPECT_TRUE(b.admits(0));
  b.add(7);
  b.add(0);  // no adapter: not counted
  b.add(7);
  EXPECT_TRUE(b.admits(9));
  b.add(9);
  EXPECT_TRUE(b.admits(7));
  EXPECT_TRUE(b.admits(0));
  EXPECT_FALSE(b.admits(3));
  EXPECT_EQ(std::vector<std::uint32_t>(b.ids().begin(), b.ids().end()),
            (std::vector<std::uint32_t>{7, 9}));
}

TEST(LoraUnitTest, ResidencyLoadsMissesAndEvictsTheLeastRecentlyUsedOutsideThePass) {
  LoraResidency r(2);
  const std::vector<std::uint32_t> p1{1}, p2{2}, p3{1}, p4{3}, p5{2, 3};
  EXPECT_EQ(r.use(p1), 1u);
  EXPECT_EQ(r.use(p2), 1u);
  EXPECT_EQ(r.use(p3), 0u);  // 1 becomes the most recent: LRU order 2, 1
  EXPECT_EQ(r.use(p4), 1u);  // evicts 2
  EXPECT_FALSE(r.resident(2));
  EXPECT_EQ(r.use(p5), 1u);  // 2 loads and evicts 1 (3 is in this pass)
  EXPECT_EQ(std::vector<std::uint32_t>(r.lru().begin(), r.lru().end()),
            (std::vector<std::uint32_t>{2, 3}));  // pass order: the last one used is 3
}

TEST(LoraUnitTest, RegistryInternsInOrderOfFirstUseAndRefusesHostileNames) {
  LoraRegistry reg;
  EXPECT_EQ(*reg.intern("A"), 1u);
  EXPECT_EQ(*reg.intern("B"), 2u);
  EXPECT_EQ(*reg.intern("A"), 1u);
  EXPECT_EQ(reg.name(2), "B");
  EXPECT_EQ(reg.intern("").error().message, "lora: an adapter name must not be empty");
  EXPECT_EQ(reg.intern(std::string(257, 'x')).error().message,
            "lora: an adapter name is at most 256 bytes (got 257)");
  EXPECT_TRUE(reg.intern(std::string(256, 'x')).has_value());
  EXPECT_EQ(reg.intern(std::string("a\nb")).error().message,
            "lora: control character 0x0a at byte 1 of the adapter name");
  EXPECT_EQ(reg.size(), 3u);
}

// A, B, A arrive together (prompt 4 tokens, 2 output tokens each: prompt + first token in one
// pass, the second token in the next).
//   max_loras 1: pass 1 admits A1 (set {A}), skips B, admits A2 behind it; pass 2 decodes A1 and
//                A2 (set {A}: B skipped again), both complete; pass 3 admits B.
//   max_loras 2: pass 1 admits all three.
TEST(LoraScheduleTest, MaxLorasOneSkipsTheOtherAdapterAndAdmitsTheRequestsBehindIt) {
  Harness h(loraConfig(1));
  const RequestId a1 = submit(h, range(1, 4), 2, "A");
  const RequestId b = submit(h, range(11, 14), 2, "B");
  const RequestId a2 = submit(h, range(21, 24), 2, "A");
  const RequestId base = submit(h, range(31, 34), 2, std::nullopt);
  const PassResult& p1 = h.step();
  EXPECT_EQ(admitted(p1), (std::vector<RequestId>{a1, a2, base}));
  EXPECT_EQ(p1.load.waiting_requests, 1u);  // B waits: skipped, not preempted
  EXPECT_EQ(p1.load.preemptions_total, 0u);
  const PassResult& p2 = h.step();
  EXPECT_TRUE(p2.admissions.empty());  // A1 and A2 are scheduled: the set {A} is full
  const PassResult& p3 = h.step();
  EXPECT_EQ(admitted(p3), (std::vector<RequestId>{b}));
  h.runUntilIdle();
  EXPECT_EQ(h.passes().back().load.preemptions_total, 0u);
}

TEST(LoraScheduleTest, MaxLorasTwoAdmitsBothAdaptersAndSkipsAThird) {
  Harness h(loraConfig(2));
  const RequestId a1 = submit(h, range(1, 4), 2, "A");
  const RequestId b = submit(h, range(11, 14), 2, "B");
  const RequestId a2 = submit(h, range(21, 24), 2, "A");
  const RequestId c = submit(h, range(31, 34), 2, "C");
  EXPECT_EQ(admitted(h.step()), (std::vector<RequestId>{a1, b, a2}));
  EXPECT_TRUE(h.step().admissions.empty());  // {A, B} scheduled: C skipped
  EXPECT_EQ(admitted(h.step()), (std::vector<RequestId>{c}));
  h.runUntilIdle();
}

TEST(LoraScheduleTest, ASkippedRequestKeepsItsPlaceAtTheFront) {
  // max_loras 1, max_num_seqs 2: A1 runs, B is skipped, A2 is admitted; when A1 and A2 finish
  // B is the head again and goes before C (also adapter B) and D (adapter A).
  EngineConfig c = loraConfig(1);
  c.max_num_seqs = 2;
  Harness h(c);
  const RequestId a1 = submit(h, range(1, 4), 2, "A");
  const RequestId b = submit(h, range(11, 14), 2, "B");
  const RequestId a2 = submit(h, range(21, 24), 2, "A");
  const RequestId c2 = submit(h, range(31, 34), 2, "B");
  const RequestId d = submit(h, range(41, 44), 2, "A");
  EXPECT_EQ(admitted(h.step()), (std::vector<RequestId>{a1, a2}));
  EXPECT_TRUE(h.step().admissions.empty());                        // max_num_seqs
  EXPECT_EQ(admitted(h.step()), (std::vector<RequestId>{b, c2}));  // D skipped for {B}
  h.step();
  EXPECT_EQ(admitted(h.step()), (std::vector<RequestId>{d}));
  h.runUntilIdle();
}

TEST(LoraPrefixTest, NoPrefixHitAcrossAdaptersAndTheSameAdapterShares) {
  Harness h(loraConfig(2));
  const auto prompt = range(1, 9);  // 2 full blocks + 1 token
  submit(h, prompt, 1, "A");
  h.runUntilIdle();
  const auto first_cached = [&](RequestId id) { return *h.signalsOf(id).front().cached_tokens; };
  const RequestId other = submit(h, prompt, 1, "B");
  h.runUntilIdle();
  EXPECT_EQ(first_cached(other), 0u);
  const RequestId none = submit(h, prompt, 1, std::nullopt);
  h.runUntilIdle();
  EXPECT_EQ(first_cached(none), 0u);
  const RequestId same = submit(h, prompt, 1, "A");
  h.runUntilIdle();
  EXPECT_EQ(first_cached(same), 8u);
  // The adapter's blocks chain from its key; the base model's are unchanged (block_hash.h).
  const HashSeeds plain{};
  const HashSeeds with_a{.lora_key = loraHashKey("A", kDefaultHashSeed)};
  const auto base_hashes = sequenceHashes(prompt, 4, plain);
  const auto a_hashes = sequenceHashes(prompt, 4, with_a);
  EXPECT_EQ(a_hashes[0], chainHash(*with_a.lora_key, contentHash(range(1, 4), kDefaultHashSeed),
                                   kDefaultChainSeed));
  EXPECT_NE(a_hashes[0], base_hashes[0]);
  EXPECT_EQ(base_hashes[0], contentHash(range(1, 4), kDefaultHashSeed));
  // KV events carry the adapter id; Engine::loraName names it.
  bool saw_a = false, saw_base = false;
  for (const PassResult& p : h.passes()) {
    for (const KvEvent& e : p.kv_events) {
      const auto* s = std::get_if<BlockStored>(&e);
      if (s == nullptr || s->parent_block_hash) continue;
      if (s->block_hashes.front() == a_hashes[0]) {
        saw_a = true;
        EXPECT_EQ(h.engine().loraName(s->lora_id), "A");
      } else if (s->block_hashes.front() == base_hashes[0]) {
        saw_base = true;
        EXPECT_EQ(s->lora_id, 0u);
      }
    }
  }
  EXPECT_TRUE(saw_a);
  EXPECT_TRUE(saw_base);
}

TEST(LoraLoadTest, APassThatSchedulesANonResidentAdapterPaysItsLoadTime) {
  // lora_load_ms 7, max_loras 1, max_cpu_loras 1 (null = max_loras).
  Harness h(loraConfig(1, 7.0));
  submit(h, range(1, 4), 1, "A");
  EXPECT_EQ(h.step().prefill_ms, 17.0);  // A loads
  submit(h, range(11, 14), 1, "A");
  EXPECT_EQ(h.step().prefill_ms, 10.0);  // resident
  submit(h, range(21, 24), 1, "B");
  EXPECT_EQ(h.step().prefill_ms, 17.0);  // B loads, evicts A
  submit(h, range(31, 34), 1, "A");
  EXPECT_EQ(h.step().prefill_ms, 17.0);
  submit(h, range(41, 44), 1, std::nullopt);
  EXPECT_EQ(h.step().prefill_ms, 10.0);  // the base model loads nothing
}

TEST(LoraLoadTest, MoreResidentAdaptersThanBatchSlotsKeepTheirLoads) {
  EngineConfig c = loraConfig(1, 7.0);
  c.max_cpu_loras = 2;
  Harness h(c);
  for (const char* name : {"A", "B", "A", "B"}) {
    submit(h, range(1, 4), 1, std::string(name));
    h.step();
  }
  const auto& ps = h.passes();
  EXPECT_EQ(ps[0].prefill_ms, 17.0);
  EXPECT_EQ(ps[1].prefill_ms, 17.0);
  EXPECT_EQ(ps[2].prefill_ms, 10.0);
  EXPECT_EQ(ps[3].prefill_ms, 10.0);
}

TEST(LoraUnitTest, ResidencyLoadTouchesEvictsTheLeastRecentlyUsedAndRemoveDrops) {
  LoraResidency r(2);
  EXPECT_TRUE(r.load(1));
  EXPECT_TRUE(r.load(2));
  EXPECT_FALSE(r.load(1));  // resident: now the most recently used
  EXPECT_EQ(std::vector<std::uint32_t>(r.lru().begin(), r.lru().end()),
            (std::vector<std::uint32_t>{2, 1}));
  EXPECT_TRUE(r.load(3));  // evicts 2
  EXPECT_EQ(std::vector<std::uint32_t>(r.lru().begin(), r.lru().end()),
            (std::vector<std::uint32_t>{1, 3}));
  EXPECT_TRUE(r.remove(1));
  EXPECT_FALSE(r.remove(1));
  EXPECT_FALSE(r.resident(1));
  EXPECT_TRUE(r.resident(3));
}

// lora_load / lora_unload (Engine::loadLora / unloadLora). Hand-computed: a pass costs 10 ms
// when it computes prompt tokens, 5 ms when it samples, 7 ms per adapter it loads; a lora_load
// keeps the rank busy 7 ms from max(its time, the rank's last pass end).
TEST(LoraProtocolLoadTest, APreloadedAdapterPaysNoLoadAndAnUnloadedOnePaysAgain) {
  Harness h(loraConfig(1, 7.0));                           // max_cpu_loras 1
  ASSERT_EQ(h.engine().loadLora("A", 0.0).value(), true);  // busy 0 → 7
  h.advanceTo(20.0);
  submit(h, range(1, 4), 1, "A");
  const PassResult& p1 = h.step();  // 20 → 35: resident, the load long done
  EXPECT_EQ(p1.start_ms, 20.0);
  EXPECT_EQ(p1.prefill_ms, 10.0);
  EXPECT_EQ(p1.end_ms, 35.0);
  EXPECT_EQ(h.engine().loadLora("A", 35.0).value(), false);  // already resident: nothing
  EXPECT_EQ(h.engine().unloadLora("A").value(), true);
  EXPECT_EQ(h.engine().unloadLora("A").value(), false);
  EXPECT_EQ(h.engine().unloadLora("never-named").value(), false);
  h.advanceTo(50.0);
  submit(h, range(11, 14), 1, "A");
  const PassResult& p2 = h.step();  // 50 → 72: A loads again (10 + 7, then 5)
  EXPECT_EQ(p2.prefill_ms, 17.0);
  EXPECT_EQ(p2.end_ms, 72.0);
  // max_cpu_loras 1: loading B evicts A, whose next request pays its load.
  ASSERT_EQ(h.engine().loadLora("B", 100.0).value(), true);  // busy 100 → 107
  h.advanceTo(110.0);
  submit(h, range(21, 24), 1, "A");
  EXPECT_EQ(h.step().prefill_ms, 17.0);
}

TEST(LoraProtocolLoadTest, APassThatStartsDuringALoadWaitsForIt) {
  Harness h(loraConfig(1, 7.0));
  // Idle rank: the load runs 0 → 7; a pass starting at 3 waits 4 ms.
  ASSERT_EQ(h.engine().loadLora("A", 0.0).value(), true);
  h.advanceTo(3.0);
  submit(h, range(1, 4), 3, "A");
  const PassResult& p1 = h.step();  // 3 → 22: 4 (wait) + 10 + 5
  EXPECT_EQ(p1.prefill_ms, 14.0);
  EXPECT_EQ(p1.end_ms, 22.0);
  // A load asked at 10, while the pass 3 → 22 is in flight, starts at that pass's end: 22 → 29.
  // With max_cpu_loras 1 it evicts A (vLLM's worker evicts even an adapter in use), so the next
  // pass, A's decode, waits 7 ms and then loads A again.
  ASSERT_EQ(h.engine().loadLora("B", 10.0).value(), true);
  const PassResult& p2 = h.step();  // 22 → 41: 7 (wait) + 7 (A loads again) + 5
  EXPECT_EQ(p2.prefill_ms, 14.0);
  EXPECT_EQ(p2.end_ms, 41.0);
  const PassResult& p3 = h.step();  // 41 → 46: the load is over, A resident
  EXPECT_EQ(p3.prefill_ms, 0.0);
  EXPECT_EQ(p3.end_ms, 46.0);
}

TEST(LoraProtocolLoadTest, UnloadWhileARequestOfItWaitsIsAcceptedAndItLoadsAgain) {
  // vLLM's remove_lora refuses nothing: the waiting request's pass loads the adapter again.
  EngineConfig c = loraConfig(1, 7.0);
  c.max_cpu_loras = 2;
  for (const bool unload : {false, true}) {
    SCOPED_TRACE(unload ? "unloaded" : "kept");
    Harness h(c);
    ASSERT_EQ(h.engine().loadLora("B", 0.0).value(), true);  // 0 → 7
    h.advanceTo(10.0);
    submit(h, range(1, 4), 3, "A");
    const RequestId b = submit(h, range(11, 14), 1, "B");
    EXPECT_EQ(h.step().end_ms, 32.0);  // A: 10 + 7 (loads) + 5; B skipped (A holds the set)
    if (unload) {
      EXPECT_EQ(h.engine().unloadLora("B").value(), true);  // B waits
    }
    EXPECT_EQ(h.engine().loraUsage(0).waiting, std::vector<std::uint32_t>{1});  // B: id 1
    EXPECT_EQ(h.step().end_ms, 37.0);                                           // A decodes
    EXPECT_EQ(h.step().end_ms, 42.0);                                           // A's last token
    const PassResult& p4 = h.step();  // B: 10 (+ 7 when unloaded) + 5
    ASSERT_EQ(admitted(p4), std::vector<RequestId>{b});
    EXPECT_EQ(p4.prefill_ms, unload ? 17.0 : 10.0);
    EXPECT_EQ(p4.end_ms, unload ? 64.0 : 57.0);
  }
}

TEST(LoraProtocolLoadTest, LoadAndUnloadRefuseHostileNamesAndAnEngineWithoutLora) {
  Engine off(loraConfig(0));
  const auto r = off.loadLora("A", 0.0);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::Unsupported);
  EXPECT_EQ(r.error().message, "lora_load: LoRA is off on this engine (max_loras 0)");
  EXPECT_EQ(off.unloadLora("A").error().message,
            "lora_unload: LoRA is off on this engine (max_loras 0)");
  Engine on(loraConfig(1));
  for (const std::string& bad : {std::string(), std::string(257, 'y'), std::string("a\x7f")}) {
    for (const auto& res : {on.loadLora(bad, 0.0), on.unloadLora(bad)}) {
      ASSERT_FALSE(res.has_value());
      EXPECT_EQ(res.error().code, ErrorCode::InvalidArgument);
      EXPECT_TRUE(res.error().message.starts_with("name: ")) << res.error().message;
    }
  }
}

TEST(LoraSubmitTest, HostileOrUnexpectedAdapterNamesAreRefused) {
  Engine off(loraConfig(0));
  EXPECT_EQ(off.submit(Request{.tokens = {1}, .max_output_tokens = 1, .lora = "A"}).error().message,
            "lora: adapter 'A' named, but LoRA is off on this engine (max_loras 0)");
  // A hostile name is refused before it is echoed.
  EXPECT_EQ(
      off.submit(Request{.tokens = {1}, .max_output_tokens = 1, .lora = std::string(300, 'x')})
          .error()
          .message,
      "lora: an adapter name is at most 256 bytes (got 300)");
  Engine on(loraConfig(1));
  for (const std::string& bad : {std::string(), std::string(257, 'y'), std::string("a\x01")}) {
    const auto r = on.submit(Request{.tokens = {1}, .max_output_tokens = 1, .lora = bad});
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::InvalidArgument);
    EXPECT_TRUE(r.error().message.starts_with("lora: ")) << r.error().message;
  }
  EXPECT_TRUE(on.submit(Request{.tokens = {1}, .max_output_tokens = 1, .lora = "ok"}).has_value());
}

TEST(LoraConfigTest, ValidationNamesTheRule) {
  const auto fields = [](const EngineConfig& c) {
    const auto e = checkEngineConfig(c);
    return e ? e->fields : std::vector<std::string>{};
  };
  EngineConfig c = loraConfig(2);
  EXPECT_TRUE(validateEngineConfig(c).has_value());
  c.max_cpu_loras = 1;
  EXPECT_EQ(fields(c), (std::vector<std::string>{"max_cpu_loras", "max_loras"}));
  EXPECT_EQ(validateEngineConfig(c).error().message,
            "max_cpu_loras must be >= max_loras (2) (got 1)");
  c = loraConfig(1, -1.0);
  EXPECT_EQ(fields(c), (std::vector<std::string>{"lora_load_ms"}));
  c = testing::specConfig(EngineType::Sglang);
  c.max_loras = 1;
  EXPECT_EQ(fields(c), (std::vector<std::string>{"max_loras", "engine_type"}));
  c = loraConfig(1);
  c.worker_type = WorkerType::Prefill;
  EXPECT_EQ(fields(c), (std::vector<std::string>{"max_loras", "worker_type"}));
  c = loraConfig(1);
  c.engine_type = EngineType::Trtllm;
  EXPECT_TRUE(validateEngineConfig(c).has_value());
}

}  // namespace
}  // namespace mocker::engine
