#include "tools/replay/http_client.h"

#include <array>
#include <limits>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

namespace mocker::replay {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr std::size_t kReadChunk = 16 << 10;
constexpr std::size_t kMaxHeaderBytes = 64 << 10;
/// Bytes read but not yet parsed: the headers, then one chunk header or the trailer at most.
/// Beast bounds the headers (header_limit) but not a chunk header line or a trailer, so without
/// a limit here a server that never ends one makes the buffer grow with whatever it sends.
constexpr std::size_t kMaxBufferBytes = kMaxHeaderBytes + kReadChunk;
/// Idle keep-alive connections kept for reuse; more are closed.
constexpr std::size_t kMaxIdle = 256;
/// Read buffer reserved once per connection: a non-streamed answer (~600 bytes) then arrives in
/// one receive (Beast reads max(512, free capacity) bytes at a time).
constexpr std::size_t kFirstReadBytes = 4 << 10;

/// One TCP connection and its read buffers, carried from call to call while kept alive (the
/// buffers' memory with it: nothing allocated per call on a reused connection).
struct Connection {
  explicit Connection(asio::io_context& io) : stream(io) { buffer.reserve(kFirstReadBytes); }
  beast::tcp_stream stream;
  beast::flat_buffer buffer{kMaxBufferBytes};
  std::array<char, kReadChunk> chunk;  // not zeroed: written before read
};

/// The connections of one client: where to connect, and the idle keep-alive ones.
struct Connections {
  asio::io_context& io;
  tcp::resolver::results_type endpoints;
  std::vector<std::unique_ptr<Connection>> idle{};
};

class BeastCall final : public HttpCall, public std::enable_shared_from_this<BeastCall> {
 public:
  BeastCall(std::shared_ptr<Connections> connections, http::request<http::string_body> request,
            HttpCallbacks callbacks)
      : connections_(std::move(connections)),
        request_(std::move(request)),
        callbacks_(std::move(callbacks)) {}

  /// On an idle keep-alive connection when there is one, else on a new connection.
  void start() {
    newParser();
    if (!connections_->idle.empty()) {
      conn_ = std::move(connections_->idle.back());
      connections_->idle.pop_back();
      reused_ = true;
      return write();
    }
    connect();
  }

  void abort() override {
    if (ended_) return;
    closeStream();
    end("aborted");
  }

 private:
  void newParser() {
    parser_.emplace();
    parser_->header_limit(kMaxHeaderBytes);
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
  }

  void connect() {
    reused_ = false;
    conn_ = std::make_unique<Connection>(connections_->io);
    conn_->stream.async_connect(
        connections_->endpoints,
        [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
          if (self->ended_) return;
          if (ec) return self->end("connect: " + ec.message());
          self->write();
        });
  }

  /// A reused connection the server had closed while idle fails before any response: the request
  /// goes again on a new connection (the server did not take it).
  bool retryFresh() {
    if (!reused_ || ended_) return false;
    closeStream();
    newParser();
    connect();
    return true;
  }

  void write() {
    http::async_write(conn_->stream, request_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        if (self->ended_) return;
                        if (ec) {
                          if (self->retryFresh()) return;
                          return self->end("send: " + ec.message());
                        }
                        self->readHeader();
                      });
  }

  void readHeader() {
    http::async_read_header(conn_->stream, conn_->buffer, *parser_,
                            [self = shared_from_this()](beast::error_code ec, std::size_t) {
                              if (self->ended_) return;
                              if (ec) {
                                if (self->retryFresh()) return;
                                return self->end("response: " + ec.message());
                              }
                              self->reused_ = false;  // answered: no retry from here on
                              if (self->callbacks_.on_status) {
                                self->callbacks_.on_status(self->parser_->get().result_int());
                              }
                              self->readBody();
                            });
  }

  void readBody() {
    if (ended_) return;
    if (parser_->is_done()) return end(std::nullopt);
    parser_->get().body().data = conn_->chunk.data();
    parser_->get().body().size = conn_->chunk.size();
    // read_some: hand over what arrived (each SSE event at its receive time), not the whole body.
    http::async_read_some(
        conn_->stream, conn_->buffer, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) {
          if (ec == http::error::need_buffer) ec = {};
          if (self->ended_) return;
          const std::size_t got = self->conn_->chunk.size() - self->parser_->get().body().size;
          if (got > 0 && self->callbacks_.on_body) {
            self->callbacks_.on_body(std::string_view(self->conn_->chunk.data(), got));
          }
          if (ec == http::error::buffer_overflow) {
            return self->end(
                "response body: a chunk header or trailer over "
                "the " +
                std::to_string(kMaxBufferBytes >> 10) + " KiB read buffer");
          }
          if (ec) return self->end("response body: " + ec.message());
          self->readBody();
        });
  }

  void closeStream() {
    if (!conn_) return;
    beast::error_code ignored;
    conn_->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    conn_->stream.socket().close(ignored);
    conn_.reset();
  }

  void end(std::optional<std::string> error) {
    if (ended_) return;
    ended_ = true;
    // A complete response on a keep-alive connection with nothing read past it: reusable.
    if (!error && conn_ && parser_->is_done() && parser_->keep_alive() &&
        conn_->buffer.size() == 0 && connections_->idle.size() < kMaxIdle) {
      connections_->idle.push_back(std::move(conn_));
    }
    closeStream();
    if (callbacks_.on_end) callbacks_.on_end(std::move(error));
    callbacks_ = {};  // drop what the callbacks hold
  }

  std::shared_ptr<Connections> connections_;
  std::unique_ptr<Connection> conn_;  ///< the connection carrying the call, while it has one
  http::request<http::string_body> request_;
  HttpCallbacks callbacks_;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  bool reused_ = false;  ///< on a reused idle connection, no response byte read yet
  bool ended_ = false;
};

class BeastClient final : public HttpClient {
 public:
  BeastClient(asio::io_context& io, std::string host, tcp::resolver::results_type endpoints)
      : host_(std::move(host)),
        connections_(std::make_shared<Connections>(Connections{io, std::move(endpoints)})) {}

  std::shared_ptr<HttpCall> request(std::string_view method, std::string_view target,
                                    std::string body,
                                    const std::vector<std::pair<std::string, std::string>>& headers,
                                    HttpCallbacks callbacks) override {
    http::request<http::string_body> req;
    req.method_string(method);
    req.target(target);
    req.version(11);  // keep-alive by default
    req.set(http::field::host, host_);
    req.set(http::field::accept, "application/json, text/event-stream");
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    for (const auto& [name, value] : headers) req.set(name, value);
    req.body() = std::move(body);
    req.prepare_payload();
    auto call = std::make_shared<BeastCall>(connections_, std::move(req), std::move(callbacks));
    call->start();
    return call;
  }

  void preconnect(std::size_t count, std::function<void(std::size_t opened)> on_done) override {
    struct Pending {
      std::vector<std::unique_ptr<Connection>> opening;
      std::size_t left = 0;
      std::size_t opened = 0;
      std::function<void(std::size_t)> on_done;
    };
    auto pending = std::make_shared<Pending>();
    pending->left = count;
    pending->on_done = std::move(on_done);
    if (count == 0) return pending->on_done(0);
    for (std::size_t i = 0; i < count; ++i) {
      pending->opening.push_back(std::make_unique<Connection>(connections_->io));
    }
    for (std::size_t i = 0; i < count; ++i) {
      pending->opening[i]->stream.async_connect(
          connections_->endpoints,
          [pending, i, connections = connections_](beast::error_code ec, const tcp::endpoint&) {
            if (!ec && connections->idle.size() < kMaxIdle) {
              connections->idle.push_back(std::move(pending->opening[i]));
              ++pending->opened;
            }
            if (--pending->left == 0) pending->on_done(pending->opened);
          });
    }
  }

 private:
  std::string host_;
  std::shared_ptr<Connections> connections_;
};

}  // namespace

Result<std::unique_ptr<HttpClient>> HttpClient::create(asio::io_context& io,
                                                       const std::string& host,
                                                       const std::string& port) {
  tcp::resolver resolver(io);
  beast::error_code ec;
  tcp::resolver::results_type endpoints = resolver.resolve(host, port, ec);
  if (ec) {
    return Error{ErrorCode::IoError, "cannot resolve " + host + ":" + port + ": " + ec.message()};
  }
  std::unique_ptr<HttpClient> client =
      std::make_unique<BeastClient>(io, host + ":" + port, std::move(endpoints));
  return client;
}

}  // namespace mocker::replay
