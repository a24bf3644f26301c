// KV-aware routing with load (tools/replay/README.md, "Routers"): the cost model of Dynamo's KV
// router, shared by the offline and the live replay. A candidate is one (worker, DP rank).
//
//   cost(c) = overlap_weight · prefill_blocks(c) + decode_blocks(c)
//   prefill_blocks(c) = (queued prefill tokens of c + prompt tokens − overlap(c) · block_size)
//                       / block_size                     (fractional; the new part ≥ 0)
//   decode_blocks(c)  = |active blocks of c ∪ the request's full blocks|
//
// "Queued prefill tokens" are the uncached prompt tokens of requests routed to c that have not
// produced their first token yet; "active blocks" are the distinct full-block sequence hashes of
// the prompts routed to c and not yet ended (ActiveLoad). overlap(c) comes from the KV index.
// Temperature 0: the lowest cost wins; ties go to the candidate whose index holds the fewest
// blocks (when known), then uniformly at random. Temperature T > 0: costs are normalised to
// [0, 1] by (cost − min) / (max − min) and candidate c is drawn with probability ∝
// exp(−normalised(c) / T) (uniform when all costs are equal). Every random draw comes from one
// SplitMix64 seeded by the run, so a run is deterministic per seed.
//
// Not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/hash_index.h"
#include "base/result.h"
#include "tools/replay/random.h"

namespace mocker::replay {

/// Dynamo's defaults: overlap_score_weight 1.0, router_temperature 0.0.
struct KvRouterConfig {
  double overlap_weight = 1.0;  ///< finite, >= 0
  double temperature = 0.0;     ///< finite, >= 0
};
Status validateKvRouterConfig(const KvRouterConfig& config);

/// The inputs of one candidate's cost.
struct KvCostInputs {
  std::uint32_t prompt_tokens = 0;
  std::uint32_t block_size = 1;  ///< >= 1
  std::uint32_t overlap_blocks = 0;
  std::uint64_t queued_prefill_tokens = 0;
  std::uint64_t decode_blocks = 0;  ///< active blocks ∪ the request's blocks
};
double kvCost(double overlap_weight, const KvCostInputs& in);

/// Uncached prompt tokens: prompt_tokens − overlap_blocks · block_size, at least 0.
std::uint64_t newPrefillTokens(std::uint32_t prompt_tokens, std::uint32_t overlap_blocks,
                               std::uint32_t block_size);

/// Picks a candidate from `costs` (non-empty) with the rule above. `tree_sizes` is empty or one
/// entry per candidate. Draws from `rng` only for a tie at temperature 0 or at temperature > 0.
std::size_t selectByCost(std::span<const double> costs, std::span<const std::uint64_t> tree_sizes,
                         double temperature, SplitMix64& rng);

/// Each candidate's in-flight load as Dynamo's router counts it: the distinct block hashes of
/// its active prompts (reference-counted) and the prefill tokens not yet done. One index from
/// block hash to the candidates whose active prompts hold it (with their reference counts)
/// serves every candidate: scoring a request probes it once per prompt block, whatever the
/// number of candidates.
class ActiveLoad {
 public:
  explicit ActiveLoad(std::size_t candidates);
  /// A request (key unique among active ones) was routed to `candidate`.
  void add(std::uint64_t request, std::uint32_t candidate, std::span<const std::uint64_t> hashes,
           std::uint64_t prefill_tokens);
  /// Its first token arrived: its prefill tokens leave the queue. Unknown keys are ignored.
  void prefillDone(std::uint64_t request);
  /// It ended: its blocks (and prefill tokens, if still queued) are released. Unknown: ignored.
  void remove(std::uint64_t request);
  std::uint64_t activeBlocks(std::uint32_t candidate) const;
  /// How many of `hashes` the candidate's active blocks do not hold.
  std::uint64_t newBlocks(std::uint32_t candidate, std::span<const std::uint64_t> hashes) const;
  /// For every candidate at once: how many of `hashes` its active blocks hold (`held` resized to
  /// the number of candidates). One index probe per hash.
  void heldBlocks(std::span<const std::uint64_t> hashes, std::vector<std::uint64_t>& held) const;
  std::uint64_t queuedPrefillTokens(std::uint32_t candidate) const;
  std::size_t activeRequests() const { return requests_.size(); }

 private:
  static constexpr std::uint32_t kNoList = ~std::uint32_t{0};
  // Hashes ahead that a loop over a prompt's hashes prefetches (each probe is a cache miss once
  // the index outgrows the cache: SGLang page size 1 has one hash per token).
  static constexpr std::size_t kPrefetchAhead = 8;
  struct Active {
    std::uint32_t candidate = 0;
    std::vector<std::uint64_t> hashes;
    std::uint64_t prefill_tokens = 0;
    bool prefill_queued = true;
  };
  struct Holder {
    std::uint32_t candidate = 0;
    std::uint32_t refs = 0;  // active prompts of the candidate holding the hash
  };
  // The holders of one hash: the first inline (the common case: one candidate), more in a list.
  struct Holders {
    std::uint32_t count = 0;  // candidates holding the hash (HashIndex's occupancy marker)
    Holder first;
    std::uint32_t more = kNoList;  // index into lists_
  };
  void addRef(std::uint64_t hash, std::uint32_t candidate);
  void dropRef(std::uint64_t hash, std::uint32_t candidate);

  std::unordered_map<std::uint64_t, Active> requests_;
  HashIndex<Holders> holders_;              // hash → candidates holding it
  std::vector<std::vector<Holder>> lists_;  // further holders; slots recycled (free_lists_)
  std::vector<std::uint32_t> free_lists_;
  std::vector<std::uint64_t> active_blocks_;  // distinct hashes per candidate
  std::vector<std::uint64_t> queued_prefill_;
};

/// Costs every candidate and picks one; owns the load and the RNG.
class KvCostRouter {
 public:
  KvCostRouter(std::size_t candidates, std::uint32_t block_size, KvRouterConfig config,
               std::uint64_t seed);
  /// `hashes`: the prompt's full-block sequence hashes; `overlaps`: leading cached blocks per
  /// candidate; `tree_sizes`: blocks each candidate's index holds (empty: unknown). Does not
  /// add the request to the load (call load().add with the chosen candidate).
  std::uint32_t select(std::span<const std::uint64_t> hashes, std::uint32_t prompt_tokens,
                       std::span<const std::uint32_t> overlaps,
                       std::span<const std::uint64_t> tree_sizes);
  /// The same among candidates [first, last) only (`overlaps` and `tree_sizes` still indexed
  /// by candidate): a disaggregated replay routes its first hop over the prefill workers.
  std::uint32_t select(std::span<const std::uint64_t> hashes, std::uint32_t prompt_tokens,
                       std::span<const std::uint32_t> overlaps,
                       std::span<const std::uint64_t> tree_sizes, std::uint32_t first,
                       std::uint32_t last);
  /// Candidates select() leaves out (by candidate; empty = none): the live replay's servers that
  /// are down. When every candidate of a select's range is excluded, none is.
  void setExcluded(std::vector<bool> excluded) { excluded_ = std::move(excluded); }
  /// The costs of the last select(), by candidate.
  const std::vector<double>& lastCosts() const { return costs_; }
  ActiveLoad& load() { return load_; }
  const ActiveLoad& load() const { return load_; }
  std::uint32_t blockSize() const { return block_size_; }

 private:
  std::uint32_t block_size_;
  KvRouterConfig config_;
  SplitMix64 rng_;
  ActiveLoad load_;
  std::vector<double> costs_;
  std::vector<std::uint64_t> held_;  // scratch: blocks of the request each candidate holds
  std::vector<bool> excluded_;
  std::vector<double> kept_costs_;         // scratch: the costs of the candidates not excluded
  std::vector<std::uint64_t> kept_sizes_;  // scratch: their tree sizes
  std::vector<std::uint32_t> kept_;        // scratch: their candidate indices
};

}  // namespace mocker::replay
