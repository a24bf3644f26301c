// A streaming HTTP/1.1 client on Boost.Beast/Asio for the OpenAI replay
// (tools/replay/openai_replay.h): many concurrent requests from one thread, one TCP connection
// each at a time, the response body handed over as it arrives (server-sent events), never
// buffered whole. Keep-alive: a connection whose response ended completely (and that the server
// keeps open) goes to an idle pool (at most 256) and carries a later request; when a reused
// connection fails before any byte of its response (the server closed it while idle), the
// request is sent again once on a new connection. `preconnect` opens connections ahead of the
// requests (`mocker replay --openai-connections`).
//
//   HttpClient client(io, endpoint);                   // resolved once, at start-up
//   auto call = client.post(target, body, headers, {.on_status = ..., .on_body = ...,
//                                                   .on_end = ...});
//   io.run();                                          // callbacks run inside
//   call->abort();                                     // closes it; on_end("aborted") follows
//
// Callbacks run on the io_context's thread: on_status once when the response headers arrive,
// on_body for each piece of body (chunked or not, de-chunked), on_end exactly once — with
// nullopt after a complete response, or the error (connect refused, reset, malformed response,
// headers over 64 KiB, a chunk header or trailer over the 80 KiB read buffer, aborted). Not
// thread-safe: one io_context thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace mocker::replay {

struct HttpCallbacks {
  std::function<void(unsigned status)> on_status;
  std::function<void(std::string_view bytes)> on_body;
  std::function<void(std::optional<std::string> error)> on_end;
};

/// One request in flight.
class HttpCall {
 public:
  virtual ~HttpCall() = default;
  /// Closes the connection (the server sees the client go; it is never reused); on_end("aborted")
  /// follows unless the call had already ended.
  virtual void abort() = 0;
};

class HttpClient {
 public:
  /// Resolves host:port (blocking, once). Errors: a host that does not resolve.
  static Result<std::unique_ptr<HttpClient>> create(boost::asio::io_context& io,
                                                    const std::string& host,
                                                    const std::string& port);
  virtual ~HttpClient() = default;

  /// Starts `method` `target` with `body` (Content-Type application/json when non-empty) and
  /// the extra `headers`.
  virtual std::shared_ptr<HttpCall> request(
      std::string_view method, std::string_view target, std::string body,
      const std::vector<std::pair<std::string, std::string>>& headers, HttpCallbacks callbacks) = 0;

  /// Opens `count` connections and keeps them idle for later requests (at most the idle pool's
  /// 256), so those requests do not wait for a TCP handshake; `on_done(opened)` once every one
  /// has connected or failed (a failed one is only not kept).
  virtual void preconnect(std::size_t count, std::function<void(std::size_t opened)> on_done) = 0;
};

}  // namespace mocker::replay
