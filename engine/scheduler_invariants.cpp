// VllmScheduler::checkInvariants: the scheduler's bookkeeping checked whole (queues, request
// states, held blocks against the pool); tests call it through Engine::checkInvariantsForTest.
#include <string>
#include <unordered_map>

#include "base/check.h"
#include "engine/scheduler.h"

namespace mocker::engine {

Status VllmScheduler::checkInvariants() const {
  MOCKER_TRY_VOID(pool_.checkInvariants());
  const auto fail = [](const std::string& what) {
    return Error{ErrorCode::Internal, "scheduler invariant: " + what};
  };
  if (config_.max_num_seqs && running_.size() > *config_.max_num_seqs) {
    return fail("running > max_num_seqs");
  }
  std::uint64_t live_waiting = 0;
  std::uint64_t held = 0;
  std::unordered_map<RequestId, int> seen;
  for (RequestId id : waiting_) {
    const auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    if (it->second.state == ReqState::Running) return fail("running request in waiting");
    if (++seen[id] > 1) return fail("request twice in waiting");
    if (!it->second.blocks.empty()) return fail("waiting request holds blocks");
    ++live_waiting;
  }
  for (RequestId id : loaded_) {
    const auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    if (it->second.state != ReqState::Loaded) return fail("loaded queue holds another state");
    if (++seen[id] > 1) return fail("loaded request twice in a queue");
    held += it->second.blocks.size();
    ++live_waiting;
  }
  if (live_waiting + book_.activated().size() + num_onboarding_ != num_waiting_)
    return fail("waiting count mismatch");
  // Disaggregation states: each in exactly its own queue, holding exactly its prompt's blocks
  // (Reserving: none yet).
  std::uint64_t num_held = 0;
  for (const auto& [id, r] : requests_) {
    if (r.deferred_prompt && (r.state != ReqState::Waiting || r.admitted_before)) {
      return fail("a request considered for admission has no tokens");
    }
    switch (r.state) {
      case ReqState::Held:
        ++num_held;
        if (++seen[id] > 1) return fail("held request in a queue");
        if (r.blocks.size() != blocksFor(r.prompt_len)) return fail("held request lost blocks");
        held += r.blocks.size();
        break;
      case ReqState::Reserving:
        if (!r.blocks.empty()) return fail("unreserved handoff holds blocks");
        break;
      case ReqState::Onboarding:
        if (++seen[id] > 1) return fail("onboarding request in a queue");
        if (r.blocks.empty()) return fail("onboarding request holds no blocks");
        held += r.blocks.size();
        break;
      case ReqState::Reserved:
      case ReqState::Activated:
        if (r.blocks.size() < blocksFor(r.prompt_len)) return fail("handoff lost its blocks");
        held += r.blocks.size();
        break;
      default:
        break;
    }
  }
  MOCKER_TRY_VOID(book_.checkInvariants(seen, requests_, num_held));
  for (const Req* rp : running_) {
    if (++seen[rp->id] > 1) return fail("request in two queues");
    const Req& r = *rp;
    if (requests_.find(r.id) == requests_.end() || &requests_.at(r.id) != rp) {
      return fail("running entry is not the request's node");
    }
    if (r.state != ReqState::Running) return fail("non-running request in running");
    if (r.num_computed > r.len()) return fail("num_computed > len");
    if (r.blocks.size() < blocksFor(r.num_computed)) return fail("fewer blocks than computed");
    held += r.blocks.size();
  }
  if (seen.size() != requests_.size()) return fail("request in no queue");
  if (held < pool_.numActive()) return fail("active blocks not held by any request");
  if (!config_.enable_prefix_caching && held != pool_.numActive()) {
    return fail("blocks shared although prefix caching is off");
  }
  if (isTrtllm() && pool_.numActive() + outstandingBlocks() > pool_.numBlocks()) {
    return fail(
        "trtllm: running requests' blocks to completion do not fit (a request could stall)");
  }
  return {};
}

}  // namespace mocker::engine
