#include "gateway/worker_choice.h"

namespace mocker::gateway {

WorkerChoice::WorkerChoice(std::size_t num_request, std::size_t num_decode, bool random,
                           replay::DecodeRouterKind decode_router, std::uint64_t seed)
    : num_request_(num_request),
      random_(random),
      decode_router_(decode_router),
      seed_(seed),
      rng_(seed),
      lost_(num_request + num_decode, false),
      decode_in_flight_(num_decode, 0) {}

bool WorkerChoice::anyLiveRequestWorker() const {
  for (std::size_t w = 0; w < num_request_; ++w) {
    if (!lost_[w]) return true;
  }
  return false;
}

std::optional<std::size_t> WorkerChoice::pickRequestWorker() {
  std::vector<std::size_t> live;
  for (std::size_t w = 0; w < num_request_; ++w) {
    if (!lost_[w]) live.push_back(w);
  }
  if (live.empty()) return std::nullopt;
  if (random_) return live[static_cast<std::size_t>(rng_.uniformIndex(live.size()))];
  for (std::size_t i = 0; i < num_request_; ++i) {
    const std::size_t w = next_++ % num_request_;
    if (!lost_[w]) return w;
  }
  return std::nullopt;  // unreachable: `live` is not empty
}

std::optional<std::size_t> WorkerChoice::keepOrPick(std::size_t kv_pick) {
  if (!lost_.at(kv_pick)) return kv_pick;
  return pickRequestWorker();
}

std::optional<std::size_t> WorkerChoice::pickDecodeWorker(std::uint64_t dispatch) {
  const std::size_t n = decode_in_flight_.size();
  if (n == 0) return std::nullopt;
  const std::size_t first =
      replay::pickDecodeWorker(decode_router_, seed_, dispatch, decode_in_flight_);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t d = (first + i) % n;
    if (lost_[num_request_ + d]) continue;
    ++decode_in_flight_[d];
    return num_request_ + d;
  }
  return std::nullopt;
}

void WorkerChoice::decodeEnded(std::size_t worker) {
  if (isDecode(worker)) --decode_in_flight_.at(worker - num_request_);
}

}  // namespace mocker::gateway
