// `mocker submit`: sends one request to a running `mocker serve` (net/client.h) and prints
// its output as it streams — one line per output message, `<index> <token> <token> …`, then
// `finish <reason>` — so a service can be poked by hand or from a shell script.
//
// To a prefill worker (engine.worker_type = prefill) the request ends in a `handoff`: the ticket is
// printed (`handoff source … source_rank … prompt_len …`) and the command exits 0, or, with
// --decode-endpoint, it is submitted to that decode worker, whose tokens stream as above.
//
// Ctrl-C (SIGINT) sends a cancel on the cancel socket and waits for the terminal entry; a second
// Ctrl-C gives up at once. Exit codes: 0 finished (`length`) or handed off, 1 error / rejected /
// timeout / any other finish, 2 (or CLI11's code) usage error, 130 cancelled by Ctrl-C.
//
// Call from the main thread (installs a SIGINT handler for the duration of the run).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace mocker::tools {

struct SubmitCommand {
  CLI::App* cmd = nullptr;
  std::vector<std::uint32_t> tokens;  ///< --tokens 1,2,3
  std::uint32_t prompt_len = 0;       ///< --prompt-len N: synthetic prompt 1..N
  std::uint32_t max_tokens = 16;
  std::vector<std::uint32_t> output_tokens;  ///< --output-tokens: planned output (optional)
  std::string id;                            ///< default "submit-<pid>"
  std::optional<std::uint32_t> dp_rank;
  std::optional<std::string> lora;  ///< --lora: the LoRA adapter name
  std::string submit_endpoint = "tcp://127.0.0.1:5555";
  std::string cancel_endpoint = "tcp://127.0.0.1:5556";
  /// Prefill worker: the decode worker to submit the handoff ticket to (empty: print the ticket
  /// and exit 0) and its cancel endpoint (empty: the submit port + 1).
  std::string decode_endpoint;
  std::string decode_cancel_endpoint;
  double timeout_s = 10.0;  ///< longest wait for the next message from the service
  /// CURVE: the service's public key file and this client's secret key file (`mocker keygen`;
  /// the public key is derived from the secret one). Both or neither.
  std::string curve_server_key_file;
  std::string curve_secret_key_file;
};

/// Registers the `submit` subcommand on `app`. `command` must outlive parsing.
void addSubmitCommand(CLI::App& app, SubmitCommand& command);

/// Sends the request and streams its output to `out` (diagnostics to `err`). Exit code as above.
int runSubmitCommand(const SubmitCommand& command, std::ostream& out, std::ostream& err);

}  // namespace mocker::tools
