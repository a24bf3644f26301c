#include "protocol/client.h"

#include <gtest/gtest.h>

#include "protocol/detail/client_names.h"

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

const std::string kRoutingId(
    "\x00k\x8b"
    "Eg",
    5);

const std::string kKey = [] {
  std::string k;
  for (int i = 0xa0; i < 0xb0; ++i) k.push_back(static_cast<char>(i));
  return k;
}();

HandoffTicket goldenTicket() {
  return {.source = "tcp://10.0.0.7:5560",
          .key = kKey,
          .source_rank = 0,
          .block_size = 16,
          .prompt_len = 40,
          .cached_tokens = 16,
          .transfer_ms = 1.25};
}

std::vector<std::uint32_t> iota(std::uint32_t from, std::uint32_t to) {
  std::vector<std::uint32_t> v;
  for (std::uint32_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

// Each golden file of tests/data/protocol/client_*.hex and the C++ value it must equal.
std::vector<std::pair<std::string, ClientMessage>> clientGoldens() {
  return {
      {"client_submit_min", SubmitRequest{.id = "r1", .prompt = {1, 2, 3}, .max_tokens = 2}},
      {"client_submit_full", SubmitRequest{.id = "req-42",
                                           .prompt = {1, 200, 70000},
                                           .max_tokens = 3,
                                           .output_tokens = std::vector<std::uint32_t>{7, 8, 9},
                                           .dp_rank = 1,
                                           .arrival_ms = 12.5,
                                           .priority = -2}},
      {"client_submit_ack", SubmitAck{.id = "r1", .dp_rank = 0}},
      {"client_submit_reject", SubmitReject{.id = "r1", .reason = "duplicate active request id"}},
      {"client_output",
       OutputBatch{
           .outputs =
               {
                   {.id = "r1", .index = 0, .tokens = {24979}, .cached_tokens = 16},
                   {.id = "r2", .index = 5, .tokens = {7036, 1001}},
                   {.id = "r3",
                    .index = 2,
                    .tokens = {},
                    .finish = FinishReason::Cancelled,
                    .reason = "cancelled by client"},
                   {.id = "r4", .index = 9, .tokens = {1234}, .finish = FinishReason::Length},
               }}},
      {"client_cancel", CancelRequest{.id = "r1"}},
      {"client_cancel_client", CancelRequest{.id = "r1", .client = kRoutingId}},
      {"client_cancel_reply_applied", CancelReply{.id = "r1", .result = CancelResult::Applied}},
      {"client_cancel_reply_not_found", CancelReply{.id = "r9", .result = CancelResult::NotFound}},
      {"client_error",
       ErrorReply{
           .code = ErrorCode::Unsupported,
           .message = "v: protocol version 2 is not supported (this peer speaks version 1)"}},
      {"client_error_id",
       ErrorReply{
           .code = ErrorCode::InvalidArgument, .message = "dp_rank: 4 >= dp_size 2", .id = "r1"}},
      {"client_stats", StatsRequest{}},
      {"client_stats_reply",
       StatsReply{.ranks = {{.dp_rank = 0,
                             .active_blocks = 10,
                             .total_blocks = 16384,
                             .kv_usage = 0.25,
                             .running = 2,
                             .waiting = 1,
                             .preemptions = 0,
                             .prefix_queries_tokens = 4096,
                             .prefix_hit_tokens = 1024},
                            {.dp_rank = 1, .total_blocks = 16384, .preemptions = 3}},
                  .routes = 3,
                  .clients = {{kRoutingId, 2}, {"bob", 1}},
                  .client_entries = 2}},
      {"client_kv_snapshot", KvSnapshotRequest{}},
      {"client_kv_snapshot_rank", KvSnapshotRequest{.dp_rank = 1}},
      {"client_kv_snapshot_reply",
       KvSnapshotReply{.ranks = {{.dp_rank = 0,
                                  .block_hashes = {0x44a2b2379d6d3c3dull, 0xaea1e67a6c80cf84ull,
                                                   0xcb38e4d7fb2dca5cull}},
                                 {.dp_rank = 1, .block_hashes = {}}}}},
      {"client_kv_snapshot_reply_seq",
       KvSnapshotReply{.ranks = {{.dp_rank = 0,
                                  .block_hashes = {0x44a2b2379d6d3c3dull, 0xaea1e67a6c80cf84ull},
                                  .last_seq = 41},
                                 {.dp_rank = 1, .block_hashes = {}}}}},
      {"client_handoff", Handoff{.id = "r1", .ticket = goldenTicket()}},
      {"client_submit_handoff",
       SubmitRequest{
           .id = "d1", .prompt = iota(1, 41), .max_tokens = 4, .handoff = goldenTicket()}},
      {"client_kv_fetch", KvFetch{.key = kKey, .tokens = 24}},
      {"client_kv_fetch_reply", KvFetchReply{.key = kKey, .result = KvFetchResult::Ready}},
      {"client_kv_release", KvRelease{.key = kKey}},
      {"client_lora_load", LoraLoad{.name = "sql-lora"}},
      {"client_lora_unload", LoraUnload{.name = "sql-lora"}},
      {"client_lora_reply", LoraReply{.op = LoraOp::Load, .name = "sql-lora", .changed = true}},
      {"client_lora_reply_error",
       LoraReply{.op = LoraOp::Unload,
                 .name = "sql-lora",
                 .error = ErrorCode::Unsupported,
                 .message = "lora_unload: LoRA is off on this engine (max_loras 0)"}},
      {"client_stats_reply_handoff", StatsReply{.ranks = {{.dp_rank = 0,
                                                           .active_blocks = 3,
                                                           .total_blocks = 64,
                                                           .kv_usage = 0.046875,
                                                           .prefix_queries_tokens = 40,
                                                           .prefix_hit_tokens = 16,
                                                           .held = 1,
                                                           .pending_handoffs = 0,
                                                           .handoff_expired = 2}},
                                                .routes = 1,
                                                .client_entries = 1}},
  };
}

TEST(ClientGoldenTest, EncodersMatchPythonGoldensAndDecodeBack) {
  const auto goldens = clientGoldens();
  EXPECT_EQ(goldens.size(), 27u);
  for (const auto& [name, message] : goldens) {
    SCOPED_TRACE(name);
    const Bytes golden = readGolden(name);
    EXPECT_EQ(toHex(encodeClientMessage(message)), toHex(golden));
    const auto decoded = decodeClientMessage(golden);
    ASSERT_TRUE(decoded.has_value()) << decoded.error().toString();
    EXPECT_EQ(*decoded, message);
  }
}

// stats_reply gained `client_entries` (optional): a reply from a service that predates it
// still decodes, and an old decoder skips the new key (decoders ignore unknown keys).
TEST(ClientGoldenTest, StatsReplyWithoutClientEntriesStillDecodes) {
  StatsReply old{.routes = 3, .clients = {{"bob", 3}}};
  const Bytes bytes = encodeClientMessage(old);
  EXPECT_EQ(toHex(bytes).find("client_entries"), std::string::npos);
  const auto decoded = decodeClientMessage(bytes);
  ASSERT_TRUE(decoded.has_value()) << decoded.error().toString();
  EXPECT_EQ(*decoded, ClientMessage{old});
  EXPECT_FALSE(std::get<StatsReply>(*decoded).client_entries.has_value());
}

// stats_reply gained `timing` (optional, after client_entries): it round-trips, and a damaged
// one is refused naming the key.
TEST(ClientGoldenTest, StatsReplyTimingRoundTripsAndIsChecked) {
  StatsReply r{.routes = 1,
               .client_entries = 1,
               .timing = PassTiming{.passes = 12345,
                                    .resyncs = 2,
                                    .lateness_mean_ms = 0.0125,
                                    .lateness_p50_ms = 0.011,
                                    .lateness_p99_ms = 0.9,
                                    .lateness_max_ms = 7.5}};
  const auto decoded = decodeClientMessage(encodeClientMessage(r));
  ASSERT_TRUE(decoded.has_value()) << decoded.error().toString();
  EXPECT_EQ(*decoded, ClientMessage{r});

  r.timing->lateness_p99_ms = -1.0;
  const auto negative = decodeClientMessage(encodeClientMessage(r));
  ASSERT_FALSE(negative.has_value());
  EXPECT_NE(negative.error().message.find("timing.lateness_p99_ms"), std::string::npos)
      << negative.error().message;
}

// stats_reply gained `engine` (optional, last): it round-trips, a reply without it still decodes,
// and a block size of 0 or a negative speedup is refused naming the key.
TEST(ClientGoldenTest, StatsReplyEngineRoundTripsAndIsChecked) {
  StatsReply r{.routes = 0,
               .engine = EngineInfo{.engine_type = "sglang",
                                    .worker_type = "prefill",
                                    .block_size = 16,
                                    .speedup_ratio = 10.0}};
  const auto decoded = decodeClientMessage(encodeClientMessage(r));
  ASSERT_TRUE(decoded.has_value()) << decoded.error().toString();
  EXPECT_EQ(*decoded, ClientMessage{r});
  EXPECT_NE(toHex(encodeClientMessage(r)).find("656e67696e65"), std::string::npos);  // "engine"
  EXPECT_EQ(toHex(encodeClientMessage(StatsReply{})).find("656e67696e65"), std::string::npos);

  // The length limit: optional, both keys or neither; 0 or an unknown name refused.
  StatsReply limited = r;
  limited.engine->length_limit = 4096;
  limited.engine->length_limit_name = "max_model_len";
  const auto with_limit = decodeClientMessage(encodeClientMessage(limited));
  ASSERT_TRUE(with_limit.has_value()) << with_limit.error().toString();
  EXPECT_EQ(*with_limit, ClientMessage{limited});
  EXPECT_EQ(toHex(encodeClientMessage(r)).find("6c656e677468"), std::string::npos);  // "length"
  StatsReply other_name = limited;
  other_name.engine->length_limit_name = "max_tokens";
  const auto o = decodeClientMessage(encodeClientMessage(other_name));
  ASSERT_FALSE(o.has_value());
  EXPECT_NE(o.error().message.find("engine.length_limit_name"), std::string::npos)
      << o.error().message;

  StatsReply zero = r;
  zero.engine->block_size = 0;
  const auto z = decodeClientMessage(encodeClientMessage(zero));
  ASSERT_FALSE(z.has_value());
  EXPECT_NE(z.error().message.find("engine.block_size"), std::string::npos) << z.error().message;
  StatsReply negative = r;
  negative.engine->speedup_ratio = -1.0;
  const auto n = decodeClientMessage(encodeClientMessage(negative));
  ASSERT_FALSE(n.has_value());
  EXPECT_NE(n.error().message.find("engine.speedup_ratio"), std::string::npos) << n.error().message;
}

TEST(ClientGoldenTest, StatsReplyFaultsRoundTripAndAreChecked) {
  StatsReply r{.routes = 0,
               .faults = FaultCounts{.crash = 1, .hang = 2, .slow = 3, .error = 4, .abort = 5}};
  const auto decoded = decodeClientMessage(encodeClientMessage(r));
  ASSERT_TRUE(decoded.has_value()) << decoded.error().toString();
  EXPECT_EQ(*decoded, ClientMessage{r});
  EXPECT_EQ(toHex(encodeClientMessage(StatsReply{})).find("666175"), std::string::npos);  // "fau"
  // A count of the wrong type is named.
  std::vector<std::byte> bytes = encodeClientMessage(r);
  const std::string hex = toHex(bytes);
  const std::size_t at =
      hex.find("a5" + toHex(std::vector<std::byte>{std::byte{'a'}, std::byte{'b'}, std::byte{'o'},
                                                   std::byte{'r'}, std::byte{'t'}}));
  ASSERT_NE(at, std::string::npos);
  bytes[at / 2 + 6] = std::byte{0xc0};  // abort: nil
  const auto bad = decodeClientMessage(bytes);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("faults"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("abort"), std::string::npos) << bad.error().message;
}

TEST(ClientGoldenTest, StatsReplyKvFaultCountsRoundTripAndMayBeAbsent) {
  StatsReply r{.routes = 0,
               .faults = FaultCounts{.drop = 6,
                                     .drop_unhealable = 7,
                                     .suppress = 8,
                                     .duplicate = 9,
                                     .reorder = 10,
                                     .delay = 11,
                                     .truncate_ring = 12,
                                     .fpm_stop = 13,
                                     .metrics_freeze = 14,
                                     .fetch_not_found = 15,
                                     .fetch_late = 16,
                                     .fetch_never = 17,
                                     .restart = 18,
                                     .silent = 19}};
  const auto decoded = decodeClientMessage(encodeClientMessage(r));
  ASSERT_TRUE(decoded.has_value()) << decoded.error().toString();
  EXPECT_EQ(*decoded, ClientMessage{r});
  // A service that predates them sends the first five keys only (faults is the last field):
  // cut the fourteen KV-event, metrics, kv_fetch, restart and silent pairs (a key and a one-byte
  // count each) and make the map header (map16, 19 entries) a fixmap of 5.
  std::vector<std::byte> bytes = encodeClientMessage(StatsReply{.faults = FaultCounts{.abort = 5}});
  std::size_t kv_bytes = 0;
  for (std::size_t i = protocol::detail::kRequiredFaultCountKeys;
       i < protocol::detail::kFaultCountKeys.size(); ++i) {
    kv_bytes += 1 + protocol::detail::kFaultCountKeys[i].first.size() + 1;
  }
  const std::string hex = toHex(bytes);
  const std::size_t header = hex.find(
      "de0013a5" + toHex(std::vector<std::byte>{std::byte{'c'}, std::byte{'r'}, std::byte{'a'},
                                                std::byte{'s'}, std::byte{'h'}}));
  ASSERT_NE(header, std::string::npos);
  bytes[header / 2] = std::byte{0x85};
  bytes.erase(bytes.begin() + static_cast<std::ptrdiff_t>(header / 2) + 1,
              bytes.begin() + static_cast<std::ptrdiff_t>(header / 2) + 3);
  bytes.resize(bytes.size() - kv_bytes);
  const auto old = decodeClientMessage(bytes);
  ASSERT_TRUE(old.has_value()) << old.error().toString();
  EXPECT_EQ(std::get<StatsReply>(*old).faults, FaultCounts{.abort = 5});
}

TEST(ClientGoldenTest, EveryMessageTypeIsCovered) {
  std::vector<bool> seen(std::variant_size_v<ClientMessage>, false);
  for (const auto& [name, message] : clientGoldens()) seen[message.index()] = true;
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_TRUE(seen[i]) << "variant index " << i;
}

TEST(ClientRoundTripTest, MessageTypesAndExtremes) {
  SubmitRequest big{.id = std::string(kMaxRequestIdBytes, 'x'),
                    .prompt = std::vector<std::uint32_t>(5000, 4294967295u),
                    .max_tokens = 4294967295u,
                    .output_tokens = std::vector<std::uint32_t>{},
                    .dp_rank = 0,
                    .arrival_ms = -0.0,
                    .priority = std::numeric_limits<std::int64_t>::min(),
                    .lora = std::string(kMaxLoraNameBytes, 'l')};
  const auto d = decodeClientMessage(encodeClientMessage(big));
  ASSERT_TRUE(d.has_value()) << d.error().toString();
  EXPECT_EQ(std::get<SubmitRequest>(*d), big);
  for (const auto& [name, message] : clientGoldens()) {
    EXPECT_EQ(*decodeClientMessage(encodeClientMessage(message)), message) << name;
  }
  EXPECT_EQ(messageType(ClientMessage{OutputBatch{}}), "output");
  EXPECT_EQ(messageType(ClientMessage{KvSnapshotReply{}}), "kv_snapshot_reply");
  EXPECT_EQ(messageType(ClientMessage{Handoff{}}), "handoff");
  EXPECT_EQ(messageType(ClientMessage{KvRelease{}}), "kv_release");
  KvFetchReply gone{.key = kKey, .result = KvFetchResult::NotFound};
  EXPECT_EQ(std::get<KvFetchReply>(*decodeClientMessage(encodeClientMessage(gone))), gone);
}

TEST(ClientDecodeTest, AllFinishReasons) {
  for (FinishReason r : {FinishReason::Length, FinishReason::Cancelled, FinishReason::Rejected,
                         FinishReason::Error, FinishReason::Shutdown}) {
    const OutputBatch b{.outputs = {{.id = "a", .index = 0, .tokens = {}, .finish = r}}};
    EXPECT_EQ(std::get<OutputBatch>(*decodeClientMessage(encodeClientMessage(b))), b);
    EXPECT_EQ(*parseFinishReason(toString(r)), r);
  }
}

TEST(ClientDecodeTest, VersionTwoIsRefusedClearly) {
  const auto r = decodeClientMessage(mp({{"v", 2}, {"type", "submit"}, {"id", "x"}}));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::Unsupported);
  EXPECT_EQ(r.error().message,
            "v: protocol version 2 is not supported (this peer speaks version 1)");
}

TEST(ClientDecodeTest, UnknownKeysAndNilOptionalsAreIgnored) {
  const auto r = decodeClientMessage(mp({{"v", 1},
                                         {"type", "submit"},
                                         {"id", "a"},
                                         {"prompt", {1}},
                                         {"max_tokens", 1},
                                         {"dp_rank", nullptr},
                                         {"future_field", {{"x", 1}}}}));
  ASSERT_TRUE(r.has_value()) << r.error().toString();
  EXPECT_FALSE(std::get<SubmitRequest>(*r).dp_rank.has_value());
}

TEST(ClientDecodeTest, PeekRequestIdOfAnOtherwiseBadMessage) {
  EXPECT_EQ(peekRequestId(mp({{"v", 1}, {"type", "submit"}, {"id", "r7"}, {"prompt", "x"}})), "r7");
  EXPECT_FALSE(peekRequestId(fromHex("81")).has_value());
  EXPECT_FALSE(peekRequestId(mp({{"id", 5}})).has_value());
}

TEST(ClientDecodeTest, PeekRequestIdNeverReturnsInvalidUtf8) {
  // The service echoes the peeked id in its error reply: an id that is not UTF-8 stays out.
  EXPECT_FALSE(peekRequestId(mp({{"v", 1},
                                 {"type", "submit"},
                                 {"id", std::string("\xff\xfe"
                                                    "A")}}))
                   .has_value());
  // A map key that is not UTF-8 makes the whole map unreadable.
  EXPECT_FALSE(peekRequestId(mp({{"id", "r7"}, {std::string("\xc0\x80"), 1}})).has_value());
  EXPECT_EQ(peekRequestId(mp({{"id", "r\xc3\xa9"}})), "r\xc3\xa9");
}

TEST(ClientDecodeTest, QuotedStringsAreCutOnCharacterBoundaries) {
  // 63 ASCII bytes then a 2-byte character straddling the 64-byte quote limit.
  const std::string type = std::string(63, 't') + "\xc3\xa9" + "tail";
  const auto r = decodeClientMessage(mp({{"v", 1}, {"type", type}}));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message, "type: unknown message type '" + std::string(63, 't') + "'");
}

Json submit() {
  return {{"v", 1}, {"type", "submit"}, {"id", "r1"}, {"prompt", {1, 2}}, {"max_tokens", 4}};
}
Json submitWith(const std::string& key, Json v) {
  Json j = submit();
  j[key] = std::move(v);
  return j;
}
Json submitWithout(const std::string& key) {
  Json j = submit();
  j.erase(key);
  return j;
}
Json msg(const std::string& type, Json fields) {
  Json j = {{"v", 1}, {"type", type}};
  for (auto& [k, v] : fields.items()) j[k] = v;
  return j;
}
Json output(Json entry) { return msg("output", {{"outputs", Json::array({entry})}}); }

Json ticket() {
  return {{"source", "tcp://10.0.0.7:5560"},
          {"key", Json::binary(std::vector<std::uint8_t>(16, 7))},
          {"source_rank", 0},
          {"block_size", 16},
          {"prompt_len", 2},
          {"cached_tokens", 0},
          {"transfer_ms", 0.5}};
}
Json ticketWith(const std::string& key, Json v) {
  Json t = ticket();
  t[key] = std::move(v);
  return t;
}
Json handoffWith(Json t) { return msg("handoff", {{"id", "r1"}, {"ticket", std::move(t)}}); }

std::vector<DamageCase> clientDamageCatalogue() {
  const Bytes ok = mp(submit());
  Json wide = submit();
  for (int i = 0; i < 70; ++i) wide[std::to_string(i).insert(0, 1, 'k')] = i;
  Bytes deep = fromHex("86 a1 76 01 a4 74797065 a6 7375626d6974 a2 6964 a1 61 a6 70726f6d7074");
  for (int i = 0; i < 12; ++i) deep.push_back(std::byte{0x91});
  deep.push_back(std::byte{0x01});
  deep = concat(deep, fromHex("aa 6d61785f746f6b656e73 01"));
  const auto E = ErrorCode::Corruption;
  const auto I = ErrorCode::InvalidArgument;
  const auto U = ErrorCode::Unsupported;
  return {
      {"empty input", {}, E, "message: empty"},
      {"truncated", prefix(ok, ok.size() / 2), E, "truncated"},
      {"trailing bytes", concat(ok, fromHex("01")), E, "1 trailing bytes"},
      {"root is an array", mp(Json::array({1, "submit"})), E, "message: expected map, got array"},
      {"v missing", mp({{"type", "stats"}}), E, "v: missing"},
      {"v is 2", mp({{"v", 2}, {"type", "stats"}}), U, "v: protocol version 2 is not supported"},
      {"v is 0", mp({{"v", 0}, {"type", "stats"}}), U, "version 0"},
      {"v is a str", mp({{"v", "1"}, {"type", "stats"}}), E, "v: expected unsigned integer"},
      {"v is negative", mp({{"v", -1}, {"type", "stats"}}), U,
       "v: protocol version -1 is not supported"},
      {"type missing", mp({{"v", 1}}), E, "type: missing"},
      {"type is an int", mp({{"v", 1}, {"type", 3}}), E, "type: expected str"},
      {"unknown type", mp({{"v", 1}, {"type", "subscribe"}}), E,
       "type: unknown message type 'subscribe'"},
      {"submit without id", mp(submitWithout("id")), E, "id: missing"},
      {"submit id is an int", mp(submitWith("id", 7)), E, "id: expected str"},
      {"submit id empty", mp(submitWith("id", "")), I, "id: must not be empty"},
      {"submit id too long", mp(submitWith("id", std::string(257, 'x'))), I,
       "id: string of 257 bytes exceeds the limit of 256"},
      {"submit without prompt", mp(submitWithout("prompt")), E, "prompt: missing"},
      {"prompt is a str", mp(submitWith("prompt", "hello")), E, "prompt: expected array, got str"},
      {"prompt token is a str", mp(submitWith("prompt", {1, "2"})), E,
       "prompt[1]: expected unsigned integer, got str"},
      {"prompt token negative", mp(submitWith("prompt", {-1})), I, "prompt[0]: must be >= 0"},
      {"prompt token above u32", mp(submitWith("prompt", {1LL << 32})), I,
       "prompt[0]: 4294967296 exceeds"},
      {"prompt too long", mp(submitWith("prompt", std::vector<int>(kMaxTokensPerRequest + 1, 1))),
       I, "prompt: 1048577 elements exceed the limit of 1048576"},
      {"submit without max_tokens", mp(submitWithout("max_tokens")), E, "max_tokens: missing"},
      {"max_tokens negative", mp(submitWith("max_tokens", -4)), I, "max_tokens: must be >= 0"},
      {"max_tokens above u32", mp(submitWith("max_tokens", 1LL << 40)), I,
       "max_tokens: 1099511627776 exceeds"},
      {"output_tokens element is a float", mp(submitWith("output_tokens", {1.5})), E,
       "output_tokens[0]: expected unsigned integer, got float"},
      {"dp_rank is a str", mp(submitWith("dp_rank", "0")), E, "dp_rank: expected unsigned integer"},
      {"arrival_ms is a str", mp(submitWith("arrival_ms", "now")), E,
       "arrival_ms: expected number"},
      {"priority is a float", mp(submitWith("priority", 0.5)), E, "priority: expected integer"},
      {"lora is an int", mp(submitWith("lora", 3)), E, "lora: expected str"},
      {"lora empty", mp(submitWith("lora", "")), I, "lora: an adapter name must not be empty"},
      {"lora too long", mp(submitWith("lora", std::string(kMaxLoraNameBytes + 1, 'x'))), I,
       "lora: string of 257 bytes exceeds the limit of 256"},
      {"output without outputs", mp(msg("output", Json::object())), E, "outputs: missing"},
      {"outputs is a map", mp(msg("output", {{"outputs", {{"a", 1}}}})), E,
       "outputs: expected array, got map"},
      {"output entry is an int", mp(msg("output", {{"outputs", {1}}})), E,
       "outputs[0]: output: expected map"},
      {"output without index", mp(output({{"id", "a"}, {"tokens", {1}}})), E,
       "outputs[0]: index: missing"},
      {"output token is a str", mp(output({{"id", "a"}, {"index", 0}, {"tokens", {"t"}}})), E,
       "outputs[0]: tokens[0]: expected unsigned integer"},
      {"unknown finish reason",
       mp(output({{"id", "a"}, {"index", 0}, {"tokens", {1}}, {"finish", "stop"}})), E,
       "finish: 'stop' is not one of"},
      {"non-terminal output without tokens",
       mp(output({{"id", "a"}, {"index", 0}, {"tokens", Json::array()}})), I,
       "tokens: empty on a non-terminal output"},
      {"cached_tokens negative",
       mp(output({{"id", "a"}, {"index", 0}, {"tokens", {1}}, {"cached_tokens", -1}})), I,
       "cached_tokens: must be >= 0"},
      {"cancel without id", mp(msg("cancel", Json::object())), E, "id: missing"},
      {"cancel client is an int", mp(msg("cancel", {{"id", "a"}, {"client", 5}})), E,
       "client: expected bin or str"},
      {"cancel client empty", mp(msg("cancel", {{"id", "a"}, {"client", testing::bin({})}})), I,
       "client: routing id must not be empty"},
      {"cancel client too long",
       mp(msg("cancel", {{"id", "a"}, {"client", std::string(256, 'c')}})), I,
       "client: string of 256 bytes"},
      {"cancel_reply bad result", mp(msg("cancel_reply", {{"id", "a"}, {"result", "done"}})), E,
       "result: 'done' is not one of applied, not_found"},
      {"cancel_reply result in another case",
       mp(msg("cancel_reply", {{"id", "a"}, {"result", "Applied"}})), E,
       "result: 'Applied' is not one of applied, not_found"},
      {"submit_ack without dp_rank", mp(msg("submit_ack", {{"id", "a"}})), E, "dp_rank: missing"},
      {"submit_reject without reason", mp(msg("submit_reject", {{"id", "a"}})), E,
       "reason: missing"},
      {"error with unknown code", mp(msg("error", {{"code", "oops"}, {"message", "m"}})), E,
       "code: 'oops' is not a known error code"},
      {"error without message", mp(msg("error", {{"code", "internal"}})), E, "message: missing"},
      {"stats_reply rank without kv_usage",
       mp(msg("stats_reply",
              {{"ranks", {{{"dp_rank", 0}}}}, {"routes", 0}, {"clients", Json::array()}})),
       E, "ranks[0]: active_blocks: missing"},
      {"stats_reply without clients",
       mp(msg("stats_reply", {{"ranks", Json::array()}, {"routes", 0}})), E, "clients: missing"},
      {"kv_snapshot dp_rank negative", mp(msg("kv_snapshot", {{"dp_rank", -1}})), I,
       "dp_rank: must be >= 0"},
      {"kv_snapshot_reply unsorted",
       mp(msg("kv_snapshot_reply", {{"ranks", {{{"dp_rank", 0}, {"block_hashes", {5, 3}}}}}})), I,
       "ranks[0]: block_hashes[1]: hashes must be strictly ascending"},
      {"kv_snapshot_reply hash is a str",
       mp(msg("kv_snapshot_reply", {{"ranks", {{{"dp_rank", 0}, {"block_hashes", {"h"}}}}}})), E,
       "ranks[0]: block_hashes[0]: expected unsigned integer"},
      {"kv_snapshot_reply last_seq is a str",
       mp(msg("kv_snapshot_reply",
              {{"ranks", {{{"dp_rank", 0}, {"block_hashes", Json::array()}, {"last_seq", "s"}}}}})),
       E, "ranks[0]: last_seq: expected unsigned integer"},
      {"duplicate key", fromHex("83 a1 76 01 a4 74797065 a5 7374617473 a1 76 01"), E,
       "duplicate key 'v'"},
      {"too many keys", mp(wide), I, "message: map of 75 entries exceeds the limit of 64"},
      {"nesting too deep", deep, I, "nesting deeper than 8"},
      {"huge declared array", fromHex("82 a1 76 01 a4 74797065 dd 7fffffff"), E,
       "declares 2147483647 entries"},
      {"str length beyond the input", fromHex("82 a1 76 01 a4 74797065 da ffff 61"), E,
       "truncated"},
      {"submit id not UTF-8",
       mp(submitWith("id", std::string("\xff\xfe"
                                       "A"))),
       E, "id: not valid UTF-8 (byte 0xff at offset 0)"},
      {"lora not UTF-8", mp(submitWith("lora", std::string("ad\xc3"))), E,
       "lora: not valid UTF-8 (byte 0xc3 at offset 2)"},
      {"type not UTF-8", mp({{"v", 1}, {"type", std::string("st\xc0\x80ts")}}), E,
       "type: not valid UTF-8 (byte 0xc0 at offset 2)"},
      {"map key not UTF-8", mp(submitWith(std::string("k\xed\xa0\x80"), 1)), E,
       "message: map key 5: not valid UTF-8 (byte 0xed at offset 1)"},
      {"output entry key not UTF-8",
       mp(output({{"id", "a"}, {"index", 0}, {"tokens", {1}}, {std::string("\x80"), 1}})), E,
       "outputs[0]: output: map key 3: not valid UTF-8 (byte 0x80 at offset 0)"},
      {"output id not UTF-8",
       mp(output({{"id", std::string("a\xe2\x82")}, {"index", 0}, {"tokens", {1}}})), E,
       "outputs[0]: id: not valid UTF-8 (byte 0xe2 at offset 1)"},
      {"output reason not UTF-8",
       mp(output({{"id", "a"},
                  {"index", 0},
                  {"tokens", {1}},
                  {"finish", "length"},
                  {"reason", std::string("ok \xf4\x90\x80\x80")}})),
       E, "reason: not valid UTF-8 (byte 0xf4 at offset 3)"},
      {"submit_reject reason not UTF-8",
       mp(msg("submit_reject", {{"id", "a"}, {"reason", std::string("\xfe")}})), E,
       "reason: not valid UTF-8 (byte 0xfe at offset 0)"},
      {"cancel id not UTF-8",
       mp(msg("cancel", {{"id", std::string("\xff\xfe"
                                            "A")}})),
       E, "id: not valid UTF-8 (byte 0xff at offset 0)"},
      {"cancel_reply id not UTF-8",
       mp(msg("cancel_reply", {{"id", std::string("\xc1\xbf")}, {"result", "applied"}})), E,
       "id: not valid UTF-8 (byte 0xc1 at offset 0)"},
      {"error id not UTF-8",
       mp(msg("error",
              {{"code", "internal"}, {"message", "m"}, {"id", std::string("\xed\xbf\xbf")}})),
       E, "id: not valid UTF-8 (byte 0xed at offset 0)"},
      {"error message not UTF-8",
       mp(msg("error", {{"code", "internal"}, {"message", std::string("\xe0\x9f\xbf")}})), E,
       "message: not valid UTF-8 (byte 0xe0 at offset 0)"},
      {"handoff without ticket", mp(msg("handoff", {{"id", "r1"}})), E, "ticket: missing"},
      {"handoff ticket is an array", mp(msg("handoff", {{"id", "r1"}, {"ticket", {1, 2}}})), E,
       "ticket: expected map, got array"},
      {"handoff without id", mp(msg("handoff", {{"ticket", ticket()}})), E, "id: missing"},
      {"ticket key too short",
       mp(handoffWith(ticketWith("key", Json::binary(std::vector<std::uint8_t>(15, 1))))), I,
       "ticket: key: must be exactly 16 bytes, got 15"},
      {"ticket key is an int", mp(handoffWith(ticketWith("key", 5))), E,
       "ticket: key: expected bin or str"},
      {"ticket source empty", mp(handoffWith(ticketWith("source", ""))), I,
       "ticket: source: must not be empty"},
      {"ticket source too long", mp(handoffWith(ticketWith("source", std::string(1025, 's')))), I,
       "ticket: source: string of 1025 bytes exceeds the limit of 1024"},
      {"ticket block_size 0", mp(handoffWith(ticketWith("block_size", 0))), I,
       "ticket: block_size: must be > 0"},
      {"ticket cached beyond prompt", mp(handoffWith(ticketWith("cached_tokens", 3))), I,
       "ticket: cached_tokens: 3 exceeds prompt_len 2"},
      {"ticket transfer_ms negative", mp(handoffWith(ticketWith("transfer_ms", -1.0))), I,
       "ticket: transfer_ms: expected a finite number >= 0"},
      {"ticket without prompt_len", mp(handoffWith([] {
         Json t = ticket();
         t.erase("prompt_len");
         return t;
       }())),
       E, "ticket: prompt_len: missing"},
      {"submit handoff is a str", mp(submitWith("handoff", "t")), E,
       "handoff: expected map, got str"},
      {"submit handoff source_rank negative",
       mp(submitWith("handoff", ticketWith("source_rank", -1))), I,
       "handoff: source_rank: must be >= 0"},
      {"kv_fetch without tokens",
       mp(msg("kv_fetch", {{"key", Json::binary(std::vector<std::uint8_t>(16, 1))}})), E,
       "tokens: missing"},
      {"kv_fetch without key", mp(msg("kv_fetch", {{"tokens", 4}})), E, "key: missing"},
      {"kv_fetch key too long",
       mp(msg("kv_fetch",
              {{"key", Json::binary(std::vector<std::uint8_t>(17, 1))}, {"tokens", 4}})),
       I, "key: must be exactly 16 bytes, got 17"},
      {"kv_fetch_reply bad result",
       mp(msg("kv_fetch_reply",
              {{"key", Json::binary(std::vector<std::uint8_t>(16, 1))}, {"result", "done"}})),
       E, "result: 'done' is not one of ready, not_found"},
      {"kv_fetch_reply result in another case",
       mp(msg("kv_fetch_reply",
              {{"key", Json::binary(std::vector<std::uint8_t>(16, 1))}, {"result", "READY"}})),
       E, "result: 'READY' is not one of ready, not_found"},
      {"kv_release key is nil", mp(msg("kv_release", {{"key", nullptr}})), E,
       "key: expected bin or str, got nil"},
      {"stats_reply held is a str",
       mp(msg("stats_reply", {{"ranks",
                               {{{"dp_rank", 0},
                                 {"active_blocks", 0},
                                 {"total_blocks", 1},
                                 {"kv_usage", 0.0},
                                 {"running", 0},
                                 {"waiting", 0},
                                 {"preemptions", 0},
                                 {"prefix_queries_tokens", 0},
                                 {"prefix_hit_tokens", 0},
                                 {"held", "x"}}}},
                              {"routes", 0},
                              {"clients", Json::array()}})),
       E, "ranks[0]: held: expected unsigned integer"},
      {"lora_load without name", mp(msg("lora_load", Json::object())), E, "name: missing"},
      {"lora_load name is an int", mp(msg("lora_load", {{"name", 7}})), E,
       "name: expected str, got"},
      {"lora_load name empty", mp(msg("lora_load", {{"name", ""}})), I,
       "name: an adapter name must not be empty"},
      {"lora_unload name too long",
       mp(msg("lora_unload", {{"name", std::string(kMaxLoraNameBytes + 1, 'x')}})), I,
       "name: string of 257 bytes exceeds the limit of 256"},
      {"lora_unload name not UTF-8", mp(msg("lora_unload", {{"name", std::string("a\xc3")}})), E,
       "name: not valid UTF-8 (byte 0xc3 at offset 1)"},
      {"lora_reply op unknown",
       mp(msg("lora_reply",
              {{"op", "reload"}, {"name", "a"}, {"result", "ok"}, {"changed", true}})),
       E, "op: 'reload' is not one of load, unload"},
      {"lora_reply result unknown",
       mp(msg("lora_reply",
              {{"op", "load"}, {"name", "a"}, {"result", "busy"}, {"changed", false}})),
       E, "result: 'busy' is neither 'ok' nor an error code"},
      {"lora_reply changed is an int",
       mp(msg("lora_reply", {{"op", "load"}, {"name", "a"}, {"result", "ok"}, {"changed", 1}})), E,
       "changed: expected bool"},
      {"lora_reply changed with an error",
       mp(msg("lora_reply",
              {{"op", "load"}, {"name", "a"}, {"result", "internal"}, {"changed", true}})),
       I, "changed: true with result 'internal'"},
      {"cancel client str not UTF-8",
       mp(msg("cancel", {{"id", "a"}, {"client", std::string("\xff")}})), E,
       "client: not valid UTF-8 (byte 0xff at offset 0)"},
  };
}

TEST(ClientDamageTest, EveryCaseIsRefusedWithTheNamedField) {
  expectEveryCaseRefused(clientDamageCatalogue(),
                         [](const Bytes& b) { return decodeClientMessage(b); });
}

TEST(ClientDamageTest, EveryTruncationOfEveryGoldenIsRefused) {
  for (const auto& [name, message] : clientGoldens()) {
    const Bytes golden = readGolden(name);
    for (std::size_t n = 0; n < golden.size(); ++n) {
      EXPECT_FALSE(decodeClientMessage(prefix(golden, n)).has_value()) << name << " " << n;
    }
  }
}

}  // namespace
}  // namespace mocker::protocol
