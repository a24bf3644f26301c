// `mocker gateway`: the OpenAI HTTP API in front of running `mocker serve` workers
// (gateway/README.md). Prints `http://HOST:PORT` on stdout once listening; serves until SIGINT /
// SIGTERM. Exit codes: 0 stopped by a signal, 1 error (bind, keys, fleet file), 2 usage error.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace mocker::tools {

struct GatewayCommand {
  CLI::App* cmd = nullptr;
  std::vector<std::string> connect;
  std::vector<std::string> connect_cancel;
  std::string fleet_file;
  std::string prefill_fleet;
  std::string decode_fleet;
  std::string decode_router = "round_robin";
  std::string host = "127.0.0.1";
  std::uint16_t port = 8080;
  std::string model;
  std::string tokenizer_file;
  std::vector<std::string> lora_modules;
  bool allow_runtime_lora_updating = false;
  std::string router = "round_robin";
  double router_overlap_weight = 1.0;
  double router_temperature = 0.0;
  std::uint32_t max_model_len = 8192;
  std::uint32_t default_max_tokens = 16;
  std::uint32_t max_n = 16;
  double output_len_mean = 128.0;
  double output_len_stddev = 64.0;
  std::uint64_t seed = 0;
  std::size_t max_connections = 4096;
  std::size_t max_inflight = 10'000;
  std::size_t max_body_bytes = 4 << 20;
  std::size_t max_header_bytes = 16 << 10;
  std::size_t max_stream_buffer_bytes = 1 << 20;
  double read_timeout_s = 30.0;
  double request_timeout_s = 600.0;
  std::uint32_t stats_interval_ms = 1000;
  double worker_timeout_s = 5.0;
  std::string api_key_file;
  std::string curve_server_key_file;
  std::string curve_secret_key_file;
};

/// Registers the `gateway` subcommand on `app`. `command` must outlive parsing.
void addGatewayCommand(CLI::App& app, GatewayCommand& command);

int runGatewayCommand(const GatewayCommand& command, std::ostream& out, std::ostream& err);

}  // namespace mocker::tools
