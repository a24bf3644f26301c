// The live replay's socket-free request bookkeeping (tools/replay/live_requests.h): ids, which
// connection speaks for a request before and after its handoff, the deadlines in order, and the
// counters of tools/replay/live_stats.h the loop feeds (finish counts, dispatch lag summary, the
// servers' injected faults by kind and their report line and JSON key).
#include "tools/replay/live_requests.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "protocol/detail/client_names.h"
#include "tools/replay/live_stats.h"
#include "tools/replay/report_output.h"

namespace mocker::replay {
namespace {

TEST(LiveRequestsTest, IdsRoundTripAndOthersAreRefused) {
  EXPECT_EQ(liveRequestId(42), "r42");
  EXPECT_EQ(liveRequestId(42, 3), "r42.3");
  EXPECT_EQ(parseLiveRequestId("r42"), (LiveRequestId{.index = 42}));
  EXPECT_EQ(parseLiveRequestId("r0"), (LiveRequestId{.index = 0}));
  EXPECT_EQ(parseLiveRequestId("r42.3"), (LiveRequestId{.index = 42, .attempt = 3}));
  for (const char* bad : {"", "r", "42", "x42", "r4x", "r-1", "r99999999999999999999999", "r042",
                          "r00", "r4.", "r4.0", "r4.03", "r.1", "r4.1.1", "r4.x", "r4.-1",
                          "r4.99999999999"}) {  // only the spelling liveRequestId gives
    EXPECT_FALSE(parseLiveRequestId(bad).has_value()) << bad;
  }
  EXPECT_EQ(terminalStatusOf(protocol::FinishReason::Length), TerminalStatus::Completed);
  EXPECT_EQ(terminalStatusOf(protocol::FinishReason::Shutdown), TerminalStatus::Failed);
}

TEST(LiveRequestsTest, TheHolderChangesAtTheHandoff) {
  LiveRequests requests(/*num_prefill=*/2);
  requests.add({.target = 1});
  EXPECT_EQ(requests.find(1, "r0"), &requests[0]);
  EXPECT_EQ(requests.find(0, "r0"), nullptr);  // another prefill server
  EXPECT_EQ(requests.find(1, "r1"), nullptr);  // unknown
  EXPECT_EQ(requests.holder(0), 1u);
  requests[0].decode_target = 1;  // the decode submit went to decode server 1 (connection 3)
  EXPECT_EQ(requests.find(1, "r0"), nullptr);
  EXPECT_EQ(requests.find(3, "r0"), &requests[0]);
  EXPECT_EQ(requests.find(2, "r0"), nullptr);
  EXPECT_EQ(requests.holder(0), 3u);
  requests[0].live = false;
  EXPECT_EQ(requests.find(3, "r0"), nullptr);
}

TEST(LiveRequestsTest, OnlyTheCurrentAttemptSpeaksForAMigratedRequest) {
  LiveRequests requests(/*num_prefill=*/2);
  requests.add({.target = 0});
  EXPECT_EQ(requests.wireId(0), "r0");
  requests[0].migrations = 1;  // re-sent to server 1 as r0.1
  requests[0].target = 1;
  EXPECT_EQ(requests.wireId(0), "r0.1");
  EXPECT_EQ(requests.find(1, "r0.1"), &requests[0]);
  EXPECT_EQ(requests.find(1, "r0"), nullptr);    // the first attempt's id: a late message
  EXPECT_EQ(requests.find(0, "r0.1"), nullptr);  // not that server's
  EXPECT_EQ(requests.find(1, "r0.2"), nullptr);  // no such attempt yet
}

TEST(LiveRequestsTest, AMigrationSendsThePromptAndTheTokensSoFarForTheRest) {
  const protocol::SubmitRequest original{.id = "r7",
                                         .prompt = {1, 2, 3},
                                         .max_tokens = 5,
                                         .output_tokens = std::vector<std::uint32_t>{9, 8, 7, 6, 5},
                                         .dp_rank = 1,
                                         .lora = "adapter",
                                         .handoff = protocol::HandoffTicket{}};
  // Before its first token: the same prompt and output, the router picks the rank again.
  const protocol::SubmitRequest before = migratedSubmit(original, {});
  EXPECT_EQ(before.prompt, original.prompt);
  EXPECT_EQ(before.max_tokens, 5u);
  EXPECT_EQ(before.output_tokens, original.output_tokens);
  EXPECT_FALSE(before.dp_rank.has_value());
  EXPECT_FALSE(before.handoff.has_value());
  EXPECT_EQ(before.lora, original.lora);
  // After two tokens: they join the prompt; three are left to generate.
  const std::vector<std::uint32_t> generated{9, 8};
  const protocol::SubmitRequest after = migratedSubmit(original, generated);
  EXPECT_EQ(after.prompt, (std::vector<std::uint32_t>{1, 2, 3, 9, 8}));
  EXPECT_EQ(after.max_tokens, 3u);
  EXPECT_EQ(after.output_tokens, (std::vector<std::uint32_t>{7, 6, 5}));
  // Every token already streamed (its finish lost with the server): nothing is left.
  const std::vector<std::uint32_t> all{9, 8, 7, 6, 5};
  EXPECT_EQ(migratedSubmit(original, all).max_tokens, 0u);
  EXPECT_TRUE(migratedSubmit(original, all).output_tokens->empty());
}

TEST(LiveRequestsTest, ALostRequestIsCompletedResentOrFailed) {
  using enum LostRequestStep;
  LiveRequest r{.submit = protocol::SubmitRequest{.id = "r0", .prompt = {1, 2}, .max_tokens = 3}};
  // Migration off: a lost request fails, whatever it streamed.
  EXPECT_EQ(lostRequestStep(r, 0).step, Fail);
  r.generated = {7, 8, 9};
  EXPECT_EQ(lostRequestStep(r, 0).step, Fail);
  // Every token streamed, only the finish lost: completed, never re-sent for 0 tokens — also
  // when the limit is used up.
  EXPECT_EQ(lostRequestStep(r, 2).step, Complete);
  r.migrations = 2;
  EXPECT_EQ(lostRequestStep(r, 2).step, Complete);
  // Tokens left: re-sent while migrations < limit.
  r.generated = {7, 8};
  EXPECT_EQ(lostRequestStep(r, 2).step, Fail);
  r.migrations = 1;
  EXPECT_EQ(lostRequestStep(r, 2).step, Resend);
  r.generated.clear();
  EXPECT_EQ(lostRequestStep(r, 2).step, Resend);
  // Planned output: its length is what counts, not max_tokens.
  r.submit->output_tokens = std::vector<std::uint32_t>{7, 8};
  r.generated = {7, 8};
  EXPECT_EQ(lostRequestStep(r, 2).step, Complete);
  r.submit->output_tokens = std::vector<std::uint32_t>{7, 8, 9, 10};
  r.generated = {7, 8, 9};
  EXPECT_EQ(lostRequestStep(r, 2).step, Resend);
  // A 0-token request (allow_empty_output) is not complete until its server says so.
  r.submit->output_tokens.reset();
  r.submit->max_tokens = 0;
  r.generated.clear();
  EXPECT_EQ(lostRequestStep(r, 2).step, Resend);
  // No submit kept (nothing to re-send): failed.
  r.submit.reset();
  EXPECT_EQ(lostRequestStep(r, 2).step, Fail);
}

// A stream the server stopped at its length limit L (prompt + output = L) before max_tokens has
// nothing left either: a re-send would be a prompt of L tokens, which every server with that
// limit rejects. Known only from the server's stats_reply.engine.length_limit.
TEST(LiveRequestsTest, LostRequestAtTheServersLengthLimitIsComplete) {
  using enum LostRequestStep;
  LiveRequest r{.submit =
                    protocol::SubmitRequest{.id = "r0", .prompt = {1, 2, 3, 4}, .max_tokens = 10}};
  r.generated = {7, 8, 9};  // prompt + output = 7
  const protocol::EngineInfo at_7{.engine_type = "vllm",
                                  .worker_type = "aggregated",
                                  .block_size = 16,
                                  .length_limit = 7,
                                  .length_limit_name = "max_model_len"};
  const LostRequestOutcome done = lostRequestStep(r, 2, at_7);
  EXPECT_EQ(done.step, Complete);
  EXPECT_EQ(done.cut_short_by, StopReason::MaxModelLen);
  // Below the limit: tokens left, re-sent.
  protocol::EngineInfo at_8 = at_7;
  at_8.length_limit = 8;
  at_8.length_limit_name = "kv capacity";
  EXPECT_EQ(lostRequestStep(r, 2, at_8).step, Resend);
  r.generated.push_back(10);
  EXPECT_EQ(lostRequestStep(r, 2, at_8).cut_short_by, StopReason::KvCapacity);
  // A server that does not say its limit (0, or no engine map): re-sent as before.
  protocol::EngineInfo unknown = at_7;
  unknown.length_limit = 0;
  EXPECT_EQ(lostRequestStep(r, 2, unknown).step, Resend);
  EXPECT_EQ(lostRequestStep(r, 2, std::nullopt).step, Resend);
  // Migration off: failed all the same.
  EXPECT_EQ(lostRequestStep(r, 0, at_7).step, Fail);
  // Every requested token streamed exactly at L: simply complete, no limit named.
  r.submit->max_tokens = 4;
  EXPECT_EQ(lostRequestStep(r, 2, at_8).step, Complete);
  EXPECT_EQ(lostRequestStep(r, 2, at_8).cut_short_by, StopReason::None);
}

TEST(LiveRequestsTest, DeadlinesComeOutInOrderAndSkipEndedRequests) {
  LiveRequests requests(1);
  for (int i = 0; i < 3; ++i) requests.add({});
  requests.setDeadline(0, 30.0);
  requests.setDeadline(1, 10.0);
  requests.setDeadline(2, 20.0);
  requests[1].live = false;  // ended before its deadline
  EXPECT_EQ(requests.nextDeadlineMs(), 20.0);
  EXPECT_FALSE(requests.takeExpired(19.0).has_value());
  EXPECT_EQ(requests.takeExpired(25.0), std::optional<std::size_t>(2));
  EXPECT_FALSE(requests.takeExpired(25.0).has_value());
  EXPECT_EQ(requests.takeExpired(30.0), std::optional<std::size_t>(0));
  EXPECT_EQ(requests.nextDeadlineMs(), std::numeric_limits<double>::infinity());
}

TEST(LiveRequestsTest, FinishCountsAndDispatchLagSummary) {
  LiveReplayStats stats;
  countFinish(TerminalStatus::Rejected, stats);
  countFinish(TerminalStatus::Failed, stats);
  countFinish(TerminalStatus::Completed, stats);
  EXPECT_EQ(stats.finish_rejected, 1u);
  EXPECT_EQ(stats.finish_failed, 1u);
  EXPECT_EQ(stats.finish_cancelled, 0u);
  std::vector<double> none;
  summarizeDispatchLag(none, stats);
  EXPECT_EQ(stats.mean_dispatch_lag_ms, 0.0);
  std::vector<double> lags;
  for (int i = 100; i >= 1; --i) lags.push_back(static_cast<double>(i));
  summarizeDispatchLag(lags, stats);
  EXPECT_DOUBLE_EQ(stats.mean_dispatch_lag_ms, 50.5);
  EXPECT_EQ(stats.p99_dispatch_lag_ms, 99.0);
}

/// The value of table line `label` (after its padding), or "" when the table has no such line.
std::string tableValue(const std::string& table, const std::string& label) {
  const std::size_t at = table.find("\n" + label + " ");
  if (at == std::string::npos) return {};
  const std::size_t from = table.find_first_not_of(' ', at + 1 + label.size());
  return table.substr(from, table.find('\n', from) - from);
}

TEST(LiveRequestsTest, ServerFaultsAreCountedOverTheRunByKind) {
  LiveReplayStats stats;
  // No server has faults configured: no counts, no report line.
  stats.faults_start.assign(2, std::nullopt);
  stats.faults_end.assign(2, std::nullopt);
  EXPECT_EQ(liveServerFaults(stats), std::nullopt);
  // Server 0 had injected before the run (hang 1, error 4: not this run's); server 1 reported
  // counts only later (from 0); the counts are summed over the servers, every kind listed.
  stats.faults_start[0] = protocol::FaultCounts{.hang = 1, .error = 4};
  stats.faults_end[0] = protocol::FaultCounts{.hang = 2, .error = 7, .drop = 2};
  stats.faults_end[1] = protocol::FaultCounts{.error = 1, .restart = 1};
  const auto kinds = liveServerFaults(stats);
  ASSERT_TRUE(kinds.has_value());
  EXPECT_EQ(kinds->size(), protocol::detail::kFaultCountKeys.size());
  EXPECT_EQ(kinds->front(), (std::pair<std::string, std::uint64_t>("crash", 0)));
  Report report;
  report.server_faults = kinds;
  EXPECT_EQ(tableValue(formatReportTable(report), "Faults injected (servers)"),
            "hang 1, error 4, drop 2, restart 1");
  const auto j = nlohmann::json::parse(formatReportJson(report));
  EXPECT_EQ(j["server_faults_injected"]["error"], 4);
  EXPECT_EQ(j["server_faults_injected"]["crash"], 0);
  EXPECT_EQ(j["server_faults_injected"].size(), protocol::detail::kFaultCountKeys.size());
  // Reported, none fired: "none"; without it (offline), no line and no key.
  report.server_faults = liveServerFaults(LiveReplayStats{.faults_start = {protocol::FaultCounts{}},
                                                          .faults_end = {protocol::FaultCounts{}}});
  EXPECT_EQ(tableValue(formatReportTable(report), "Faults injected (servers)"), "none");
  report.server_faults.reset();
  EXPECT_EQ(formatReportTable(report).find("Faults injected (servers)"), std::string::npos);
  EXPECT_FALSE(nlohmann::json::parse(formatReportJson(report)).contains("server_faults_injected"));
}

}  // namespace
}  // namespace mocker::replay
