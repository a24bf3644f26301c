// `mocker submit`'s handling of the messages about its request (tools/submit_stream.h), without
// sockets: what it prints, when it ends and with which exit code, when it takes the second hop.
#include "tools/submit_stream.h"

#include <gtest/gtest.h>

#include <sstream>

namespace mocker::tools {
namespace {

using protocol::FinishReason;

protocol::OutputBatch outputs(std::vector<protocol::RequestOutput> v) { return {std::move(v)}; }

struct Session {
  explicit Session(bool second_hop = false) : stream("r", 8, second_hop, out, err) {}
  std::ostringstream out, err;
  SubmitStream stream;
};

TEST(SubmitStreamTest, TokensStreamThenLengthEndsWithZero) {
  Session run;
  EXPECT_FALSE(run.stream.onMessage(protocol::SubmitAck{"r", 1}, 0.5, false).exit);
  EXPECT_FALSE(
      run.stream
          .onMessage(outputs({{.id = "r", .index = 0, .tokens = {7, 8}, .cached_tokens = 4}}), 2.0,
                     false)
          .exit);
  // Another request's outputs in the same batch are not ours.
  EXPECT_FALSE(
      run.stream
          .onMessage(
              outputs({{.id = "x", .index = 0, .tokens = {1}, .finish = FinishReason::Length}}),
              2.5, false)
          .exit);
  const auto step = run.stream.onMessage(
      outputs({{.id = "r", .index = 2, .tokens = {9}, .finish = FinishReason::Length}}), 3.0,
      false);
  EXPECT_EQ(step.exit, kSubmitExitOk);
  EXPECT_EQ(run.out.str(), "0 7 8\n2 9\nfinish length\n");
  EXPECT_NE(run.err.str().find("'r' accepted on dp_rank 1"), std::string::npos);
  EXPECT_NE(run.err.str().find("3 tokens in 3.0 ms; TTFT 2.0 ms; prefix-cache hits 4 of 8"),
            std::string::npos)
      << run.err.str();
}

TEST(SubmitStreamTest, RejectsErrorsAndOtherFinishesEndWithOne) {
  Session reject;
  EXPECT_FALSE(reject.stream.onMessage(protocol::SubmitReject{"other", "x"}, 1, false).exit);
  EXPECT_EQ(
      reject.stream.onMessage(protocol::SubmitReject{"r", "duplicate active id"}, 1, false).exit,
      kSubmitExitFailed);
  EXPECT_NE(reject.err.str().find("rejected: duplicate active id"), std::string::npos);

  Session error;
  EXPECT_EQ(error.stream
                .onMessage(protocol::ErrorReply{.code = ErrorCode::Corruption, .message = "bad"}, 1,
                           false)
                .exit,
            kSubmitExitFailed);

  Session shutdown;
  EXPECT_EQ(
      shutdown.stream
          .onMessage(outputs({{.id = "r", .finish = FinishReason::Shutdown, .reason = "stopping"}}),
                     1, false)
          .exit,
      kSubmitExitFailed);
  EXPECT_EQ(shutdown.out.str(), "finish shutdown (stopping)\n");
}

TEST(SubmitStreamTest, ACancelledFinishIs130OnlyAfterOurCancel) {
  const protocol::OutputBatch cancelled = outputs({{.id = "r", .finish = FinishReason::Cancelled}});
  Session ours;
  EXPECT_EQ(ours.stream.onMessage(cancelled, 1, /*cancel_sent=*/true).exit, kSubmitExitInterrupted);
  Session theirs;
  EXPECT_EQ(theirs.stream.onMessage(cancelled, 1, /*cancel_sent=*/false).exit, kSubmitExitFailed);
}

TEST(SubmitStreamTest, AHandoffEndsTheRunOrIsTheSecondHop) {
  const protocol::Handoff handoff{.id = "r",
                                  .ticket = {.source = "tcp://127.0.0.1:9",
                                             .source_rank = 1,
                                             .block_size = 16,
                                             .prompt_len = 8,
                                             .cached_tokens = 0}};
  Session one_hop;
  EXPECT_EQ(one_hop.stream.onMessage(handoff, 4.0, false).exit, kSubmitExitOk);
  EXPECT_EQ(
      one_hop.out.str().rfind("handoff source tcp://127.0.0.1:9 source_rank 1 prompt_len 8", 0), 0u)
      << one_hop.out.str();
  EXPECT_NE(one_hop.err.str().find("give --decode-endpoint"), std::string::npos);

  Session two_hops(/*second_hop=*/true);
  const auto step = two_hops.stream.onMessage(handoff, 4.0, false);
  EXPECT_FALSE(step.exit);
  ASSERT_TRUE(step.hop.has_value());
  EXPECT_EQ(step.hop->source, "tcp://127.0.0.1:9");
  // A repeated handoff is not a second hop.
  EXPECT_FALSE(two_hops.stream.onMessage(handoff, 5.0, false).hop.has_value());
}

}  // namespace
}  // namespace mocker::tools
