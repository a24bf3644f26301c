// Exchange: one OpenAI generation request in flight — its HTTP connection, its choices' worker
// requests (one wire id per choice) and its ResponseShaper. It submits the choices, feeds worker
// outputs to the shaper and the shaped bytes to the connection, cancels a choice that hit a stop
// string, and cancels every open choice when the client goes away (a disconnect or a reader too
// slow for the stream buffer).
//
// Owned by the gateway's in-flight table until it reports finished(); the routing table and
// the connection's on-close callback hold weak references. I/O thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gateway/http_connection.h"
#include "gateway/response_shaper.h"
#include "protocol/client.h"

namespace mocker::gateway {

class Exchange;

/// What an Exchange needs from the gateway.
class ExchangeHost {
 public:
  virtual void submit(std::size_t worker, protocol::SubmitRequest&& request) = 0;
  virtual void cancel(std::size_t worker, const std::string& id) = 0;
  /// The wire id no longer routes to the exchange.
  virtual void forget(const std::string& id) = 0;
  /// The response ended with HTTP `status` (499: the client went away first).
  virtual void finished(Exchange& exchange, int status) = 0;
  virtual void firstToken(const Exchange& exchange, double seconds) = 0;
  virtual void interToken(double seconds) = 0;

 protected:
  ~ExchangeHost() = default;
};

class Exchange final : public std::enable_shared_from_this<Exchange> {
 public:
  using Clock = std::chrono::steady_clock;
  struct Timing {
    Clock::time_point arrival = Clock::now();
    std::optional<Clock::time_point> last_output;  ///< the latest message with tokens
  };

  /// `lora`: the LoRA adapter every choice's worker request names (absent: the base model).
  Exchange(ExchangeHost& host, std::shared_ptr<HttpConnection> connection, std::string endpoint,
           HttpHeaders headers, ResponseShaper&& shaper,
           std::optional<std::string> lora = std::nullopt);
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  /// Before start(): choice `shaper().numChoices()`-th in order goes to `worker` as `wire_id`
  /// (to its DP rank `dp_rank` when given: the kv router's pick).
  void addChoice(std::size_t worker, std::string wire_id,
                 std::optional<std::uint32_t> dp_rank = std::nullopt);
  /// Submits every choice and then, when streaming, opens the stream.
  void start();
  /// Disaggregated: choice `choice`'s prefill worker handed it off; the same request with the
  /// ticket goes to `decode_worker`, which then holds it (cancels go there).
  void handOff(std::size_t choice, std::size_t decode_worker, protocol::HandoffTicket ticket);
  /// The worker that holds choice `choice` now.
  std::size_t choiceWorker(std::size_t choice) const { return choices_.at(choice).worker; }

  void onOutput(std::size_t choice, const protocol::RequestOutput& output);
  /// The worker refused or failed choice `choice`: the response fails with `status` (a stream
  /// gets an error frame with that code). `cancel`: also cancel it on its worker (a worker that
  /// stopped answering may still hold it).
  void onFailure(std::size_t choice, int status, const std::string& message, bool cancel = false);
  /// The request ran out of time: every open choice is cancelled on its worker and fails
  /// (504: the worker did not finish in time, e.g. it is gone).
  void expire(const std::string& message);

  /// Choice `c` may still take outputs (the response goes on and the choice did not end).
  bool choiceOpen(std::size_t c) const { return !completed_ && choices_.at(c).open; }
  const std::string& endpoint() const { return endpoint_; }
  /// The LoRA adapter its choices name (absent: the base model).
  const std::optional<std::string>& lora() const { return lora_; }
  const ResponseShaper& shaper() const { return shaper_; }
  const Timing& timing() const { return timing_; }
  bool disconnected() const { return disconnected_; }

 private:
  struct Choice {
    std::size_t worker = 0;
    std::string wire_id;
    std::optional<std::uint32_t> dp_rank;  // hop 1 only: a decode worker picks its own
    bool open = true;                      // the worker request may still send something
  };
  protocol::SubmitRequest submitRequest(std::size_t choice) const;
  void close(std::size_t choice, bool cancel);
  void send(const std::string& bytes);
  void completeIfDone();
  void onDisconnect();

  ExchangeHost& host_;
  std::shared_ptr<HttpConnection> connection_;
  std::string endpoint_;
  HttpHeaders headers_;
  ResponseShaper shaper_;
  std::optional<std::string> lora_;
  std::vector<Choice> choices_;
  Timing timing_;
  bool stream_ = false;
  int failure_status_ = 0;
  bool disconnected_ = false;
  bool completed_ = false;
};

}  // namespace mocker::gateway
