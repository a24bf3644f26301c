// LoRA adapters in the vLLM / TRT-LLM scheduler (docs/engine.md, "LoRA adapters"); the adapter
// bookkeeping itself is engine/lora.h.
//
// vLLM's rule: the adapters of the running requests scheduled in this pass form the pass's set;
// while it holds max_loras adapters, a waiting request whose adapter is not in it is skipped —
// left waiting, not preempted — and the requests behind it may still be admitted (each adds its
// adapter while the set has room). Skipped requests return to the front of waiting in their
// order. A pass then loads the adapters it schedules that are not resident (max_cpu_loras, LRU):
// lora_load_ms each, added to its prefill time.
//
// lora_load / lora_unload (vLLM's add_lora / remove_lora, utility calls its engine core runs
// between two steps): a load makes the adapter resident at once and keeps the rank busy for
// lora_load_ms from max(its time, the end of the rank's last pass); a pass that starts before
// that waits for it (the wait is added to its prefill time). An unload drops the adapter from
// the resident set; a request of it that runs or waits loads it again when it is next scheduled.
#include <algorithm>

#include "engine/scheduler.h"

namespace mocker::engine {

void VllmScheduler::beginLoraBatch() {
  lora_batch_.clear();
  lora_skipped_.clear();
  for (const Scheduled& s : scheduled_) lora_batch_.add(s.lora_id);
}

void VllmScheduler::skipForLora(std::deque<RequestId>& queue) {
  lora_skipped_.emplace_back(queue.front(), &queue == &loaded_);
  queue.pop_front();
}

void VllmScheduler::restoreLoraSkipped() {
  for (auto it = lora_skipped_.rbegin(); it != lora_skipped_.rend(); ++it) {
    (it->second ? loaded_ : waiting_).push_front(it->first);
  }
  lora_skipped_.clear();
}

void VllmScheduler::loadLoras(Pass& pass) {
  // The final set: a pass that preempted admitted nothing, and its preempted requests left
  // scheduled_, so rebuild it from what the pass computes.
  lora_batch_.clear();
  for (const Scheduled& s : scheduled_) lora_batch_.add(s.lora_id);
  const std::uint32_t loads = lora_resident_.use(lora_batch_.ids());
  if (loads > 0)
    pass.out.prefill_ms += detail::scaledPrefillMs(config_, loads * config_.lora_load_ms);
  if (!scheduled_.empty() && lora_busy_until_ms_ > pass.out.start_ms) {
    pass.out.prefill_ms += lora_busy_until_ms_ - pass.out.start_ms;
  }
}

bool VllmScheduler::loadLora(std::uint32_t id, double now_ms) {
  if (!lora_resident_.load(id)) return false;
  const double start = std::max({now_ms, last_end_ms_, lora_busy_until_ms_});
  lora_busy_until_ms_ = start + detail::scaledPrefillMs(config_, config_.lora_load_ms);
  return true;
}

bool VllmScheduler::unloadLora(std::uint32_t id) { return lora_resident_.remove(id); }

LoraUsage VllmScheduler::loraUsage() const {
  LoraUsage usage;
  for (const auto& [id, r] : requests_) {
    if (r.lora_id == 0) continue;
    (r.state == ReqState::Running ? usage.running : usage.waiting).push_back(r.lora_id);
  }
  for (auto* ids : {&usage.running, &usage.waiting}) {
    std::sort(ids->begin(), ids->end());
    ids->erase(std::unique(ids->begin(), ids->end()), ids->end());
  }
  return usage;
}

}  // namespace mocker::engine
