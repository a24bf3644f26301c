// Pure parts of `mocker index`: the --worker syntax and the query protocol codec.
#include <gtest/gtest.h>

#include "tools/index/index_service.h"
#include "tools/index/query_protocol.h"

namespace mocker::index {
namespace {

std::string hex(const std::vector<std::byte>& b) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::byte x : b) {
    s += digits[std::to_integer<int>(x) >> 4];
    s += digits[std::to_integer<int>(x) & 15];
  }
  return s;
}

TEST(WorkerSpec, EventsOnly) {
  auto w = parseWorkerSpec("7=tcp://127.0.0.1:5557");
  ASSERT_TRUE(w.has_value()) << w.error().message;
  ASSERT_EQ(w->size(), 1u);
  EXPECT_EQ((*w)[0], (WorkerEndpoint{.worker_id = 7, .events = "tcp://127.0.0.1:5557"}));
}

TEST(WorkerSpec, AllOptionsAndExplicitRank) {
  auto w = parseWorkerSpec(
      "18446744073709551615/3=tcp://h:1,replay=tcp://h:2,snapshot=tcp://h:3,topic=kv@a@b");
  ASSERT_TRUE(w.has_value()) << w.error().message;
  ASSERT_EQ(w->size(), 1u);
  EXPECT_EQ((*w)[0], (WorkerEndpoint{.worker_id = 18446744073709551615u,
                                     .dp_rank = 3,
                                     .events = "tcp://h:1",
                                     .replay = "tcp://h:2",
                                     .snapshot = "tcp://h:3",
                                     .topic = "kv@a@b"}));
}

TEST(WorkerSpec, DpExpandsWithPortOffsets) {
  auto w = parseWorkerSpec("1=tcp://h:5557,replay=tcp://h:6000,snapshot=tcp://h:5555,dp=3");
  ASSERT_TRUE(w.has_value()) << w.error().message;
  ASSERT_EQ(w->size(), 3u);
  for (std::uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ((*w)[r].dp_rank, r);
    EXPECT_EQ((*w)[r].events, "tcp://h:" + std::to_string(5557 + r));
    EXPECT_EQ((*w)[r].replay, "tcp://h:" + std::to_string(6000 + r));
    EXPECT_EQ((*w)[r].snapshot, "tcp://h:5555");
  }
}

TEST(WorkerSpec, ErrorsNameTheProblem) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"tcp://h:1", "expected ID"},
      {"x=tcp://h:1", "ID"},
      {"-1=tcp://h:1", "ID"},
      {"1=", "missing the KV-event endpoint"},
      {"1=tcp://h:1,replay", "not key=value"},
      {"1=tcp://h:1,foo=1", "unknown option 'foo'"},
      {"1=tcp://h:1,dp=0", "dp must be"},
      {"1/0=tcp://h:1,dp=2", "either /RANK or dp=N"},
      {"1/x=tcp://h:1", "RANK"},
      {"1=tcp://h:1,replay=", "needs a value"},
      {"1=tcp://h,dp=2", "tcp://h"},
  };
  for (const auto& [spec, what] : bad) {
    auto w = parseWorkerSpec(spec);
    ASSERT_FALSE(w.has_value()) << spec;
    EXPECT_NE(w.error().message.find(what), std::string::npos) << spec << ": " << w.error().message;
  }
}

TEST(QueryProtocol, DocumentedExamplesRoundTrip) {
  // The README's examples, byte for byte.
  const OverlapQuery by_tokens{
      .id = "q1", .tokens = std::vector<std::uint32_t>{1, 2, 3, 4, 5, 6, 7, 8}, .block_size = 4};
  EXPECT_EQ(hex(encodeQueryRequest(by_tokens)),
            "84a474797065a76f7665726c6170a26964a27131a6746f6b656e739801020304050607"
            "08aa626c6f636b5f73697a6504");
  const OverlapQuery by_hashes{
      .block_hashes = std::vector<std::uint64_t>{0xcb38e4d7fb2dca5cu, 0x44a2b2379d6d3c3du}};
  EXPECT_EQ(hex(encodeQueryRequest(by_hashes)),
            "82a474797065a76f7665726c6170ac626c6f636b5f68617368657392cfcb38e4d7fb2dca5ccf44a2"
            "b2379d6d3c3d");
  const OverlapReply reply{
      .id = "q1", .num_blocks = 2, .workers = {{.worker_id = 7, .blocks = 2, .ranks = {{0, 2}}}}};
  EXPECT_EQ(hex(encodeQueryReply(reply)),
            "84a474797065ad6f7665726c61705f7265706c79a26964a27131aa6e756d5f626c6f636b7302a7"
            "776f726b6572739183a9776f726b65725f696407a6626c6f636b7302a572616e6b739182a76470"
            "5f72616e6b00a6626c6f636b7302");

  for (const QueryRequest& q : {QueryRequest{by_tokens}, QueryRequest{by_hashes},
                                QueryRequest{StatsQuery{"s"}}, QueryRequest{VerifyQuery{}},
                                QueryRequest{OverlapQuery{.tokens = std::vector<std::uint32_t>{},
                                .block_size = 16,
                                .hash_seed = 1,
                                .chain_seed = 2}}}) {
    auto back = decodeQueryRequest(encodeQueryRequest(q));
    ASSERT_TRUE(back.has_value()) << back.error().message;
    EXPECT_EQ(*back, q);
  }
  const VerifyReply v{.id = std::nullopt,
                      .ok = false,
                      .sources = {{.worker_id = 1,
                                   .dp_rank = 2,
                                   .index_blocks = 3,
                                   .worker_blocks = 4,
                                   .missing = {5, 6},
                                   .extra = {~std::uint64_t{0}}}},
                      .errors = {"boom"}};
  for (const QueryReply& r :
       {QueryReply{reply}, QueryReply{v}, QueryReply{StatsReply{"x", {{"a", 1}, {"b", 2}}}},
        QueryReply{QueryError{"e", "bad"}}}) {
    auto back = decodeQueryReply(encodeQueryReply(r));
    ASSERT_TRUE(back.has_value()) << back.error().message;
    EXPECT_EQ(*back, r);
  }
}

TEST(QueryProtocol, MalformedRequestsAreErrors) {
  const std::vector<std::vector<std::byte>> bad = {
      {},
      {std::byte{0xc1}},
      {std::byte{0x90}},                                   // []
      {std::byte{0x80}},                                   // {}
      {std::byte{0x81}, std::byte{0xa4}, std::byte{'t'}},  // truncated
  };
  for (const auto& b : bad) {
    EXPECT_FALSE(decodeQueryRequest(b).has_value()) << hex(b);
    EXPECT_FALSE(decodeQueryReply(b).has_value()) << hex(b);
  }
  // Huge tokens count (array32 header claiming 2^32-1 entries) with no body.
  const std::vector<std::byte> huge = {
      std::byte{0x82}, std::byte{0xa4}, std::byte{'t'},  std::byte{'y'},  std::byte{'p'},
      std::byte{'e'},  std::byte{0xa7}, std::byte{'o'},  std::byte{'v'},  std::byte{'e'},
      std::byte{'r'},  std::byte{'l'},  std::byte{'a'},  std::byte{'p'},  std::byte{0xa6},
      std::byte{'t'},  std::byte{'o'},  std::byte{'k'},  std::byte{'e'},  std::byte{'n'},
      std::byte{'s'},  std::byte{0xdd}, std::byte{0xff}, std::byte{0xff}, std::byte{0xff},
      std::byte{0xff}};
  EXPECT_FALSE(decodeQueryRequest(huge).has_value());
}

}  // namespace
}  // namespace mocker::index
