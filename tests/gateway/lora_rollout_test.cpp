// LoraRollout (gateway/lora_rollout.h): a run-time load or unload ends once every worker
// answered; refusals, lost and silent workers; one operation per name, later ones deferred.
#include "gateway/lora_rollout.h"

#include <gtest/gtest.h>

#include <optional>

namespace mocker::gateway {
namespace {

using protocol::LoraOp;
using protocol::LoraReply;
using Clock = LoraRollout::Clock;

struct Recorder {
  std::optional<LoraRollout::Outcome> outcome;
  int calls = 0;
  LoraRollout::Done done() {
    return [this](LoraRollout::Outcome&& o) {
      ++calls;
      outcome = std::move(o);
    };
  }
};

TEST(LoraRolloutTest, EndsOnceEveryWorkerRepliedAndNamesEachRefusal) {
  LoraRollout r;
  Recorder rec;
  const auto t0 = Clock::now();
  r.start(LoraOp::Load, "a", 3, t0, rec.done());
  EXPECT_TRUE(r.busy("a"));
  EXPECT_TRUE(r.onReply(2, LoraReply{.op = LoraOp::Load, .name = "a", .changed = true}));
  // Another name, another op, a worker already counted: awaited by nothing.
  EXPECT_FALSE(r.onReply(0, LoraReply{.op = LoraOp::Load, .name = "b"}));
  EXPECT_FALSE(r.onReply(0, LoraReply{.op = LoraOp::Unload, .name = "a"}));
  EXPECT_FALSE(r.onReply(2, LoraReply{.op = LoraOp::Load, .name = "a"}));
  EXPECT_FALSE(r.onReply(7, LoraReply{.op = LoraOp::Load, .name = "a"}));
  EXPECT_TRUE(r.onReply(1, LoraReply{.op = LoraOp::Load,
                                     .name = "a",
                                     .error = ErrorCode::Unsupported,
                                     .message = "LoRA is off"}));
  EXPECT_EQ(rec.calls, 0);
  EXPECT_TRUE(r.onReply(0, LoraReply{.op = LoraOp::Load, .name = "a"}));
  ASSERT_EQ(rec.calls, 1);
  EXPECT_EQ(rec.outcome->name, "a");
  EXPECT_EQ(rec.outcome->op, LoraOp::Load);
  EXPECT_EQ(rec.outcome->errors, std::vector<std::string>{"worker 1: unsupported: LoRA is off"});
  EXPECT_FALSE(r.busy("a"));
  EXPECT_EQ(r.inFlight(), 0u);
}

TEST(LoraRolloutTest, ALostOrSilentWorkerFailsItsPart) {
  LoraRollout r;
  Recorder a;
  Recorder b;
  const auto t0 = Clock::now();
  r.start(LoraOp::Load, "a", 2, t0, a.done());
  r.start(LoraOp::Unload, "b", 2, t0 + std::chrono::seconds(5), b.done());
  r.onLost(1, "stopped answering");
  EXPECT_EQ(a.calls + b.calls, 0);
  EXPECT_TRUE(r.onReply(0, LoraReply{.op = LoraOp::Load, .name = "a"}));
  ASSERT_EQ(a.calls, 1);
  EXPECT_EQ(a.outcome->errors, std::vector<std::string>{"worker 1: stopped answering"});
  // "b" started 5 s later: a 3 s timeout at t0 + 6 s leaves it; at t0 + 9 s worker 0 fails.
  r.expire(t0 + std::chrono::seconds(6), std::chrono::milliseconds(3000));
  EXPECT_EQ(b.calls, 0);
  r.expire(t0 + std::chrono::seconds(9), std::chrono::milliseconds(3000));
  ASSERT_EQ(b.calls, 1);
  EXPECT_EQ(b.outcome->errors, (std::vector<std::string>{"worker 0: no lora reply within 3000 ms",
                                                         "worker 1: stopped answering"}));
}

TEST(LoraRolloutTest, ARequestForABusyNameRunsWhenItsOperationEnds) {
  LoraRollout r;
  Recorder first;
  Recorder second;
  const auto t0 = Clock::now();
  r.start(LoraOp::Load, "a", 1, t0, first.done());
  std::vector<std::string> order;
  // Deferred requests run in order once "a" ends; the first starts a new operation, so the
  // second finds "a" busy again and waits for that one.
  r.defer("a", [&] {
    order.push_back("unload");
    r.start(LoraOp::Unload, "a", 1, t0, second.done());
  });
  r.defer("a", [&] {
    order.push_back(r.busy("a") ? "load waits" : "load runs");
    if (r.busy("a")) r.defer("a", [&] { order.push_back("load runs"); });
  });
  EXPECT_TRUE(r.onReply(0, LoraReply{.op = LoraOp::Load, .name = "a"}));
  EXPECT_EQ(first.calls, 1);
  EXPECT_EQ(order, (std::vector<std::string>{"unload", "load waits"}));
  EXPECT_TRUE(r.onReply(0, LoraReply{.op = LoraOp::Unload, .name = "a"}));
  EXPECT_EQ(second.calls, 1);
  EXPECT_EQ(order, (std::vector<std::string>{"unload", "load waits", "load runs"}));
  EXPECT_FALSE(r.busy("a"));
}

TEST(LoraRolloutTest, FinishServesALoadEveryWorkerTookAndUnloadsWhateverTheySaid) {
  auto adapters = LoraAdapters::create("base", {{.name = "kept", .path = "/k"}}).value();
  auto ok = finishLoraUpdate(adapters, {.op = LoraOp::Load, .name = "new", .errors = {}},
                             LoraAdapter{.name = "new", .path = "/n"});
  EXPECT_EQ(std::get<std::string>(ok), "Success: LoRA adapter 'new' added successfully.");
  ASSERT_NE(adapters.find("new"), nullptr);
  EXPECT_EQ(adapters.find("new")->path, "/n");
  auto refused = finishLoraUpdate(
      adapters,
      {.op = LoraOp::Load, .name = "x", .errors = {"worker 0: unsupported: off", "worker 2: e"}},
      LoraAdapter{.name = "x", .path = "/x"});
  const ApiError& e = std::get<ApiError>(refused);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.message,
            "LoRA adapter 'x' could not be loaded: worker 0: unsupported: off; worker 2: e");
  EXPECT_EQ(adapters.find("x"), nullptr);
  auto gone = finishLoraUpdate(
      adapters, {.op = LoraOp::Unload, .name = "kept", .errors = {"worker 1: refused"}}, {});
  EXPECT_EQ(std::get<std::string>(gone), "Success: LoRA adapter 'kept' removed successfully.");
  EXPECT_EQ(adapters.find("kept"), nullptr);
}

}  // namespace
}  // namespace mocker::gateway
