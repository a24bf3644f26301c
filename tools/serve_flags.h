// The command-line flags shared by `mocker serve`, `mocker config` and `mocker replay`: --config
// FILE plus one flag per configuration key (named like vLLM's / Dynamo's where they have one),
// layered as defaults → file → flags. Flag values use the file's spellings ("none", enum names).
//
//   ServeFlags flags;
//   addServeFlags(app_or_subcommand, flags);   // before parsing
//   auto config = resolveServeConfig(flags);   // after parsing; errors name file:line:col or flag
//
// Not thread-safe; the ServeFlags object must outlive the CLI::App it was registered with and
// must not move after registration (CLI11 holds pointers into it).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "service/config.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace mocker::tools {

struct ServeFlags {
  /// One registered flag: a configuration key and the value CLI11 stored for it.
  struct Binding {
    std::string flag;    ///< "--num-gpu-blocks", for error messages
    std::string key;     ///< "engine.num_gpu_blocks"
    std::string text;    ///< value flags
    bool value = false;  ///< boolean flags
    bool boolean = false;
    CLI::Option* option = nullptr;
  };

  ServeFlags() = default;
  ServeFlags(const ServeFlags&) = delete;
  ServeFlags& operator=(const ServeFlags&) = delete;

  std::string config_path;
  std::string kv_events_config;  ///< vLLM's --kv-events-config JSON (applied before the flags)
  CLI::Option* kv_events_config_option = nullptr;
  std::deque<Binding> bindings;  // deque: stable addresses for CLI11
  // vLLM / SGLang launch-line flags without a key of their own (serve_flags.cpp).
  std::string host;
  std::uint32_t port = 0;
  std::string model;
  bool disable_log_stats = false;
  CLI::Option* host_option = nullptr;
  CLI::Option* port_option = nullptr;
  CLI::Option* model_option = nullptr;
  CLI::Option* disable_log_stats_option = nullptr;
  /// `--fault SPEC` (repeatable): appended to `[faults] inject` (service/fault_plan.h).
  std::vector<std::string> faults;
  CLI::Option* fault_option = nullptr;
};

/// What the configuration is for (service::ConfigUse). EngineOnly (offline tools such as
/// `mocker replay`) skips the endpoint rules, which only matter for sockets such a tool never
/// opens; every other rule, the engine's included, still applies.
using ConfigUse = service::ConfigUse;

/// Registers --config and every configuration flag on `app`, in help groups, each with its type
/// and default (from the key table). With EngineOnly the flags of non-engine keys are left out
/// of --help (still registered, so that using one says why it has no effect).
void addServeFlags(CLI::App& app, ServeFlags& flags, ConfigUse use = ConfigUse::Serve);

/// defaults → --config file (if given) → --kv-events-config JSON → flags given on the command
/// line → profile load → validation. Errors are prefixed with the origin of the offending key
/// ("f.toml:3:5: " or
/// "--flag: "). With EngineOnly a flag whose key only configures the live service (sockets,
/// publishers, logging, start-up delay, empty-output policy) is refused: it would have no effect.
/// (A --config file may hold such keys: a service's file can be reused; only [engine] is read.)
Result<service::ServiceConfig> resolveServeConfig(const ServeFlags& flags,
                                                  ConfigUse use = ConfigUse::Serve);

/// Whether `key` changes what an engine computes.
bool isEngineKey(std::string_view key);
/// The keys an EngineOnly use (the offline replay) takes from flags: the engine keys, and the
/// fault plan's seed and log (`--fault` too; the offline replay's failure drills).
bool isEngineOnlyKey(std::string_view key);

/// The first of --config and the configuration flags that was given on the command line, as
/// typed ("--num-gpu-blocks"); nullopt if none. For modes that use no configuration at all.
/// `with_model` false: --model is not counted (a mode that takes it for itself).
std::optional<std::string> firstGivenServeFlag(const ServeFlags& flags, bool with_model = true);

}  // namespace mocker::tools
