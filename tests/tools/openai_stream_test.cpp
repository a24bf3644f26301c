// The socket-free half of the OpenAI replay (tools/replay/openai_stream.h) and its schedule
// (tools/replay/turn_scheduler.h).
#include "tools/replay/openai_stream.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/replay/turn_scheduler.h"

namespace mocker::replay {
namespace {

TEST(OpenAiUrlTest, DefaultsThePathToV1AndKeepsAGivenOne) {
  const auto a = parseOpenAiUrl("http://127.0.0.1:8000");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, "8000");
  EXPECT_EQ(a->base_path, "/v1");
  const auto b = parseOpenAiUrl("http://localhost:9/v1/");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->base_path, "/v1");
  const auto c = parseOpenAiUrl("http://[::1]:8080/proxy");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->base_path, "/proxy/v1");
  EXPECT_EQ(parseOpenAiUrl("http://h")->port, "80");
}

TEST(OpenAiUrlTest, RefusesWhatItCannotReach) {
  for (const char* bad : {"https://h:1", "tcp://h:1", "http://:80", "http://h:0", "http://h:x",
                          "http://h:70000", "http://[::1"}) {
    const auto r = parseOpenAiUrl(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("--openai-url"), std::string::npos) << r.error().message;
  }
  EXPECT_NE(parseOpenAiUrl("https://h").error().message.find("https is not supported"),
            std::string::npos);
}

TEST(OpenAiRequestBodyTest, TokenIdPromptOrTextAndStreamedUsage) {
  const std::vector<std::uint32_t> ids = {5, 5, 7};
  const auto ids_body =
      nlohmann::json::parse(openAiRequestBody({.model = "m", .prompt_ids = ids, .max_tokens = 4}));
  EXPECT_EQ(ids_body["prompt"], nlohmann::json(ids));
  EXPECT_EQ(ids_body["max_tokens"], 4);
  EXPECT_EQ(ids_body["min_tokens"], 4);
  EXPECT_EQ(ids_body["ignore_eos"], true);
  EXPECT_EQ(ids_body["stream"], true);
  EXPECT_EQ(ids_body["stream_options"]["include_usage"], true);
  EXPECT_EQ(ids_body["stream_options"]["continuous_usage_stats"], true);
  const auto chat = nlohmann::json::parse(openAiRequestBody(
      {.model = "m", .chat = true, .prompt_ids = ids, .text = " t5", .max_tokens = 1}));
  EXPECT_FALSE(chat.contains("prompt"));
  EXPECT_EQ(chat["messages"][0]["role"], "user");
  EXPECT_EQ(chat["messages"][0]["content"], " t5");
  const auto text = nlohmann::json::parse(
      openAiRequestBody({.model = "m", .prompt_ids = ids, .text = "hi", .max_tokens = 1}));
  EXPECT_EQ(text["prompt"], "hi");
  const auto whole = nlohmann::json::parse(
      openAiRequestBody({.model = "m", .prompt_ids = ids, .max_tokens = 2, .stream = false}));
  EXPECT_EQ(whole["stream"], false);
  EXPECT_FALSE(whole.contains("stream_options"));
  EXPECT_EQ(whole["max_tokens"], 2);
}

TEST(OpenAiRequestBodyTest, BytesAreNlohmannsDumpOfTheSameTree) {
  // The body is written without a JSON tree; pinned byte for byte to the tree's dump.
  const std::vector<std::uint32_t> ids = {0, 7, 4294967295u, 123456};
  for (const bool chat : {false, true}) {
    for (const bool stream : {false, true}) {
      for (const std::optional<std::string>& text :
           {std::optional<std::string>{},
            std::optional<std::string>("q\"uote\\ \n\x01 \xc3\xa9")}) {
        if (chat && !text) continue;
        const OpenAiRequestSpec spec{.model = "m\"x",
                                     .chat = chat,
                                     .prompt_ids = ids,
                                     .text = text,
                                     .max_tokens = 16,
                                     .stream = stream};
        nlohmann::json tree = {{"model", spec.model},
                               {"max_tokens", spec.max_tokens},
                               {"min_tokens", spec.max_tokens},
                               {"ignore_eos", true},
                               {"stream", stream}};
        if (stream) {
          tree["stream_options"] = {{"include_usage", true}, {"continuous_usage_stats", true}};
        }
        if (chat) {
          tree["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", *text}}});
        } else if (text) {
          tree["prompt"] = *text;
        } else {
          tree["prompt"] = ids;
        }
        EXPECT_EQ(openAiRequestBody(spec), tree.dump()) << chat << stream << text.has_value();
      }
    }
  }
}

TEST(OpenAiErrorMessageTest, ReadsOpenAiErrorsAndQuotesAnythingElse) {
  EXPECT_EQ(openAiErrorMessage(R"({"error":{"message":"no such model","type":"x"}})"),
            "no such model");
  EXPECT_EQ(openAiErrorMessage(R"({"detail":"Not Found"})"), "Not Found");
  EXPECT_EQ(openAiErrorMessage("<html>bad gateway</html>"), "<html>bad gateway</html>");
  EXPECT_EQ(openAiErrorMessage(""), "(empty body)");
  EXPECT_EQ(openAiErrorMessage(std::string(300, 'x')).size(), 203u);
  EXPECT_EQ(*firstModelId(R"({"object":"list","data":[{"id":"mock","object":"model"}]})"), "mock");
  EXPECT_FALSE(firstModelId(R"({"data":[]})"));
}

TEST(SseReaderTest, SplitsEventsAcrossAnyByteBoundaryAndLineEnding) {
  const std::string stream =
      ": comment\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata:two\ndata: lines\n\ndata: [DONE]\r\r";
  const std::vector<std::string> expected = {"{\"a\":1}", "two\nlines", "[DONE]"};
  for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
    SseReader reader;
    std::vector<std::string> events;
    ASSERT_TRUE(reader.feed(std::string_view(stream).substr(0, cut), events));
    ASSERT_TRUE(reader.feed(std::string_view(stream).substr(cut), events));
    EXPECT_EQ(events, expected) << "cut at " << cut;
    EXPECT_EQ(reader.pending(), 0u);
  }
}

TEST(SseReaderTest, AnEventThatNeverEndsIsAnErrorNotUnboundedMemory) {
  // A hostile server's line without an end, or data lines without the blank line that ends
  // their event: the reader gives up at kMaxSseEventBytes instead of buffering (and, before,
  // rescanning on every feed: 81 s for these 8 MiB) whatever is sent.
  const std::string piece(16 << 10, 'x');
  std::vector<std::string> events;
  SseReader line;
  Status s;
  std::size_t fed = 0;
  while (s && fed < 512) s = line.feed(piece, events), ++fed;  // up to 8 MiB, no line end
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message,
            "an SSE event over 1 MiB without its end (a line end, then a blank line)");
  EXPECT_LE(fed * piece.size(), SseReader::kMaxSseEventBytes + piece.size());
  SseReader lines;
  const std::string data_line = "data: " + piece + "\n";
  s = {};
  fed = 0;
  while (s && fed < 512) s = lines.feed(data_line, events), ++fed;  // no blank line
  ASSERT_FALSE(s);
  EXPECT_LE(lines.pending(), SseReader::kMaxSseEventBytes + data_line.size());
  EXPECT_TRUE(events.empty());
  // Just under the limit, then its end: one event.
  SseReader big;
  const std::string under(SseReader::kMaxSseEventBytes - 16, 'y');
  ASSERT_TRUE(big.feed("data: ", events));
  ASSERT_TRUE(big.feed(under, events));
  ASSERT_TRUE(big.feed("\n\n", events));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], under);
  EXPECT_EQ(big.pending(), 0u);
}

TEST(OpenAiStreamTest, ContinuousUsageStampsEveryTokenWithItsChunk) {
  OpenAiStream s(3);
  ASSERT_TRUE(s.onEvent(R"({"choices":[{"delta":{"role":"assistant","content":""}}],)"
                        R"("usage":{"prompt_tokens":9,"completion_tokens":0}})",
                        1.0));
  ASSERT_TRUE(s.onEvent(R"({"choices":[{"text":" t1 t2"}],"usage":{"completion_tokens":2}})", 2.0));
  ASSERT_TRUE(s.onEvent(R"({"choices":[{"text":" t3","finish_reason":"length"}],)"
                        R"("usage":{"completion_tokens":3}})",
                        3.0));
  ASSERT_TRUE(s.onEvent(R"({"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,)"
                        R"("prompt_tokens_details":{"cached_tokens":4}}})",
                        4.0));
  ASSERT_TRUE(s.onEvent("[DONE]", 5.0));
  s.finish();
  EXPECT_TRUE(s.done());
  EXPECT_EQ(s.tokenTimes(), (std::vector<double>{2.0, 2.0, 3.0}));
  EXPECT_EQ(s.promptTokens(), 9u);
  EXPECT_EQ(s.cachedTokens(), 4u);
  EXPECT_EQ(s.finishReason(), "length");
  EXPECT_EQ(s.text(), " t1 t2 t3");
  EXPECT_FALSE(s.onEvent("{}", 6.0));  // nothing after [DONE]
}

TEST(OpenAiStreamTest, WithoutContinuousUsageOneTokenPerTextChunkReconciledWithUsage) {
  OpenAiStream more(4);
  ASSERT_TRUE(more.onEvent(R"({"choices":[{"text":"a"}]})", 1.0));
  ASSERT_TRUE(more.onEvent(R"({"choices":[{"text":"bc","finish_reason":"stop"}]})", 2.0));
  ASSERT_TRUE(more.onEvent(R"({"choices":[],"usage":{"completion_tokens":4}})", 3.0));
  more.finish();
  EXPECT_EQ(more.tokenTimes(), (std::vector<double>{1.0, 2.0, 2.0, 2.0}));
  OpenAiStream fewer(4);
  ASSERT_TRUE(fewer.onEvent(R"({"choices":[{"text":"a"}]})", 1.0));
  ASSERT_TRUE(fewer.onEvent(R"({"choices":[{"text":"b"}]})", 2.0));
  ASSERT_TRUE(fewer.onEvent(R"({"choices":[],"usage":{"completion_tokens":1}})", 3.0));
  fewer.finish();
  EXPECT_EQ(fewer.tokenTimes(), (std::vector<double>{1.0}));
}

TEST(OpenAiStreamTest, AUsageCountOverMaxTokensIsMalformedNotAnAllocation) {
  // A hostile server's usage.completion_tokens must not size the token-time vector: 50 million
  // claimed tokens for a request of 16 would be 400 MB (4e9: 32 GB).
  OpenAiStream cumulative(16);
  const Status over = cumulative.onEvent(
      R"({"choices":[{"text":"a"}],"usage":{"completion_tokens":50000000}})", 1.0);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().message,
            "usage.completion_tokens 50000000 is over the request's max_tokens 16");
  EXPECT_LE(cumulative.tokenTimes().size(), 16u);
  OpenAiStream final_usage(16);
  ASSERT_TRUE(final_usage.onEvent(R"({"choices":[{"text":"a"}]})", 1.0));
  EXPECT_FALSE(
      final_usage.onEvent(R"({"choices":[],"usage":{"completion_tokens":50000000}})", 2.0));
  final_usage.finish();
  EXPECT_LE(final_usage.tokenTimes().size(), 16u);
  // More text chunks than max_tokens (without usage) are not counted past it.
  OpenAiStream chunks(2);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(chunks.onEvent(R"({"choices":[{"text":"a"}]})", i));
  chunks.finish();
  EXPECT_EQ(chunks.tokenTimes(), (std::vector<double>{0.0, 1.0}));
  // Exactly max_tokens is fine.
  OpenAiStream exact(2);
  ASSERT_TRUE(exact.onEvent(R"({"choices":[{"text":"ab"}],"usage":{"completion_tokens":2}})", 1.0));
  EXPECT_EQ(exact.tokenTimes().size(), 2u);
}

TEST(OpenAiStreamTest, ANonStreamingBodyStampsEveryTokenAtItsArrival) {
  OpenAiStream completion(3);
  ASSERT_TRUE(completion.onResponse(
      R"({"id":"cmpl-r0","object":"text_completion","choices":[{"index":0,"text":" t1 t2 t3",)"
      R"("finish_reason":"length"}],"usage":{"prompt_tokens":9,"completion_tokens":3,)"
      R"("total_tokens":12,"prompt_tokens_details":{"cached_tokens":4}}})",
      7.0));
  completion.finish();
  EXPECT_TRUE(completion.done());
  EXPECT_EQ(completion.tokenTimes(), (std::vector<double>{7.0, 7.0, 7.0}));
  EXPECT_EQ(completion.promptTokens(), 9u);
  EXPECT_EQ(completion.cachedTokens(), 4u);
  EXPECT_EQ(completion.finishReason(), "length");
  EXPECT_EQ(completion.text(), " t1 t2 t3");
  OpenAiStream chat(2);
  ASSERT_TRUE(chat.onResponse(
      R"({"choices":[{"message":{"role":"assistant","content":" t1 t2"},"finish_reason":"stop"}],)"
      R"("usage":{"prompt_tokens":5,"completion_tokens":2}})",
      3.0));
  chat.finish();
  EXPECT_EQ(chat.tokenTimes(), (std::vector<double>{3.0, 3.0}));
  EXPECT_EQ(chat.text(), " t1 t2");
  OpenAiStream error(2);
  ASSERT_TRUE(error.onResponse(R"({"error":{"message":"worker lost"}})", 1.0));
  EXPECT_EQ(error.error(), "worker lost");
  for (const char* bad : {"", R"({"choices":[{"message":"x"}]})",
                          R"({"choices":[{"text":"a"}],"usage":{"completion_tokens":3}})"}) {
    OpenAiStream s(2);
    EXPECT_FALSE(s.onResponse(bad, 1.0)) << bad;
    EXPECT_FALSE(s.done()) << bad;
  }
}

TEST(OpenAiStreamTest, ErrorFramesAndMalformedEvents) {
  OpenAiStream e(4);
  ASSERT_TRUE(e.onEvent(R"({"error":{"message":"worker lost","code":503}})", 1.0));
  EXPECT_EQ(e.error(), "worker lost");
  for (const char* bad :
       {"not json", "[1]", R"({"choices":{}})", R"({"choices":[{"text":5}]})",
        R"({"usage":{"completion_tokens":-1}})", R"({"usage":{"completion_tokens":"3"}})",
        R"({"choices":[{"delta":[]}]})", R"({"usage":{"prompt_tokens_details":7}})"}) {
    OpenAiStream s(4);
    EXPECT_FALSE(s.onEvent(bad, 1.0)) << bad;
  }
}

TEST(TurnSchedulerTest, TraceTimingThenTheNextTurnAfterTheTerminal) {
  Workload w;
  w.sessions.push_back({.session_id = "a", .first_arrival_ms = 0.0, .turns = {{}, {}}});
  w.sessions[0].turns[1].delay_after_previous_ms = 5.0;
  w.sessions.push_back({.session_id = "b", .first_arrival_ms = 10.0, .turns = {{}}});
  w.sessions.push_back(
      {.session_id = "c", .turns = {{}}, .wait_for = {0, 1}, .dependency_delay_ms = 1.0});
  TurnScheduler s(w, std::nullopt);
  EXPECT_EQ(s.nextDueMs(), 0.0);
  auto first = s.popDue(0.0);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->session, 0u);
  EXPECT_FALSE(s.popDue(9.0));
  s.ended(0, 0, 7.0);  // turn 1 of "a" due at 12
  EXPECT_EQ(s.popDue(10.0)->session, 1u);
  EXPECT_FALSE(s.popDue(11.9));
  EXPECT_EQ(s.popDue(12.0)->turn, 1u);
  s.ended(1, 0, 20.0);
  EXPECT_FALSE(s.finished());
  s.ended(0, 1, 30.0);  // both dependencies ended: "c" at 30 + 1
  EXPECT_EQ(s.nextDueMs(), 31.0);
  EXPECT_EQ(s.popDue(31.0)->session, 2u);
  s.ended(2, 0, 40.0);
  EXPECT_TRUE(s.finished());
}

TEST(TurnSchedulerTest, ClosedLoopKeepsAtMostConcurrencyInFlight) {
  Workload w;
  for (const char* id : {"a", "b", "c"}) w.sessions.push_back({.session_id = id, .turns = {{}}});
  TurnScheduler s(w, 2u);
  ASSERT_TRUE(s.popDue(0.0));
  ASSERT_TRUE(s.popDue(0.0));
  EXPECT_EQ(s.nextDueMs(), std::numeric_limits<double>::infinity());
  EXPECT_FALSE(s.popDue(100.0));
  s.ended(0, 0, 3.0);
  EXPECT_EQ(s.popDue(3.0)->session, 2u);
  EXPECT_EQ(s.inFlight(), 2u);
}

TEST(TurnSchedulerTest, TraceModeNeedsArrivalsAndClosedLoopAConcurrency) {
  Workload w;
  w.sessions.push_back({.session_id = "untimed", .turns = {{}}});
  const Status trace = checkSchedulable(w, std::nullopt);
  ASSERT_FALSE(trace);
  EXPECT_NE(trace.error().message.find("'untimed' has no arrival time"), std::string::npos);
  EXPECT_TRUE(checkSchedulable(w, 4u));
  EXPECT_FALSE(checkSchedulable(w, 0u));
}

}  // namespace
}  // namespace mocker::replay
