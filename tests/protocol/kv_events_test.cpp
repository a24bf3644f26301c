#include "protocol/kv_events.h"

#include <gtest/gtest.h>

#include <limits>

#include "protocol/limits.h"
#include "tests/protocol/protocol_test_util.h"

namespace mocker::protocol {
namespace {

using testing::Bytes;
using testing::concat;
using testing::DamageCase;
using testing::expectEveryCaseRefused;
using testing::fromHex;
using testing::Json;
using testing::mp;
using testing::prefix;
using testing::readGolden;
using testing::toHex;

constexpr std::uint64_t kS0 = 0xcb38e4d7fb2dca5cull;
constexpr std::uint64_t kS1 = 0x44a2b2379d6d3c3dull;
constexpr std::uint64_t kS2 = 0xaea1e67a6c80cf84ull;

BlockStoredEvent stored(std::vector<std::uint64_t> hashes, std::optional<std::uint64_t> parent,
                        std::vector<std::uint32_t> tokens) {
  return BlockStoredEvent{.block_hashes = std::move(hashes),
                          .parent_block_hash = parent,
                          .token_ids = std::move(tokens),
                          .block_size = 4};
}
BlockRemovedEvent removed(std::uint64_t h) { return BlockRemovedEvent{.block_hashes = {h}}; }

KvEventBatch batch0() {
  return {.ts = 1700000000.5,
          .events = {stored({kS0, kS1}, std::nullopt, {1, 2, 3, 4, 5, 6, 7, 8})}};
}
KvEventBatch batch1() {
  return {.ts = 1700000000.75, .events = {stored({kS2}, kS1, {9, 10, 11, 12})}};
}
KvEventBatch batch2() { return {.ts = 1700000001.0, .events = {removed(kS2), removed(kS1)}}; }

// What a layout loses on the wire: p6 carries no medium.
KvEventBatch asDecodedFrom(KvEventBatch b, KvLayout layout) {
  if (layout != KvLayout::P6) return b;
  for (KvEvent& e : b.events) {
    if (auto* s = std::get_if<BlockStoredEvent>(&e)) s->medium.reset();
    if (auto* r = std::get_if<BlockRemovedEvent>(&e)) r->medium.reset();
  }
  return b;
}

constexpr KvLayout kAllLayouts[] = {KvLayout::P6,  KvLayout::P7,  KvLayout::P8,   KvLayout::P9,
                                    KvLayout::P12, KvLayout::Map, KvLayout::Map26};

// ------------------------------------------------------------------------------------------
// Golden bytes: the C++ encoder must reproduce the independent python encoder (which itself
// checks the worked examples), and the decoder must read them back.

TEST(KvEventsGoldenTest, SpecWorkedExampleP8BatchZero) {
  const Bytes want = fromHex(
      "93cb41d954fc402000009198ab426c6f636b53746f72656492cfcb38e4d7fb2dca5ccf44a2b2379d6d3c3dc0"
      "98010203040506070804c0a3475055c000");
  EXPECT_EQ(toHex(encodeKvEventBatch(batch0())), toHex(want));
  EXPECT_EQ(want.size(), 61u);
}

TEST(KvEventsGoldenTest, EveryLayoutMatchesPythonGoldens) {
  const std::pair<const char*, KvEventBatch (*)()> batches[] = {
      {"batch0", batch0}, {"batch1", batch1}, {"batch2", batch2}};
  for (KvLayout layout : kAllLayouts) {
    for (const auto& [suffix, make] : batches) {
      const std::string name = "kv_" + std::string(toString(layout)) + "_" + suffix;
      SCOPED_TRACE(name);
      const Bytes golden = readGolden(name);
      EXPECT_EQ(toHex(encodeKvEventBatch(make(), {.layout = layout})), toHex(golden));
      const auto decoded = decodeKvEventBatch(golden);
      ASSERT_TRUE(decoded.has_value()) << decoded.error().toString();
      EXPECT_EQ(*decoded, asDecodedFrom(make(), layout));
    }
  }
}

TEST(KvEventsGoldenTest, SpecSizes) {
  EXPECT_EQ(encodeKvEventBatch(batch0(), {.layout = KvLayout::Map}).size(), 143u);
  EXPECT_EQ(encodeKvEventBatch(batch1()).size(), 56u);
  EXPECT_EQ(encodeKvEventBatch(batch1(), {.layout = KvLayout::Map}).size(), 138u);
  EXPECT_EQ(encodeKvEventBatch(batch2()).size(), 68u);
  EXPECT_EQ(encodeKvEventBatch(batch2(), {.layout = KvLayout::Map}).size(), 118u);
  EXPECT_EQ(encodeKvEventBatch(batch0(), {.layout = KvLayout::P12}).size(), 79u);
}

TEST(KvEventsGoldenTest, AllBlocksClearedInEveryLayout) {
  const KvEventBatch b{.ts = 1700000000.5, .events = {AllBlocksClearedEvent{}}};
  for (KvLayout layout : kAllLayouts) {
    const bool is_map = layout == KvLayout::Map || layout == KvLayout::Map26;
    EXPECT_EQ(toHex(encodeKvEventBatch(b, {.layout = layout})),
              toHex(readGolden(is_map ? "kv_cleared_map" : "kv_cleared_positional")))
        << toString(layout);
  }
}

TEST(KvEventsGoldenTest, ParentRootZero) {
  const Bytes golden = readGolden("kv_p8_parent_zero");
  EXPECT_EQ(toHex(encodeKvEventBatch(batch0(), {.parent_root = ParentRoot::Zero})), toHex(golden));
  // Decoding cannot tell "0 = no parent" from a parent hash 0: it reports the value.
  const auto decoded = decodeKvEventBatch(golden);
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(std::get<BlockStoredEvent>(decoded->events[0]).parent_block_hash, 0u);
}

TEST(KvEventsGoldenTest, MixedBatchOnRankThree) {
  const KvEventBatch b{
      .ts = 2.25,
      .events = {removed(kS2), stored({kS0}, std::nullopt, {1, 2, 3, 4}), AllBlocksClearedEvent{}},
      .dp_rank = 3};
  const Bytes golden = readGolden("kv_p8_mixed_rank3");
  EXPECT_EQ(toHex(encodeKvEventBatch(b)), toHex(golden));
  EXPECT_EQ(*decodeKvEventBatch(golden), b);
}

TEST(KvEventsGoldenTest, ForceUint64HashesWritesEightBytes) {
  const KvEventBatch b{
      .ts = 0.0,
      .events = {stored({5, 1ull << 40}, 7, {300, 70000, 1, 2, 3, 4, 5, 6}), removed(9)},
      .dp_rank = 1};
  const Bytes golden = readGolden("kv_p8_force_u64");
  EXPECT_EQ(toHex(encodeKvEventBatch(b, {.force_uint64_hashes = true})), toHex(golden));
  EXPECT_EQ(*decodeKvEventBatch(golden), b);
  const KvEventBatch z{.ts = 0.0, .events = {stored({5}, std::nullopt, {9, 10, 11, 12})}};
  EXPECT_EQ(
      toHex(encodeKvEventBatch(z, {.parent_root = ParentRoot::Zero, .force_uint64_hashes = true})),
      toHex(readGolden("kv_p8_force_u64_parent_zero")));
}

// ------------------------------------------------------------------------------------------
// Round trips and decoder tolerance

TEST(KvEventsRoundTripTest, EveryLayoutAndOption) {
  KvEventBatch b{
      .ts = 123.456,
      .events = {stored({1, 1ull << 33, ~0ull}, 0xffffffffull, std::vector<std::uint32_t>(12, 7)),
                 removed(42), AllBlocksClearedEvent{}, removed(1ull << 63)},
      .dp_rank = 7};
  std::get<BlockStoredEvent>(b.events[0]).lora_id = -3;
  std::get<BlockStoredEvent>(b.events[0]).lora_name = "adapter";
  for (KvLayout layout : kAllLayouts) {
    for (bool force : {false, true}) {
      SCOPED_TRACE(std::string(toString(layout)) + (force ? " forced" : ""));
      const auto bytes = encodeKvEventBatch(b, {.layout = layout, .force_uint64_hashes = force});
      const auto decoded = decodeKvEventBatch(bytes);
      ASSERT_TRUE(decoded.has_value()) << decoded.error().toString();
      KvEventBatch want = asDecodedFrom(b, layout);
      if (layout == KvLayout::P6 || layout == KvLayout::P7) {
        std::get<BlockStoredEvent>(want.events[0]).lora_name.reset();
      }
      EXPECT_EQ(*decoded, want);
    }
  }
}

TEST(KvEventsRoundTripTest, EmptyBatchAndAppendReusesBuffer) {
  const KvEventBatch empty{.ts = 1.0, .events = {}};
  EXPECT_EQ(*decodeKvEventBatch(encodeKvEventBatch(empty)), empty);
  std::vector<std::byte> buf = {std::byte{0xaa}};
  appendKvEventBatch(batch0(), {}, buf);
  EXPECT_EQ(buf.size(), 62u);
  EXPECT_EQ(buf[0], std::byte{0xaa});
}

TEST(KvEventsDecodeTest, AcceptsShortAndLongPositionalEvents) {
  // Dynamo-style tolerance: any BlockStored with ≥ 5 elements, trailing unknown ones ignored.
  const Bytes five = mp(
      Json::array({1.0, Json::array({Json::array({"BlockStored", {7}, nullptr, {1, 2}, 2})}), 0}));
  const auto d5 = decodeKvEventBatch(five);
  ASSERT_TRUE(d5.has_value()) << d5.error().toString();
  const auto& s5 = std::get<BlockStoredEvent>(d5->events[0]);
  EXPECT_EQ(s5.block_hashes, std::vector<std::uint64_t>{7});
  EXPECT_FALSE(s5.medium.has_value());
  Json long_event = Json::array({"BlockStored",
                                 {7},
                                 3,
                                 {1, 2},
                                 2,
                                 nullptr,
                                 "CPU",
                                 "l",
                                 nullptr,
                                 0,
                                 "full_attention",
                                 nullptr,
                                 "future",
                                 1,
                                 2});
  const auto d15 = decodeKvEventBatch(mp(Json::array({1, Json::array({long_event}), nullptr})));
  ASSERT_TRUE(d15.has_value()) << d15.error().toString();
  EXPECT_EQ(std::get<BlockStoredEvent>(d15->events[0]).medium, "CPU");
  EXPECT_EQ(d15->dp_rank, 0u);  // nil rank (vLLM without DP) decodes as 0
  EXPECT_EQ(d15->ts, 1.0);      // integer ts accepted
}

TEST(KvEventsDecodeTest, MapEventsIgnoreUnknownKeysAndAcceptNegativeHashes) {
  const Json ev = {{"type", "BlockRemoved"}, {"block_hashes", {-1}}, {"locality", "LOCAL"}};
  const auto d = decodeKvEventBatch(mp(Json::array({0.5, Json::array({ev}), 2})));
  ASSERT_TRUE(d.has_value()) << d.error().toString();
  EXPECT_EQ(std::get<BlockRemovedEvent>(d->events[0]).block_hashes[0], ~0ull);
  EXPECT_FALSE(std::get<BlockRemovedEvent>(d->events[0]).medium.has_value());
}

TEST(KvEventsDecodeTest, LayoutNamesParse) {
  for (KvLayout layout : kAllLayouts) EXPECT_EQ(*parseKvLayout(toString(layout)), layout);
  EXPECT_FALSE(parseKvLayout("p10").has_value());
  EXPECT_EQ(*parseParentRoot("zero"), ParentRoot::Zero);
  EXPECT_FALSE(parseParentRoot("null").has_value());
  // One table per enum, read both ways, any ASCII case (the config file uses the same table).
  EXPECT_EQ(*parseKvLayout("MAP26"), KvLayout::Map26);
  EXPECT_EQ(*parseParentRoot("Nil"), ParentRoot::Nil);
  EXPECT_EQ(parseKvLayout("p10").error().message,
            "layout: 'p10' is not one of p6, p7, p8, p9, p12, map, map26");
}

// ------------------------------------------------------------------------------------------
// Damage catalogue

Json batchWith(const Json& event) { return Json::array({1.0, Json::array({event}), 0}); }
Json storedPos() {
  return Json::array({"BlockStored", {11, 12}, nullptr, {1, 2, 3, 4}, 2, nullptr, "GPU", nullptr});
}
Json storedMap() {
  return {{"type", "BlockStored"}, {"block_hashes", {11}}, {"parent_block_hash", nullptr},
          {"token_ids", {1, 2}},   {"block_size", 2},      {"medium", "GPU"}};
}
Json with(Json j, std::size_t pos, Json v) {
  j[pos] = std::move(v);
  return j;
}
Json withKey(Json j, const std::string& key, Json v) {
  j[key] = std::move(v);
  return j;
}
Json without(Json j, const std::string& key) {
  j.erase(key);
  return j;
}

std::vector<DamageCase> kvDamageCatalogue() {
  const Bytes good = encodeKvEventBatch(batch0());
  Bytes deep;
  for (int i = 0; i < 40; ++i) deep.push_back(std::byte{0x91});
  deep.push_back(std::byte{0x00});
  Json too_many_events = Json::array();
  for (std::size_t i = 0; i <= kMaxEventsPerBatch; ++i)
    too_many_events.push_back(Json::array({"AllBlocksCleared"}));
  Json too_many_hashes = Json::array();
  for (std::size_t i = 0; i <= kMaxBlocksPerEvent; ++i) too_many_hashes.push_back(i);
  const auto E = ErrorCode::Corruption;
  const auto I = ErrorCode::InvalidArgument;
  return {
      {"empty input", {}, E, "empty"},
      {"truncated after 1 byte", prefix(good, 1), E, "truncated"},
      {"truncated inside ts", prefix(good, 5), E, "truncated"},
      {"truncated inside a hash", prefix(good, 30), E, "truncated"},
      {"truncated before dp_rank", prefix(good, good.size() - 1), E, "truncated"},
      {"trailing byte", concat(good, {std::byte{0x00}}), E, "trailing"},
      {"root is a map", mp(Json{{"ts", 1}}), E, "batch: expected array"},
      {"root has 2 elements", mp(Json::array({1.0, Json::array()})), E, "expected 3 elements"},
      {"root has 4 elements", mp(Json::array({1.0, Json::array(), 0, 0})), E, "got 4"},
      {"ts is a str", mp(Json::array({"now", Json::array(), 0})), E, "ts: expected number"},
      {"ts is nil", mp(Json::array({nullptr, Json::array(), 0})), E,
       "ts: expected number, got nil"},
      {"events is a map", mp(Json::array({1.0, Json{{"a", 1}}, 0})), E, "events: expected array"},
      {"event is an integer", mp(batchWith(5)), E, "events[0]: event: expected array or map"},
      {"event array is empty", mp(batchWith(Json::array())), E, "events[0]: tag: missing"},
      {"tag is an integer", mp(batchWith(Json::array({7}))), E, "tag: expected str"},
      {"unknown tag", mp(batchWith(Json::array({"BlockMoved", {1}}))), E,
       "unknown event type 'BlockMoved'"},
      {"stored with 4 elements", mp(batchWith(Json::array({"BlockStored", {1}, nullptr, {1}}))), E,
       "at least 5"},
      {"removed with 1 element", mp(batchWith(Json::array({"BlockRemoved"}))), E, "at least 2"},
      {"block_hashes is an int", mp(batchWith(with(storedPos(), 1, 5))), E,
       "block_hashes: expected array"},
      {"hash is a str", mp(batchWith(with(storedPos(), 1, {"abc"}))), E,
       "block_hashes[0]: expected integer hash, got str"},
      {"hash is bin", mp(batchWith(with(storedPos(), 1, Json::array({1, testing::bin({1, 2})})))),
       E, "block_hashes[1]: expected integer hash, got bin"},
      {"hash is a float", mp(batchWith(with(storedPos(), 1, {1.5}))), E, "block_hashes[0]"},
      {"empty block_hashes", mp(batchWith(with(storedPos(), 1, Json::array()))), I,
       "block_hashes: must not be empty"},
      {"parent is a str", mp(batchWith(with(storedPos(), 2, "p"))), E,
       "parent_block_hash: expected integer hash"},
      {"negative token", mp(batchWith(with(storedPos(), 3, {1, -2}))), I,
       "token_ids[1]: must be >= 0"},
      {"token above u32", mp(batchWith(with(storedPos(), 3, {5000000000LL}))), I,
       "token_ids[0]: 5000000000 exceeds"},
      {"token_ids is nil", mp(batchWith(with(storedPos(), 3, nullptr))), E,
       "token_ids: expected array, got nil"},
      {"block_size 0", mp(batchWith(with(storedPos(), 4, 0))), I, "block_size: must be >= 1"},
      {"block_size is a str", mp(batchWith(with(storedPos(), 4, "4"))), E,
       "block_size: expected unsigned integer"},
      {"lora_id is a str", mp(batchWith(with(storedPos(), 5, "x"))), E,
       "lora_id: expected integer"},
      {"medium is an int", mp(batchWith(with(storedPos(), 6, 1))), E, "medium: expected str"},
      {"lora_name is an int", mp(batchWith(with(storedPos(), 7, 1))), E, "lora_name: expected str"},
      {"removed medium is an array", mp(batchWith(Json::array({"BlockRemoved", {1}, {1}}))), E,
       "medium: expected str"},
      {"tag not UTF-8", mp(batchWith(Json::array({std::string("Block\xffStored"), {1}}))), E,
       "events[0]: tag: not valid UTF-8 (byte 0xff at offset 5)"},
      {"medium not UTF-8", mp(batchWith(with(storedPos(), 6, std::string("GPU\xed\xa0\x80")))), E,
       "medium: not valid UTF-8 (byte 0xed at offset 3)"},
      {"map event key not UTF-8", mp(batchWith(withKey(storedMap(), std::string("\xc0\x80"), 1))),
       E, "event: map key"},
      {"dp_rank negative", mp(Json::array({1.0, Json::array(), -1})), I, "dp_rank: must be >= 0"},
      {"dp_rank is a str", mp(Json::array({1.0, Json::array(), "0"})), E,
       "dp_rank: expected unsigned integer"},
      {"dp_rank above u32", mp(Json::array({1.0, Json::array(), 1LL << 33})), I,
       "dp_rank: 8589934592 exceeds"},
      {"map event without type", mp(batchWith(without(storedMap(), "type"))), E, "type: missing"},
      {"map event type is an int", mp(batchWith(withKey(storedMap(), "type", 3))), E,
       "type: expected str"},
      {"map event unknown type", mp(batchWith(withKey(storedMap(), "type", "Evicted"))), E,
       "unknown event type 'Evicted'"},
      {"map stored without block_hashes", mp(batchWith(without(storedMap(), "block_hashes"))), E,
       "block_hashes: missing"},
      {"map stored without token_ids", mp(batchWith(without(storedMap(), "token_ids"))), E,
       "token_ids: missing"},
      {"map stored without block_size", mp(batchWith(without(storedMap(), "block_size"))), E,
       "block_size: missing"},
      {"map removed without block_hashes", mp(batchWith(Json{{"type", "BlockRemoved"}})), E,
       "block_hashes: missing"},
      {"map event with a non-str key",
       fromHex("93 01 91 82 a474797065 b0416c6c426c6f636b73436c6561726564 01 02 00"), E,
       "map key 1 must be a str"},
      {"map event with a duplicate key",
       fromHex("93 01 91 82 a474797065 b0416c6c426c6f636b73436c6561726564 a474797065 01 00"), E,
       "duplicate key 'type'"},
      {"reserved byte 0xc1", fromHex("93 01 91 c1 00"), E, "invalid msgpack byte 0xc1"},
      {"ext value", fromHex("93 01 91 d4 01 02 00"), E, "ext type"},
      {"array declaring 2^32-1 elements", fromHex("93 01 dd ffffffff 00 00"), E,
       "declares 4294967295 entries"},
      {"map declaring 65535 entries", fromHex("93 01 91 de ffff 00"), E, "declares 65535 entries"},
      {"str declaring 4 GiB", fromHex("93 01 91 91 db ffffffff 41"), E, "truncated"},
      {"bin declaring 65535 bytes", fromHex("93 01 91 91 c5 ffff 00"), E, "truncated"},
      {"nesting 40 deep", deep, I, "nesting deeper than 8"},
      {"too many events", mp(Json::array({1.0, too_many_events, 0})), I,
       "events: 65537 elements exceed the limit"},
      {"too many hashes", mp(batchWith(with(storedPos(), 1, too_many_hashes))), I,
       "block_hashes: 65537 elements exceed"},
      {"NaN ts", fromHex("93 cb7ff8000000000000 90 00"), I, "ts: NaN"},
      {"error in the third event",
       mp(Json::array({1.0,
                       Json::array({Json::array({"AllBlocksCleared"}),
                                    Json::array({"AllBlocksCleared"}), Json::array({"Nope"})}),
                       0})),
       E, "events[2]: tag: unknown"},
  };
}

TEST(KvEventsDamageTest, EveryCaseIsRefusedWithTheNamedField) {
  expectEveryCaseRefused(kvDamageCatalogue(), [](const Bytes& b) { return decodeKvEventBatch(b); });
}

TEST(KvEventsDamageTest, EveryTruncationOfEveryGoldenIsRefused) {
  for (const char* name :
       {"kv_p8_batch0", "kv_map26_batch2", "kv_p12_batch1", "kv_p8_mixed_rank3"}) {
    const Bytes golden = readGolden(name);
    for (std::size_t n = 0; n < golden.size(); ++n) {
      EXPECT_FALSE(decodeKvEventBatch(prefix(golden, n)).has_value()) << name << " prefix " << n;
    }
  }
}

}  // namespace
}  // namespace mocker::protocol
