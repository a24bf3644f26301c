// SglangScheduler::checkInvariants: request, queue and page accounting against the radix cache
// (tests and snapshots; O(requests + pool)).
#include "engine/sglang_scheduler.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

namespace mocker::engine {

Status SglangScheduler::checkInvariants() const {
  const auto fail = [](const std::string& what) {
    return Error{ErrorCode::Internal, "sglang scheduler invariant: " + what};
  };
  std::vector<std::span<const BlockHash>> paths;
  std::uint64_t private_pages = 0, overhead = 0, num_held = 0, num_onboarding = 0;
  std::unordered_map<RequestId, int> seen;
  for (const auto& [id, r] : requests_) {
    if (r.path_pages > pageKeys(r).size()) return fail("path beyond the request's page keys");
    if (r.path_pages > 0) paths.push_back(path(r));
    private_pages += r.private_pages;
    overhead += overheadOf(r);
    if (r.state == ReqState::Held) {
      ++num_held;
      if (++seen[id] > 1) return fail("held request in a queue");
      if (r.materialized != r.prompt_len) return fail("held request without its prompt's KV");
    }
    if (r.state == ReqState::Onboarding) {
      // HiCache load back in flight: its device prefix locked, the loaded pages private.
      if (++seen[id] > 1) return fail("loading request in a queue");
      if (r.materialized != 0 || r.private_pages == 0) return fail("loading request's pages");
      ++num_onboarding;
      continue;
    }
    if (r.state == ReqState::Reserving || r.state == ReqState::Reserved) {
      // KV in flight: the whole prompt's pages are reserved (none before the reservation), the
      // resident prefix locked, nothing materialised yet.
      const std::uint32_t pages = r.state == ReqState::Reserved ? pagesFor(r.prompt_len) : 0;
      if (r.heldPages() != pages) return fail("handoff holds the wrong number of pages");
      if (r.materialized != 0) return fail("handoff materialised before activation");
      if (r.path_pages > r.prompt_len / page_size_) return fail("handoff path beyond its prompt");
      continue;
    }
    if (r.heldPages() != pagesFor(r.materialized)) return fail("held pages != ceil(kv / B)");
    if (config_.enable_prefix_caching && r.path_pages != r.materialized / page_size_) {
      return fail("a complete page is not in the radix tree");
    }
    if (!config_.enable_prefix_caching && r.path_pages != 0)
      return fail("tree use without caching");
    if (r.materialized > r.len()) return fail("materialized > len");
  }
  MOCKER_TRY_VOID(cache_.checkInvariants(paths));
  if (private_pages != cache_.numPrivate()) return fail("private page count mismatch");
  if (overhead != page_overhead_) return fail("page overhead mismatch");
  if (config_.max_num_seqs && running_.size() > *config_.max_num_seqs) {
    return fail("running > max_num_seqs");
  }
  std::uint64_t live_waiting = 0, holders = 0;
  for (RequestId id : waiting_) {
    const auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    if (it->second.state != ReqState::Waiting) return fail("non-waiting request in waiting");
    if (++seen[id] > 1) return fail("request twice in waiting");
    if (it->second.heldPages() > 0) {
      ++holders;
      if (std::find(waiting_holders_.begin(), waiting_holders_.end(), id) ==
          waiting_holders_.end()) {
        return fail("waiting request holds KV but is not a holder");
      }
    }
    ++live_waiting;
  }
  if (holders != waiting_holders_.size()) return fail("holder list mismatch");
  if (live_waiting + book_.activated().size() != num_waiting_) {
    return fail("waiting count mismatch");
  }
  MOCKER_TRY_VOID(book_.checkInvariants(seen, requests_, num_held));
  for (RequestId id : book_.activated()) {
    const Req& r = requests_.at(id);
    if (r.materialized != r.len()) return fail("activated handoff without its prompt's KV");
  }
  if (queued_prefill_.count() + queued_decode_.count() != num_waiting_) {
    return fail("queued statistics count mismatch");
  }
  for (RequestId id : running_) {
    if (++seen[id] > 1) return fail("request in two queues");
    const Req& r = requests_.at(id);
    if (r.state != ReqState::Running) return fail("non-running request in running");
    if (r.materialized != r.len()) return fail("running request without KV for every token");
  }
  if (num_onboarding != num_onboarding_) return fail("loading request count mismatch");
  if (seen.size() != requests_.size()) return fail("request in no queue");
  return {};
}

}  // namespace mocker::engine
