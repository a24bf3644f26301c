// The gateway's HTTP/1.1 server side on Boost.Beast/Asio (gateway/README.md "HTTP"): one
// event-driven I/O thread runs an acceptor and every connection (no thread per connection).
// Beast parses each request with bounded headers and body; the handler answers it through the
// HttpConnection interface, either at once (reply) or as a chunked SSE stream (beginStream,
// streamWrite, endStream). Keep-alive and pipelined requests are served in order.
//
// Limits: connections beyond max_connections get a 503 and are closed; a body over
// max_body_bytes gets 413, headers over max_header_bytes 431, a malformed request 400; a request
// not read completely within read_timeout closes the connection (slowloris). While a response is
// pending the connection is watched: the peer closing it, or a stream whose unsent bytes exceed
// max_stream_buffer_bytes (a slow reader), closes it and calls the on-close callback once, so
// the handler can cancel the work behind it.
//
// Thread-safety: everything runs on the io_context's single thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace mocker::gateway {

struct HttpLimits {
  std::size_t max_connections = 4096;
  std::size_t max_body_bytes = 4 << 20;
  std::size_t max_header_bytes = 16 << 10;
  std::chrono::milliseconds read_timeout{30'000};
  std::size_t max_stream_buffer_bytes = 1 << 20;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  ///< "GET", "POST", ...
  std::string target;  ///< path (query string removed)
  std::string body;
  std::string request_id;     ///< X-Request-Id, "" when absent
  std::string authorization;  ///< Authorization, "" when absent
};

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers;  ///< extra headers (X-Request-Id, Allow, ...)
};

/// One connection as a request handler sees it, between a request and the end of its response.
class HttpConnection {
 public:
  virtual ~HttpConnection() = default;
  /// Sends a complete response. The connection then reads its next request.
  virtual void reply(HttpReply&& reply) = 0;
  /// Starts a 200 `text/event-stream` response with chunked transfer encoding.
  virtual void beginStream(const HttpHeaders& headers) = 0;
  /// Queues stream bytes; false when the connection is gone or the reader is too slow (the
  /// connection is then closed and on-close fires).
  virtual bool streamWrite(std::string_view data) = 0;
  /// Ends the stream (the last chunk). The connection then reads its next request.
  virtual void endStream() = 0;
  /// Called once if the connection closes before the response ended.
  virtual void setOnClose(std::function<void()> on_close) = 0;
  virtual bool isOpen() const = 0;
};

using HttpHandler = std::function<void(const std::shared_ptr<HttpConnection>&, HttpRequest&&)>;
/// Answers to requests refused before they reach the handler (status, message) — for metrics
/// and the error body.
using HttpRefusalHook = std::function<HttpReply(int status, const std::string& message)>;

class HttpListener {
 public:
  /// Binds `host:port` (0 = ephemeral) and starts accepting on `io`.
  static Result<std::unique_ptr<HttpListener>> listen(boost::asio::io_context& io,
                                                      const std::string& host, std::uint16_t port,
                                                      HttpLimits limits, HttpHandler handler,
                                                      HttpRefusalHook refusal);
  virtual ~HttpListener() = default;
  virtual std::uint16_t port() const = 0;
  virtual std::size_t numConnections() const = 0;
  /// Stops accepting (open connections run on).
  virtual void close() = 0;
};

}  // namespace mocker::gateway
