// Test-side helpers for a live Server's HTTP endpoint: enable it on an ephemeral port, a client
// with short timeouts, and one sample read out of a /metrics text.
#pragma once

#include <httplib.h>

#include <chrono>
#include <string>
#include <thread>

#include "service/config.h"

namespace mocker::service::testing {

/// `c` with [endpoints.http] on 127.0.0.1 and a port the kernel picks.
inline ServiceConfig withHttp(ServiceConfig c) {
  c.endpoints.http.enabled = true;
  c.endpoints.http.endpoint = "127.0.0.1:0";
  return c;
}

/// "http://127.0.0.1:PORT" → a client with short timeouts.
inline httplib::Client httpClient(const std::string& url) {
  using namespace std::chrono_literals;
  httplib::Client client(url);
  client.set_connection_timeout(2s);
  client.set_read_timeout(5s);
  return client;
}

/// The value of the sample line that starts with `series` (name{labels}), or -1.
inline double sample(const std::string& text, const std::string& series) {
  const std::size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  const std::size_t value = at + series.size() + 2;
  return std::stod(text.substr(value, text.find('\n', value) - value));
}

/// Polls GET `path` until `pred(status, body)` holds or `timeout` passes; the last body.
template <typename Pred>
bool pollUntil(httplib::Client& client, const std::string& path, Pred pred,
               std::chrono::milliseconds timeout, std::string* last = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  do {
    if (auto res = client.Get(path)) {
      if (last) *last = res->body;
      if (pred(res->status, res->body)) return true;
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(20));  // poll interval, not a wait for an event
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

}  // namespace mocker::service::testing
