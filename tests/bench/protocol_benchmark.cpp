// Protocol encode/decode costs on the hot paths, next to raw msgpack-c packing of the same
// payload:
//   * a KV-event batch of 16 stored blocks of 64 tokens (one BlockStored run: 16 hashes, 1024
//     token ids — what one 1024-token prefill produces), default layout p8 and map;
//   * an output message of 64 requests × 1 token (one decode pass of 64 running requests);
//   * KvEventPublisher::publishPass on the same events (engine → wire conversion, encode, ring)
//     into a sink that discards.
#include <benchmark/benchmark.h>
#include <msgpack.hpp>

#include <string>
#include <vector>

#include "protocol/client.h"
#include "protocol/detail/output_fast_path.h"
#include "protocol/kv_events.h"
#include "publishers/kv_event_publisher.h"

namespace {

using namespace mocker;

constexpr std::size_t kBlocks = 16;
constexpr std::uint32_t kBlockSize = 64;
constexpr std::size_t kRequests = 64;

engine::BlockStored engineStored() {
  engine::BlockStored s{.block_hashes = {},
                        .parent_block_hash = 0x1234567890abcdefull,
                        .token_ids = {},
                        .block_size = kBlockSize};
  for (std::size_t i = 0; i < kBlocks; ++i)
    s.block_hashes.push_back(0x9e3779b97f4a7c15ull * (i + 1));
  for (std::uint32_t t = 0; t < kBlocks * kBlockSize; ++t)
    s.token_ids.push_back(1000 + t * 7 % 31000);
  return s;
}

protocol::KvEventBatch kvBatch() {
  const engine::BlockStored s = engineStored();
  return protocol::KvEventBatch{
      .ts = 1700000000.5,
      .events = {protocol::BlockStoredEvent{.block_hashes = s.block_hashes,
                                            .parent_block_hash = s.parent_block_hash,
                                            .token_ids = s.token_ids,
                                            .block_size = s.block_size}}};
}

protocol::OutputBatch outputBatch() {
  protocol::OutputBatch b;
  for (std::size_t i = 0; i < kRequests; ++i) {
    b.outputs.push_back({.id = "req-" + std::to_string(i),
                         .index = static_cast<std::uint32_t>(100 + i),
                         .tokens = {static_cast<std::uint32_t>(1000 + i)}});
  }
  return b;
}

void BM_KvBatchEncode(benchmark::State& state) {
  const auto batch = kvBatch();
  const protocol::KvEncodeOptions options{.layout =
                                              static_cast<protocol::KvLayout>(state.range(0))};
  std::size_t bytes = 0;
  for (auto _ : state) {
    auto out = protocol::encodeKvEventBatch(batch, options);
    bytes = out.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["bytes"] = static_cast<double>(bytes);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes));
}
BENCHMARK(BM_KvBatchEncode)
    ->Arg(static_cast<int>(protocol::KvLayout::P8))
    ->Arg(static_cast<int>(protocol::KvLayout::Map));

void BM_KvBatchEncodeReusedBuffer(benchmark::State& state) {
  const auto batch = kvBatch();
  std::vector<std::byte> out;
  for (auto _ : state) {
    out.clear();
    protocol::appendKvEventBatch(batch, {}, out);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_KvBatchEncodeReusedBuffer);

// The same p8 payload with msgpack-c's packer into an sbuffer, no abstraction around it.
void BM_KvBatchRawMsgpackC(benchmark::State& state) {
  const auto batch = kvBatch();
  const auto& s = std::get<protocol::BlockStoredEvent>(batch.events[0]);
  for (auto _ : state) {
    msgpack::sbuffer buf(8192);
    msgpack::packer<msgpack::sbuffer> pk(buf);
    pk.pack_array(3);
    pk.pack_double(batch.ts);
    pk.pack_array(1);
    pk.pack_array(8);
    pk.pack_str(11);
    pk.pack_str_body("BlockStored", 11);
    pk.pack_array(static_cast<std::uint32_t>(s.block_hashes.size()));
    for (auto h : s.block_hashes) pk.pack_uint64(h);
    pk.pack_uint64(*s.parent_block_hash);
    pk.pack_array(static_cast<std::uint32_t>(s.token_ids.size()));
    for (auto t : s.token_ids) pk.pack_uint32(t);
    pk.pack_uint32(s.block_size);
    pk.pack_nil();
    pk.pack_str(3);
    pk.pack_str_body("GPU", 3);
    pk.pack_nil();
    pk.pack_uint32(0);
    benchmark::DoNotOptimize(buf.data());
  }
}
BENCHMARK(BM_KvBatchRawMsgpackC);

void BM_KvBatchDecode(benchmark::State& state) {
  const auto bytes = protocol::encodeKvEventBatch(
      kvBatch(), {.layout = static_cast<protocol::KvLayout>(state.range(0))});
  for (auto _ : state) {
    auto batch = protocol::decodeKvEventBatch(bytes);
    benchmark::DoNotOptimize(batch.has_value());
  }
}
BENCHMARK(BM_KvBatchDecode)
    ->Arg(static_cast<int>(protocol::KvLayout::P8))
    ->Arg(static_cast<int>(protocol::KvLayout::Map));

class NullSink final : public publishers::FrameSink {
 public:
  publishers::SendResult send(std::span<const publishers::Frame> frames) override {
    benchmark::DoNotOptimize(frames.data());
    return publishers::SendResult::Sent;
  }
};

void BM_KvPublisherPublishPass(benchmark::State& state) {
  NullSink sink;
  auto publisher = publishers::KvEventPublisher::create({}, sink);
  const std::vector<engine::KvEvent> events{engineStored()};
  for (auto _ : state) benchmark::DoNotOptimize((*publisher)->publishPass(events, 1.0));
}
BENCHMARK(BM_KvPublisherPublishPass);

void BM_OutputEncode(benchmark::State& state) {
  const auto batch = outputBatch();
  std::size_t bytes = 0;
  for (auto _ : state) {
    auto out = protocol::encodeClientMessage(batch);
    bytes = out.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_OutputEncode);

// What the service does per pass and client: encode from borrowed views.
void BM_OutputEncodeViews(benchmark::State& state) {
  const auto batch = outputBatch();
  std::vector<protocol::RequestOutputView> views;
  for (const auto& o : batch.outputs) {
    views.push_back({o.id, o.index, o.tokens, o.finish, o.reason, o.cached_tokens});
  }
  for (auto _ : state) {
    auto out = protocol::encodeOutputBatch(views);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_OutputEncodeViews);

void BM_OutputRawMsgpackC(benchmark::State& state) {
  const auto batch = outputBatch();
  for (auto _ : state) {
    msgpack::sbuffer buf(4096);
    msgpack::packer<msgpack::sbuffer> pk(buf);
    const auto str = [&](std::string_view s) {
      pk.pack_str(static_cast<std::uint32_t>(s.size()));
      pk.pack_str_body(s.data(), static_cast<std::uint32_t>(s.size()));
    };
    pk.pack_map(3);
    str("v");
    pk.pack_uint32(1);
    str("type");
    str("output");
    str("outputs");
    pk.pack_array(static_cast<std::uint32_t>(batch.outputs.size()));
    for (const auto& o : batch.outputs) {
      pk.pack_map(3);
      str("id");
      str(o.id);
      str("index");
      pk.pack_uint32(o.index);
      str("tokens");
      pk.pack_array(1);
      pk.pack_uint32(o.tokens[0]);
    }
    benchmark::DoNotOptimize(buf.data());
  }
}
BENCHMARK(BM_OutputRawMsgpackC);

void BM_OutputDecode(benchmark::State& state) {
  const auto bytes = protocol::encodeClientMessage(outputBatch());
  for (auto _ : state) {
    auto m = protocol::decodeClientMessage(bytes);
    benchmark::DoNotOptimize(m.has_value());
  }
}
BENCHMARK(BM_OutputDecode);

// The same message through the general decoder (prescan + msgpack-c object tree), i.e. what
// decodeClientMessage does for any message the output fast path does not recognise.
void BM_OutputDecodeGeneral(benchmark::State& state) {
  const auto bytes = protocol::encodeClientMessage(outputBatch());
  for (auto _ : state) {
    auto m = protocol::detail::decodeClientMessageGeneral(bytes);
    benchmark::DoNotOptimize(m.has_value());
  }
}
BENCHMARK(BM_OutputDecodeGeneral);

// A submit with a prompt of range(0) tokens (ids up to 2^17, as a real vocabulary's), as the
// service reads it: decodeClientMessage (no fast path for submits; the general decoder).
void BM_SubmitDecode(benchmark::State& state) {
  protocol::SubmitRequest submit{.id = "request-000123", .max_tokens = 256};
  for (std::int64_t i = 0; i < state.range(0); ++i) {
    submit.prompt.push_back(static_cast<std::uint32_t>((i * 7919) % 131072));
  }
  const auto bytes = protocol::encodeClientMessage(submit);
  for (auto _ : state) {
    auto m = protocol::decodeClientMessage(bytes);
    benchmark::DoNotOptimize(m.has_value());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_SubmitDecode)->Arg(16)->Arg(512)->Arg(8192);

}  // namespace

BENCHMARK_MAIN();
