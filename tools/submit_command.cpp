#include "tools/submit_command.h"

#include <unistd.h>
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <numeric>
#include <variant>

#include "service/client.h"
#include "service/security.h"

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
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitInterrupted = 130;

}  // namespace

void addSubmitCommand(CLI::App& app, SubmitCommand& command) {
  command.cmd = app.add_subcommand(
      "submit", "Send one request to a running `mocker serve` and print its output as it streams");
  CLI::App& c = *command.cmd;
  auto* tokens =
      c.add_option("--tokens", command.tokens, "prompt token ids, e.g. 1,2,3")->delimiter(',');
  auto* prompt_len =
      c.add_option("--prompt-len", command.prompt_len, "synthetic prompt of N tokens (1, 2, …, N)")
          ->check(CLI::Range(1u, 1u << 20));
  tokens->excludes(prompt_len);
  prompt_len->excludes(tokens);
  c.add_option("--max-tokens", command.max_tokens, "output tokens to generate")
      ->capture_default_str();
  c.add_option("--output-tokens", command.output_tokens,
               "planned output token ids (its length wins over --max-tokens)")
      ->delimiter(',');
  c.add_option("--id", command.id, "request id (default: submit-<pid>)");
  c.add_option("--dp-rank", command.dp_rank, "data-parallel rank (default: the service chooses)");
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
  c.add_option("--timeout-s", command.timeout_s,
               "give up when the service sends nothing for this long (seconds)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c.footer(
      "Prints `<index> <token>…` per output message, then `finish <reason>`. Ctrl-C cancels the "
      "request and waits for its end.\nExit codes: 0 finished (length), 1 error, rejected or "
      "timeout, 130 cancelled by Ctrl-C.");
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

  service::ClientOptions options{.submit_endpoint = command.submit_endpoint,
                                 .cancel_endpoint = command.cancel_endpoint};
  if (!command.curve_secret_key_file.empty()) {
    auto server_key =
        service::readKeyFile(command.curve_server_key_file, "--curve-server-key-file");
    auto secret_key =
        service::readKeyFile(command.curve_secret_key_file, "--curve-secret-key-file");
    for (const auto* key : {&server_key, &secret_key}) {
      if (!*key) {
        err << "mocker submit: " << key->error().message << "\n";
        return kExitFailed;
      }
    }
    options.curve_server_key = *server_key;
    options.curve_secret_key = *secret_key;
    options.curve_public_key = service::curvePublicKey(*secret_key);
  }
  auto client = service::Client::connect(std::move(options));
  if (!client) {
    err << "mocker submit: " << client.error().message << "\n";
    return kExitFailed;
  }
  InterruptGuard guard;
  if (auto sent = (*client)->submit(request); !sent) {
    err << "mocker submit: " << sent.error().message << "\n";
    return kExitFailed;
  }
  const auto timeout =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(command.timeout_s));
  auto last_heard = Clock::now();
  bool cancel_sent = false;
  while (true) {
    const int interrupts = g_interrupts.load();
    if (interrupts >= 2) {
      err << "mocker submit: interrupted again, not waiting for the end of the stream\n";
      return kExitInterrupted;
    }
    if (interrupts == 1 && !cancel_sent) {
      if (auto sent = (*client)->cancel(request.id); !sent) {
        err << "mocker submit: " << sent.error().message << "\n";
        return kExitFailed;
      }
      cancel_sent = true;
      last_heard = Clock::now();
      err << "mocker submit: cancelling '" << request.id << "'\n";
    }
    if (Clock::now() - last_heard > timeout) {
      err << "mocker submit: timed out: nothing from the service for " << command.timeout_s
          << " s\n";
      return kExitFailed;
    }
    auto received = (*client)->receive(kPollInterval);
    if (!received) {
      err << "mocker submit: " << received.error().message << "\n";
      return kExitFailed;
    }
    if (!*received) continue;
    last_heard = Clock::now();
    const protocol::ClientMessage& message = **received;
    if (const auto* ack = std::get_if<protocol::SubmitAck>(&message)) {
      if (ack->id == request.id) {
        err << "mocker submit: '" << request.id << "' accepted on dp_rank " << ack->dp_rank << "\n";
      }
    } else if (const auto* reject = std::get_if<protocol::SubmitReject>(&message)) {
      if (reject->id == request.id) {
        err << "mocker submit: rejected: " << reject->reason << "\n";
        return kExitFailed;
      }
    } else if (const auto* error = std::get_if<protocol::ErrorReply>(&message)) {
      err << "mocker submit: error from the service: " << errorCodeName(error->code) << ": "
          << error->message << "\n";
      return kExitFailed;
    } else if (const auto* reply = std::get_if<protocol::CancelReply>(&message)) {
      if (reply->result == protocol::CancelResult::NotFound) {
        err << "mocker submit: cancel: request not found (already finishing)\n";
      }
    } else if (const auto* batch = std::get_if<protocol::OutputBatch>(&message)) {
      for (const protocol::RequestOutput& o : batch->outputs) {
        if (o.id != request.id) continue;
        if (!o.tokens.empty()) {
          out << o.index;
          for (std::uint32_t t : o.tokens) out << ' ' << t;
          out << '\n';
        }
        if (!o.finish) continue;
        out << "finish " << protocol::toString(*o.finish);
        if (!o.reason.empty()) out << " (" << o.reason << ")";
        out << '\n';
        out.flush();
        if (*o.finish == protocol::FinishReason::Length) return kExitOk;
        if (*o.finish == protocol::FinishReason::Cancelled && cancel_sent) {
          return kExitInterrupted;
        }
        return kExitFailed;
      }
      out.flush();
    }
  }
}

}  // namespace mocker::tools
