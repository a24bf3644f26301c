// Run-time LoRA loads and unloads on every worker (lora_rollout.h).
#include "gateway/lora_rollout.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "base/check.h"

namespace mocker::gateway {

void LoraRollout::start(protocol::LoraOp op, const std::string& name, std::size_t workers,
                        Clock::time_point now, Done done) {
  MOCKER_CHECK(!busy(name) && workers > 0);
  ops_.emplace(name, Op{.op = op,
                        .awaiting = std::vector<bool>(workers, true),
                        .left = workers,
                        .errors = std::vector<std::optional<std::string>>(workers),
                        .started = now,
                        .done = std::move(done),
                        .deferred = {}});
}

void LoraRollout::defer(const std::string& name, std::function<void()> retry) {
  ops_.at(name).deferred.push_back(std::move(retry));
}

bool LoraRollout::onReply(std::size_t worker, const protocol::LoraReply& reply) {
  const auto it = ops_.find(reply.name);
  if (it == ops_.end() || it->second.op != reply.op || worker >= it->second.awaiting.size() ||
      !it->second.awaiting[worker]) {
    return false;
  }
  std::optional<std::string> error;
  if (reply.error) {
    error = "worker " + std::to_string(worker) + ": " + errorCodeName(*reply.error) +
            (reply.message.empty() ? std::string() : ": " + reply.message);
  }
  answered(it, worker, std::move(error));
  return true;
}

void LoraRollout::onLost(std::size_t worker, const std::string& why) {
  std::vector<std::string> names;
  for (const auto& [name, op] : ops_) {
    if (worker < op.awaiting.size() && op.awaiting[worker]) names.push_back(name);
  }
  for (const std::string& name : names) {
    const auto it = ops_.find(name);
    if (it != ops_.end()) answered(it, worker, "worker " + std::to_string(worker) + ": " + why);
  }
}

void LoraRollout::expire(Clock::time_point now, std::chrono::milliseconds timeout) {
  std::vector<std::string> names;
  for (const auto& [name, op] : ops_) {
    if (now - op.started > timeout) names.push_back(name);
  }
  const std::string why = "no lora reply within " + std::to_string(timeout.count()) + " ms";
  for (const std::string& name : names) {
    for (std::size_t w = 0;; ++w) {
      const auto it = ops_.find(name);
      if (it == ops_.end() || w >= it->second.awaiting.size()) break;
      if (it->second.awaiting[w]) answered(it, w, "worker " + std::to_string(w) + ": " + why);
    }
  }
}

void LoraRollout::answered(std::map<std::string, Op>::iterator it, std::size_t worker,
                           std::optional<std::string> error) {
  Op& op = it->second;
  op.awaiting[worker] = false;
  op.errors[worker] = std::move(error);
  if (--op.left > 0) return;
  // Out of the table before anything runs: `done` and the retries may start operations.
  Outcome outcome{.op = op.op, .name = it->first, .errors = {}};
  for (auto& e : op.errors) {
    if (e) outcome.errors.push_back(std::move(*e));
  }
  Done done = std::move(op.done);
  std::vector<std::function<void()>> deferred = std::move(op.deferred);
  ops_.erase(it);
  done(std::move(outcome));
  for (auto& retry : deferred) retry();
}

std::variant<std::string, ApiError> finishLoraUpdate(LoraAdapters& adapters,
                                                     LoraRollout::Outcome&& outcome,
                                                     std::optional<LoraAdapter>&& adapter) {
  if (outcome.op == protocol::LoraOp::Unload) {
    for (const std::string& e : outcome.errors) {
      spdlog::warn("gateway: unloading LoRA adapter '{}': {}", outcome.name, e);
    }
    return adapters.remove(outcome.name);
  }
  if (!outcome.errors.empty()) {
    std::string message = "LoRA adapter '" + outcome.name + "' could not be loaded: ";
    for (std::size_t i = 0; i < outcome.errors.size(); ++i) {
      message += (i == 0 ? "" : "; ") + outcome.errors[i];
    }
    return ApiError{.status = 400, .message = std::move(message)};
  }
  MOCKER_CHECK(adapter.has_value());
  return adapters.add(std::move(*adapter));
}

}  // namespace mocker::gateway
