#include "gateway/http_connection.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <optional>

namespace mocker::gateway {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

/// What every connection of one listener shares (outlives the listener while sessions run).
struct Shared {
  HttpLimits limits;
  HttpHandler handler;
  HttpRefusalHook refusal;
  std::size_t connections = 0;
};

/// Appends a response's status line and headers to `out` (no temporaries: once per response).
void appendHead(std::string& out, int status, const std::string& content_type,
                std::optional<std::size_t> length, bool keep_alive, const HttpHeaders& headers) {
  char number[24];
  const auto append_number = [&](std::size_t v) {
    out.append(number, static_cast<std::size_t>(
                           std::to_chars(number, number + sizeof number, v).ptr - number));
  };
  out += "HTTP/1.1 ";
  append_number(static_cast<std::size_t>(status));
  out += ' ';
  out += http::obsolete_reason(static_cast<http::status>(status));
  out += "\r\nServer: mocker-gateway\r\nContent-Type: ";
  out += content_type;
  out += "\r\n";
  if (length) {
    out += "Content-Length: ";
    append_number(*length);
    out += "\r\n";
  } else {
    out += "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n";
  }
  out += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const auto& [name, value] : headers) {
    out += name;
    out += ": ";
    out += value;
    out += "\r\n";
  }
  out += "\r\n";
}

class Session final : public HttpConnection, public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, std::shared_ptr<Shared> shared)
      : stream_(std::move(socket)), shared_(std::move(shared)) {
    ++shared_->connections;
  }
  ~Session() override {
    if (!counted_out_) --shared_->connections;
  }

  void start() { readRequest(); }

  /// Answers `status` at once and closes (before any request was read).
  void refuse(int status, const std::string& message) {
    response_open_ = true;
    keep_alive_ = false;
    reply(shared_->refusal(status, message));
  }

  void reply(HttpReply&& r) override {
    if (closed_ || !response_open_) return;
    pending_.reserve(pending_.size() + r.body.size() + 256);
    appendHead(pending_, r.status, r.content_type, r.body.size(), keep_alive_, r.headers);
    write(r.body);
    endResponse();
  }

  void beginStream(const HttpHeaders& headers) override {
    if (closed_ || !response_open_) return;
    appendHead(pending_, 200, "text/event-stream; charset=utf-8", std::nullopt, keep_alive_,
               headers);
    flush();
  }

  bool streamWrite(std::string_view data) override {
    if (closed_ || !response_open_) return false;
    if (data.empty()) return true;
    char size[20];
    const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    pending_.append(size, static_cast<std::size_t>(n)).append(data).append("\r\n");
    if (pending_.size() > shared_->limits.max_stream_buffer_bytes) {
      closeNow();  // a slow reader: bounded, then cancelled
      return false;
    }
    flush();
    return true;
  }

  void endStream() override {
    if (closed_ || !response_open_) return;
    write("0\r\n\r\n");
    endResponse();
  }

  void setOnClose(std::function<void()> on_close) override { on_close_ = std::move(on_close); }
  bool isOpen() const override { return !closed_; }

 private:
  void readRequest() {
    parser_.emplace();
    parser_->body_limit(shared_->limits.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(shared_->limits.max_header_bytes));
    stream_.expires_after(shared_->limits.read_timeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->onHeader(ec); });
  }

  /// Headers read: a client that sent `Expect: 100-continue` waits for the interim response
  /// before its body (curl does for bodies over 1 KiB), so it gets one; then the body.
  void onHeader(beast::error_code ec) {
    if (ec || closed_ || parser_->is_done()) return onRead(ec);
    if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()),
                        [self = shared_from_this()](beast::error_code wec, std::size_t) {
                          if (wec) return self->onRead(wec);
                          self->readBody();
                        });
      return;
    }
    readBody();
  }

  void readBody() {
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->onRead(ec); });
  }

  void onRead(beast::error_code ec) {
    if (closed_) return;
    stream_.expires_never();
    if (ec == http::error::body_limit) {
      return refuse(
          413, "request body exceeds " + std::to_string(shared_->limits.max_body_bytes) + " bytes");
    }
    if (ec == http::error::header_limit) {
      return refuse(431, "request headers exceed " +
                             std::to_string(shared_->limits.max_header_bytes) + " bytes");
    }
    if (ec && ec.category() == http::make_error_code(http::error::bad_target).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message) {
      return refuse(400, "malformed HTTP request: " + ec.message());
    }
    if (ec) return closeNow();  // end of stream, timeout (slowloris), reset
    auto& req = parser_->get();
    HttpRequest request;
    request.method = std::string(req.method_string());
    const std::string_view target = req.target();
    request.target = std::string(target.substr(0, target.find('?')));
    request.body = std::move(req.body());
    if (auto it = req.find("X-Request-Id"); it != req.end()) {
      request.request_id = std::string(it->value().substr(0, 256));
    }
    if (auto it = req.find(http::field::authorization); it != req.end()) {
      request.authorization = std::string(it->value());
    }
    keep_alive_ = req.keep_alive();
    response_open_ = true;
    watch();
    shared_->handler(shared_from_this(), std::move(request));
  }

  /// While a response is pending: a read that notices the peer closing (pipelined bytes are
  /// kept for the next request).
  void watch() {
    if (watching_ || closed_) return;
    watching_ = true;
    stream_.async_read_some(
        buffer_.prepare(4096),
        [self = shared_from_this()](beast::error_code ec, std::size_t n) { self->onWatch(ec, n); });
  }

  void onWatch(beast::error_code ec, std::size_t n) {
    watching_ = false;
    if (closed_) return;
    if (ec) return closeNow();
    buffer_.commit(n);
    const auto& limits = shared_->limits;
    if (buffer_.size() > limits.max_header_bytes + limits.max_body_bytes) return closeNow();
    if (response_open_) return watch();
    maybeContinue();
  }

  void write(std::string_view bytes) {
    pending_.append(bytes);
    flush();
  }

  void flush() {
    if (writing_ || pending_.empty() || closed_) return;
    inflight_.swap(pending_);
    pending_.clear();
    writing_ = true;
    asio::async_write(
        stream_, asio::buffer(inflight_),
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->onWrite(ec); });
  }

  void onWrite(beast::error_code ec) {
    writing_ = false;
    inflight_.clear();
    if (closed_) return;
    if (ec) return closeNow();
    if (idle_timeout_due_) {
      idle_timeout_due_ = false;
      stream_.expires_after(shared_->limits.read_timeout);
    }
    if (!pending_.empty()) return flush();
    maybeContinue();
  }

  void endResponse() {
    response_open_ = false;
    on_close_ = nullptr;
    // Bounds the flush of what is queued and the idle wait for the next request. Beast forbids
    // changing a stream's timeout while both a read (the watch) and a write are pending, so with
    // a write in flight it is armed when that write completes.
    if (writing_) {
      idle_timeout_due_ = true;
    } else {
      stream_.expires_after(shared_->limits.read_timeout);
    }
    maybeContinue();
  }

  void maybeContinue() {
    if (writing_ || response_open_ || closed_ || !pending_.empty()) return;
    if (!keep_alive_) return lingeringClose();
    if (!watching_) readRequest();  // else onWatch continues once the watch read returns
  }

  /// Closes after a response with `Connection: close`: shut the sending side, then read and
  /// discard until the peer closes (bounded), so an unread request body does not turn the close
  /// into a reset that loses the response.
  void lingeringClose() {
    if (lingering_) return;
    lingering_ = true;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(std::chrono::seconds(2));
    drain();
  }

  void drain() {
    if (watching_) {  // the watch read's end comes back here through maybeContinue
      lingering_ = false;
      return;
    }
    stream_.async_read_some(asio::buffer(discard_),
                            [self = shared_from_this()](beast::error_code ec, std::size_t) {
                              if (ec) return self->closeNow();
                              self->drain();
                            });
  }

  void closeNow() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
    --shared_->connections;
    counted_out_ = true;
    if (response_open_ && on_close_) {
      auto callback = std::move(on_close_);
      on_close_ = nullptr;
      callback();
    }
  }

  beast::tcp_stream stream_;
  std::shared_ptr<Shared> shared_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string pending_;   // queued bytes
  std::string inflight_;  // bytes being written
  std::array<char, 4096> discard_{};
  std::function<void()> on_close_;
  bool response_open_ = false;
  bool keep_alive_ = true;
  bool watching_ = false;
  bool writing_ = false;
  bool idle_timeout_due_ = false;  ///< endResponse ran while a write was pending
  bool closed_ = false;
  bool lingering_ = false;
  bool counted_out_ = false;
};

class Listener final : public HttpListener {
 public:
  Listener(asio::io_context& io, std::shared_ptr<Shared> shared)
      : acceptor_(io), shared_(std::move(shared)) {}

  Status open(const std::string& host, std::uint16_t port) {
    beast::error_code ec;
    const auto address = asio::ip::make_address(host, ec);
    if (ec) return invalidArgument("HTTP host '" + host + "': " + ec.message());
    const tcp::endpoint endpoint(address, port);
    if (acceptor_.open(endpoint.protocol(), ec); !ec) {
      acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
      if (!ec) acceptor_.bind(endpoint, ec);
      if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    }
    if (ec) {
      return Error{ErrorCode::IoError,
                   "HTTP listen on " + host + ":" + std::to_string(port) + ": " + ec.message()};
    }
    accept();
    return {};
  }

  std::uint16_t port() const override { return acceptor_.local_endpoint().port(); }
  std::size_t numConnections() const override { return shared_->connections; }
  void close() override {
    beast::error_code ignored;
    acceptor_.close(ignored);
  }

 private:
  void accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (!ec) {
        socket.set_option(tcp::no_delay(true), ec);
        // The kernel's send buffer is bounded like the gateway's own: left to autotuning it grows
        // to tcp_wmem's maximum (4 MiB by default) per connection, which a reader that never
        // reads would fill before the per-connection bound below it is ever reached.
        const std::size_t sndbuf =
            std::min<std::size_t>(shared_->limits.max_stream_buffer_bytes, 1 << 30);
        socket.set_option(asio::socket_base::send_buffer_size(static_cast<int>(sndbuf)), ec);
        const bool full = shared_->connections >= shared_->limits.max_connections;
        auto session = std::make_shared<Session>(std::move(socket), shared_);
        if (full) {
          session->refuse(503, "too many connections (limit " +
                                   std::to_string(shared_->limits.max_connections) + ")");
        } else {
          session->start();
        }
      }
      accept();
    });
  }

  tcp::acceptor acceptor_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace

Result<std::unique_ptr<HttpListener>> HttpListener::listen(asio::io_context& io,
                                                           const std::string& host,
                                                           std::uint16_t port, HttpLimits limits,
                                                           HttpHandler handler,
                                                           HttpRefusalHook refusal) {
  auto shared = std::make_shared<Shared>(
      Shared{.limits = limits, .handler = std::move(handler), .refusal = std::move(refusal)});
  auto listener = std::make_unique<Listener>(io, std::move(shared));
  if (auto s = listener->open(host, port); !s) return s.error();
  return std::unique_ptr<HttpListener>(std::move(listener));
}

}  // namespace mocker::gateway
