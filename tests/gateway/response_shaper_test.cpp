#include "gateway/response_shaper.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "gateway/detail/json_out.h"
#include "gateway/tokenizer.h"
#include "tools/replay/random.h"

namespace mocker::gateway {
namespace {

using nlohmann::json;

/// The JSON payloads of an SSE body ("data: {...}\n\n" frames), and whether it ends in [DONE].
std::vector<json> frames(const std::string& body, bool* done = nullptr) {
  std::vector<json> out;
  std::size_t at = 0;
  if (done != nullptr) *done = false;
  while (at < body.size()) {
    EXPECT_EQ(body.compare(at, 6, "data: "), 0) << body.substr(at);
    const std::size_t end = body.find("\n\n", at);
    EXPECT_NE(end, std::string::npos);
    const std::string payload = body.substr(at + 6, end - at - 6);
    if (payload == "[DONE]") {
      if (done != nullptr) *done = true;
    } else {
      out.push_back(json::parse(payload));
    }
    at = end + 2;
  }
  return out;
}

class ResponseShaperTest : public ::testing::Test {
 protected:
  ResponseShaper shaper(GenerateRequest r, std::vector<std::uint32_t> planned) {
    return ResponseShaper(r, std::move(planned), {.request_id = "abc", .model = "m", .created = 42},
                          tokenizer_);
  }
  BuiltinTokenizer tokenizer_;
  const std::vector<std::uint32_t> ids_{5, 6, 7};
};

TEST_F(ResponseShaperTest, ShapesANonStreamingCompletion) {
  auto s = shaper({.prompts = {{1, 2, 3, 4}}, .max_tokens = 3}, {3});
  EXPECT_EQ(s.start(), "");
  EXPECT_EQ(s.onOutput(0, std::vector<std::uint32_t>{5}, 2).body, "");
  (void)s.onOutput(0, std::vector<std::uint32_t>{6, 7}, std::nullopt);
  EXPECT_EQ(s.onFinish(0, ChoiceEnd::Planned), "");
  ASSERT_TRUE(s.done());
  const json body = json::parse(s.finish());
  EXPECT_EQ(body["id"], "cmpl-abc");
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["created"], 42);
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["choices"][0]["text"], " t5 t6 t7");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(body["choices"][0]["stop_reason"].is_null());
  EXPECT_EQ(body["usage"], json::parse(R"({"prompt_tokens": 4, "total_tokens": 7,
      "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 2}})"));
  // The text re-tokenizes to exactly the reported count.
  EXPECT_EQ(tokenizer_.encode(body["choices"][0]["text"].get<std::string>()).size(), 3u);
}

TEST_F(ResponseShaperTest, ShortOfMaxTokensIsAModelledStop) {
  auto s = shaper({.kind = ApiKind::Chat, .prompts = {{1}}, .max_tokens = 10}, {2});
  (void)s.onOutput(0, std::vector<std::uint32_t>{5, 6}, 0);
  (void)s.onFinish(0, ChoiceEnd::Planned);
  const json body = json::parse(s.finish());
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["id"], "chatcmpl-abc");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], " t5 t6");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
}

TEST_F(ResponseShaperTest, StreamsChatWithRoleChunkUsageAndDone) {
  auto s = shaper({.kind = ApiKind::Chat,
                   .prompts = {{1, 2}},
                   .max_tokens = 2,
                   .stream = true,
                   .include_usage = true},
                  {2});
  std::string body = s.start();
  body += s.onOutput(0, std::vector<std::uint32_t>{5}, 1).body;
  body += s.onOutput(0, std::vector<std::uint32_t>{6}, std::nullopt).body;
  body += s.onFinish(0, ChoiceEnd::Planned);
  ASSERT_TRUE(s.done());
  body += s.finish();
  bool done = false;
  const auto f = frames(body, &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(f.size(), 5u) << body;
  EXPECT_EQ(f[0]["choices"][0]["delta"], json::parse(R"({"role": "assistant", "content": ""})"));
  EXPECT_EQ(f[1]["choices"][0]["delta"]["content"], " t5");
  EXPECT_TRUE(f[1]["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(f[1].contains("usage"));
  EXPECT_EQ(f[2]["choices"][0]["delta"]["content"], " t6");
  EXPECT_EQ(f[3]["choices"][0]["delta"], json::object());
  EXPECT_EQ(f[3]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(f[4]["choices"], json::array());
  EXPECT_EQ(f[4]["usage"]["completion_tokens"], 2);
  EXPECT_EQ(f[4]["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
  for (const auto& frame : f) {
    EXPECT_EQ(frame["object"], "chat.completion.chunk");
    EXPECT_EQ(frame["id"], "chatcmpl-abc");
  }
}

TEST_F(ResponseShaperTest, StreamsCompletionsWithoutUsageUnlessAsked) {
  auto s = shaper({.prompts = {{1}}, .max_tokens = 1, .stream = true}, {1});
  std::string body = s.start() + s.onOutput(0, std::vector<std::uint32_t>{9}, 0).body;
  body += s.onFinish(0, ChoiceEnd::Planned) + s.finish();
  const auto f = frames(body);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0]["choices"][0]["text"], " t9");
  EXPECT_TRUE(f[0]["usage"].is_null());
  EXPECT_EQ(f[1]["choices"][0]["text"], "");
  EXPECT_EQ(f[1]["choices"][0]["finish_reason"], "length");
}

TEST_F(ResponseShaperTest, ContinuousUsageStatsCountSoFar) {
  auto s = shaper(
      {.prompts = {{1, 2}}, .max_tokens = 5, .stream = true, .continuous_usage_stats = true}, {5});
  const auto f = frames(s.onOutput(0, std::vector<std::uint32_t>{9, 10}, 0).body);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0]["usage"], json::parse(R"({"prompt_tokens": 2, "total_tokens": 4,
                                           "completion_tokens": 2})"));
}

TEST_F(ResponseShaperTest, AStopStringEndsTheChoiceAndIsCutOff) {
  // " t5 t6 t7": stop at " t6" — the text before it, finish "stop", stop_reason the string.
  auto s = shaper({.prompts = {{1}}, .max_tokens = 10, .stream = true, .stop = {" t6"}}, {10});
  std::string body = s.onOutput(0, std::vector<std::uint32_t>{5}, 0).body;
  EXPECT_EQ(frames(body).size(), 1u);  // " " sent; "t5" held back: it could start " t6"?
  const auto step = s.onOutput(0, std::vector<std::uint32_t>{6, 7}, std::nullopt);
  EXPECT_TRUE(step.stop_matched);
  EXPECT_TRUE(s.done());
  body += step.body;
  const auto f = frames(body);
  std::string text;
  for (const auto& frame : f) text += frame["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, " t5");
  EXPECT_EQ(f.back()["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(f.back()["choices"][0]["stop_reason"], " t6");
  // Later outputs of the choice are ignored.
  EXPECT_EQ(s.onOutput(0, std::vector<std::uint32_t>{8}, std::nullopt).body, "");
}

TEST_F(ResponseShaperTest, SeveralChoicesAreIndexedPromptTimesN) {
  auto s = shaper({.prompts = {{1}, {2, 3}}, .max_tokens = 1, .n = 2}, {1, 1, 1, 1});
  ASSERT_EQ(s.numChoices(), 4u);
  EXPECT_EQ(s.prompt(3), (std::vector<std::uint32_t>{2, 3}));
  for (std::size_t c = 0; c < 4; ++c) {
    (void)s.onOutput(c, std::vector<std::uint32_t>{static_cast<std::uint32_t>(c)}, 1);
    (void)s.onFinish(c, ChoiceEnd::Planned);
  }
  const json body = json::parse(s.finish());
  ASSERT_EQ(body["choices"].size(), 4u);
  EXPECT_EQ(body["choices"][2]["index"], 2);
  EXPECT_EQ(body["choices"][2]["text"], " t2");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 3);  // once per prompt, not per copy
  EXPECT_EQ(body["usage"]["completion_tokens"], 4);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
}

TEST_F(ResponseShaperTest, AFailedChoiceIsReported) {
  auto s = shaper({.prompts = {{1}}, .max_tokens = 4, .stream = true}, {4});
  const auto f = frames(s.onFinish(0, ChoiceEnd::Failed, "worker ended the request: error"));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0]["error"]["message"], "worker ended the request: error");
  EXPECT_EQ(f[0]["error"]["code"], 500);
  EXPECT_EQ(f[0]["error"]["type"], "InternalServerError");
  EXPECT_EQ(s.failure(), "worker ended the request: error");
}

TEST_F(ResponseShaperTest, AnErrorFrameCarriesTheFailuresStatus) {
  auto s = shaper({.prompts = {{1}}, .max_tokens = 4, .stream = true}, {4});
  const auto f =
      frames(s.onFinish(0, ChoiceEnd::Failed, "worker ended the request: shutdown", 503));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0]["error"]["code"], 503);
  EXPECT_EQ(f[0]["error"]["type"], "ServiceUnavailableError");
}

TEST(JsonOut, StringsAreWrittenAsNlohmannWritesThem) {
  // Every byte value, valid multi-byte UTF-8 and invalid sequences (truncated, overlong,
  // surrogates, stray continuations), at random: the same bytes as nlohmann's dump.
  const std::vector<std::string> pieces = {"a",
                                           "\"",
                                           "\\",
                                           "\x7f",
                                           "\xc3\xa9",
                                           "\xe2\x82\xac",
                                           "\xf0\x9f\x98\x80",
                                           "\xc3",
                                           "\xe2\x82",
                                           "\xc0\xaf",
                                           "\xed\xa0\x80",
                                           "\x80",
                                           "\xff",
                                           "\xf4\x90\x80\x80"};
  replay::SplitMix64 rng(7);
  for (int round = 0; round < 2000; ++round) {
    std::string s;
    const auto n = rng.uniformIndex(8);
    for (std::uint64_t i = 0; i < n; ++i) {
      if (rng.uniformIndex(2) == 0) {
        s += static_cast<char>(rng.uniformIndex(256));
      } else {
        s += pieces[rng.uniformIndex(pieces.size())];
      }
    }
    std::string out = "x";
    detail::appendJsonString(out, s);
    EXPECT_EQ(out, "x" + json(s).dump(-1, ' ', false, json::error_handler_t::replace));
  }
  std::string ints;
  detail::appendJsonInt(ints, -42);
  detail::appendJsonInt(ints, 1700000000123);
  EXPECT_EQ(ints, "-421700000000123");
}

/// Every byte the shaper writes, for each response shape, pinned: the hand-written JSON must stay
/// exactly what the nlohmann-built bodies were (key order, escaping, invalid UTF-8 replaced).
std::string everything(ResponseShaper& s, const std::vector<std::vector<std::uint32_t>>& outputs,
                       bool fail_last) {
  std::string all = s.start();
  for (std::size_t c = 0; c < s.numChoices(); ++c) {
    all += "|";
    for (const auto& tokens : outputs) all += s.onOutput(c, tokens, 3).body + "|";
    const bool fail = fail_last && c + 1 == s.numChoices();
    all += s.onFinish(c, fail ? ChoiceEnd::Failed : ChoiceEnd::Planned, "bad \xff\"byte\x01", 503);
  }
  return all + "|" + s.finish();
}

TEST(ResponseShaperBytes, EveryShapeIsPinnedByteForByte) {
  BuiltinTokenizer tokenizer;
  const ResponseIdentity id{.request_id = "r\t\"1\"", .model = "m\\é\x7f", .created = 1700000000};
  const std::vector<std::vector<std::uint32_t>> out{{5, 0x22}, {0xabc}, {6}};
  auto shape = [&](GenerateRequest r, std::vector<std::uint32_t> planned, bool fail) {
    ResponseShaper s(r, std::move(planned), id, tokenizer);
    return everything(s, out, fail);
  };
  const std::vector<std::vector<std::uint32_t>> prompts{{1, 2}, {3}};
  EXPECT_EQ(shape({.prompts = prompts, .max_tokens = 4, .n = 2, .stop = {" tabc", "\"\n"}},
                  {4, 4, 4, 4}, false),
            "|||||||||||||||||{\"id\":\"cmpl-r\\t\\\"1\\\"\",\"object\":\"text_completion\",\"cre"
            "ated\":1700000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":0,\"text\""
            ":\" t5 t22\",\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":\" tabc\","
            "\"prompt_logprobs\":null},{\"index\":1,\"text\":\" t5 t22\",\"logprobs\":null,\"fini"
            "sh_reason\":\"stop\",\"stop_reason\":\" tabc\",\"prompt_logprobs\":null},{\"index\":"
            "2,\"text\":\" t5 t22\",\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":"
            "\" tabc\",\"prompt_logprobs\":null},{\"index\":3,\"text\":\" t5 t22\",\"logprobs\":n"
            "ull,\"finish_reason\":\"stop\",\"stop_reason\":\" tabc\",\"prompt_logprobs\":null}],"
            "\"usage\":{\"prompt_tokens\":3,\"total_tokens\":15,\"completion_tokens\":12,\"prompt"
            "_tokens_details\":{\"cached_tokens\":6}}}");
  EXPECT_EQ(shape({.kind = ApiKind::Chat, .prompts = {{1}}, .max_tokens = 9}, {9}, false),
            "|||||{\"id\":\"chatcmpl-r\\t\\\"1\\\"\",\"object\":\"chat.completion\",\"created\":1"
            "700000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":0,\"message\":{\"r"
            "ole\":\"assistant\",\"content\":\" t5 t22 tabc t6\",\"tool_calls\":[]},\"logprobs\":"
            "null,\"finish_reason\":\"stop\",\"stop_reason\":null}],\"usage\":{\"prompt_tokens\":"
            "1,\"total_tokens\":5,\"completion_tokens\":4,\"prompt_tokens_details\":{\"cached_tok"
            "ens\":3}},\"prompt_logprobs\":null}");
  EXPECT_EQ(shape({.kind = ApiKind::Chat,
                   .prompts = {{1}},
                   .max_tokens = 4,
                   .n = 2,
                   .stream = true,
                   .include_usage = true,
                   .continuous_usage_stats = true,
                   .stop = {" t6"}},
                  {4, 4}, true),
            "data: {\"id\":\"chatcmpl-r\\t\\\"1\\\"\",\"object\":\"chat.completion.chunk\",\"crea"
            "ted\":1700000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":0,\"delta\""
            ":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}"
            "],\"usage\":{\"prompt_tokens\":1,\"total_tokens\":1,\"completion_tokens\":0}}\n\ndat"
            "a: {\"id\":\"chatcmpl-r\\t\\\"1\\\"\",\"object\":\"chat.completion.chunk\",\"created"
            "\":1700000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":1,\"delta\":{"
            "\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}],"
            "\"usage\":{\"prompt_tokens\":1,\"total_tokens\":1,\"completion_tokens\":0}}\n\n|data"
            ": {\"id\":\"chatcmpl-r\\t\\\"1\\\"\",\"object\":\"chat.completion.chunk\",\"created"
            "\":1700000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":0,\"delta\":{"
            "\"content\":\" t5 t\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":{\"promp"
            "t_tokens\":1,\"total_tokens\":3,\"completion_tokens\":2}}\n\n|data: {\"id\":\"chatcm"
            "pl-r\\t\\\"1\\\"\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"mod"
            "el\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"22 ta"
            "\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":{\"prompt_tokens\":1,\"tota"
            "l_tokens\":4,\"completion_tokens\":3}}\n\n|data: {\"id\":\"chatcmpl-r\\t\\\"1\\\"\","
            "\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m\\\\\xc3"
            "\xa9\x7f\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"bc\"},\"logprobs\":nul"
            "l,\"finish_reason\":\"stop\",\"stop_reason\":\" t6\"}],\"usage\":{\"prompt_tokens\":"
            "1,\"total_tokens\":5,\"completion_tokens\":4}}\n\n||data: {\"id\":\"chatcmpl-r\\t\\"
            "\"1\\\"\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m"
            "\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":1,\"delta\":{\"content\":\" t5 t\"},\"log"
            "probs\":null,\"finish_reason\":null}],\"usage\":{\"prompt_tokens\":1,\"total_tokens"
            "\":7,\"completion_tokens\":6}}\n\n|data: {\"id\":\"chatcmpl-r\\t\\\"1\\\"\",\"object"
            "\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m\\\\\xc3\xa9\x7f\","
            "\"choices\":[{\"index\":1,\"delta\":{\"content\":\"22 ta\"},\"logprobs\":null,\"fini"
            "sh_reason\":null}],\"usage\":{\"prompt_tokens\":1,\"total_tokens\":8,\"completion_to"
            "kens\":7}}\n\n|data: {\"id\":\"chatcmpl-r\\t\\\"1\\\"\",\"object\":\"chat.completion"
            ".chunk\",\"created\":1700000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"inde"
            "x\":1,\"delta\":{\"content\":\"bc\"},\"logprobs\":null,\"finish_reason\":\"stop\",\""
            "stop_reason\":\" t6\"}],\"usage\":{\"prompt_tokens\":1,\"total_tokens\":9,\"completi"
            "on_tokens\":8}}\n\n||data: {\"id\":\"chatcmpl-r\\t\\\"1\\\"\",\"object\":\"chat.comp"
            "letion.chunk\",\"created\":1700000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[]"
            ",\"usage\":{\"prompt_tokens\":1,\"total_tokens\":9,\"completion_tokens\":8,\"prompt_"
            "tokens_details\":{\"cached_tokens\":3}}}\n\ndata: [DONE]\n\n");
  EXPECT_EQ(
      shape({.prompts = prompts, .max_tokens = 4, .stream = true, .stop = {"t2 t"}}, {4, 4}, false),
      "|data: {\"id\":\"cmpl-r\\t\\\"1\\\"\",\"object\":\"text_completion\",\"created\":170"
      "0000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":0,\"text\":\" t5 \","
      "\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":null}\n\n|"
      "data: {\"id\":\"cmpl-r\\t\\\"1\\\"\",\"object\":\"text_completion\",\"created\":1700"
      "000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":0,\"text\":\"t22 t\","
      "\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":null}\n\n|"
      "data: {\"id\":\"cmpl-r\\t\\\"1\\\"\",\"object\":\"text_completion\",\"created\":1700"
      "000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":0,\"text\":\"abc\",\""
      "logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":null}\n\n|da"
      "ta: {\"id\":\"cmpl-r\\t\\\"1\\\"\",\"object\":\"text_completion\",\"created\":170000"
      "0000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":0,\"text\":\" t6\",\"lo"
      "gprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}],\"usage\":null}\n"
      "\n|data: {\"id\":\"cmpl-r\\t\\\"1\\\"\",\"object\":\"text_completion\",\"created\":1"
      "700000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":1,\"text\":\" t5 "
      "\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":null}\n"
      "\n|data: {\"id\":\"cmpl-r\\t\\\"1\\\"\",\"object\":\"text_completion\",\"created\":1"
      "700000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":1,\"text\":\"t22 t"
      "\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":null}\n"
      "\n|data: {\"id\":\"cmpl-r\\t\\\"1\\\"\",\"object\":\"text_completion\",\"created\":1"
      "700000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":1,\"text\":\"abc\""
      ",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":null}\n\n"
      "|data: {\"id\":\"cmpl-r\\t\\\"1\\\"\",\"object\":\"text_completion\",\"created\":170"
      "0000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":1,\"text\":\" t6\","
      "\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}],\"usage\":null"
      "}\n\n|data: [DONE]\n\n");
  EXPECT_EQ(
      shape({.prompts = {{1}}, .max_tokens = 4, .stream = true, .include_usage = true}, {4}, false),
      "|data: {\"id\":\"cmpl-r\\t\\\"1\\\"\",\"object\":\"text_completion\",\"created\":170"
      "0000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":0,\"text\":\" t5 t22"
      "\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":null}\n"
      "\n|data: {\"id\":\"cmpl-r\\t\\\"1\\\"\",\"object\":\"text_completion\",\"created\":1"
      "700000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":0,\"text\":\" tabc"
      "\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":null}\n"
      "\n|data: {\"id\":\"cmpl-r\\t\\\"1\\\"\",\"object\":\"text_completion\",\"created\":1"
      "700000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":0,\"text\":\" t6\""
      ",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":null}\n\n"
      "|data: {\"id\":\"cmpl-r\\t\\\"1\\\"\",\"object\":\"text_completion\",\"created\":170"
      "0000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":0,\"text\":\"\",\"lo"
      "gprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}],\"usage\":null}\n"
      "\n|data: {\"id\":\"cmpl-r\\t\\\"1\\\"\",\"object\":\"text_completion\",\"created\":1"
      "700000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[],\"usage\":{\"prompt_tokens"
      "\":1,\"total_tokens\":5,\"completion_tokens\":4,\"prompt_tokens_details\":{\"cached_"
      "tokens\":3}}}\n\ndata: [DONE]\n\n");
  EXPECT_EQ(shape({.prompts = {{1}}, .max_tokens = 4}, {4}, true),
            "|||||{\"id\":\"cmpl-r\\t\\\"1\\\"\",\"object\":\"text_completion\",\"created\":17000"
            "00000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":0,\"text\":\" t5 t22 t"
            "abc t6\",\"logprobs\":null,\"finish_reason\":\"error\",\"stop_reason\":null,\"prompt"
            "_logprobs\":null}],\"usage\":{\"prompt_tokens\":1,\"total_tokens\":5,\"completion_to"
            "kens\":4,\"prompt_tokens_details\":{\"cached_tokens\":3}}}");
  EXPECT_EQ(
      shape({.kind = ApiKind::Chat, .prompts = {{1}}, .max_tokens = 4, .stream = true}, {4}, true),
      "data: {\"id\":\"chatcmpl-r\\t\\\"1\\\"\",\"object\":\"chat.completion.chunk\",\"crea"
      "ted\":1700000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":0,\"delta\""
      ":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}"
      "]}\n\n|data: {\"id\":\"chatcmpl-r\\t\\\"1\\\"\",\"object\":\"chat.completion.chunk\""
      ",\"created\":1700000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":0,\""
      "delta\":{\"content\":\" t5 t22\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n|da"
      "ta: {\"id\":\"chatcmpl-r\\t\\\"1\\\"\",\"object\":\"chat.completion.chunk\",\"create"
      "d\":1700000000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":0,\"delta\":{"
      "\"content\":\" tabc\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n|data: {\"id\""
      ":\"chatcmpl-r\\t\\\"1\\\"\",\"object\":\"chat.completion.chunk\",\"created\":1700000"
      "000,\"model\":\"m\\\\\xc3\xa9\x7f\",\"choices\":[{\"index\":0,\"delta\":{\"content\""
      ":\" t6\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n|data: {\"error\":{\"messag"
      "e\":\"bad \xef\xbf\xbd\\\"byte\\u0001\",\"type\":\"ServiceUnavailableError\",\"param"
      "\":null,\"code\":503}}\n\n|data: [DONE]\n\n");
}

}  // namespace
}  // namespace mocker::gateway
