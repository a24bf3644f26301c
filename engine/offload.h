// Host KV offload tiers of one DP rank (docs/engine.md, "KV offload tiers"): G2 (host memory)
// and optionally G3 (disk) below the GPU pool (G1), in the spirit of Dynamo's KV block manager
// and vLLM's CPU offloading connector.
//
// * Offload on eviction: a block the GPU pool evicts is copied GPU→host in batches of
//   `offload_batch_size` blocks, one batch in flight at a time; it is in G2 (Stored, medium CPU)
//   when its batch's transfer ends. A block G2 evicts (LRU) is Removed from G2 and, with G3 on,
//   copied host→disk the same way (Stored DISK when its batch ends); G3 evicts LRU (Removed
//   DISK). A hash already in the tier below is only touched (no copy, no event).
// * Onboarding: a request's prefix found in G2/G3 beyond its GPU hits is copied back before it
//   runs: one job per request, its G3 blocks first over the disk→host link, then all its blocks
//   over the host→GPU link. Each link direction is a processor-sharing server: n concurrent jobs
//   each progress at bandwidth / n. Onboarding copies (the tiers keep their blocks, touched).
// * Write-through (SGLang's HiCache, engine/SGLANG.md "Hierarchical cache"): blocks the GPU
//   *stores* are copied to G2 the same way, in batches (writeThrough instead of offloadEvicted).
//
// Pure and deterministic: time is a parameter (model ms), events are data. Not thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/config.h"
#include "engine/types.h"

namespace mocker::engine {

/// One direction of a link: a processor-sharing server in model time. Every job in progress
/// gets bandwidth / (jobs in progress); a job completes when its bytes are done.
class PsLink final {
 public:
  explicit PsLink(double bytes_per_ms) : bytes_per_ms_(bytes_per_ms) {}

  /// Starts `job` with `bytes` at `now_ms`. REQUIRES: bytes > 0, now_ms >= the link's clock
  /// (advance first), `job` not in progress.
  void add(std::uint64_t job, double bytes, double now_ms);
  /// When the next job completes if nothing is added before; nullopt when idle.
  std::optional<double> nextCompletionMs() const;
  /// Advances the link's clock to `t`, appending the jobs that complete at or before `t`
  /// (ascending completion time; ties by job id) to `done`.
  void advanceTo(double t, std::vector<std::uint64_t>& done);
  bool idle() const { return jobs_.empty(); }

 private:
  double bytes_per_ms_;
  double clock_ms_ = 0.0;
  std::map<std::uint64_t, double> jobs_;  // job → bytes left (ordered: deterministic ties)
};

/// An LRU set of block hashes with a capacity (one tier).
class TierLru final {
 public:
  explicit TierLru(std::uint32_t capacity) : capacity_(capacity) {}
  std::uint32_t capacity() const { return capacity_; }
  std::uint32_t size() const { return static_cast<std::uint32_t>(index_.size()); }
  bool contains(std::uint64_t hash) const { return index_.contains(hash); }
  /// Moves `hash` to the most recently used end. REQUIRES: contains(hash).
  void touch(std::uint64_t hash);
  /// Inserts `hash` as most recently used; when full, the least recently used hash is evicted
  /// first and returned. REQUIRES: !contains(hash), capacity() > 0.
  std::optional<std::uint64_t> insert(std::uint64_t hash);
  /// Sorted hashes.
  std::vector<std::uint64_t> hashes() const;

 private:
  std::uint32_t capacity_;
  std::list<std::uint64_t> order_;  // front = evicted next
  std::unordered_map<std::uint64_t, std::list<std::uint64_t>::iterator> index_;
};

/// Settings of the tiers, from EngineConfig (offloadSettings).
struct OffloadSettings {
  std::uint32_t g2_blocks = 0;
  std::uint32_t g3_blocks = 0;
  std::uint32_t batch_size = 1;
  std::uint32_t block_size = 1;  ///< tokens per block (the tier events' block_size)
  double block_bytes = 0.0;
  /// Bytes per model ms of each link direction (after speedup_ratio).
  double gpu_to_host = 0.0, host_to_gpu = 0.0, host_to_disk = 0.0, disk_to_host = 0.0;
};

/// Block bytes: block_size · kv_bytes_per_token (÷ tensor_parallel_size with the roofline
/// model: one GPU's share); bandwidths in bytes per model ms (× speedup_ratio).
OffloadSettings offloadSettings(const EngineConfig& config, std::uint32_t block_size);

/// A finished onboarding: the request's blocks are on the GPU at `end_ms`.
struct OnboardDone {
  RequestId id;
  double start_ms = 0.0;
  double end_ms = 0.0;
};

class OffloadTiers final {
 public:
  explicit OffloadTiers(const OffloadSettings& settings);

  /// Blocks the GPU pool evicted at `now_ms` (the GPU Removed events among `events`) start
  /// their way to G2. Call after advance(now_ms).
  void offloadEvicted(std::span<const KvEvent> events, double now_ms);
  /// Write-through: blocks the GPU stored at `now_ms` (the GPU Stored events among `events`)
  /// start their way to G2, as offloadEvicted does for evicted ones. Call after advance(now_ms).
  void writeThrough(std::span<const KvEvent> events, double now_ms);
  /// Marks the G2 copies of `hashes` used now, the last one least recently (a prefix hit on the
  /// GPU also refreshes its host copies, so the root side of a prefix leaves G2 last).
  void refresh(std::span<const BlockHash> hashes);
  /// Number of leading `hashes` that are in G2 or G3 (complete copies only).
  std::uint32_t countResident(std::span<const BlockHash> hashes) const;
  /// Starts onboarding `hashes` (all resident) for request `id` at `now_ms`.
  void onboard(RequestId id, std::span<const BlockHash> hashes, double now_ms);
  /// Processes every transfer that ends at or before `now_ms`, in time order: tier events go to
  /// `events`, finished onboardings to `done` (in completion order).
  void advance(double now_ms, std::vector<KvEvent>& events, std::vector<OnboardDone>& done);
  /// The next time a transfer ends; nullopt when no transfer is in flight or queued.
  std::optional<double> nextEventMs() const;
  /// Sorted hashes held by `medium`'s tier (CPU = G2, DISK = G3).
  std::vector<std::uint64_t> hashes(Medium medium) const;
  /// Counters and occupancy (LoadMetrics::tiers).
  const TierMetrics& metrics() const { return metrics_; }
  TierMetrics& metrics() { return metrics_; }

 private:
  enum class Kind : std::uint8_t { ToHost, ToDisk, FromDisk, FromHost };
  struct Job {
    Kind kind;
    RequestId request;                  // onboarding only
    std::vector<std::uint64_t> hashes;  // blocks moved
    std::uint32_t from_disk = 0;        // onboarding: blocks read from G3
    double start_ms = 0.0;              // onboarding: when it began
    double leg_start_ms = 0.0;          // when this transfer started on its link
  };
  enum LinkIdx : std::size_t { kGpuToHost, kHostToGpu, kHostToDisk, kDiskToHost };

  void startJob(LinkIdx link, Job job, double now_ms);
  /// Queues `hash` for the GPU→host link unless G2 holds it (then touched) or it is on its way.
  void queueForHost(std::uint64_t hash);
  /// Starts the next queued offload batch towards G2 (or G3) if none is in flight.
  void pumpOffloads(double now_ms);
  void complete(std::uint64_t job_id, double t, std::vector<KvEvent>& events,
                std::vector<OnboardDone>& done);
  void storeInHost(std::span<const std::uint64_t> hashes, std::vector<KvEvent>& events);
  void storeOnDisk(std::span<const std::uint64_t> hashes, std::vector<KvEvent>& events);
  void refreshOccupancy();

  OffloadSettings settings_;
  TierLru g2_;
  TierLru g3_;
  std::array<PsLink, 4> links_;
  std::unordered_map<std::uint64_t, Job> jobs_;
  std::uint64_t next_job_ = 1;
  std::deque<std::uint64_t> to_host_queue_;  // evicted hashes waiting for a GPU→host batch
  std::deque<std::uint64_t> to_disk_queue_;  // G2-evicted hashes waiting for a host→disk batch
  std::unordered_set<std::uint64_t> pending_host_;  // queued or in flight towards G2
  std::unordered_set<std::uint64_t> pending_disk_;  // queued or in flight towards G3
  bool to_host_busy_ = false;
  bool to_disk_busy_ = false;
  TierMetrics metrics_;
};

}  // namespace mocker::engine
