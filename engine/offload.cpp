#include "engine/offload.h"

#include <algorithm>
#include <limits>

#include "base/check.h"
#include "engine/roofline.h"

namespace mocker::engine {

// ---- PsLink ----

void PsLink::add(std::uint64_t job, double bytes, double now_ms) {
  MOCKER_CHECK(bytes > 0.0 && now_ms >= clock_ms_);
  if (jobs_.empty()) clock_ms_ = now_ms;
  MOCKER_CHECK(clock_ms_ == now_ms);
  MOCKER_CHECK(jobs_.emplace(job, bytes).second);
}

std::optional<double> PsLink::nextCompletionMs() const {
  if (jobs_.empty()) return std::nullopt;
  double least = std::numeric_limits<double>::infinity();
  for (const auto& [job, left] : jobs_) least = std::min(least, left);
  return clock_ms_ + least * static_cast<double>(jobs_.size()) / bytes_per_ms_;
}

void PsLink::advanceTo(double t, std::vector<std::uint64_t>& done) {
  while (!jobs_.empty()) {
    double least = std::numeric_limits<double>::infinity();
    for (const auto& [job, left] : jobs_) least = std::min(least, left);
    const double n = static_cast<double>(jobs_.size());
    const double end = clock_ms_ + least * n / bytes_per_ms_;  // as nextCompletionMs()
    if (end > t) {
      const double share = (t - clock_ms_) * bytes_per_ms_ / n;
      for (auto& [job, left] : jobs_) left -= share;
      break;
    }
    clock_ms_ = end;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->second == least) {  // exactly the least: it ends now
        done.push_back(it->first);
        it = jobs_.erase(it);
      } else {
        it->second -= least;
        ++it;
      }
    }
  }
  clock_ms_ = std::max(clock_ms_, t);
}

// ---- TierLru ----

void TierLru::touch(std::uint64_t hash) {
  const auto it = index_.find(hash);
  MOCKER_CHECK(it != index_.end());
  order_.splice(order_.end(), order_, it->second);
}

std::optional<std::uint64_t> TierLru::insert(std::uint64_t hash) {
  MOCKER_CHECK(capacity_ > 0 && !contains(hash));
  std::optional<std::uint64_t> evicted;
  if (index_.size() >= capacity_) {
    evicted = order_.front();
    index_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(hash);
  index_.emplace(hash, std::prev(order_.end()));
  return evicted;
}

std::vector<std::uint64_t> TierLru::hashes() const {
  std::vector<std::uint64_t> out(order_.begin(), order_.end());
  std::sort(out.begin(), out.end());
  return out;
}

// ---- settings ----

OffloadSettings offloadSettings(const EngineConfig& config, std::uint32_t block_size) {
  OffloadSettings s;
  s.g2_blocks = config.num_g2_blocks;
  s.g3_blocks = config.num_g3_blocks;
  s.batch_size = config.offload_batch_size;
  // kv_bytes_per_token is the whole model's (the service derives it from the roofline model's
  // architecture when the key is not given); each GPU of a tensor-parallel group moves its own
  // share over its own link.
  double per_token = static_cast<double>(config.kv_bytes_per_token);
  if (config.timing_model == TimingModelKind::Roofline && config.roofline) {
    per_token /=
        static_cast<double>(std::max<std::uint32_t>(config.roofline->tensor_parallel_size, 1));
  }
  s.block_size = block_size;
  s.block_bytes = per_token * block_size;
  const double speedup = config.speedup_ratio > 0.0 ? config.speedup_ratio : 1.0;
  const auto perMs = [&](double gbps) { return gbps * 1e6 * speedup; };  // 1e9 B/s = 1e6 B/ms
  s.gpu_to_host = perMs(config.offload_gpu_to_host_gbps);
  s.host_to_gpu = perMs(config.offload_host_to_gpu_gbps);
  s.host_to_disk = perMs(config.offload_host_to_disk_gbps);
  s.disk_to_host = perMs(config.offload_disk_to_host_gbps);
  return s;
}

// ---- OffloadTiers ----

OffloadTiers::OffloadTiers(const OffloadSettings& settings)
    : settings_(settings),
      g2_(settings.g2_blocks),
      g3_(settings.g3_blocks),
      links_{PsLink(settings.gpu_to_host), PsLink(settings.host_to_gpu),
             PsLink(settings.host_to_disk), PsLink(settings.disk_to_host)} {
  metrics_.g2_capacity = settings.g2_blocks;
  metrics_.g3_capacity = settings.g3_blocks;
}

void OffloadTiers::offloadEvicted(std::span<const KvEvent> events, double now_ms) {
  for (const KvEvent& e : events) {
    const auto* removed = std::get_if<BlockRemoved>(&e);
    if (removed == nullptr || removed->medium != Medium::Gpu) continue;
    queueForHost(removed->block_hash);
  }
  pumpOffloads(now_ms);
}

void OffloadTiers::writeThrough(std::span<const KvEvent> events, double now_ms) {
  for (const KvEvent& e : events) {
    const auto* stored = std::get_if<BlockStored>(&e);
    if (stored == nullptr || stored->medium != Medium::Gpu) continue;
    for (std::uint64_t h : stored->block_hashes) queueForHost(h);
  }
  pumpOffloads(now_ms);
}

void OffloadTiers::queueForHost(std::uint64_t h) {
  if (g2_.contains(h)) {
    g2_.touch(h);  // the host copy is still there: nothing to move
  } else if (pending_host_.insert(h).second) {
    to_host_queue_.push_back(h);
  }
}

void OffloadTiers::refresh(std::span<const BlockHash> hashes) {
  for (std::size_t i = hashes.size(); i-- > 0;) {
    if (g2_.contains(hashes[i].value())) g2_.touch(hashes[i].value());
  }
}

void OffloadTiers::pumpOffloads(double now_ms) {
  const auto batch = [&](std::deque<std::uint64_t>& queue, Kind kind) {
    Job job{.kind = kind, .request = RequestId{}, .hashes = {}};
    while (!queue.empty() && job.hashes.size() < settings_.batch_size) {
      job.hashes.push_back(queue.front());
      queue.pop_front();
    }
    return job;
  };
  if (!to_host_busy_ && !to_host_queue_.empty()) {
    to_host_busy_ = true;
    startJob(kGpuToHost, batch(to_host_queue_, Kind::ToHost), now_ms);
  }
  if (!to_disk_busy_ && !to_disk_queue_.empty()) {
    to_disk_busy_ = true;
    startJob(kHostToDisk, batch(to_disk_queue_, Kind::ToDisk), now_ms);
  }
}

void OffloadTiers::startJob(LinkIdx link, Job job, double now_ms) {
  const std::uint64_t id = next_job_++;
  const double bytes = settings_.block_bytes * static_cast<double>(job.hashes.size());
  const auto whole = static_cast<std::uint64_t>(bytes);
  switch (job.kind) {
    case Kind::ToHost:
      metrics_.bytes_gpu_to_host += whole;
      break;
    case Kind::ToDisk:
      metrics_.bytes_host_to_disk += whole;
      break;
    case Kind::FromDisk:
      metrics_.bytes_disk_to_host += whole;
      break;
    case Kind::FromHost:
      metrics_.bytes_host_to_gpu += whole;
      break;
  }
  job.leg_start_ms = now_ms;
  links_[link].add(id, bytes, now_ms);
  jobs_.emplace(id, std::move(job));
}

std::uint32_t OffloadTiers::countResident(std::span<const BlockHash> hashes) const {
  std::uint32_t n = 0;
  for (BlockHash h : hashes) {
    if (!g2_.contains(h.value()) && !g3_.contains(h.value())) break;
    ++n;
  }
  return n;
}

void OffloadTiers::onboard(RequestId id, std::span<const BlockHash> hashes, double now_ms) {
  Job job{.kind = Kind::FromHost, .request = id, .hashes = {}, .start_ms = now_ms};
  job.hashes.reserve(hashes.size());
  std::vector<std::uint64_t> from_disk;
  for (BlockHash h : hashes) {
    job.hashes.push_back(h.value());
    if (g2_.contains(h.value())) {
      g2_.touch(h.value());
      ++metrics_.g2_hit_blocks;
    } else {
      MOCKER_CHECK(g3_.contains(h.value()));
      g3_.touch(h.value());
      ++metrics_.g3_hit_blocks;
      from_disk.push_back(h.value());
    }
  }
  if (from_disk.empty()) return startJob(kHostToGpu, std::move(job), now_ms);
  // Disk blocks first reach host memory, then everything crosses host→GPU.
  job.kind = Kind::FromDisk;
  job.from_disk = static_cast<std::uint32_t>(from_disk.size());
  std::vector<std::uint64_t> all = std::move(job.hashes);
  job.hashes = std::move(from_disk);
  const std::uint64_t id_before = next_job_;
  startJob(kDiskToHost, std::move(job), now_ms);
  // Remember the whole set for the second stage.
  jobs_.at(id_before).hashes.insert(jobs_.at(id_before).hashes.end(), all.begin(), all.end());
}

void OffloadTiers::advance(double now_ms, std::vector<KvEvent>& events,
                           std::vector<OnboardDone>& done) {
  std::vector<std::uint64_t> finished;
  while (true) {
    std::optional<double> next = nextEventMs();
    if (!next || *next > now_ms) break;
    const double t = *next;
    for (PsLink& link : links_) {
      finished.clear();
      link.advanceTo(t, finished);
      for (std::uint64_t job : finished) complete(job, t, events, done);
    }
    pumpOffloads(t);
  }
  finished.clear();
  for (PsLink& link : links_) link.advanceTo(now_ms, finished);
  MOCKER_CHECK(finished.empty());
  refreshOccupancy();
}

void OffloadTiers::complete(std::uint64_t job_id, double t, std::vector<KvEvent>& events,
                            std::vector<OnboardDone>& done) {
  auto node = jobs_.extract(job_id);
  Job& job = node.mapped();
  switch (job.kind) {
    case Kind::ToHost:
      to_host_busy_ = false;
      metrics_.store_ms_total += t - job.leg_start_ms;
      for (std::uint64_t h : job.hashes) pending_host_.erase(h);
      storeInHost(job.hashes, events);
      break;
    case Kind::ToDisk:
      to_disk_busy_ = false;
      for (std::uint64_t h : job.hashes) pending_disk_.erase(h);
      storeOnDisk(job.hashes, events);
      break;
    case Kind::FromDisk: {
      // hashes = the disk blocks, then every block of the onboarding.
      Job next{.kind = Kind::FromHost,
               .request = job.request,
               .hashes =
                   std::vector<std::uint64_t>(job.hashes.begin() + job.from_disk, job.hashes.end()),
               .from_disk = job.from_disk,
               .start_ms = job.start_ms};
      startJob(kHostToGpu, std::move(next), t);
      break;
    }
    case Kind::FromHost:
      metrics_.load_ms_total += t - job.leg_start_ms;
      ++metrics_.onboardings;
      metrics_.onboard_ms_total += t - job.start_ms;
      metrics_.onboard_ms_max = std::max(metrics_.onboard_ms_max, t - job.start_ms);
      done.push_back({job.request, job.start_ms, t});
      break;
  }
}

void OffloadTiers::storeInHost(std::span<const std::uint64_t> hashes,
                               std::vector<KvEvent>& events) {
  for (std::uint64_t h : hashes) {
    if (g2_.contains(h)) {
      g2_.touch(h);
      continue;
    }
    const std::optional<std::uint64_t> evicted = g2_.insert(h);
    ++metrics_.offloaded_blocks;
    if (evicted) {
      events.emplace_back(BlockRemoved{.block_hash = *evicted, .medium = Medium::Cpu});
      if (settings_.g3_blocks > 0) {
        if (g3_.contains(*evicted)) {
          g3_.touch(*evicted);
        } else if (pending_disk_.insert(*evicted).second) {
          to_disk_queue_.push_back(*evicted);
        }
      }
    }
    // Like vLLM's offloading connector: one stored block, no parent, no token ids.
    events.emplace_back(BlockStored{.block_hashes = {h},
                                    .parent_block_hash = std::nullopt,
                                    .token_ids = {},
                                    .block_size = settings_.block_size,
                                    .medium = Medium::Cpu});
  }
}

void OffloadTiers::storeOnDisk(std::span<const std::uint64_t> hashes,
                               std::vector<KvEvent>& events) {
  for (std::uint64_t h : hashes) {
    if (g3_.contains(h)) {
      g3_.touch(h);
      continue;
    }
    if (const std::optional<std::uint64_t> evicted = g3_.insert(h)) {
      events.emplace_back(BlockRemoved{.block_hash = *evicted, .medium = Medium::Disk});
    }
    events.emplace_back(BlockStored{.block_hashes = {h},
                                    .parent_block_hash = std::nullopt,
                                    .token_ids = {},
                                    .block_size = settings_.block_size,
                                    .medium = Medium::Disk});
  }
}

std::optional<double> OffloadTiers::nextEventMs() const {
  std::optional<double> best;
  for (const PsLink& link : links_) {
    const std::optional<double> t = link.nextCompletionMs();
    if (t && (!best || *t < *best)) best = t;
  }
  return best;
}

std::vector<std::uint64_t> OffloadTiers::hashes(Medium medium) const {
  if (medium == Medium::Cpu) return g2_.hashes();
  if (medium == Medium::Disk) return g3_.hashes();
  return {};
}

void OffloadTiers::refreshOccupancy() {
  metrics_.g2_blocks = g2_.size();
  metrics_.g3_blocks = g3_.size();
}

}  // namespace mocker::engine
