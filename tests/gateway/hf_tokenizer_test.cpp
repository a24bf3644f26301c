// HfTokenizer (gateway/hf_tokenizer.h) on the tokenizer.json the tests ship
// (tests/data/tiny_tokenizer.json, made by tests/gateway/make_tiny_tokenizer.py): ids pinned
// from Hugging Face's own JavaScript implementation (@huggingface/tokenizers 0.2.0, run by
// tests/gateway/node/tokenizer_check.mjs; gateway_live_python re-checks them live), round
// trips, output text that re-tokenizes to its count, GPT-2 and Llama 3 variants of the file, and
// files it refuses with errors naming the field.
#include "gateway/hf_tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <vector>

#include "tools/replay/random.h"

namespace mocker::gateway {
namespace {

using Ids = std::vector<std::uint32_t>;

std::string tinyJson() {
  std::ifstream in(std::string(MOCKER_SOURCE_DIR_FOR_TEST) + "/tests/data/tiny_tokenizer.json");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::unique_ptr<HfTokenizer> parse(const std::string& text) {
  auto t = HfTokenizer::parse(text, "test.json");
  EXPECT_TRUE(t.has_value()) << (t ? "" : t.error().message);
  return t ? std::move(*t) : nullptr;
}

TEST(HfTokenizerTest, MatchesTheReferenceImplementation) {
  const auto t = parse(tinyJson());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("Hello world, the gateway!"),
            (Ids{72, 101, 108, 281, 280, 531, 44, 258, 350, 33}));
  EXPECT_EQ(t->encode("the the   x\n\ny"), (Ids{573, 258, 32, 32, 32, 120, 10, 10, 121}));
  EXPECT_EQ(t->encode("can't 12345 héllo <|im_start|>user"),
            (Ids{99,  97,  110, 359, 32,  429, 51,  52,  53,  32,
                 104, 195, 169, 108, 281, 32,  657, 117, 115, 261}));
  EXPECT_EQ(t->encode("Ünïcödé 😀 text\twith\ttabs"),
            (Ids{195, 156, 110, 195, 175, 99, 195, 182, 100, 195, 169, 32, 240,
                 159, 152, 128, 256, 503, 9,  119, 376, 9,   116, 97,  98, 115}));
  EXPECT_EQ(t->encode("The quick brown fox jumps over the lazy dog."),
            (Ids{307, 598, 617, 634, 597, 267, 304, 258, 644, 626, 46}));
  EXPECT_EQ(t->encode("  leading spaces and trailing  "),
            (Ids{32, 322, 286, 100, 340, 271, 112, 97, 334, 115, 269, 256, 114, 97, 105, 108, 340,
                 32, 32}));
  EXPECT_EQ(t->encode("worker workers gateway's blocks"), (Ids{119, 268, 288, 358, 350, 424, 325}));
}

TEST(HfTokenizerTest, DecodeInvertsEncode) {
  const auto t = parse(tinyJson());
  ASSERT_TRUE(t);
  for (const std::string text : {"", "a", "Hello world", "  x\n\n\ty  ",
                                 "héllo 😀 wörld <|im_end|>!", "numbers 1234567 and can't"}) {
    EXPECT_EQ(t->decode(t->encode(text)), text);
  }
  EXPECT_EQ(t->decode(Ids{4'000'000}), "");  // unknown ids decode to nothing
}

// A request body may be megabytes of one word, or of added tokens: both encode in O(n log n)
// (the quadratic forms would run for hours here and trip the test timeout).
TEST(HfTokenizerTest, HostileLongInputsEncodeQuickly) {
  const auto t = parse(tinyJson());
  ASSERT_TRUE(t);
  std::string word;
  for (int i = 0; i < 200'000; ++i) word += static_cast<char>('a' + (i * 7 + i / 26) % 26);
  const Ids ids = t->encodeText(word);
  EXPECT_LT(ids.size(), word.size());
  EXPECT_EQ(t->decode(ids), word);
  std::string specials;
  for (int i = 0; i < 40'000; ++i) specials += i % 3 ? "<|im_end|>" : "x<|im_start|>";
  const Ids sids = t->encodeText(specials);
  EXPECT_EQ(t->decode(sids), specials);
  EXPECT_EQ(t->encodeText(std::string(300'000, ' ')).size(), 300'000u);  // " " has no merge
}

TEST(HfTokenizerTest, OutputTextRetokenizesToItsCount) {
  const auto t = parse(tinyJson());
  ASSERT_TRUE(t);
  EXPECT_GT(t->outputTokens().size(), 20u);
  replay::SplitMix64 rng(7);
  for (int round = 0; round < 200; ++round) {
    Ids ids(1 + rng.uniformIndex(40));
    for (auto& id : ids) id = static_cast<std::uint32_t>(rng.next());
    const std::string text = t->outputText(ids);
    EXPECT_EQ(t->encode(text).size(), ids.size()) << text;
  }
}

TEST(HfTokenizerTest, Gpt2ByteLevelRegexMatchesTheReferenceImplementation) {
  // GPT-2's layout: ByteLevel with its own regex (ids from @huggingface/tokenizers, as above).
  auto j = nlohmann::json::parse(tinyJson());
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  auto t = parse(j.dump());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("can't 12345 héllo"),
            (Ids{99, 97, 110, 359, 32, 429, 432, 32, 104, 195, 169, 108, 281}));
  EXPECT_EQ(t->encode("a\n\nb  c"), (Ids{97, 10, 10, 98, 32, 270}));
  j["pre_tokenizer"]["add_prefix_space"] = true;
  t = parse(j.dump());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("can't 12345 héllo"),
            (Ids{398, 359, 32, 429, 432, 32, 104, 195, 169, 108, 281}));
  EXPECT_EQ(t->encode("Hello world"), (Ids{32, 72, 101, 108, 281, 280, 531}));
}

TEST(HfTokenizerTest, TemplateProcessingAddsItsSpecialTokens) {
  // Llama 3's post-processor: <|begin_of_text|> (here <|endoftext|>, id 656) before the text.
  auto j = nlohmann::json::parse(tinyJson());
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}},
        {{"type", "TemplateProcessing"},
         {"single",
          {{{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}},
           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
         {"special_tokens", {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {656}}}}}}}}}};
  const auto t = parse(j.dump());
  ASSERT_TRUE(t);
  const Ids ids = t->encode("the gateway");
  ASSERT_EQ(ids.size(), t->encodeText("the gateway").size() + 1);
  EXPECT_EQ(ids.front(), 656u);
  EXPECT_EQ(t->decode(ids), "<|endoftext|>the gateway");
}

TEST(HfTokenizerTest, RefusesWhatItCannotApply) {
  const std::string good = tinyJson();
  auto with = [&](const char* pointer, nlohmann::json value) {
    auto j = nlohmann::json::parse(good);
    j[nlohmann::json::json_pointer(pointer)] = std::move(value);
    auto t = HfTokenizer::parse(j.dump(), "bad.json");
    EXPECT_FALSE(t.has_value());
    return t ? std::string() : t.error().message;
  };
  EXPECT_NE(with("/model/type", "WordPiece").find("model.type"), std::string::npos);
  EXPECT_NE(with("/model/byte_fallback", true).find("byte_fallback"), std::string::npos);
  EXPECT_NE(with("/normalizer", {{"type", "Lowercase"}}).find("normalizer"), std::string::npos);
  EXPECT_NE(with("/decoder", {{"type", "Metaspace"}}).find("decoder"), std::string::npos);
  EXPECT_NE(with("/pre_tokenizer/pretokenizers/0/pattern/Regex", "(unclosed").find("regex"),
            std::string::npos);
  EXPECT_NE(with("/model/merges/3", 17).find("model.merges[3]"), std::string::npos);
  auto j = nlohmann::json::parse(good);
  j["model"]["vocab"].erase("Ġ");
  auto t = HfTokenizer::parse(j.dump(), "bad.json");
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message.find("byte 32 has no token"), std::string::npos);
  auto not_json = HfTokenizer::parse("{not json", "x.json");
  ASSERT_FALSE(not_json.has_value());
  EXPECT_NE(not_json.error().message.find("x.json"), std::string::npos);
}

}  // namespace
}  // namespace mocker::gateway
