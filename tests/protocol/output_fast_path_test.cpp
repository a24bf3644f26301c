// The output and submit fast paths must be invisible: for any bytes, decodeClientMessage (fast
// paths first) returns exactly what the general decoder returns — the same value, or the same
// error.
#include "protocol/detail/output_fast_path.h"

#include <gtest/gtest.h>

#include <random>

#include "protocol/limits.h"
#include "tests/protocol/protocol_test_util.h"

namespace mocker::protocol {
namespace {

using testing::Bytes;
using testing::fromHex;
using testing::Json;
using testing::mp;
using testing::readGolden;

// decodeClientMessage and the general decoder agree on `bytes` (value or error message).
void expectSameAsGeneral(const Bytes& bytes, const std::string& what) {
  const auto fast = decodeClientMessage(bytes);
  const auto general = detail::decodeClientMessageGeneral(bytes);
  ASSERT_EQ(fast.has_value(), general.has_value()) << what;
  if (fast) {
    EXPECT_EQ(*fast, *general) << what;
  } else {
    EXPECT_EQ(fast.error().code, general.error().code) << what;
    EXPECT_EQ(fast.error().message, general.error().message) << what;
  }
}

// Every single-byte change, truncation and extension of each seed decodes as the general
// decoder decodes it. Returns how many of the damaged messages `fast` still accepted (some
// damage keeps a message canonical: a token or an index changed) and how many were tried.
template <typename FastPath>
std::pair<std::size_t, std::size_t> expectDamageDecodesAsGeneral(const std::vector<Bytes>& seeds,
                                                                 FastPath fast) {
  std::size_t accepted_by_fast_path = 0;
  std::size_t cases = 0;
  for (const Bytes& seed : seeds) {
    for (std::size_t pos = 0; pos < seed.size(); ++pos) {
      const auto b = std::to_integer<unsigned>(seed[pos]);
      for (unsigned value :
           {0x00u, 0x01u, 0x7fu, 0x80u, 0x90u, 0xa0u, 0xc0u, 0xc1u, 0xccu, 0xcfu, 0xd9u, 0xdcu,
            0xdeu, 0xffu, b ^ 1u, (b + 1) & 0xffu, (b - 1) & 0xffu}) {
        if (value == b) continue;
        Bytes damaged = seed;
        damaged[pos] = static_cast<std::byte>(value);
        if (fast(damaged)) ++accepted_by_fast_path;
        ++cases;
        expectSameAsGeneral(damaged,
                            "byte " + std::to_string(pos) + " := " + std::to_string(value));
      }
      expectSameAsGeneral(Bytes(seed.begin(), seed.begin() + static_cast<std::ptrdiff_t>(pos)),
                          "truncated to " + std::to_string(pos));
    }
    Bytes longer = seed;
    longer.push_back(std::byte{0});
    EXPECT_FALSE(fast(longer));
    expectSameAsGeneral(longer, "trailing byte");
  }
  return {accepted_by_fast_path, cases};
}

OutputBatch randomBatch(std::mt19937_64& rng) {
  OutputBatch b;
  const std::size_t n = rng() % 20;
  for (std::size_t i = 0; i < n; ++i) {
    RequestOutput o;
    o.id = "req-" + std::to_string(rng() % 100000);
    if (rng() % 8 == 0) o.id.assign(40 + rng() % 200, 'x');               // str8 ids
    if (rng() % 6 == 0) o.id += "-\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";  // 2-, 3-, 4-byte UTF-8
    o.index = static_cast<std::uint32_t>(rng() % 3 == 0 ? rng() : rng() % 300);
    const std::size_t tokens = rng() % 4 == 0 ? rng() % 40 : 1;
    for (std::size_t t = 0; t < tokens; ++t) {
      const std::uint64_t widths[] = {0x7f, 0xff, 0xffff, 0xffffffff};
      o.tokens.push_back(static_cast<std::uint32_t>(rng() % (widths[rng() % 4] + 1)));
    }
    if (o.tokens.empty() || rng() % 5 == 0) {
      o.finish = static_cast<FinishReason>(rng() % 5);
      if (rng() % 2 == 0) o.reason = "because " + std::to_string(rng() % 1000);
      if (rng() % 10 == 0) o.reason.assign(300 + rng() % 3000, 'r');  // str16
    }
    if (rng() % 4 == 0) o.cached_tokens = static_cast<std::uint32_t>(rng() % 5000);
    b.outputs.push_back(std::move(o));
  }
  return b;
}

TEST(OutputFastPath, ReadsEveryEncoderOutput) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 500; ++i) {
    const OutputBatch batch = randomBatch(rng);
    const Bytes bytes = encodeClientMessage(batch);
    const auto fast = detail::decodeCanonicalOutput(bytes);
    ASSERT_TRUE(fast.has_value()) << i;
    EXPECT_EQ(*fast, batch) << i;
    expectSameAsGeneral(bytes, "batch " + std::to_string(i));
  }
}

// The direct encoder writes what an independent msgpack encoder (nlohmann's, smallest widths,
// keys in README order) writes for the same message — across fixstr/str8 ids, every integer
// width, and all optional fields.
Bytes independentEncoding(const OutputBatch& batch) {
  Json outputs = Json::array();
  for (const RequestOutput& o : batch.outputs) {
    Json e = {{"id", o.id}, {"index", o.index}, {"tokens", o.tokens}};
    if (o.finish) e["finish"] = std::string(toString(*o.finish));
    if (!o.reason.empty()) e["reason"] = o.reason;
    if (o.cached_tokens) e["cached_tokens"] = *o.cached_tokens;
    outputs.push_back(std::move(e));
  }
  return mp({{"v", 1}, {"type", "output"}, {"outputs", std::move(outputs)}});
}

TEST(OutputFastPath, EncoderMatchesAnIndependentEncoder) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 500; ++i) {
    const OutputBatch batch = randomBatch(rng);
    ASSERT_EQ(testing::toHex(encodeClientMessage(batch)),
              testing::toHex(independentEncoding(batch)))
        << i;
  }
}

// The service encodes each output message in place, into a send buffer of exactly
// outputBatchSize bytes: the size is exact for every header and integer width (array32 and str32
// included), and every byte of the buffer is written with encodeOutputBatch's bytes.
TEST(OutputFastPath, EncodesInPlaceIntoABufferOfTheExactSize) {
  std::mt19937_64 rng(11);
  std::vector<OutputBatch> batches;
  for (int i = 0; i < 500; ++i) batches.push_back(randomBatch(rng));
  RequestOutput huge{.id = "huge", .index = 70000, .finish = FinishReason::Length};
  huge.tokens.assign(70000, 0x12345);  // array32 header, u32 tokens
  huge.reason.assign(70000, 'r');      // str32
  batches.push_back({.outputs = {huge}});
  OutputBatch many;  // array32 of entries
  many.outputs.assign(70000, RequestOutput{.id = "m", .tokens = {1}});
  batches.push_back(std::move(many));
  for (std::size_t i = 0; i < batches.size(); ++i) {
    std::vector<RequestOutputView> views;
    for (const RequestOutput& o : batches[i].outputs) {
      views.push_back({o.id, o.index, o.tokens, o.finish, o.reason, o.cached_tokens});
    }
    const Bytes want = independentEncoding(batches[i]);
    ASSERT_EQ(outputBatchSize(views), want.size()) << i;
    Bytes in_place(want.size(), std::byte{0xa5});
    encodeOutputBatchInto(views, in_place);
    ASSERT_TRUE(in_place == want) << i;  // (not ASSERT_EQ: no hex dump of 350 KB on failure)
  }
}

// Ids and reasons of every length up to 40 bytes: each way the encoder copies a short string.
TEST(OutputFastPath, EncodesStringsOfEveryShortLength) {
  for (std::size_t n = 1; n <= 40; ++n) {
    std::string id(n, 'a');
    for (std::size_t i = 0; i < n; ++i) id[i] = static_cast<char>('a' + i % 26);
    const OutputBatch batch{
        .outputs = {
            RequestOutput{.id = id, .tokens = {1}},
            RequestOutput{.id = "x", .finish = FinishReason::Error, .reason = id.substr(n / 2)}}};
    ASSERT_EQ(testing::toHex(encodeClientMessage(batch)),
              testing::toHex(independentEncoding(batch)))
        << n;
  }
}

TEST(OutputFastPath, ReadsTheGolden) {
  const auto fast = detail::decodeCanonicalOutput(readGolden("client_output"));
  ASSERT_TRUE(fast.has_value());
  EXPECT_EQ(fast->outputs.size(), 4u);
}

// Every single-byte change, truncation and extension of canonical messages: wherever the fast
// path accepts, the general decoder accepts the same value; errors are the general decoder's.
TEST(OutputFastPath, DamagedMessagesDecodeExactlyAsTheGeneralDecoder) {
  std::mt19937_64 rng(11);
  std::vector<Bytes> seeds = {readGolden("client_output")};
  for (int i = 0; i < 6; ++i) seeds.push_back(encodeClientMessage(randomBatch(rng)));
  const auto [accepted_by_fast_path, cases] = expectDamageDecodesAsGeneral(
      seeds, [](const Bytes& b) { return detail::decodeCanonicalOutput(b).has_value(); });
  // Some damage keeps the message canonical (a token or index changed): those must have gone
  // through the fast path, so the comparison above covered accepted values too.
  EXPECT_GT(accepted_by_fast_path, 0u);
  EXPECT_GT(cases, accepted_by_fast_path);
}

// Valid but not canonical: the fast path steps aside and the general decoder reads it.
TEST(OutputFastPath, NonCanonicalLayoutsFallBackToTheGeneralDecoder) {
  const OutputBatch want{.outputs = {{.id = "a", .index = 3, .tokens = {9}}}};
  // Keys in another order ("type" before "v", "tokens" before "index").
  const Bytes reordered = mp(Json{
      {"type", "output"}, {"v", 1}, {"outputs", {{{"id", "a"}, {"tokens", {9}}, {"index", 3}}}}});
  // Canonical except for a nil "finish" (absent for the general decoder) and an unknown key.
  const Bytes nil_finish = fromHex(
      "83a17601a474797065a66f7574707574a76f75747075747391"
      "84a26964a161a5696e64657803a6746f6b656e739109a666696e697368c0");
  const Bytes unknown_key = fromHex(
      "83a17601a474797065a66f7574707574a76f75747075747391"
      "84a26964a161a5696e64657803a6746f6b656e739109a178c3");
  for (const Bytes& bytes : {reordered, nil_finish, unknown_key}) {
    EXPECT_FALSE(detail::decodeCanonicalOutput(bytes));
    const auto decoded = decodeClientMessage(bytes);
    ASSERT_TRUE(decoded.has_value()) << decoded.error().message;
    EXPECT_EQ(std::get<OutputBatch>(*decoded), want);
  }
}

// Canonical layout, values the general decoder refuses: the fast path must not accept them.
TEST(OutputFastPath, RefusesWhatTheGeneralDecoderRefuses) {
  const std::string head = "83a17601a474797065a66f7574707574a76f75747075747391";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty id", head + "83a26964a0a5696e64657803a6746f6b656e739109"},
      {"token above u32", head + "83a26964a161a5696e64657803a6746f6b656e7391cf0000000100000000"},
      {"index above u32", head + "83a26964a161a5696e646578cf0000000100000000a6746f6b656e739109"},
      {"unknown finish",
       head + "84a26964a161a5696e64657803a6746f6b656e739109a666696e697368a473746f70"},
      {"no tokens, not terminal", head + "83a26964a161a5696e64657803a6746f6b656e7390"},
      {"version 2", "83a17602a474797065a66f7574707574a76f75747075747390"},
      {"token count beyond the input",
       head + "83a26964a161a5696e64657803a6746f6b656e73dd0010000009"},
      {"id not UTF-8", head + "83a26964a3fffe41a5696e64657803a6746f6b656e739109"},
      {"id with a surrogate", head + "83a26964a3eda080a5696e64657803a6746f6b656e739109"},
      {"reason not UTF-8",
       head + "85a26964a161a5696e64657803a6746f6b656e739109a666696e697368a66c656e677468"
              "a6726561736f6ea2e282"},
  };
  for (const auto& [what, hex] : cases) {
    const Bytes bytes = fromHex(hex);
    EXPECT_FALSE(detail::decodeCanonicalOutput(bytes)) << what;
    EXPECT_FALSE(decodeClientMessage(bytes).has_value()) << what;
    expectSameAsGeneral(bytes, what);
  }
  // 257-byte id: one over kMaxRequestIdBytes.
  OutputBatch long_id{.outputs = {{.id = std::string(kMaxRequestIdBytes + 1, 'i'), .tokens = {1}}}};
  const Bytes bytes = encodeClientMessage(long_id);
  EXPECT_FALSE(detail::decodeCanonicalOutput(bytes));
  expectSameAsGeneral(bytes, "long id");
}

// --- The submit fast path --------------------------------------------------------------------

SubmitRequest randomSubmit(std::mt19937_64& rng) {
  SubmitRequest r;
  r.id = "s-" + std::to_string(rng() % 100000);
  if (rng() % 8 == 0) r.id.assign(40 + rng() % 200, 'x');
  if (rng() % 6 == 0) r.id += "-\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
  const std::uint64_t widths[] = {0x7f, 0xff, 0xffff, 0xffffffff};
  const std::size_t n = rng() % 4 == 0 ? rng() % 3000 : rng() % 40;
  for (std::size_t t = 0; t < n; ++t) {
    r.prompt.push_back(static_cast<std::uint32_t>(rng() % (widths[rng() % 4] + 1)));
  }
  r.max_tokens = static_cast<std::uint32_t>(rng() % 3 == 0 ? rng() : rng() % 2000);
  if (rng() % 4 == 0) {
    r.output_tokens.emplace();
    for (std::size_t t = rng() % 30; t > 0; --t) {
      r.output_tokens->push_back(static_cast<std::uint32_t>(rng()));
    }
  }
  if (rng() % 3 == 0) r.dp_rank = static_cast<std::uint32_t>(rng() % 8);
  return r;
}

TEST(SubmitFastPath, ReadsEveryPlainSubmitTheEncoderWrites) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 500; ++i) {
    const SubmitRequest want = randomSubmit(rng);
    const Bytes bytes = encodeClientMessage(want);
    const auto fast = detail::decodeCanonicalSubmit(bytes);
    ASSERT_TRUE(fast.has_value()) << i;
    EXPECT_EQ(*fast, want) << i;
    expectSameAsGeneral(bytes, "submit " + std::to_string(i));
  }
}

// Fields the fast path leaves to the general decoder: it steps aside, the result is the same.
TEST(SubmitFastPath, OtherFieldsAndLayoutsFallBackToTheGeneralDecoder) {
  std::mt19937_64 rng(9);
  for (int i = 0; i < 40; ++i) {
    SubmitRequest r = randomSubmit(rng);
    switch (i % 4) {
      case 0:
        r.arrival_ms = 12.5 * i;
        break;
      case 1:
        r.priority = -i;
        break;
      case 2:
        r.lora = "adapter-" + std::to_string(i);
        break;
      default:
        r.handoff = HandoffTicket{.source = "tcp://10.0.0.7:5560",
                                  .key = std::string(kHandoffKeyBytes, 'k'),
                                  .block_size = 16,
                                  .prompt_len = 40,
                                  .transfer_ms = 1.25};
        break;
    }
    const Bytes bytes = encodeClientMessage(r);
    EXPECT_FALSE(detail::decodeCanonicalSubmit(bytes)) << i;
    const auto decoded = decodeClientMessage(bytes);
    ASSERT_TRUE(decoded.has_value()) << decoded.error().message;
    EXPECT_EQ(std::get<SubmitRequest>(*decoded), r) << i;
  }
  // Keys in another order.
  const Bytes reordered =
      mp(Json{{"type", "submit"}, {"v", 1}, {"prompt", {1, 2}}, {"id", "a"}, {"max_tokens", 3}});
  EXPECT_FALSE(detail::decodeCanonicalSubmit(reordered));
  const auto decoded = decodeClientMessage(reordered);
  ASSERT_TRUE(decoded.has_value()) << decoded.error().message;
  EXPECT_EQ(std::get<SubmitRequest>(*decoded),
            (SubmitRequest{.id = "a", .prompt = {1, 2}, .max_tokens = 3}));
}

// Every single-byte change, truncation and extension of plain submits (and the goldens): where
// the fast path accepts, the general decoder accepts the same value; errors are the general's.
TEST(SubmitFastPath, DamagedSubmitsDecodeExactlyAsTheGeneralDecoder) {
  std::mt19937_64 rng(13);
  std::vector<Bytes> seeds = {readGolden("client_submit_min")};
  for (int i = 0; i < 4; ++i) {
    SubmitRequest r = randomSubmit(rng);
    r.prompt.resize(std::min<std::size_t>(r.prompt.size(), 12));
    seeds.push_back(encodeClientMessage(r));
  }
  const auto [accepted_by_fast_path, cases] = expectDamageDecodesAsGeneral(
      seeds, [](const Bytes& b) { return detail::decodeCanonicalSubmit(b).has_value(); });
  EXPECT_GT(accepted_by_fast_path, 0u);
  EXPECT_GT(cases, accepted_by_fast_path);
}

// Canonical layout, values the general decoder refuses: the fast path must not accept them.
TEST(SubmitFastPath, RefusesWhatTheGeneralDecoderRefuses) {
  const std::string head = "85a17601a474797065a67375626d6974";  // {v: 1, type: "submit", …
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty id", head + "a26964a0a670726f6d707491"
                          "01aa6d61785f746f6b656e7302"},
      {"id not UTF-8", head + "a26964a2fffea670726f6d707491"
                              "01aa6d61785f746f6b656e7302"},
      {"token above u32",
       head + "a26964a161a670726f6d707491cf0000000100000000aa6d61785f746f6b656e7302"},
      {"max_tokens above u32",
       head + "a26964a161a670726f6d70749101aa6d61785f746f6b656e73cf0000000100000000"},
      {"negative token", head + "a26964a161a670726f6d707491ffaa6d61785f746f6b656e7302"},
      {"token count beyond the input",
       head + "a26964a161a670726f6d7074dd0010000001aa6d61785f746f6b656e7302"},
      {"version 2",
       "85a17602a474797065a67375626d6974a26964a161a670726f6d70749101"
       "aa6d61785f746f6b656e7302"},
  };
  // The same layout with valid values goes the fast way: the cases differ from it in one value.
  ASSERT_TRUE(detail::decodeCanonicalSubmit(
      fromHex(head + "a26964a161a670726f6d70749101aa6d61785f746f6b656e7302")));
  for (const auto& [what, hex] : cases) {
    const Bytes bytes = fromHex(hex);
    EXPECT_FALSE(detail::decodeCanonicalSubmit(bytes)) << what;
    expectSameAsGeneral(bytes, what);
  }
  // 257-byte id: one over kMaxRequestIdBytes.
  const Bytes long_id = encodeClientMessage(SubmitRequest{
      .id = std::string(kMaxRequestIdBytes + 1, 'i'), .prompt = {1}, .max_tokens = 1});
  EXPECT_FALSE(detail::decodeCanonicalSubmit(long_id));
  expectSameAsGeneral(long_id, "long id");
}

}  // namespace
}  // namespace mocker::protocol
