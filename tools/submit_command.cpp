#include "tools/submit_command.h"

#include <unistd.h>
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <variant>

#include "net/client.h"
#include "net/security.h"
#include "tools/cli_options.h"
#include "tools/peer_probe.h"
#include "tools/replay/live_replay.h"
#include "tools/submit_stream.h"

namespace mocker::tools {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> g_interrupts{0};

extern "C" void onInterrupt(int /*signal*/) { g_interrupts.fetch_add(1); }

/// Installs the SIGINT handler for the lifetime of the object and restores the previous one.
class InterruptGuard {
 public:
  InterruptGuard() {
    g_interrupts.store(0);
    struct sigaction action {};
    action.sa_handler = onInterrupt;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_);
  }
  ~InterruptGuard() { sigaction(SIGINT, &previous_, nullptr); }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  struct sigaction previous_ {};
};

constexpr auto kPollInterval = std::chrono::milliseconds(50);
/// How long a peer has to accept the connection, and to answer the submit, before we say so.
constexpr auto kAnswerWait = std::chrono::milliseconds(1000);

/// A client of the service at `submit` / `cancel` (CURVE keys from `command`), after checking
/// that something accepts connections there; nullptr once the problem is said on `err`.
std::unique_ptr<net::Client> openClient(const SubmitCommand& command, const std::string& submit,
                                        const std::string& cancel, std::ostream& err) {
  net::ClientOptions options{.submit_endpoint = submit, .cancel_endpoint = cancel};
  if (!command.curve_secret_key_file.empty()) {
    auto keys =
        net::loadCurveClientKeys(command.curve_server_key_file, command.curve_secret_key_file);
    if (!keys) {
      err << "mocker submit: " << keys.error().message << "\n";
      return nullptr;
    }
    options.curve_server_key = keys->server_public_key;
    options.curve_secret_key = keys->secret_key;
    options.curve_public_key = keys->public_key;
  }
  const Result<bool> listening = somethingAccepts(submit, kAnswerWait);
  if (!listening) {
    err << "mocker submit: " << listening.error().message << "\n";
    return nullptr;
  }
  if (!*listening) {
    err << "mocker submit: nothing answers at " << submit << " (no connection within "
        << kAnswerWait.count()
        << " ms): is `mocker serve` running there? Start one with `mocker serve "
           "--submit-endpoint "
        << submit << "`, or point --submit-endpoint at the `submit` line a running one printed\n";
    return nullptr;
  }
  auto client = net::Client::connect(std::move(options));
  if (!client) {
    err << "mocker submit: " << client.error().message << "\n";
    return nullptr;
  }
  return std::move(*client);
}

}  // namespace

void addSubmitCommand(CLI::App& app, SubmitCommand& command) {
  command.cmd = app.add_subcommand(
      "submit", "Send one request to a running `mocker serve` and print its output as it streams");
  CLI::App& c = *command.cmd;
  auto* tokens =
      c.add_option("--tokens", command.tokens, "prompt token ids, e.g. 1,2,3")->delimiter(',');
  auto* prompt_len =
      c.add_option("--prompt-len", command.prompt_len, "synthetic prompt of N tokens (1, 2, …, N)")
          ->check(between(1, 1u << 20));
  tokens->excludes(prompt_len);
  prompt_len->excludes(tokens);
  c.add_option("--max-tokens", command.max_tokens, "output tokens to generate")
      ->capture_default_str();
  c.add_option("--output-tokens", command.output_tokens,
               "planned output token ids (its length wins over --max-tokens)")
      ->delimiter(',');
  c.add_option("--id", command.id, "request id (default: submit-<pid>)");
  c.add_option("--dp-rank", command.dp_rank, "data-parallel rank (default: the service chooses)");
  c.add_option("--lora", command.lora,
               "LoRA adapter name (1..256 bytes; the service needs --max-loras > 0; default: the "
               "base model)");
  c.add_option("--submit-endpoint", command.submit_endpoint, "the service's submit ROUTER")
      ->capture_default_str();
  c.add_option("--cancel-endpoint", command.cancel_endpoint, "the service's cancel ROUTER")
      ->capture_default_str();
  auto* server_key =
      c.add_option("--curve-server-key-file", command.curve_server_key_file,
                   "CURVE: the service's public key file (NAME.pub of its key pair)");
  auto* secret_key = c.add_option("--curve-secret-key-file", command.curve_secret_key_file,
                                  "CURVE: this client's secret key file (NAME.key of `mocker "
                                  "keygen`; its public key must be on the service's allow-list)");
  server_key->needs(secret_key);
  secret_key->needs(server_key);
  auto* decode = c.add_option("--decode-endpoint", command.decode_endpoint,
                              "prefill worker: after its handoff, submit the ticket to the decode "
                              "worker at this submit endpoint and stream its tokens (default: "
                              "print the ticket and exit 0)");
  c.add_option("--decode-cancel-endpoint", command.decode_cancel_endpoint,
               "the decode worker's cancel ROUTER (default: the --decode-endpoint port + 1)")
      ->needs(decode);
  c.add_option("--timeout-s", command.timeout_s,
               "give up when the service sends nothing for this long (seconds)")
      ->check(greaterThan(0))
      ->capture_default_str();
  c.footer(
      "Prints `<index> <token>…` per output message, then `finish <reason>`; on stderr, the "
      "tokens, time, TTFT and prefix-cache hits. Ctrl-C cancels the request and waits for its "
      "end. If nothing accepts a connection at --submit-endpoint within a second, says so and "
      "exits. To a prefill worker: prints `handoff source … ` (its handoff ticket) and exits 0, or "
      "with --decode-endpoint submits the ticket there and streams the decode worker's tokens."
      "\nExit codes: 0 finished (length) or handed off, 1 error, rejected, nothing listening or "
      "timeout, "
      "2 usage error, 130 cancelled by Ctrl-C.");
}

int runSubmitCommand(const SubmitCommand& command, std::ostream& out, std::ostream& err) {
  if (command.tokens.empty() && command.prompt_len == 0) {
    err << "mocker submit: give the prompt with --tokens or --prompt-len\n";
    return 2;
  }
  protocol::SubmitRequest request;
  request.id = command.id.empty() ? "submit-" + std::to_string(getpid()) : command.id;
  request.prompt = command.tokens;
  if (request.prompt.empty()) {
    request.prompt.resize(command.prompt_len);
    std::iota(request.prompt.begin(), request.prompt.end(), 1u);
  }
  request.max_tokens = command.max_tokens;
  if (!command.output_tokens.empty()) request.output_tokens = command.output_tokens;
  request.dp_rank = command.dp_rank;
  request.lora = command.lora;

  std::string decode_cancel = command.decode_cancel_endpoint;
  if (!command.decode_endpoint.empty() && decode_cancel.empty()) {
    Result<std::string> derived = replay::defaultCancelEndpoint(command.decode_endpoint);
    if (!derived) {
      err << "mocker submit: --decode-endpoint: " << derived.error().message << "\n";
      return 2;
    }
    decode_cancel = std::move(*derived);
  }
  auto client = openClient(command, command.submit_endpoint, command.cancel_endpoint, err);
  if (!client) return kSubmitExitFailed;
  net::Client* active = client.get();  // the decode worker's after a handoff
  std::unique_ptr<net::Client> decode_client;
  InterruptGuard guard;
  if (auto sent = active->submit(request); !sent) {
    err << "mocker submit: " << sent.error().message << "\n";
    return kSubmitExitFailed;
  }
  const auto timeout =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(command.timeout_s));
  const auto sent_at = Clock::now();
  auto last_heard = sent_at;
  bool cancel_sent = false;
  bool heard_anything = false;
  SubmitStream stream(request.id, request.prompt.size(), !command.decode_endpoint.empty(), out,
                      err);
  while (true) {
    const int interrupts = g_interrupts.load();
    if (interrupts >= 2) {
      err << "mocker submit: interrupted again, not waiting for the end of the stream\n";
      return kSubmitExitInterrupted;
    }
    if (interrupts == 1 && !cancel_sent) {
      if (auto sent = active->cancel(request.id); !sent) {
        err << "mocker submit: " << sent.error().message << "\n";
        return kSubmitExitFailed;
      }
      cancel_sent = true;
      last_heard = Clock::now();
      err << "mocker submit: cancelling '" << request.id << "'\n";
    }
    if (!heard_anything && Clock::now() - sent_at > kAnswerWait) {
      heard_anything = true;  // say it once
      err << "mocker submit: connected to " << command.submit_endpoint
          << " but no answer yet (a `mocker serve` in its start-up delay answers once ready; "
             "anything else never will); waiting up to "
          << command.timeout_s << " s\n";
    }
    if (Clock::now() - last_heard > timeout) {
      err << "mocker submit: timed out: nothing from the service for " << command.timeout_s
          << " s\n";
      return kSubmitExitFailed;
    }
    auto received = active->receive(kPollInterval);
    if (!received) {
      err << "mocker submit: " << received.error().message << "\n";
      return kSubmitExitFailed;
    }
    if (!*received) continue;
    last_heard = Clock::now();
    heard_anything = true;
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - sent_at).count();
    const SubmitStream::Step step = stream.onMessage(**received, ms, cancel_sent);
    if (step.exit) return *step.exit;
    if (!step.hop) continue;
    // The prefill worker handed off: the same request, with the ticket, to the decode worker.
    decode_client = openClient(command, command.decode_endpoint, decode_cancel, err);
    if (!decode_client) return kSubmitExitFailed;
    active = decode_client.get();
    request.handoff = *step.hop;
    request.dp_rank.reset();  // the decode worker's own choice
    if (auto sent = active->submit(request); !sent) {
      err << "mocker submit: " << sent.error().message << "\n";
      return kSubmitExitFailed;
    }
  }
}

}  // namespace mocker::tools
