#include "protocol/fpm.h"

#include <gtest/gtest.h>

#include <limits>

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

FpmRecord example() {
  return FpmRecord{.worker_id = "7587889736218396437",
                   .counter_id = 42,
                   .wall_time = 0.025,
                   .scheduled = {.num_prefill_requests = 1,
                                 .sum_prefill_tokens = 512,
                                 .num_decode_requests = 3,
                                 .sum_decode_kv_tokens = 1500,
                                 .var_decode_kv_tokens = 2.0}};
}

FpmRecord heartbeat() { return FpmRecord{.worker_id = "7587889736218396437", .counter_id = 43}; }

FpmRecord withExtensions() {
  return FpmRecord{
      .worker_id = "7587889736218396437",
      .counter_id = 70000,
      .wall_time = 1.5,
      .scheduled = {2, 100000, 12.25, 64, 300, 4000000000ull, 0.5},
      .queued = {5, 6000, 1.0, 2, 300, 7.5},
      .extensions = {.pass_start_ms = 1000.0, .pass_end_ms = 2500.0, .preemptions_total = 12}};
}

TEST(FpmGoldenTest, SpecExampleIs430Bytes) {
  const Bytes bytes = encodeFpm(example());
  EXPECT_EQ(bytes.size(), 430u);
  EXPECT_EQ(toHex(bytes), toHex(readGolden("fpm_example")));
  // Spot checks against the example of docs/wire.md independent of the golden file.
  EXPECT_EQ(toHex(prefix(bytes, 10)), "87a776657273696f6e01");
  EXPECT_NE(toHex(bytes).find("a977616c6c5f74696d65cb3f9999999999999a"), std::string::npos);
}

TEST(FpmGoldenTest, HeartbeatIs426Bytes) {
  const Bytes bytes = encodeFpm(heartbeat());
  EXPECT_EQ(bytes.size(), 426u);
  EXPECT_EQ(toHex(bytes), toHex(readGolden("fpm_heartbeat")));
}

TEST(FpmGoldenTest, ExtensionKeysFollowTheStandardKeys) {
  EXPECT_EQ(toHex(encodeFpm(withExtensions())), toHex(readGolden("fpm_extensions")));
}

TEST(FpmRoundTripTest, GoldensDecodeToTheirRecords) {
  EXPECT_EQ(*decodeFpm(readGolden("fpm_example")), example());
  EXPECT_EQ(*decodeFpm(readGolden("fpm_heartbeat")), heartbeat());
  EXPECT_EQ(*decodeFpm(readGolden("fpm_extensions")), withExtensions());
}

TEST(FpmRoundTripTest, ExtremeValues) {
  FpmRecord r = withExtensions();
  r.worker_id = "18446744073709551615";
  r.dp_rank = 4294967295u;
  r.counter_id = ~0ull;
  r.wall_time = 1e-300;
  r.queued.var_decode_kv_tokens = 1e300;
  const auto d = decodeFpm(encodeFpm(r));
  ASSERT_TRUE(d.has_value()) << d.error().toString();
  EXPECT_EQ(*d, r);
}

TEST(FpmDecodeTest, KeysInAnyOrderAndUnknownKeysIgnored) {
  const Bytes b = encodeFpm(example());
  std::vector<std::uint8_t> raw(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) raw[i] = std::to_integer<std::uint8_t>(b[i]);
  const Json j = Json::from_msgpack(raw);
  Json reordered;
  reordered["y_unknown"] = "ignored";
  for (auto it = j.rbegin(); it != j.rend(); ++it) reordered[it.key()] = it.value();
  const auto d = decodeFpm(mp(reordered));
  ASSERT_TRUE(d.has_value()) << d.error().toString();
  EXPECT_EQ(*d, example());
}

TEST(FpmDecodeTest, WorkerIdValidation) {
  EXPECT_TRUE(isDecimalU64("0"));
  EXPECT_TRUE(isDecimalU64("18446744073709551615"));
  EXPECT_FALSE(isDecimalU64("18446744073709551616"));
  EXPECT_FALSE(isDecimalU64(""));
  EXPECT_FALSE(isDecimalU64("01"));
  EXPECT_FALSE(isDecimalU64("+1"));
  EXPECT_FALSE(isDecimalU64("1a"));
}

Json good() {
  return {{"version", 1},
          {"worker_id", "7"},
          {"dp_rank", 0},
          {"counter_id", 1},
          {"wall_time", 0.5},
          {"scheduled_requests",
           {{"num_prefill_requests", 1},
            {"sum_prefill_tokens", 2},
            {"var_prefill_length", 0.0},
            {"sum_prefill_kv_tokens", 0},
            {"num_decode_requests", 0},
            {"sum_decode_kv_tokens", 0},
            {"var_decode_kv_tokens", 0.0}}},
          {"queued_requests",
           {{"num_prefill_requests", 0},
            {"sum_prefill_tokens", 0},
            {"var_prefill_length", 0.0},
            {"num_decode_requests", 0},
            {"sum_decode_kv_tokens", 0},
            {"var_decode_kv_tokens", 0.0}}}};
}
Json set(const std::string& key, Json v) {
  Json j = good();
  j[key] = std::move(v);
  return j;
}
Json setIn(const std::string& section, const std::string& key, Json v) {
  Json j = good();
  j[section][key] = std::move(v);
  return j;
}
Json drop(const std::string& key) {
  Json j = good();
  j.erase(key);
  return j;
}
Json dropIn(const std::string& section, const std::string& key) {
  Json j = good();
  j[section].erase(key);
  return j;
}

std::vector<DamageCase> fpmDamageCatalogue() {
  const Bytes ok = encodeFpm(example());
  Json wide = good();
  for (int i = 0; i < 70; ++i) wide[std::to_string(i).insert(0, 1, 'k')] = i;
  Bytes deep = fromHex("81 a1 61");  // {"a": [[[[...]]]]}
  for (int i = 0; i < 20; ++i) deep.push_back(std::byte{0x91});
  deep.push_back(std::byte{0x01});
  const auto E = ErrorCode::Corruption;
  const auto I = ErrorCode::InvalidArgument;
  return {
      {"empty input", {}, E, "empty"},
      {"truncated after the map header", prefix(ok, 1), E, "truncated"},
      {"truncated inside worker_id", prefix(ok, 30), E, "truncated"},
      {"truncated before the last variance", prefix(ok, ok.size() - 3), E, "truncated"},
      {"trailing bytes", concat(ok, {std::byte{0xc0}, std::byte{0xc0}}), E, "2 trailing bytes"},
      {"root is an array", mp(Json::array({1, 2})), E, "fpm record: expected map, got array"},
      {"root is nil", fromHex("c0"), E, "expected map, got nil"},
      {"version missing", mp(drop("version")), E, "version: missing"},
      {"version 2", mp(set("version", 2)), ErrorCode::Unsupported, "version: 2 is not supported"},
      {"version is a str", mp(set("version", "1")), E, "version: expected unsigned integer"},
      {"worker_id missing", mp(drop("worker_id")), E, "worker_id: missing"},
      {"worker_id is an int", mp(set("worker_id", 7)), E, "worker_id: expected str"},
      {"worker_id not decimal", mp(set("worker_id", "abc")), I,
       "worker_id: 'abc' is not a decimal u64"},
      {"worker_id negative", mp(set("worker_id", "-1")), I, "worker_id: '-1'"},
      {"worker_id leading zero", mp(set("worker_id", "007")), I, "worker_id: '007'"},
      {"worker_id too long", mp(set("worker_id", "184467440737095516150")), I,
       "worker_id: string of 21 bytes"},
      {"worker_id overflows u64", mp(set("worker_id", "18446744073709551616")), I,
       "not a decimal u64"},
      {"dp_rank missing", mp(drop("dp_rank")), E, "dp_rank: missing"},
      {"dp_rank negative", mp(set("dp_rank", -1)), I, "dp_rank: must be >= 0"},
      {"dp_rank above u32", mp(set("dp_rank", 1LL << 32)), I, "dp_rank: 4294967296 exceeds"},
      {"counter_id missing", mp(drop("counter_id")), E, "counter_id: missing"},
      {"counter_id is a float", mp(set("counter_id", 1.5)), E,
       "counter_id: expected unsigned integer, got float"},
      {"wall_time missing", mp(drop("wall_time")), E, "wall_time: missing"},
      {"wall_time is a str", mp(set("wall_time", "0.1")), E, "wall_time: expected number, got str"},
      {"wall_time is NaN", mp(set("wall_time", std::numeric_limits<double>::quiet_NaN())), I,
       "wall_time: NaN"},
      {"scheduled_requests missing", mp(drop("scheduled_requests")), E,
       "scheduled_requests: missing"},
      {"scheduled_requests is an array", mp(set("scheduled_requests", Json::array({1}))), E,
       "scheduled_requests: map: expected map, got array"},
      {"scheduled field missing", mp(dropIn("scheduled_requests", "num_prefill_requests")), E,
       "scheduled_requests: num_prefill_requests: missing"},
      {"scheduled variance is a str", mp(setIn("scheduled_requests", "var_prefill_length", "x")), E,
       "scheduled_requests: var_prefill_length: expected number"},
      {"scheduled count negative", mp(setIn("scheduled_requests", "sum_decode_kv_tokens", -5)), I,
       "scheduled_requests: sum_decode_kv_tokens: must be >= 0"},
      {"queued_requests missing", mp(drop("queued_requests")), E, "queued_requests: missing"},
      {"queued field missing", mp(dropIn("queued_requests", "var_decode_kv_tokens")), E,
       "queued_requests: var_decode_kv_tokens: missing"},
      {"queued count is nil", mp(setIn("queued_requests", "num_decode_requests", nullptr)), E,
       "queued_requests: num_decode_requests: expected unsigned integer, got nil"},
      {"x_pass_start_ms is a str", mp(set("x_pass_start_ms", "t")), E,
       "x_pass_start_ms: expected number"},
      {"x_preemptions_total negative", mp(set("x_preemptions_total", -1)), I,
       "x_preemptions_total: must be >= 0"},
      {"duplicate key", fromHex("82 a7 76657273696f6e 01 a7 76657273696f6e 01"), E,
       "duplicate key 'version'"},
      {"integer key", fromHex("81 01 01"), E, "map key 0 must be a str"},
      {"too many keys", mp(wide), I, "map of 77 entries exceeds the limit of 64"},
      {"nesting 21 deep", deep, I, "nesting deeper than 8"},
      {"reserved byte", fromHex("81 a1 61 c1"), E, "0xc1"},
  };
}

TEST(FpmDamageTest, EveryCaseIsRefusedWithTheNamedField) {
  expectEveryCaseRefused(fpmDamageCatalogue(), [](const Bytes& b) { return decodeFpm(b); });
}

TEST(FpmDamageTest, EveryTruncationIsRefused) {
  const Bytes golden = readGolden("fpm_extensions");
  for (std::size_t n = 0; n < golden.size(); ++n) {
    EXPECT_FALSE(decodeFpm(prefix(golden, n)).has_value()) << "prefix " << n;
  }
}

}  // namespace
}  // namespace mocker::protocol
