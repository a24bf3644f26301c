// The query protocol of `mocker index` (protocol/index_query.h): documented examples round-trip,
// malformed input is refused.
#include "protocol/index_query.h"

#include <gtest/gtest.h>

#include "protocol/limits.h"
#include "tests/protocol/protocol_test_util.h"

namespace mocker::index {
namespace {

using protocol::testing::toHex;

TEST(QueryProtocol, DocumentedExamplesRoundTrip) {
  // The README's examples, byte for byte.
  const OverlapQuery by_tokens{
      .id = "q1", .tokens = std::vector<std::uint32_t>{1, 2, 3, 4, 5, 6, 7, 8}, .block_size = 4};
  EXPECT_EQ(toHex(encodeQueryRequest(by_tokens)),
            "84a474797065a76f7665726c6170a26964a27131a6746f6b656e739801020304050607"
            "08aa626c6f636b5f73697a6504");
  const OverlapQuery by_hashes{
      .block_hashes = std::vector<std::uint64_t>{0xcb38e4d7fb2dca5cu, 0x44a2b2379d6d3c3du}};
  EXPECT_EQ(toHex(encodeQueryRequest(by_hashes)),
            "82a474797065a76f7665726c6170ac626c6f636b5f68617368657392cfcb38e4d7fb2dca5ccf44a2"
            "b2379d6d3c3d");
  const OverlapReply reply{
      .id = "q1", .num_blocks = 2, .workers = {{.worker_id = 7, .blocks = 2, .ranks = {{0, 2}}}}};
  EXPECT_EQ(toHex(encodeQueryReply(reply)),
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

// "with_cached" asks for each rank's cache size; replies carry it as "cached" only then, so
// the documented bytes above stay what they were.
TEST(QueryProtocol, WithCachedRoundTrips) {
  const OverlapQuery q{.block_hashes = std::vector<std::uint64_t>{1, 2}, .with_cached = true};
  const auto bytes = encodeQueryRequest(q);
  // Last key: ab"with_cached" c3 (true).
  EXPECT_TRUE(toHex(bytes).ends_with("ab776974685f636163686564c3")) << toHex(bytes);
  auto back = decodeQueryRequest(bytes);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(*back, QueryRequest{q});
  const OverlapReply reply{.num_blocks = 2,
                           .workers = {{.worker_id = 3,
                                        .blocks = 1,
                                        .ranks = {{.dp_rank = 0, .blocks = 1, .cached = 40},
                                                  {.dp_rank = 1, .blocks = 0, .cached = 0}}}}};
  auto reply_back = decodeQueryReply(encodeQueryReply(reply));
  ASSERT_TRUE(reply_back.has_value()) << reply_back.error().message;
  EXPECT_EQ(*reply_back, QueryReply{reply});
  // Not a boolean: an error naming the key.
  std::vector<std::byte> not_bool = bytes;
  not_bool.back() = std::byte{0x01};  // "with_cached": 1
  auto bad = decodeQueryRequest(not_bool);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("with_cached"), std::string::npos) << bad.error().message;
}

// "tiers" asks for each rank's prefix per KV tier; replies carry it as "tiers": {"GPU", "CPU",
// "DISK"} only then. Hostile forms (not a boolean; a reply's map missing a tier) are errors
// naming the key.
TEST(QueryProtocol, TiersRoundTripAndMalformedFormsAreErrors) {
  const OverlapQuery q{.block_hashes = std::vector<std::uint64_t>{1, 2}, .tiers = true};
  const auto bytes = encodeQueryRequest(q);
  // Last key: a5"tiers" c3 (true).
  EXPECT_TRUE(toHex(bytes).ends_with("a57469657273c3")) << toHex(bytes);
  auto back = decodeQueryRequest(bytes);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(*back, QueryRequest{q});
  const OverlapReply reply{
      .num_blocks = 5,
      .workers = {{.worker_id = 3,
                   .blocks = 2,
                   .ranks = {{.dp_rank = 0, .blocks = 2, .tiers = TierBlocks{2, 2, 1}},
                             {.dp_rank = 1, .blocks = 0, .tiers = TierBlocks{0, 0, 0}}}}}};
  const auto reply_bytes = encodeQueryReply(reply);
  auto reply_back = decodeQueryReply(reply_bytes);
  ASSERT_TRUE(reply_back.has_value()) << reply_back.error().message;
  EXPECT_EQ(*reply_back, QueryReply{reply});
  // Rank 1's tiers, the last bytes: a5"tiers" 83 a3"GPU" 00 a3"CPU" 00 a4"DISK" 00.
  EXPECT_TRUE(toHex(reply_bytes)
                  .ends_with("a5746965727383a3475055"
                             "00a3435055"
                             "00a44449534b00"))
      << toHex(reply_bytes);
  std::vector<std::byte> not_bool = bytes;
  not_bool.back() = std::byte{0x01};  // "tiers": 1
  auto bad = decodeQueryRequest(not_bool);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("tiers"), std::string::npos) << bad.error().message;
  // A reply whose tiers map lacks DISK ("DISK" renamed "DISC").
  std::vector<std::byte> no_disk = reply_bytes;
  no_disk[no_disk.size() - 2] = std::byte{'C'};
  auto bad_reply = decodeQueryReply(no_disk);
  ASSERT_FALSE(bad_reply.has_value());
  EXPECT_NE(bad_reply.error().message.find("DISK"), std::string::npos) << bad_reply.error().message;
}

// "lora" names a token query's adapter; hostile names are errors naming the key, and a hash
// query may not name one (its hashes already carry the adapter).
TEST(QueryProtocol, LoraRoundTripsAndHostileNamesAreErrors) {
  const OverlapQuery q{.tokens = std::vector<std::uint32_t>{1, 2}, .lora = "sql-lora"};
  const auto bytes = encodeQueryRequest(q);
  auto back = decodeQueryRequest(bytes);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(*back, QueryRequest{q});
  const auto refused = [](const OverlapQuery& bad) {
    auto r = decodeQueryRequest(encodeQueryRequest(bad));
    EXPECT_FALSE(r.has_value());
    return r.has_value() ? std::string() : r.error().message;
  };
  const std::vector<std::uint32_t> tokens{1, 2};
  EXPECT_EQ(refused({.tokens = tokens, .lora = ""}), "lora: an adapter name must not be empty");
  EXPECT_EQ(refused({.tokens = tokens, .lora = std::string(protocol::kMaxLoraNameBytes + 1, 'x')}),
            "lora: string of 257 bytes exceeds the limit of 256");
  EXPECT_EQ(refused({.tokens = tokens, .lora = std::string("a\nb")}),
            "lora: control character at byte 1 of the adapter name");
  EXPECT_NE(
      refused({.tokens = tokens, .lora = std::string("ad\xc3")}).find("lora: not valid UTF-8"),
      std::string::npos);
  EXPECT_EQ(refused({.block_hashes = std::vector<std::uint64_t>{1}, .lora = "a"}),
            "lora: only with \"tokens\" (block hashes already carry their adapter)");
  // The longest name is accepted.
  const OverlapQuery longest{.tokens = tokens,
                             .lora = std::string(protocol::kMaxLoraNameBytes, 'l')};
  EXPECT_TRUE(decodeQueryRequest(encodeQueryRequest(longest)).has_value());
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
    EXPECT_FALSE(decodeQueryRequest(b).has_value()) << toHex(b);
    EXPECT_FALSE(decodeQueryReply(b).has_value()) << toHex(b);
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
