#include "protocol/fpm.h"

#include <charconv>

#include "protocol/detail/msgpack_io.h"
#include "protocol/limits.h"

namespace mocker::protocol {
namespace {

using detail::Packer;
using detail::packStr;

void packScheduled(Packer& pk, const FpmScheduled& s) {
  pk.pack_map(7);
  packStr(pk, "num_prefill_requests");
  pk.pack_uint64(s.num_prefill_requests);
  packStr(pk, "sum_prefill_tokens");
  pk.pack_uint64(s.sum_prefill_tokens);
  packStr(pk, "var_prefill_length");
  pk.packF64(s.var_prefill_length);
  packStr(pk, "sum_prefill_kv_tokens");
  pk.pack_uint64(s.sum_prefill_kv_tokens);
  packStr(pk, "num_decode_requests");
  pk.pack_uint64(s.num_decode_requests);
  packStr(pk, "sum_decode_kv_tokens");
  pk.pack_uint64(s.sum_decode_kv_tokens);
  packStr(pk, "var_decode_kv_tokens");
  pk.packF64(s.var_decode_kv_tokens);
}

void packQueued(Packer& pk, const FpmQueued& q) {
  pk.pack_map(6);
  packStr(pk, "num_prefill_requests");
  pk.pack_uint64(q.num_prefill_requests);
  packStr(pk, "sum_prefill_tokens");
  pk.pack_uint64(q.sum_prefill_tokens);
  packStr(pk, "var_prefill_length");
  pk.packF64(q.var_prefill_length);
  packStr(pk, "num_decode_requests");
  pk.pack_uint64(q.num_decode_requests);
  packStr(pk, "sum_decode_kv_tokens");
  pk.pack_uint64(q.sum_decode_kv_tokens);
  packStr(pk, "var_decode_kv_tokens");
  pk.packF64(q.var_decode_kv_tokens);
}

// Reads `key` of `m` as unsigned / number, naming "<section>.<key>" in errors.
Result<std::uint64_t> uintField(const detail::MapView& m, std::string_view key) {
  MOCKER_TRY(const msgpack::object* o, m.require(key));
  return detail::getUint(*o, key);
}
Result<double> numberField(const detail::MapView& m, std::string_view key) {
  MOCKER_TRY(const msgpack::object* o, m.require(key));
  return detail::getNumber(*o, key);
}

Result<FpmScheduled> decodeScheduled(const msgpack::object& o) {
  MOCKER_TRY(const detail::MapView m, detail::MapView::create(o, "map"));
  FpmScheduled s;
  MOCKER_TRY(s.num_prefill_requests, uintField(m, "num_prefill_requests"));
  MOCKER_TRY(s.sum_prefill_tokens, uintField(m, "sum_prefill_tokens"));
  MOCKER_TRY(s.var_prefill_length, numberField(m, "var_prefill_length"));
  MOCKER_TRY(s.sum_prefill_kv_tokens, uintField(m, "sum_prefill_kv_tokens"));
  MOCKER_TRY(s.num_decode_requests, uintField(m, "num_decode_requests"));
  MOCKER_TRY(s.sum_decode_kv_tokens, uintField(m, "sum_decode_kv_tokens"));
  MOCKER_TRY(s.var_decode_kv_tokens, numberField(m, "var_decode_kv_tokens"));
  return s;
}

Result<FpmQueued> decodeQueued(const msgpack::object& o) {
  MOCKER_TRY(const detail::MapView m, detail::MapView::create(o, "map"));
  FpmQueued q;
  MOCKER_TRY(q.num_prefill_requests, uintField(m, "num_prefill_requests"));
  MOCKER_TRY(q.sum_prefill_tokens, uintField(m, "sum_prefill_tokens"));
  MOCKER_TRY(q.var_prefill_length, numberField(m, "var_prefill_length"));
  MOCKER_TRY(q.num_decode_requests, uintField(m, "num_decode_requests"));
  MOCKER_TRY(q.sum_decode_kv_tokens, uintField(m, "sum_decode_kv_tokens"));
  MOCKER_TRY(q.var_decode_kv_tokens, numberField(m, "var_decode_kv_tokens"));
  return q;
}

}  // namespace

bool isDecimalU64(std::string_view s) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return false;
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc{} && end == s.data() + s.size();
}

std::vector<std::byte> encodeFpm(const FpmRecord& r) {
  std::vector<std::byte> out;
  out.reserve(512);
  detail::ByteSink sink(out);
  Packer pk(sink);
  const FpmExtensions& x = r.extensions;
  const std::uint32_t num_ext =
      (x.pass_start_ms ? 1u : 0u) + (x.pass_end_ms ? 1u : 0u) + (x.preemptions_total ? 1u : 0u);
  pk.pack_map(7 + num_ext);
  packStr(pk, "version");
  pk.pack_uint64(r.version);
  packStr(pk, "worker_id");
  packStr(pk, r.worker_id);
  packStr(pk, "dp_rank");
  pk.pack_uint32(r.dp_rank);
  packStr(pk, "counter_id");
  pk.pack_uint64(r.counter_id);
  packStr(pk, "wall_time");
  pk.packF64(r.wall_time);
  packStr(pk, "scheduled_requests");
  packScheduled(pk, r.scheduled);
  packStr(pk, "queued_requests");
  packQueued(pk, r.queued);
  if (x.pass_start_ms) {
    packStr(pk, "x_pass_start_ms");
    pk.packF64(*x.pass_start_ms);
  }
  if (x.pass_end_ms) {
    packStr(pk, "x_pass_end_ms");
    pk.packF64(*x.pass_end_ms);
  }
  if (x.preemptions_total) {
    packStr(pk, "x_preemptions_total");
    pk.pack_uint64(*x.preemptions_total);
  }
  sink.finish();
  return out;
}

Result<FpmRecord> decodeFpm(std::span<const std::byte> payload) {
  MOCKER_TRY(const detail::Unpacked unpacked, detail::unpackMessage(payload, "fpm record"));
  MOCKER_TRY(const detail::MapView m, detail::MapView::create(unpacked.root(), "fpm record"));
  FpmRecord r;
  MOCKER_TRY(r.version, uintField(m, "version"));
  if (r.version != kFpmVersion) {
    return Error{ErrorCode::Unsupported,
                 "version: " + std::to_string(r.version) + " is not supported (only version 1)"};
  }
  MOCKER_TRY(const msgpack::object* worker, m.require("worker_id"));
  MOCKER_TRY(const std::string_view worker_id, detail::getStr(*worker, "worker_id", 20));
  if (!isDecimalU64(worker_id)) {
    return invalidArgument("worker_id: '" + std::string(worker_id) + "' is not a decimal u64");
  }
  r.worker_id = std::string(worker_id);
  MOCKER_TRY(const msgpack::object* rank, m.require("dp_rank"));
  MOCKER_TRY(const std::uint64_t dp_rank,
             detail::getUint(*rank, "dp_rank", std::numeric_limits<std::uint32_t>::max()));
  r.dp_rank = static_cast<std::uint32_t>(dp_rank);
  MOCKER_TRY(r.counter_id, uintField(m, "counter_id"));
  MOCKER_TRY(r.wall_time, numberField(m, "wall_time"));
  MOCKER_TRY(const msgpack::object* sched, m.require("scheduled_requests"));
  auto scheduled = decodeScheduled(*sched);
  if (!scheduled) return scheduled.error().withContext("scheduled_requests");
  r.scheduled = *scheduled;
  MOCKER_TRY(const msgpack::object* queued_obj, m.require("queued_requests"));
  auto queued = decodeQueued(*queued_obj);
  if (!queued) return queued.error().withContext("queued_requests");
  r.queued = *queued;
  if (const auto* o = m.find("x_pass_start_ms")) {
    MOCKER_TRY(r.extensions.pass_start_ms, detail::getNumber(*o, "x_pass_start_ms"));
  }
  if (const auto* o = m.find("x_pass_end_ms")) {
    MOCKER_TRY(r.extensions.pass_end_ms, detail::getNumber(*o, "x_pass_end_ms"));
  }
  if (const auto* o = m.find("x_preemptions_total")) {
    MOCKER_TRY(r.extensions.preemptions_total, detail::getUint(*o, "x_preemptions_total"));
  }
  return r;
}

}  // namespace mocker::protocol
