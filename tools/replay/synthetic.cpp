#include "tools/replay/synthetic.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "tools/replay/random.h"

namespace mocker::replay {
namespace {

bool finiteNonNegative(double v) { return std::isfinite(v) && v >= 0.0; }
bool finitePositive(double v) { return std::isfinite(v) && v > 0.0; }

Status validate(const SyntheticSpec& spec) {
  if (spec.request_count == 0) return invalidArgument("request_count must be >= 1");
  if (spec.turns_per_session == 0) return invalidArgument("turns_per_session must be >= 1");
  if (spec.loras > kMaxSyntheticLoras) {
    return invalidArgument("loras must be <= " + std::to_string(kMaxSyntheticLoras) + " (got " +
                           std::to_string(spec.loras) + ")");
  }
  if (!std::isfinite(spec.input_tokens.mean) || !finiteNonNegative(spec.input_tokens.stddev)) {
    return invalidArgument("input_tokens needs a finite mean and a finite stddev >= 0");
  }
  if (!std::isfinite(spec.output_tokens.mean) || !finiteNonNegative(spec.output_tokens.stddev)) {
    return invalidArgument("output_tokens needs a finite mean and a finite stddev >= 0");
  }
  const ArrivalProcess& a = spec.arrival;
  switch (a.kind) {
    case ArrivalKind::Burst:
      break;
    case ArrivalKind::Gamma:
      if (!finitePositive(a.smoothness)) {
        return invalidArgument("gamma arrival smoothness must be finite and > 0");
      }
      [[fallthrough]];
    case ArrivalKind::Constant:
    case ArrivalKind::Poisson:
      if (!finitePositive(a.rate_per_s)) {
        return invalidArgument("arrival rate must be finite and > 0");
      }
      break;
    case ArrivalKind::Interval:
      if (!finiteNonNegative(a.interval_ms)) {
        return invalidArgument("arrival interval must be finite and >= 0");
      }
      break;
  }
  if (!(spec.shared_prefix_ratio >= 0.0 && spec.shared_prefix_ratio <= 1.0)) {
    return invalidArgument("shared_prefix_ratio must be in [0, 1]");
  }
  if (spec.num_prefix_groups > kMaxPrefixGroups) {
    return invalidArgument("num_prefix_groups must be <= " + std::to_string(kMaxPrefixGroups) +
                           " (got " + std::to_string(spec.num_prefix_groups) + ")");
  }
  if (spec.inter_turn_delay.kind != DelayKind::None &&
      !finiteNonNegative(spec.inter_turn_delay.ms)) {
    return invalidArgument("inter_turn_delay must be finite and >= 0");
  }
  if (spec.block_size == 0) return invalidArgument("block_size must be >= 1");
  return {};
}

/// Round half away from zero, clamp to [1, 2^32 − 1].
std::uint32_t toLength(double sample) {
  const double r = std::round(sample);
  if (!(r >= 1.0)) return 1;
  constexpr double kMax = std::numeric_limits<std::uint32_t>::max();
  return r >= kMax ? std::numeric_limits<std::uint32_t>::max() : static_cast<std::uint32_t>(r);
}

double arrivalGapMs(SplitMix64& rng, const ArrivalProcess& a) {
  switch (a.kind) {
    case ArrivalKind::Burst:
      return 0.0;
    case ArrivalKind::Constant:
      return 1000.0 / a.rate_per_s;
    case ArrivalKind::Poisson:
      return sampleExponential(rng, 1000.0 / a.rate_per_s);
    case ArrivalKind::Gamma:
      return sampleGamma(rng, a.smoothness, 1000.0 / (a.rate_per_s * a.smoothness));
    case ArrivalKind::Interval:
      return a.interval_ms;
  }
  return 0.0;
}

}  // namespace

Result<Workload> generateSyntheticWorkload(const SyntheticSpec& spec) {
  MOCKER_TRY_VOID(validate(spec));
  SplitMix64 rng(spec.seed);
  Workload workload;
  workload.trace_block_size = spec.block_size;
  workload.sessions.reserve(spec.request_count);
  std::uint64_t next_fresh_id = 1;
  double arrival_ms = 0.0;

  // Zipf CDF over the adapters: cdf[k - 1] = Σ_{j<=k} (1/j) / H(loras).
  std::vector<double> lora_cdf;
  for (std::uint32_t k = 1; k <= spec.loras; ++k) {
    lora_cdf.push_back((lora_cdf.empty() ? 0.0 : lora_cdf.back()) + 1.0 / k);
  }
  for (double& c : lora_cdf) c /= lora_cdf.back();

  for (std::uint32_t i = 0; i < spec.request_count; ++i) {
    if (i > 0) arrival_ms += arrivalGapMs(rng, spec.arrival);
    std::optional<std::uint64_t> group;
    if (spec.num_prefix_groups > 0) group = rng.uniformIndex(spec.num_prefix_groups);
    std::optional<std::string> lora;
    if (spec.loras > 0) {
      const double u = rng.uniform();
      const auto k = std::upper_bound(lora_cdf.begin(), lora_cdf.end() - 1, u) - lora_cdf.begin();
      lora = "lora-" + std::to_string(k + 1);
    }

    Session session;
    session.session_id = "session_" + std::to_string(i);
    session.first_arrival_ms = arrival_ms;
    session.turns.reserve(spec.turns_per_session);
    for (std::uint32_t t = 0; t < spec.turns_per_session; ++t) {
      Turn turn;
      turn.lora = lora;
      turn.input_length =
          toLength(sampleNormal(rng, spec.input_tokens.mean, spec.input_tokens.stddev));
      turn.output_length =
          toLength(sampleNormal(rng, spec.output_tokens.mean, spec.output_tokens.stddev));
      if (t > 0) {
        switch (spec.inter_turn_delay.kind) {
          case DelayKind::None:
            break;
          case DelayKind::Constant:
            turn.delay_after_previous_ms = spec.inter_turn_delay.ms;
            break;
          case DelayKind::Exponential:
            turn.delay_after_previous_ms = sampleExponential(rng, spec.inter_turn_delay.ms);
            break;
        }
      }
      const std::uint64_t n =
          (std::uint64_t{turn.input_length} + spec.block_size - 1) / spec.block_size;
      std::uint64_t p = 0;
      if (spec.session_context && t > 0) {
        const Turn& previous = session.turns.back();
        const std::uint64_t context = previous.hash_ids.size();
        const std::uint64_t length = context * spec.block_size + turn.input_length;
        if (length > std::numeric_limits<std::uint32_t>::max() ||
            next_fresh_id + n > kSharedIdBase) {
          return invalidArgument("session " + std::to_string(i) +
                                 ": the session context grows too long");
        }
        turn.input_length = static_cast<std::uint32_t>(length);
        turn.hash_ids = previous.hash_ids;
        for (std::uint64_t b = 0; b < n; ++b) turn.hash_ids.push_back(next_fresh_id++);
        session.turns.push_back(std::move(turn));
        continue;
      }
      if (group) {
        p = std::min<std::uint64_t>(n, static_cast<std::uint64_t>(std::round(
                                           static_cast<double>(n) * spec.shared_prefix_ratio)));
      }
      if (p > kSharedIdsPerGroup) {
        return invalidArgument("session " + std::to_string(i) + " needs " + std::to_string(p) +
                               " shared blocks; at most 2^20 per group");
      }
      if (next_fresh_id + (n - p) > kSharedIdBase) {
        return invalidArgument("synthetic workload needs more than 2^31 - 1 fresh block ids");
      }
      turn.hash_ids.reserve(n);
      for (std::uint64_t b = 0; b < p; ++b) {
        turn.hash_ids.push_back(kSharedIdBase + *group * kSharedIdsPerGroup + b);
      }
      for (std::uint64_t b = p; b < n; ++b) turn.hash_ids.push_back(next_fresh_id++);
      session.turns.push_back(std::move(turn));
    }
    workload.sessions.push_back(std::move(session));
  }
  return workload;
}

namespace {

Status validateAgentic(const SyntheticAgenticSpec& spec) {
  if (spec.sessions == 0) return invalidArgument("sessions must be >= 1");
  if (spec.calls_per_session == 0) return invalidArgument("calls_per_session must be >= 1");
  for (const auto& [d, name] : {std::pair{&spec.user_prompt_tokens, "user_prompt_tokens"},
                                std::pair{&spec.output_tokens, "output_tokens"},
                                std::pair{&spec.tool_output_tokens, "tool_output_tokens"}}) {
    if (!std::isfinite(d->mean) || !finiteNonNegative(d->stddev)) {
      return invalidArgument(std::string(name) + " needs a finite mean and a finite stddev >= 0");
    }
  }
  if (spec.tool_wait.kind != DelayKind::None && !finiteNonNegative(spec.tool_wait.ms)) {
    return invalidArgument("tool_wait must be finite and >= 0");
  }
  if (!(spec.subagent_probability >= 0.0 && spec.subagent_probability <= 1.0)) {
    return invalidArgument("subagent_probability must be in [0, 1]");
  }
  if (spec.subagent_fanout == 0 || spec.subagent_fanout > 64) {
    return invalidArgument("subagent_fanout must be in 1..64 (got " +
                           std::to_string(spec.subagent_fanout) + ")");
  }
  if (spec.block_size == 0) return invalidArgument("block_size must be >= 1");
  SyntheticSpec arrival_only;
  arrival_only.request_count = 1;
  arrival_only.arrival = spec.arrival;
  return validate(arrival_only);
}

/// Hash ids of a context of `tokens` tokens whose first `ids.size()` blocks are already known:
/// appends fresh ids for the new blocks (a partly filled last block keeps its id).
Status growContext(std::vector<std::uint64_t>& ids, std::uint64_t tokens, std::uint32_t block,
                   std::uint64_t& next_fresh_id) {
  const std::uint64_t blocks = (tokens + block - 1) / block;
  if (next_fresh_id + (blocks - std::min<std::uint64_t>(blocks, ids.size())) > kSharedIdBase) {
    return invalidArgument("synthetic agentic workload needs more than 2^31 - 1 fresh block ids");
  }
  while (ids.size() < blocks) ids.push_back(next_fresh_id++);
  return {};
}

}  // namespace

Result<Workload> generateSyntheticAgenticWorkload(const SyntheticAgenticSpec& spec) {
  MOCKER_TRY_VOID(validateAgentic(spec));
  const std::uint32_t block = spec.block_size;
  const std::uint64_t system_blocks =
      (std::uint64_t{spec.system_prompt_tokens} + block - 1) / block;
  if (system_blocks > kSharedIdsPerGroup) {
    return invalidArgument("the system prompt needs " + std::to_string(system_blocks) +
                           " blocks; at most 2^20");
  }
  std::vector<std::uint64_t> system_ids;
  for (std::uint64_t b = 0; b < system_blocks; ++b) system_ids.push_back(kSharedIdBase + b);

  SplitMix64 rng(spec.seed);
  Workload workload;
  workload.trace_block_size = block;
  std::uint64_t next_fresh_id = 1;
  double arrival_ms = 0.0;
  const auto length = [&rng](const LengthDistribution& d) {
    return toLength(sampleNormal(rng, d.mean, d.stddev));
  };
  const auto makeCall = [&](std::string session_id, std::string request_id,
                            std::vector<std::uint64_t> ids, std::uint64_t tokens,
                            std::uint32_t output) -> Result<Session> {
    if (tokens > std::numeric_limits<std::uint32_t>::max()) {
      return invalidArgument("call " + request_id + " would have a prompt of " +
                             std::to_string(tokens) + " tokens (at most 2^32 - 1)");
    }
    Session s;
    s.session_id = std::move(session_id);
    Turn t;
    t.input_length = static_cast<std::uint32_t>(tokens);
    t.output_length = output;
    t.hash_ids = std::move(ids);
    t.request_id = std::move(request_id);
    s.turns.push_back(std::move(t));
    return s;
  };

  for (std::uint32_t i = 0; i < spec.sessions; ++i) {
    if (i > 0) arrival_ms += arrivalGapMs(rng, spec.arrival);
    const std::string name = "agent_" + std::to_string(i);
    std::vector<std::uint64_t> context = system_ids;
    std::uint64_t context_tokens = spec.system_prompt_tokens;
    std::vector<std::uint32_t> previous;  // sessions the next call waits for
    for (std::uint32_t c = 0; c < spec.calls_per_session; ++c) {
      context_tokens += length(c == 0 ? spec.user_prompt_tokens : spec.tool_output_tokens);
      const std::uint32_t output = length(spec.output_tokens);
      double wait_ms = 0.0;
      if (c > 0 && spec.tool_wait.kind == DelayKind::Constant) wait_ms = spec.tool_wait.ms;
      if (c > 0 && spec.tool_wait.kind == DelayKind::Exponential) {
        wait_ms = sampleExponential(rng, spec.tool_wait.ms);
      }
      MOCKER_TRY_VOID(growContext(context, context_tokens, block, next_fresh_id));
      const std::string request = name + "." + std::to_string(c);
      MOCKER_TRY(Session call, makeCall(name, request, context, context_tokens, output));
      if (c == 0) {
        call.first_arrival_ms = arrival_ms;
      } else {
        call.wait_for = previous;
        call.dependency_delay_ms = wait_ms;
      }
      const auto call_index = static_cast<std::uint32_t>(workload.sessions.size());
      workload.sessions.push_back(std::move(call));
      previous.assign(1, call_index);
      context_tokens += output;  // the next call's prompt carries this call's answer

      if (c + 1 == spec.calls_per_session || spec.subagent_probability == 0.0) continue;
      if (!(rng.uniform() < spec.subagent_probability)) continue;
      for (std::uint32_t k = 0; k < spec.subagent_fanout; ++k) {
        const std::uint32_t task = length(spec.tool_output_tokens);
        const std::uint32_t sub_output = length(spec.output_tokens);
        std::vector<std::uint64_t> ids = system_ids;
        const std::uint64_t tokens = std::uint64_t{spec.system_prompt_tokens} + task;
        MOCKER_TRY_VOID(growContext(ids, tokens, block, next_fresh_id));
        MOCKER_TRY(Session sub, makeCall(name, request + ".sub" + std::to_string(k), std::move(ids),
                                         tokens, sub_output));
        sub.wait_for.assign(1, call_index);
        previous.push_back(static_cast<std::uint32_t>(workload.sessions.size()));
        workload.sessions.push_back(std::move(sub));
      }
    }
  }
  return workload;
}

}  // namespace mocker::replay
