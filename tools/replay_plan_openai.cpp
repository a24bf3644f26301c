// planReplay's live plan against an OpenAI-compatible server (--openai-url; tools/replay_plan.h).
#include <fstream>
#include <sstream>

#include "gateway/hf_tokenizer.h"
#include "tools/replay/openai_stream.h"
#include "tools/replay_plan.h"
#include "tools/serve_flags.h"

namespace mocker::tools {
namespace {

/// The flags that only the other live mode (ZeroMQ servers) or offline mode take.
constexpr const char* kNotWithOpenAi[] = {
    "--connect",
    "--connect-cancel",
    "--connect-kv-events",
    "--connect-kv-replay",
    "--fleet",
    "--connect-prefill",
    "--connect-decode",
    "--connect-decode-cancel",
    "--prefill-fleet",
    "--decode-fleet",
    "--router",
    "--router-seed",
    "--router-block-size",
    "--router-overlap-weight",
    "--router-temperature",
    "--decode-router",
    "--curve-server-key-file",
    "--curve-secret-key-file",
    "--num-workers",
    "--num-prefill-workers",
    "--num-decode-workers",
    "--prefill-config",
    "--decode-config",
    "--stats-interval-ms",
    "--worker-health",
    "--no-worker-health",
    "--worker-ack-timeout-ms",
    "--worker-down-after-ms",
    "--worker-stall-timeout-ms",
    "--migration-limit",
};

/// The key of --api-key-file: its first line without surrounding whitespace.
Result<std::string> readApiKey(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error{ErrorCode::IoError, "--api-key-file " + path + ": cannot be read"};
  std::string line;
  std::getline(in, line);
  const std::size_t first = line.find_first_not_of(" \t\r\n");
  const std::size_t last = line.find_last_not_of(" \t\r\n");
  if (first == std::string::npos) {
    return invalidArgument("--api-key-file " + path + ": the first line holds no key");
  }
  return line.substr(first, last - first + 1);
}

}  // namespace

bool wantsOpenAi(const ReplayFlags& f, const GivenFlags& given) {
  return given.contains("--openai-url") || !f.openai_url.empty();
}

Status planOpenAi(const ReplayFlags& f, const GivenFlags& given, ReplayPlan& plan) {
  for (const char* flag : kNotWithOpenAi) {
    if (given.contains(flag)) {
      return invalidArgument(std::string(flag) +
                             " does not apply to --openai-url (the HTTP server routes and "
                             "configures its own workers)");
    }
  }
  if (given.contains("--mode") && f.mode == "offline") {
    return invalidArgument("--openai-url is for --mode live (got --mode offline)");
  }
  if (const auto flag = firstGivenServeFlag(f.serve, /*with_model=*/false)) {
    return invalidArgument(*flag +
                           " has no effect with --openai-url: the server runs with its own "
                           "configuration (--model names the model the requests ask for)");
  }
  if (const auto url = replay::parseOpenAiUrl(f.openai_url); !url) return url.error();
  replay::OpenAiReplayOptions options{
      .url = f.openai_url,
      .model = f.serve.model,
      .chat = f.chat,
      .stream = !f.no_stream,
      .connections = f.openai_connections,
      .request_timeout_ms = f.request_timeout_s * 1000.0,
      .connect_timeout_ms = f.connect_timeout_s * 1000.0,
  };
  if (!f.api_key_file.empty()) {
    MOCKER_TRY(options.api_key, readApiKey(f.api_key_file));
  }
  if (!f.tokenizer_file.empty()) {
    auto tokenizer = gateway::HfTokenizer::load(f.tokenizer_file);
    if (!tokenizer) return invalidArgument("--tokenizer: " + tokenizer.error().message);
    options.tokenizer = std::shared_ptr<const gateway::Tokenizer>(std::move(*tokenizer));
    options.tokenizer_name = "tokenizer.json " + f.tokenizer_file;
  }
  if (plan.closed_loop) options.concurrency = f.concurrency;
  plan.mode = ReplayMode::Live;
  plan.num_workers = 1;
  plan.servers = {f.openai_url};
  plan.options = std::move(options);
  return {};
}

Status refuseOpenAiFlags(const GivenFlags& given) {
  for (const char* flag :
       {"--chat", "--no-stream", "--openai-connections", "--api-key-file", "--tokenizer"}) {
    if (given.contains(flag)) return invalidArgument(std::string(flag) + " is for --openai-url");
  }
  return {};
}

}  // namespace mocker::tools
