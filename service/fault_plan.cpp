#include "service/fault_plan.h"

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <utility>

#include "base/enum_names.h"
#include "service/logging.h"

namespace mocker::service {
namespace {

constexpr EnumNames<FaultKind, kNumFaultKinds> kKinds{
    {{"crash", FaultKind::Crash},
     {"hang", FaultKind::Hang},
     {"slow", FaultKind::Slow},
     {"error", FaultKind::Error},
     {"abort", FaultKind::Abort},
     {"drop", FaultKind::Drop},
     {"drop_unhealable", FaultKind::DropUnhealable},
     {"suppress", FaultKind::Suppress},
     {"duplicate", FaultKind::Duplicate},
     {"reorder", FaultKind::Reorder},
     {"delay", FaultKind::Delay},
     {"truncate_ring", FaultKind::TruncateRing},
     {"fpm_stop", FaultKind::FpmStop},
     {"metrics_freeze", FaultKind::MetricsFreeze},
     {"fetch_not_found", FaultKind::FetchNotFound},
     {"fetch_late", FaultKind::FetchLate},
     {"fetch_never", FaultKind::FetchNever},
     {"restart", FaultKind::Restart},
     {"silent", FaultKind::Silent}}};

constexpr std::array kErrorCodes{ErrorCode::InvalidArgument,  ErrorCode::Corruption,
                                 ErrorCode::NotFound,         ErrorCode::Unsupported,
                                 ErrorCode::IoError,          ErrorCode::Internal,
                                 ErrorCode::PermissionDenied, ErrorCode::ResourceExhausted};

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

Result<std::uint64_t> parseU64(std::string_view key, std::string_view v) {
  std::uint64_t out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc{} || end != v.data() + v.size() || v.empty()) {
    return invalidArgument(std::string(key) + " must be an unsigned integer (got '" +
                           std::string(v) + "')");
  }
  return out;
}

Result<std::uint32_t> parseU32(std::string_view key, std::string_view v) {
  MOCKER_TRY(const std::uint64_t out, parseU64(key, v));
  if (out > UINT32_MAX) return invalidArgument(std::string(key) + " must be at most 4294967295");
  return static_cast<std::uint32_t>(out);
}

Result<double> parseDouble(std::string_view key, std::string_view v) {
  double out = 0.0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc{} || end != v.data() + v.size() || v.empty() || !std::isfinite(out) ||
      out < 0) {
    return invalidArgument(std::string(key) + " must be a finite number >= 0 (got '" +
                           std::string(v) + "')");
  }
  return out;
}

Result<bool> parseBool(std::string_view key, std::string_view v) {
  if (v == "true") return true;
  if (v == "false") return false;
  return invalidArgument(std::string(key) + " must be true or false (got '" + std::string(v) +
                         "')");
}

Result<ErrorCode> parseCode(std::string_view v) {
  std::string names;
  for (const ErrorCode c : kErrorCodes) {
    if (v == errorCodeName(c)) return c;
    names += names.empty() ? "" : ", ";
    names += errorCodeName(c);
  }
  return invalidArgument("code: unknown error code '" + std::string(v) + "' (expected one of " +
                         names + ")");
}

/// Kinds that hold something `ms` milliseconds (a KV batch, a kv_fetch answer).
bool takesDelayMs(FaultKind kind) {
  return kind == FaultKind::Delay || kind == FaultKind::FetchLate;
}

/// Which keys each kind takes (besides worker and rank, which every kind takes).
bool keyApplies(FaultKind kind, std::string_view key) {
  // /metrics is one snapshot per worker: a freeze cannot be scoped to a rank; the worker's
  // engine holds every rank, so a restart cannot either.
  if (key == "rank") return kind != FaultKind::MetricsFreeze && kind != FaultKind::Restart;
  if (key == "worker") return true;
  if (key == "after_passes" || key == "at_ms") return isWorkerFault(kind) || isKvFault(kind);
  if (key == "count") return isKvFault(kind);
  if (key == "rate") return !isWorkerFault(kind);
  if (key == "match") return !isWorkerFault(kind) && !isKvFault(kind);
  if (key == "ms") return takesDelayMs(kind);
  if (key == "for_passes" || key == "factor") return kind == FaultKind::Slow;
  if (key == "health_after_ms") return kind == FaultKind::Hang;
  if (key == "code") return kind == FaultKind::Error;
  if (key == "tokens") return kind == FaultKind::Abort;
  if (key == "cleared" || key == "down_ms") return kind == FaultKind::Restart;
  return false;
}

Status setKey(FaultSpec& s, std::string_view key, std::string_view v) {
  if (key == "after_passes") {
    MOCKER_TRY(s.after_passes, parseU64(key, v));
  } else if (key == "at_ms") {
    MOCKER_TRY(s.at_ms, parseDouble(key, v));
  } else if (key == "for_passes") {
    MOCKER_TRY(s.for_passes, parseU64(key, v));
    if (*s.for_passes == 0) return invalidArgument("for_passes must be >= 1");
  } else if (key == "count") {
    MOCKER_TRY(s.count, parseU64(key, v));
    if (*s.count == 0) return invalidArgument("count must be >= 1");
  } else if (key == "ms") {
    MOCKER_TRY(s.delay_ms, parseDouble(key, v));
    if (s.delay_ms <= 0 || s.delay_ms > 3.6e6) {
      return invalidArgument("ms must be > 0 and <= 3600000 (got '" + std::string(v) + "')");
    }
  } else if (key == "rate") {
    s.rate_given = isKvFault(s.kind);
    MOCKER_TRY(s.rate, parseDouble(key, v));
    if (s.rate > 1.0)
      return invalidArgument("rate must be in [0, 1] (got '" + std::string(v) + "')");
  } else if (key == "match") {
    const std::size_t star = v.find('*');
    if (v.empty() || (star != std::string_view::npos && star + 1 != v.size())) {
      return invalidArgument("match must be a request id, or a prefix ending in '*' (got '" +
                             std::string(v) + "')");
    }
    s.match = std::string(v);
  } else if (key == "worker") {
    MOCKER_TRY(s.worker, parseU32(key, v));
  } else if (key == "rank") {
    MOCKER_TRY(s.rank, parseU32(key, v));
  } else if (key == "factor") {
    MOCKER_TRY(s.factor, parseDouble(key, v));
    if (s.factor <= 1.0 || s.factor > 1e6) {
      return invalidArgument("factor must be > 1 and <= 1000000 (got '" + std::string(v) + "')");
    }
  } else if (key == "code") {
    MOCKER_TRY(s.code, parseCode(v));
  } else if (key == "tokens") {
    MOCKER_TRY(s.tokens, parseU32(key, v));
  } else if (key == "cleared") {
    MOCKER_TRY(s.cleared, parseBool(key, v));
  } else if (key == "down_ms") {
    MOCKER_TRY(s.down_ms, parseDouble(key, v));
    if (s.down_ms > 3.6e6) {
      return invalidArgument("down_ms must be <= 3600000 (got '" + std::string(v) + "')");
    }
  } else if (key == "health_after_ms") {
    if (v == "none") {
      s.health_after_ms.reset();
    } else {
      MOCKER_TRY(s.health_after_ms, parseDouble(key, v));
    }
  }
  return {};
}

bool matches(std::string_view pattern, std::string_view id) {
  if (pattern.empty()) return true;
  if (pattern.back() == '*') return id.starts_with(pattern.substr(0, pattern.size() - 1));
  return id == pattern;
}

std::uint64_t mix64(std::uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::string_view faultKindName(FaultKind kind) { return enumName(kKinds, kind); }

bool isWorkerFault(FaultKind kind) {
  return kind == FaultKind::Crash || kind == FaultKind::Hang || kind == FaultKind::Slow ||
         kind == FaultKind::FpmStop || kind == FaultKind::MetricsFreeze ||
         kind == FaultKind::Restart;
}

bool isKvFault(FaultKind kind) {
  return kind >= FaultKind::Drop && kind <= FaultKind::TruncateRing;
}

bool isFetchFault(FaultKind kind) {
  return kind == FaultKind::FetchNotFound || kind == FaultKind::FetchLate ||
         kind == FaultKind::FetchNever;
}

Result<FaultSpec> parseFaultSpec(std::string_view text) {
  const std::size_t colon = text.find(':');
  const std::string_view kind_text = text.substr(0, colon);
  const auto kind = enumFromName(kKinds, kind_text);
  if (!kind) {
    return invalidArgument("fault '" + std::string(text) + "': unknown kind '" +
                           std::string(kind_text) + "' (expected one of " +
                           enumNameList(kKinds, ", ") + ")");
  }
  FaultSpec spec;
  spec.kind = *kind;
  const std::string prefix = "fault '" + std::string(text) + "': ";
  std::string_view rest = colon == std::string_view::npos ? "" : text.substr(colon + 1);
  std::vector<std::string> seen;
  while (colon != std::string_view::npos) {
    const std::size_t next = rest.find(':');
    const std::string_view item = rest.substr(0, next);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return invalidArgument(prefix + "expected KEY=VALUE, got '" + std::string(item) + "'");
    }
    const std::string_view key = item.substr(0, eq);
    if (!keyApplies(spec.kind, key)) {
      return invalidArgument(prefix + "'" + std::string(key) + "' is not a key of " +
                             std::string(kind_text) + " faults");
    }
    for (const std::string& k : seen) {
      if (k == key) return invalidArgument(prefix + std::string(key) + " given twice");
    }
    seen.emplace_back(key);
    if (Status st = setKey(spec, key, item.substr(eq + 1)); !st) {
      return invalidArgument(prefix + st.error().message);
    }
    if (next == std::string_view::npos) break;
    rest = rest.substr(next + 1);
  }
  if (spec.after_passes && spec.at_ms) {
    return invalidArgument(prefix + "give after_passes or at_ms, not both");
  }
  if (spec.kind == FaultKind::Slow && spec.factor <= 1.0) {
    return invalidArgument(prefix + "factor is required (> 1)");
  }
  if (spec.kind == FaultKind::Abort && spec.tokens == 0) {
    return invalidArgument(prefix + "tokens is required (>= 1)");
  }
  if (takesDelayMs(spec.kind) && spec.delay_ms <= 0) {
    return invalidArgument(prefix + "ms is required (> 0)");
  }

  return spec;
}

Result<std::vector<FaultSpec>> parseFaultSpecs(const std::vector<std::string>& specs,
                                               std::uint32_t num_workers, std::uint32_t dp_size) {
  std::vector<FaultSpec> out;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    std::string where;
    if (specs.size() > 1) {
      where += '[';
      where += std::to_string(i);
      where += "] ";
    }
    auto spec = parseFaultSpec(specs[i]);
    if (!spec) return invalidArgument(where + spec.error().message);
    if (spec->worker && *spec->worker >= num_workers) {
      return invalidArgument(
          where + "fault '" + specs[i] + "': worker " + std::to_string(*spec->worker) +
          " does not exist (fleet.num_workers = " + std::to_string(num_workers) + ")");
    }
    if (spec->rank && *spec->rank >= dp_size) {
      return invalidArgument(where + "fault '" + specs[i] + "': rank " +
                             std::to_string(*spec->rank) +
                             " does not exist (engine.dp_size = " + std::to_string(dp_size) + ")");
    }
    out.push_back(std::move(*spec));
  }
  return out;
}

std::string faultSpecText(const FaultSpec& s) {
  std::string out(faultKindName(s.kind));
  const auto add = [&out](std::string_view key, const std::string& v) {
    out += ":";
    out += key;
    out += "=";
    out += v;
  };
  // Shortest round-trip text of a double.
  const auto num = [](double v) {
    char buf[64];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, ec == std::errc{} ? end : buf);
  };
  if (s.after_passes) add("after_passes", std::to_string(*s.after_passes));
  if (s.at_ms) add("at_ms", num(*s.at_ms));
  if (s.for_passes) add("for_passes", std::to_string(*s.for_passes));
  if (s.count) add("count", std::to_string(*s.count));
  if (isKvFault(s.kind) ? s.rate_given : !isWorkerFault(s.kind) && s.rate != 1.0) {
    add("rate", num(s.rate));
  }
  if (!s.match.empty()) add("match", s.match);
  if (s.worker) add("worker", std::to_string(*s.worker));
  if (s.rank) add("rank", std::to_string(*s.rank));
  if (s.kind == FaultKind::Slow) add("factor", num(s.factor));
  if (s.kind == FaultKind::Error) add("code", errorCodeName(s.code));
  if (s.kind == FaultKind::Abort) add("tokens", std::to_string(s.tokens));
  if (takesDelayMs(s.kind)) add("ms", num(s.delay_ms));
  if (s.kind == FaultKind::Hang) {
    add("health_after_ms", s.health_after_ms ? num(*s.health_after_ms) : "none");
  }
  if (s.kind == FaultKind::Restart) {
    add("cleared", s.cleared ? "true" : "false");
    add("down_ms", num(s.down_ms));
  }
  return out;
}

std::string faultLogLine(const Injection& in) {
  std::string line =
      "{\"time_ms\":" + number(in.time_ms) + ",\"kind\":\"" + std::string(faultKindName(in.kind)) +
      "\",\"fault\":" + std::to_string(in.fault) + ",\"worker\":" + std::to_string(in.worker);
  if (in.rank) line += ",\"rank\":" + std::to_string(*in.rank);
  if (!in.request.empty()) line += ",\"request\":\"" + jsonEscape(in.request) + "\"";
  if (in.seq) line += ",\"seq\":" + std::to_string(*in.seq);
  line += ",\"detail\":\"" + jsonEscape(in.detail) + "\"}";
  return line;
}

FaultPlan::FaultPlan(std::vector<FaultSpec> specs, std::uint64_t seed, std::uint32_t worker)
    : seed_(seed), worker_(worker) {
  for (std::uint32_t i = 0; i < specs.size(); ++i) {
    if (specs[i].worker && *specs[i].worker != worker) continue;  // another worker's
    specs_.push_back({.spec = specs[i], .index = i, .given = std::move(specs[i])});
  }
  noteKinds();
}

void FaultPlan::noteKinds() {
  has_kv_ = std::any_of(specs_.begin(), specs_.end(),
                        [](const Armed& a) { return isKvFault(a.spec.kind); });
  has_fetch_ = std::any_of(specs_.begin(), specs_.end(),
                           [](const Armed& a) { return isFetchFault(a.spec.kind); });
}

std::uint64_t FaultPlan::arm(FaultSpec spec, std::uint32_t id, std::uint64_t passes,
                             std::uint64_t rank_passes, double now_ms) {
  const std::uint64_t at = spec.rank ? rank_passes : passes;
  Armed a{.spec = spec, .index = id, .given = spec, .armed_at_pass = at};
  if (a.spec.after_passes) *a.spec.after_passes += at;
  if (a.spec.at_ms) *a.spec.at_ms += now_ms;
  specs_.push_back(std::move(a));
  noteKinds();
  return at;
}

bool FaultPlan::disarm(std::uint32_t id) {
  const auto gone =
      std::remove_if(specs_.begin(), specs_.end(), [id](const Armed& a) { return a.index == id; });
  if (gone == specs_.end()) return false;
  specs_.erase(gone, specs_.end());
  noteKinds();
  return true;
}

std::vector<FaultPlan::ArmedInfo> FaultPlan::armed() const {
  std::vector<ArmedInfo> out;
  out.reserve(specs_.size());
  for (const Armed& a : specs_) {
    out.push_back({.id = a.index, .spec = a.given, .armed_at_pass = a.armed_at_pass});
  }
  return out;
}

std::string FaultPlan::withArming(const Armed& a, std::string detail) {
  if (a.armed_at_pass) detail += ", armed at pass " + std::to_string(*a.armed_at_pass);
  return detail;
}

bool FaultPlan::inScope(const FaultSpec& spec, std::uint32_t rank) const {
  return !spec.rank || *spec.rank == rank;
}

double FaultPlan::draw(std::uint32_t fault, std::string_view request_id) const {
  const std::uint64_t id_hash = XXH3_64bits_withSeed(request_id.data(), request_id.size(), seed_);
  const std::uint64_t h = mix64(id_hash ^ mix64(fault + 1));
  return static_cast<double>(h >> 11) * 0x1.0p-53;  // [0, 1)
}

FaultPlan::PassFaults FaultPlan::beforePass(std::uint32_t rank, std::uint64_t passes,
                                            std::uint64_t rank_passes, double now_ms,
                                            std::vector<Injection>& out) {
  PassFaults result;
  for (Armed& a : specs_) {
    const FaultSpec& s = a.spec;
    if (!isWorkerFault(s.kind) || !inScope(s, rank)) continue;
    const std::uint64_t count = s.rank ? rank_passes : passes;
    const bool due = s.after_passes ? count >= *s.after_passes : !s.at_ms || now_ms >= *s.at_ms;
    if (!due) continue;
    if (s.kind == FaultKind::Slow && s.for_passes && a.slowed >= *s.for_passes) continue;
    if (!a.fired) {
      a.fired = true;
      std::string detail =
          s.after_passes ? "after " + std::to_string(count) + " passes"
                         : (s.at_ms ? "at " + number(now_ms) + " ms" : std::string("at start"));
      if (s.kind == FaultKind::Slow) {
        detail += ", factor " + number(s.factor) +
                  (s.for_passes ? " for " + std::to_string(*s.for_passes) + " passes" : "");
      }
      if (s.kind == FaultKind::Restart) {
        detail += std::string(s.cleared ? ", AllBlocksCleared first" : ", no AllBlocksCleared") +
                  ", down " + number(s.down_ms) + " ms";
      }
      out.push_back({.time_ms = now_ms,
                     .kind = s.kind,
                     .fault = a.index,
                     .worker = worker_,
                     .rank = s.rank ? std::optional(rank) : std::nullopt,
                     .detail = withArming(a, std::move(detail))});
    } else if (s.kind == FaultKind::Crash || s.kind == FaultKind::Restart) {
      continue;  // crashes or restarts once
    }
    switch (s.kind) {
      case FaultKind::Crash:
        result.crash = true;
        break;
      case FaultKind::Hang:
        result.hang = true;
        result.health_after_ms = s.health_after_ms;
        break;
      case FaultKind::Slow:
        ++a.slowed;
        result.slow_factor *= s.factor;
        break;
      case FaultKind::FpmStop:
        result.fpm_stop = true;
        break;
      case FaultKind::MetricsFreeze:
        result.metrics_freeze = true;
        break;
      case FaultKind::Restart:
        result.restart = true;
        result.restart_cleared = s.cleared;
        result.restart_down_ms = s.down_ms;
        break;
      default:
        break;
    }
  }
  return result;
}

FaultPlan::RequestFaults FaultPlan::onSubmit(std::uint32_t rank, std::string_view request_id,
                                             double now_ms) const {
  RequestFaults result;
  for (const Armed& a : specs_) {
    const FaultSpec& s = a.spec;
    if (isWorkerFault(s.kind) || isKvFault(s.kind) || isFetchFault(s.kind) || !inScope(s, rank) ||
        !matches(s.match, request_id)) {
      continue;
    }
    if (s.kind == FaultKind::Abort && result.abort_after_tokens) continue;
    if (draw(a.index, request_id) >= s.rate) continue;
    Injection in{.time_ms = now_ms,
                 .kind = s.kind,
                 .fault = a.index,
                 .worker = worker_,
                 .rank = rank,
                 .request = std::string(request_id)};
    if (s.kind == FaultKind::Silent) {
      in.detail = withArming(a, "acknowledged, then silent");
      return {.silent = true, .injection = std::move(in)};
    }
    if (s.kind == FaultKind::Error) {
      in.detail = withArming(a, std::string("code ") + errorCodeName(s.code));
      return {.error = s.code,
              .error_message = "fault injected: error (fault " + std::to_string(a.index) + ")",
              .injection = std::move(in)};
    }
    in.detail = withArming(a, "stream ended after " + std::to_string(s.tokens) + " tokens");
    result.abort_after_tokens = s.tokens;
    result.injection = std::move(in);
  }
  return result;
}

FaultPlan::FetchFaults FaultPlan::onFetch(std::uint32_t rank, std::string_view request_id,
                                          double now_ms) const {
  for (const Armed& a : specs_) {
    const FaultSpec& s = a.spec;
    if (!isFetchFault(s.kind) || !inScope(s, rank) || !matches(s.match, request_id)) continue;
    if (draw(a.index, request_id) >= s.rate) continue;
    Injection in{.time_ms = now_ms,
                 .kind = s.kind,
                 .fault = a.index,
                 .worker = worker_,
                 .rank = rank,
                 .request = std::string(request_id)};
    in.detail = withArming(a, s.kind == FaultKind::FetchNotFound ? "kv_fetch answered not_found"
                              : s.kind == FaultKind::FetchNever
                                  ? "kv_fetch never answered"
                                  : "kv_fetch answered " + number(s.delay_ms) + " ms late");
    return {.kind = s.kind,
            .late_ms = s.kind == FaultKind::FetchLate ? s.delay_ms : 0.0,
            .injection = std::move(in)};
  }
  return {};
}

double FaultPlan::drawBatch(std::uint32_t fault, std::uint32_t rank, std::uint64_t seq) const {
  const std::uint64_t stream = (static_cast<std::uint64_t>(worker_) << 32) | rank;
  const std::uint64_t h = mix64(mix64(seed_ ^ mix64(fault + 1)) ^ mix64(stream) ^ seq);
  return static_cast<double>(h >> 11) * 0x1.0p-53;  // [0, 1)
}

namespace {

/// What a KV-event fault did to its batch, for the fault log.
std::string batchDetail(const FaultSpec& s) {
  switch (s.kind) {
    case FaultKind::Drop:
      return "not sent; kept in the replay ring";
    case FaultKind::DropUnhealable:
      return "not sent; left out of the replay ring";
    case FaultKind::Suppress:
      return "sent without its events";
    case FaultKind::Duplicate:
      return "sent twice";
    case FaultKind::Reorder:
      return "held until the next batch is sent";
    case FaultKind::Delay:
      return "held " + number(s.delay_ms) + " ms";
    default:
      return "replay ring emptied before this batch";
  }
}

}  // namespace

FaultPlan::BatchFaults FaultPlan::onBatch(std::uint32_t rank, std::uint64_t seq,
                                          std::uint64_t passes, std::uint64_t rank_passes,
                                          double now_ms, std::vector<Injection>& out) {
  BatchFaults result;
  for (Armed& a : specs_) {
    const FaultSpec& s = a.spec;
    if (!isKvFault(s.kind) || !inScope(s, rank)) continue;
    // The batch of the pass after `after_passes` passes (the count includes the batch's own).
    const std::uint64_t count = s.rank ? rank_passes : passes;
    const bool due = s.after_passes ? count > *s.after_passes : !s.at_ms || now_ms >= *s.at_ms;
    const std::uint64_t limit = s.count.value_or(s.rate_given ? UINT64_MAX : 1);
    if (!due || a.hits >= limit) continue;
    if (s.rate_given && drawBatch(a.index, rank, seq) >= s.rate) continue;
    ++a.hits;
    out.push_back({.time_ms = now_ms,
                   .kind = s.kind,
                   .fault = a.index,
                   .worker = worker_,
                   .rank = rank,
                   .seq = seq,
                   .detail = withArming(a, batchDetail(s))});
    switch (s.kind) {
      case FaultKind::DropUnhealable:
        result.unhealable = true;
        [[fallthrough]];
      case FaultKind::Drop:
        result.drop = true;
        break;
      case FaultKind::Suppress:
        result.suppress = true;
        break;
      case FaultKind::Duplicate:
        result.duplicate = true;
        break;
      case FaultKind::Reorder:
        result.reorder = true;
        break;
      case FaultKind::Delay:
        result.delay_ms = std::max(result.delay_ms, s.delay_ms);
        break;
      default:
        result.truncate_ring = true;
        break;
    }
  }
  return result;
}

}  // namespace mocker::service
