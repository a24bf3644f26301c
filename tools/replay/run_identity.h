// What identifies a replay run in its reports (docs/metrics.md, Run identity): the mocker build,
// the workload, the effective configuration, and — in a separate part that differs between two
// runs of the same command — the date and the command line.
//
// Plain data, filled in by the `mocker replay` command; the report writers (report_output.h,
// report_html.h) print it when Report::identity is set.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace mocker::replay {

/// One effective [engine] setting, as `mocker config --dump` spells its value.
struct ConfigSetting {
  enum class Kind : std::uint8_t { Text, Number, Bool, Null };
  std::string key;   ///< without the "engine." prefix
  std::string text;  ///< the dump's spelling ("vllm", "64", "0.9", "true", "none")
  Kind kind = Kind::Text;
};

struct RunIdentity {
  // Stable: the same for every run of the same command with the same build and inputs.
  std::string mocker_version;  ///< project version, e.g. "0.1.0"
  std::string git_revision;    ///< `git describe --always --dirty` at configure time, or "unknown"
  std::string mode;            ///< "offline" | "live"
  std::string format;          ///< "mooncake" | "azure" | "synthetic"
  std::optional<std::string> trace_path{};    ///< as given; none for a synthetic workload
  std::optional<std::string> trace_sha256{};  ///< lowercase hex of the trace file's bytes
  std::uint32_t num_workers = 1;              ///< offline workers; live: the servers
  std::string router;                         ///< "round_robin" | "kv" | "kv_prefix" | "random"
  std::vector<std::string> servers{};         ///< live: the --connect endpoints
  /// Live: each server's speedup ratio as it reported it at start-up (stats_reply.engine; servers
  /// in --connect order, then decode servers), nullopt from one that does not report it. A live
  /// report's latencies are wall-clock: × the ratio gives model time. Offline: empty (model time).
  std::vector<std::optional<double>> server_speedup_ratios{};
  /// Offline: every effective [engine] key in dump order. Live: empty (each server has its own).
  std::vector<ConfigSetting> engine_config{};
  /// Offline, roofline timing without num_gpu_blocks: the KV tokens per DP rank the deployment
  /// gives (vLLM's "GPU KV cache size"); nullopt otherwise.
  std::optional<std::uint64_t> gpu_kv_cache_tokens{};
  // Differs between runs (the JSON report's "run" object).
  std::string date_utc;      ///< start of the run, ISO-8601 UTC ("2026-11-30T18:21:20Z")
  std::string command_line;  ///< the full command line, shell-quoted
};

/// The speedup ratio every server reported, if they all reported the same one (nullopt: none,
/// one unknown, or two that differ).
std::optional<double> commonSpeedupRatio(const std::vector<std::optional<double>>& ratios);

/// `args` joined by spaces, each quoted for a POSIX shell when it needs to be.
std::string shellQuotedCommandLine(const std::vector<std::string>& args);

/// The current time as ISO-8601 UTC with seconds ("2026-11-30T18:21:20Z").
std::string currentUtcIso8601();

/// SHA-256 of a file's bytes as 64 lowercase hex digits; the error names the file.
Result<std::string> fileSha256(const std::string& path);

}  // namespace mocker::replay
