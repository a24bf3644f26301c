#include "gateway/openai_request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <tuple>
#include <vector>

#include "gateway/api_error.h"
#include "gateway/detail/json_fast_parse.h"
#include "gateway/output_plan.h"
#include "gateway/tokenizer.h"

namespace mocker::gateway {
namespace {

class OpenAiRequestTest : public ::testing::Test {
 protected:
  std::variant<GenerateRequest, ApiError> completion(const std::string& body) {
    return parseCompletionRequest(body, tokenizer_, limits_);
  }
  std::variant<GenerateRequest, ApiError> chat(const std::string& body) {
    return parseChatRequest(body, tokenizer_, limits_);
  }
  GenerateRequest ok(const std::variant<GenerateRequest, ApiError>& r) {
    if (const auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << e->message;
    return std::holds_alternative<GenerateRequest>(r) ? std::get<GenerateRequest>(r)
                                                      : GenerateRequest{};
  }
  ApiError error(const std::variant<GenerateRequest, ApiError>& r) {
    if (!std::holds_alternative<ApiError>(r)) {
      ADD_FAILURE() << "accepted";
      return {};
    }
    return std::get<ApiError>(r);
  }

  BuiltinTokenizer tokenizer_;
  RequestLimits limits_{.max_model_len = 1000};
};

TEST_F(OpenAiRequestTest, AcceptsEveryPromptShape) {
  EXPECT_EQ(ok(completion(R"({"prompt": "Hello world"})")).prompts,
            (std::vector<std::vector<std::uint32_t>>{tokenizer_.encode("Hello world")}));
  EXPECT_EQ(ok(completion(R"({"prompt": ["a b", "c"]})")).prompts.size(), 2u);
  EXPECT_EQ(ok(completion(R"({"prompt": [1, 2, 4294967295]})")).prompts,
            (std::vector<std::vector<std::uint32_t>>{{1, 2, 4294967295u}}));
  EXPECT_EQ(ok(completion(R"({"prompt": [[1, 2], [3]]})")).prompts,
            (std::vector<std::vector<std::uint32_t>>{{1, 2}, {3}}));
}

TEST_F(OpenAiRequestTest, ReadsTheGenerationFields) {
  const auto r = ok(completion(
      R"({"model": "m", "prompt": "x", "max_tokens": 7, "min_tokens": 3, "stream": true,
          "stream_options": {"include_usage": true, "continuous_usage_stats": true},
          "ignore_eos": true, "stop": ["a", "b"], "n": 2, "seed": -5, "temperature": 0.5,
          "top_k": 3, "some_future_field": {"x": 1}})"));
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.max_tokens, 7u);
  EXPECT_EQ(r.min_tokens, 3u);
  EXPECT_TRUE(r.stream && r.include_usage && r.continuous_usage_stats && r.ignore_eos);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.n, 2u);
  EXPECT_EQ(r.seed, static_cast<std::uint64_t>(-5));
}

TEST_F(OpenAiRequestTest, DefaultsMaxTokens) {
  EXPECT_EQ(ok(completion(R"({"prompt": "x"})")).max_tokens, 16u);
  // Chat: the rest of the context.
  const auto r = ok(chat(R"({"messages": [{"role": "user", "content": "Hi"}]})"));
  EXPECT_EQ(r.max_tokens, 1000u - r.prompts[0].size());
  EXPECT_EQ(ok(chat(R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 9,
                       "max_completion_tokens": 5})"))
                .max_tokens,
            5u);
}

TEST_F(OpenAiRequestTest, AppliesThePlainChatTemplate) {
  const auto r = ok(chat(R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "!"}]},
      {"role": "assistant", "content": null}]})"));
  EXPECT_EQ(
      r.prompts[0],
      tokenizer_.encode("<|system|>\nBe brief.\n<|user|>\nHi!\n<|assistant|>\n\n<|assistant|>\n"));
  EXPECT_EQ(chatPrompt({{.role = "user", .content = "Hi"}}), "<|user|>\nHi\n<|assistant|>\n");
}

struct Refusal {
  const char* body;
  const char* param;  // expected ApiError.param ("" = none)
};

TEST_F(OpenAiRequestTest, RefusesWrongTypesNamingTheField) {
  const Refusal completions[] = {
      {R"([1, 2])", ""},
      {R"({"prompt": "x", )", ""},
      {R"({})", "prompt"},
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": ""})", "prompt"},
      {R"({"prompt": [1, "a"]})", "prompt[1]"},
      {R"({"prompt": [1, -1]})", "prompt[1]"},
      {R"({"prompt": [1, 4294967296]})", "prompt[1]"},
      {R"({"prompt": [1.5]})", "prompt[0]"},
      {R"({"prompt": ["a", 3]})", "prompt[1]"},
      {R"({"prompt": [[1], [2, "x"]]})", "prompt[1][1]"},
      {R"({"prompt": "x", "model": 3})", "model"},
      {R"({"prompt": "x", "max_tokens": "8"})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 2.5})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1001})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 4, "min_tokens": 5})", "min_tokens"},
      {R"({"prompt": "x", "min_tokens": -1})", "min_tokens"},
      {R"({"prompt": "x", "stream": "yes"})", "stream"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "x", "stream": true, "stream_options": []})", "stream_options"},
      {R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})",
       "stream_options.include_usage"},
      {R"({"prompt": "x", "stream": true, "stream_options": {"continuous_usage_stats": "t"}})",
       "stream_options.continuous_usage_stats"},
      {R"({"prompt": "x", "ignore_eos": 1})", "ignore_eos"},
      {R"({"prompt": "x", "stop": 3})", "stop"},
      {R"({"prompt": "x", "stop": ["a", 3]})", "stop[1]"},
      {R"({"prompt": "x", "n": 0})", "n"},
      {R"({"prompt": "x", "n": 17})", "n"},
      {R"({"prompt": "x", "n": "2"})", "n"},
      {R"({"prompt": "x", "seed": "s"})", "seed"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "top_k": 1.5})", "top_k"},
      {R"({"prompt": "x", "user": 5})", "user"},
      {R"({"prompt": "x", "logit_bias": []})", "logit_bias"},
      {R"({"prompt": "x", "echo": true})", "echo"},
      {R"({"prompt": "x", "logprobs": 2})", "logprobs"},
      {R"({"prompt": [1, 2, 3], "max_tokens": 998})", "prompt"},
  };
  for (const auto& c : completions) {
    const ApiError e = error(completion(c.body));
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param.value_or(""), c.param) << c.body << " → " << e.message;
    if (*c.param != '\0' && e.message.rfind("This model's", 0) != 0) {
      EXPECT_EQ(e.message.rfind(c.param, 0), 0u) << e.message;  // the message names it first
    }
  }
  const Refusal chats[] = {
      {R"({})", "messages"},
      {R"({"messages": {}})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": [3]})", "messages[0]"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": 1, "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].type"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]})",
       "messages[0].content[0].text"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": "1"})",
       "max_completion_tokens"},
  };
  for (const auto& c : chats) {
    const ApiError e = error(chat(c.body));
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param.value_or(""), c.param) << c.body << " → " << e.message;
  }
}

TEST_F(OpenAiRequestTest, RefusesInvalidUtf8AndSaysWhy) {
  const ApiError e = error(completion("{\"prompt\": \"a\xff\"}"));
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("invalid JSON"), std::string::npos) << e.message;
  EXPECT_NE(errorBody(e).find("\"type\":\"BadRequestError\""), std::string::npos);
}

// A worker's `error` reply (an injected `error` fault's code among them) becomes the HTTP status
// its code means, with that status's type in the body: never a 500 for a limit or bad input.
TEST(WorkerErrorStatusTest, EachProtocolCodeHasItsStatusAndType) {
  const std::vector<std::tuple<ErrorCode, int, std::string>> cases{
      {ErrorCode::InvalidArgument, 400, "BadRequestError"},
      {ErrorCode::Corruption, 400, "BadRequestError"},
      {ErrorCode::Unsupported, 400, "BadRequestError"},
      {ErrorCode::NotFound, 404, "NotFoundError"},
      {ErrorCode::PermissionDenied, 403, "PermissionDeniedError"},
      {ErrorCode::ResourceExhausted, 429, "RateLimitError"},
      {ErrorCode::IoError, 503, "ServiceUnavailableError"},
      {ErrorCode::Internal, 500, "InternalServerError"}};
  ASSERT_EQ(cases.size(), kErrorCodeNames.size()) << "a code without a case";
  for (const auto& [code, status, type] : cases) {
    EXPECT_EQ(workerErrorStatus(code), status) << errorCodeName(code);
    EXPECT_EQ(errorType(status), type) << errorCodeName(code);
  }
}

TEST(OutputPlanTest, IgnoreEosGivesMaxTokensExactly) {
  GenerateRequest r{.prompts = {{1}, {2}}, .max_tokens = 40, .n = 2, .ignore_eos = true};
  EXPECT_EQ(planOutputLengths(r, {}, 0), (std::vector<std::uint32_t>{40, 40, 40, 40}));
}

TEST(OutputPlanTest, DrawsSeededLengthsWithinBounds) {
  GenerateRequest r{.prompts = {{1}}, .max_tokens = 100, .min_tokens = 20, .n = 8};
  const LengthModel model{.mean = 50, .stddev = 40, .seed = 3};
  const auto a = planOutputLengths(r, model, 5);
  EXPECT_EQ(a, planOutputLengths(r, model, 5));  // same seeds, same lengths
  EXPECT_NE(a, planOutputLengths(r, model, 6));  // another request, other lengths
  for (const auto len : a) {
    EXPECT_GE(len, 20u);
    EXPECT_LE(len, 100u);
  }
  r.seed = 11;  // the request's own seed wins over the sequence number
  EXPECT_EQ(planOutputLengths(r, model, 1), planOutputLengths(r, model, 2));
  const auto fixed = planOutputLengths(r, {.mean = 30, .stddev = 0}, 0);
  EXPECT_EQ(fixed, std::vector<std::uint32_t>(8, 30));
}

/// Same value, same number types (unsigned / signed / float), everywhere inside.
bool sameJson(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.type() != b.type() || a.size() != b.size()) return false;
  if (a.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it) {
      if (!b.contains(it.key()) || !sameJson(it.value(), b.at(it.key()))) return false;
    }
    return true;
  }
  if (a.is_array()) {
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (!sameJson(a[i], b[i])) return false;
    }
    return true;
  }
  return a == b;
}

TEST(JsonFastParse, ReadsTheCommonShapeAsNlohmannDoes) {
  for (const std::string& text : std::vector<std::string>{
           R"({"prompt": [1000000, 2, 0], "max_tokens": 16, "ignore_eos": true})",
           R"( {"model":"m","stream":false,"n":null,"seed":-7,"x":-0,"s":"é\u0000"} )",
           R"({"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]})",
           R"({"a":1,"a":{"b":[[],{}]},"c":999999999999999999,"d":-999999999999999999})",
           "{}",
       }) {
    const auto fast = detail::parseJsonFast(text);
    const auto slow = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(slow.is_discarded()) << text;
    if (text.find("\\u") != std::string::npos) {
      EXPECT_FALSE(fast) << text;  // an escape: left to nlohmann
      continue;
    }
    ASSERT_TRUE(fast) << text;
    EXPECT_TRUE(sameJson(*fast, slow)) << text << " read as " << fast->dump();
  }
}

TEST(JsonFastParse, LeavesEverythingElseToNlohmann) {
  for (const std::string& text : std::vector<std::string>{
           "",
           "[1]",
           "1",
           "{",
           "{\"a\":1,}",
           "{\"a\" 1}",
           "{\"a\":01}",
           "{\"a\":1.5}",
           "{\"a\":1e3}",
           "{\"a\":-}",
           "{\"a\":1}x",
           "{\"a\":\"\\n\"}",
           "{\"a\":\"\t\"}",
           "{\"a\":\"\xff\"}",
           "{\"a\":1234567890123456789}",
           "{\"a\":tru}",
           "{\"a\":[1 2]}",
           "\xef\xbb\xbf{}",
           std::string(100, '[') + std::string(100, ']'),
           "{\"a\":" + std::string(70, '[') + std::string(70, ']') + "}",
       }) {
    EXPECT_FALSE(detail::parseJsonFast(text)) << text;
  }
}

TEST(JsonFastParse, TakesATopLevelTokenIdPromptOutOfTheValue) {
  struct Case {
    std::string text;
    std::optional<std::vector<std::uint32_t>> ids;  // what comes out of the value
  };
  using Ids = std::vector<std::uint32_t>;
  for (const Case& c : std::vector<Case>{
           {R"({"prompt": [1000000, 2, 0], "max_tokens": 16})", Ids{1000000, 2, 0}},
           {R"({"prompt":[ 4294967295 ,7 ]})", Ids{4294967295u, 7}},
           {R"({"prompt":"x","prompt":[1,2]})", Ids{1, 2}},  // the last one counts
           {R"({"prompt":[1,2],"prompt":"x"})", std::nullopt},
           {R"({"prompt":[1,2],"prompt":[3]})", Ids{3}},
           {R"({"prompt":[4294967296]})", std::nullopt},  // past 2^32: the error's path
           {R"({"prompt":[-1]})", std::nullopt},
           {R"({"prompt":[]})", std::nullopt},
           {R"({"prompt":[[1,2],[3]]})", std::nullopt},
           {R"({"prompt":[1,"a"]})", std::nullopt},
           {R"({"a":{"prompt":[1]}})", std::nullopt},  // nested: not the request's prompt
       }) {
    std::optional<std::vector<std::uint32_t>> ids = Ids{99};  // reset by the call
    const auto fast = detail::parseJsonFast(c.text, &ids);
    auto slow = nlohmann::json::parse(c.text);
    ASSERT_TRUE(fast) << c.text;
    EXPECT_EQ(ids, c.ids) << c.text;
    if (c.ids) {
      EXPECT_EQ(slow["prompt"].get<Ids>(), *c.ids) << c.text;
      slow.erase("prompt");
      EXPECT_FALSE(fast->contains("prompt")) << c.text;
    }
    EXPECT_TRUE(sameJson(*fast, slow)) << c.text << " read as " << fast->dump();
  }
  // The fast path giving up leaves no ids behind.
  std::optional<std::vector<std::uint32_t>> ids;
  EXPECT_FALSE(detail::parseJsonFast(R"({"prompt":[1],"x":1.5})", &ids));
  EXPECT_FALSE(ids);
}

// The request a body means does not depend on which JSON reader read it: each body is parsed
// as given (the fast path where it applies) and with an escaped member added, which sends it
// through nlohmann::json::parse; accepted or refused alike, with the same fields or error.
TEST_F(OpenAiRequestTest, TheFastPathReadsARequestAsNlohmannDoes) {
  for (const std::string& members : std::vector<std::string>{
           R"("prompt": [1000000, 2, 0], "max_tokens": 16, "ignore_eos": true)",
           R"("prompt": [4294967295], "max_tokens": 3, "n": 2, "seed": 5)",
           R"("prompt": [4294967296])",
           R"("prompt": [-1, 2])",
           R"("prompt": [])",
           R"("prompt": [0])",
           R"("prompt": "hello there", "stop": ["a"])",
           R"("prompt": [[1, 2], [3]], "max_tokens": 2)",
           R"("prompt": [[1, 2], []])",
           R"("prompt": ["a", [7]])",
           R"("prompt": [1, 2], "prompt": "again")",
           R"("prompt": "x", "prompt": [5, 6], "stream": true)",
           R"("prompt": [1, 2], "max_tokens": 999)",
           R"("prompt": [1, 2], "max_tokens": "3")",
           R"("max_tokens": 3)",
       }) {
    const auto fast = completion("{" + members + "}");
    const auto slow = completion("{" + members + R"(, "\u0078": 0})");
    ASSERT_EQ(fast.index(), slow.index()) << members;
    if (const auto* e = std::get_if<ApiError>(&fast)) {
      const auto& f = std::get<ApiError>(slow);
      EXPECT_EQ(e->status, f.status) << members;
      EXPECT_EQ(e->message, f.message) << members;
      EXPECT_EQ(e->param, f.param) << members;
      continue;
    }
    const auto& a = std::get<GenerateRequest>(fast);
    const auto& b = std::get<GenerateRequest>(slow);
    EXPECT_EQ(a.prompts, b.prompts) << members;
    EXPECT_EQ(a.max_tokens, b.max_tokens) << members;
    EXPECT_EQ(a.n, b.n) << members;
    EXPECT_EQ(a.stream, b.stream) << members;
    EXPECT_EQ(a.ignore_eos, b.ignore_eos) << members;
    EXPECT_EQ(a.stop, b.stop) << members;
    EXPECT_EQ(a.seed, b.seed) << members;
  }
}

}  // namespace
}  // namespace mocker::gateway
