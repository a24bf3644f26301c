#include "service/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "service/server.h"
#include "tests/service/live_service.h"

namespace mocker::service {
namespace {

namespace fs = std::filesystem;

/// A fresh directory under the system temp dir, removed at scope exit.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("mocker_config_test_" + std::string(info->name()) + "_" +
                                         std::to_string(reinterpret_cast<std::uintptr_t>(this)));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    const fs::path p = path_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

constexpr const char* kGoodProfile = R"({
  "prefill_isl": [8, 512, 8192],
  "prefill_ttft_ms": [16.6, 24.4, 169.1],
  "decode_active_kv_tokens": [0, 1000],
  "decode_context_length": [16, 4096],
  "decode_itl": [[5.7, 6.0], [20.0, 34.0]]
})";

TEST(ServiceConfigTest, DefaultsEqualTheSpec) {
  const ServiceConfig c;
  // Engine and SGLang defaults.
  EXPECT_EQ(c.engine.engine_type, engine::EngineType::Vllm);
  // num_gpu_blocks null: 1 Mi tokens of KV whatever the engine type.
  EXPECT_FALSE(c.engine.num_gpu_blocks.has_value());
  EXPECT_EQ(engine::effectiveNumGpuBlocks(c.engine), 16384u);
  EXPECT_EQ(c.engine.block_size, 0u);
  EXPECT_EQ(c.engine.decode_load, engine::DecodeLoad::Physical);
  EXPECT_FALSE(c.engine.spec_num_draft_tokens.has_value());
  EXPECT_EQ(c.engine.spec_accept_rates, (std::vector<double>{0.85, 0.3, 0.0, 0.0, 0.0}));
  EXPECT_EQ(c.engine.spec_seed, 42u);
  EXPECT_FALSE(c.engine.max_model_len.has_value());
  EXPECT_EQ(c.engine.max_num_seqs, 256u);
  EXPECT_EQ(c.engine.max_num_batched_tokens, 8192u);
  EXPECT_TRUE(c.engine.enable_prefix_caching);
  EXPECT_TRUE(c.engine.enable_chunked_prefill);
  EXPECT_EQ(c.engine.preemption_mode, engine::PreemptionMode::Lifo);
  EXPECT_EQ(c.engine.dp_size, 1u);
  EXPECT_EQ(c.engine.hash_seed, 1337u);
  EXPECT_EQ(c.engine.chain_seed, 1337u);
  EXPECT_EQ(c.engine.token_seed, 0u);
  EXPECT_EQ(c.engine.kv_event_visibility, engine::KvEventVisibility::PassEnd);
  EXPECT_EQ(c.engine.timing_model, engine::TimingModelKind::Polynomial);
  EXPECT_TRUE(c.timing_profile_path.empty());
  EXPECT_EQ(c.engine.speedup_ratio, 1.0);
  EXPECT_EQ(c.engine.decode_speedup_ratio, 1.0);
  EXPECT_EQ(c.engine.sglang.schedule_policy, engine::SchedulePolicy::Fcfs);
  EXPECT_EQ(c.engine.sglang.page_size, 0u);  // unset ⇒ block_size if set, else 1
  EXPECT_EQ(c.engine.sglang.max_prefill_tokens, 16384u);
  EXPECT_EQ(c.engine.sglang.chunked_prefill_size, 8192u);
  EXPECT_EQ(c.engine.sglang.clip_max_new_tokens, 4096u);
  EXPECT_EQ(c.engine.sglang.schedule_conservativeness, 1.0);
  // Live-service limits.
  EXPECT_FALSE(c.engine.allow_empty_output);
  EXPECT_EQ(c.service.max_buffered_outputs, 8u);
  EXPECT_EQ(c.service.fpm_heartbeat_interval_s, 1.0);
  EXPECT_FALSE(c.service.startup_time_s.has_value());
  // Endpoints: all bind on loopback.
  EXPECT_EQ(c.endpoints.submit, (EndpointConfig{"tcp://127.0.0.1:5555", false}));
  EXPECT_EQ(c.endpoints.cancel, (EndpointConfig{"tcp://127.0.0.1:5556", false}));
  EXPECT_EQ(c.endpoints.kv_events, (EndpointConfig{"tcp://127.0.0.1:5557", false}));
  EXPECT_EQ(c.endpoints.kv_replay, (EndpointConfig{"tcp://127.0.0.1:5558", false}));
  EXPECT_EQ(c.endpoints.fpm, (EndpointConfig{"tcp://127.0.0.1:5559", false}));
  // KV events and forward-pass metrics (enabled by default in serve).
  EXPECT_TRUE(c.kv_events.enabled);
  EXPECT_TRUE(c.kv_events.replay_enabled);
  EXPECT_EQ(c.kv_events.topic, "");
  EXPECT_EQ(c.kv_events.hwm, 100000u);
  EXPECT_EQ(c.kv_events.buffer_steps, 10000u);
  EXPECT_EQ(c.kv_events.layout, protocol::KvLayout::P8);
  EXPECT_EQ(c.kv_events.replay_layout, publishers::ReplayLayout::R1);
  EXPECT_EQ(c.kv_events.parent_root, protocol::ParentRoot::Nil);
  EXPECT_FALSE(c.kv_events.force_uint64_hashes);
  EXPECT_FALSE(c.kv_events.clear_on_start);
  EXPECT_TRUE(c.fpm.enabled);
  EXPECT_EQ(c.fpm.worker_id, "0");
  EXPECT_EQ(c.log_level, spdlog::level::info);

  EXPECT_TRUE(validateServiceConfig(c).has_value());
}

TEST(ServiceConfigTest, EmptyFileGivesDefaults) {
  const auto r = parseServiceConfig("", "empty.toml");
  ASSERT_TRUE(r.has_value()) << r.error().toString();
  EXPECT_TRUE(*r == ServiceConfig{});
}

TEST(ServiceConfigTest, ExampleFileLoadsAndEqualsDefaults) {
  const auto r =
      loadServiceConfig(std::string(MOCKER_SOURCE_DIR_FOR_TEST) + "/docs/mocker.example.toml");
  ASSERT_TRUE(r.has_value()) << r.error().toString();
  EXPECT_TRUE(*r == ServiceConfig{});
}

TEST(ServiceConfigTest, ParsesEveryKindOfValue) {
  const auto r = parseServiceConfig(R"(
[engine]
engine_type = "SGLang"
num_gpu_blocks = 64
max_num_seqs = "none"
max_num_batched_tokens = "NONE"
enable_prefix_caching = false
dp_size = 2
hash_seed = "18446744073709551615"
token_seed = 7
timing_model = "Fixed"
fixed_prefill_ms = 3
fixed_decode_ms = 1.5
speedup_ratio = 0
startup_time_s = 2.5
[engine.sglang]
schedule_policy = "fifo"
page_size = 16
chunked_prefill_size = 4096
[service]
allow_empty_output = true
[endpoints.kv_events]
endpoint = "tcp://indexer:6000"
connect = true
[endpoints.fpm]
endpoint = "tcp://127.0.0.1:7000"
[kv_events]
topic = "kv@10.0.0.1:8000@llama"
layout = "MAP26"
parent_root = "zero"
[fpm]
worker_id = "7587889736218396437"
[logging]
level = "WARNING"
)",
                                    "kinds.toml");
  ASSERT_TRUE(r.has_value()) << r.error().toString();
  const ServiceConfig& c = *r;
  EXPECT_EQ(c.engine.engine_type, engine::EngineType::Sglang);
  EXPECT_EQ(c.engine.num_gpu_blocks, 64u);
  EXPECT_FALSE(c.engine.max_num_seqs.has_value());
  EXPECT_FALSE(c.engine.max_num_batched_tokens.has_value());
  EXPECT_FALSE(c.engine.enable_prefix_caching);
  EXPECT_EQ(c.engine.dp_size, 2u);
  EXPECT_EQ(c.engine.hash_seed, 18446744073709551615u);
  EXPECT_EQ(c.engine.token_seed, 7u);
  EXPECT_EQ(c.engine.timing_model, engine::TimingModelKind::Fixed);
  EXPECT_EQ(c.engine.fixed_prefill_ms, 3.0);
  EXPECT_EQ(c.engine.fixed_decode_ms, 1.5);
  EXPECT_EQ(c.engine.speedup_ratio, 0.0);
  EXPECT_EQ(c.service.startup_time_s, 2.5);
  EXPECT_EQ(c.engine.sglang.page_size, 16u);
  EXPECT_TRUE(c.engine.allow_empty_output);
  EXPECT_EQ(c.endpoints.kv_events, (EndpointConfig{"tcp://indexer:6000", true}));
  EXPECT_EQ(c.kv_events.layout, protocol::KvLayout::Map26);
  EXPECT_EQ(c.kv_events.parent_root, protocol::ParentRoot::Zero);
  EXPECT_EQ(c.fpm.worker_id, "7587889736218396437");
  EXPECT_EQ(c.log_level, spdlog::level::warn);
}

struct BadConfig {
  const char* name;
  const char* toml;
  std::vector<std::string> fragments;  ///< each must appear in the error message
};

// Line numbers count from the first line of the raw string (which starts with a newline, so the
// first key is on line 2).
const std::vector<BadConfig> kBadConfigs = {
    {"UnknownKey",
     "\n[engine]\nnum_gpu_blockz = 1\n",
     {"bad.toml:3:1", "engine.num_gpu_blockz",
      "unknown key (did you mean 'engine.num_gpu_blocks'?)"}},
    {"UnknownTable",
     "\n[engin]\nx = 1\n",
     {"bad.toml:", "engin", "unknown table (did you mean 'engine'?)"}},
    {"UnknownNestedTable",
     "\n[engine.sglng]\npage_size = 1\n",
     {"bad.toml:", "unknown table (did you mean 'engine.sglang'?)"}},
    {"UnknownKeyInWrongTable",
     "\n[engine]\nhwm = 5\n",
     {"bad.toml:3:1", "engine.hwm", "unknown key"}},
    {"UnknownTopLevelKey", "\nverbose = true\n", {"bad.toml:2:1", "verbose", "unknown key"}},
    {"WrongTypeString",
     "\n[engine]\nnum_gpu_blocks = \"many\"\n",
     {"bad.toml:3:18", "engine.num_gpu_blocks", "expected an integer"}},
    {"WrongTypeBool",
     "\n[engine]\nenable_prefix_caching = 1\n",
     {"bad.toml:3:25", "engine.enable_prefix_caching", "expected a boolean"}},
    {"NegativeUnsigned",
     "\n[engine]\nblock_size = -4\n",
     {"bad.toml:3:14", "engine.block_size", "[0, 4294967295]"}},
    {"TableWhereValueExpected",
     "\n[engine.dp_size]\nx = 1\n",
     {"bad.toml:2:", "engine.dp_size", "expected a value"}},
    {"ValueWhereTableExpected", "\nengine = 3\n", {"bad.toml:2:", "engine", "expected a table"}},
    {"SyntaxError", "\n[engine]\nnum_gpu_blocks = = 3\n", {"bad.toml:3:", "TOML syntax error"}},
    {"ZeroBlocks",
     "\n[engine]\nnum_gpu_blocks = 0\n",
     {"bad.toml:3:18", "engine.num_gpu_blocks", ">= 1"}},
    {"ZeroDpSize", "\n[engine]\ndp_size = 0\n", {"bad.toml:3:11", "engine.dp_size", ">= 1"}},
    {"ZeroMaxNumSeqs",
     "\n[engine]\nmax_num_seqs = 0\n",
     {"bad.toml:3:16", "engine.max_num_seqs", ">= 1"}},
    {"NullSpelledWrong",
     "\n[engine]\nmax_num_seqs = \"unbounded\"\n",
     {"bad.toml:3:16", "engine.max_num_seqs", "\"none\""}},
    {"MaxModelLenOne",
     "\n[engine]\nmax_model_len = 1\n",
     {"bad.toml:3:17", "engine.max_model_len", ">= 2"}},
    {"UnknownEngineType",
     "\n[engine]\nengine_type = \"tgi\"\n",
     {"bad.toml:3:15", "engine.engine_type", "'tgi'", "vllm"}},
    {"UnknownPreemptionMode",
     "\n[engine]\npreemption_mode = \"random\"\n",
     {"bad.toml:3:19", "engine.preemption_mode"}},
    {"NegativeSpeedup",
     "\n[engine]\nspeedup_ratio = -1.0\n",
     {"bad.toml:3:17", "engine.speedup_ratio", ">= 0"}},
    {"ZeroDecodeSpeedup",
     "\n[engine]\ndecode_speedup_ratio = 0.0\n",
     {"bad.toml:3:24", "engine.decode_speedup_ratio", "> 0"}},
    {"InfiniteSpeedup",
     "\n[engine]\nspeedup_ratio = inf\n",
     {"bad.toml:3:17", "engine.speedup_ratio", "finite"}},
    {"FixedWithoutTimes",
     "\n[engine]\ntiming_model = \"fixed\"\n",
     {"bad.toml:3:16", "fixed_prefill_ms", "required"}},
    {"InterpolatedWithoutProfile",
     "\n[engine]\ntiming_model = \"interpolated\"\n",
     {"engine.timing_profile_path", "required"}},
    {"MissingProfileFile",
     "\n[engine]\ntiming_model = \"interpolated\"\ntiming_profile_path = \"/nonexistent/p.json\"\n",
     {"bad.toml:4:23", "engine.timing_profile_path", "/nonexistent/p.json"}},
    {"WorkerTypeUnknown",
     "\n[engine]\nworker_type = \"encode\"\n",
     {"bad.toml:3:15", "engine.worker_type", "aggregated"}},
    {"HandoffEndpointClash",
     "\n[engine]\nworker_type = \"prefill\"\n[endpoints.handoff]\nendpoint = "
     "\"tcp://127.0.0.1:5555\"\n",
     {"endpoints.handoff.endpoint", "5555"}},
    {"HandoffWildcardBindWithoutAdvertise",
     "\n[engine]\nworker_type = \"prefill\"\n[endpoints.handoff]\nendpoint = "
     "\"tcp://0.0.0.0:5570\"\n",
     {"endpoints.handoff.endpoint", "wildcard", "endpoints.handoff.advertise"}},
    {"HandoffStarBindWithoutAdvertise",
     "\n[engine]\nworker_type = \"prefill\"\n[endpoints.handoff]\nendpoint = "
     "\"tcp://*:5570\"\n",
     {"endpoints.handoff.endpoint", "wildcard", "endpoints.handoff.advertise"}},
    {"HandoffAdvertiseWildcard",
     "\n[engine]\nworker_type = \"prefill\"\n[endpoints.handoff]\nendpoint = "
     "\"tcp://*:5570\"\nadvertise = \"tcp://0.0.0.0:5570\"\n",
     {"endpoints.handoff.advertise", "connectable"}},
    {"HandoffAdvertiseNotTcp",
     "\n[engine]\nworker_type = \"prefill\"\n[endpoints.handoff]\nadvertise = \"ipc:///x\"\n",
     {"endpoints.handoff.advertise", "tcp://HOST:PORT"}},
    {"HandoffAdvertiseInAFleet",
     "\n[engine]\nworker_type = \"prefill\"\n[endpoints.handoff]\nadvertise = "
     "\"tcp://h:5570\"\n[fleet]\nnum_workers = 2\n",
     {"endpoints.handoff.advertise", "fleet.num_workers"}},
    {"WorkerKeyWithoutServerKey",
     "\n[security]\nworker_secret_key_file = \"/x/d.key\"\n",
     {"security.worker_secret_key_file", "security.handoff_server_key_file", "both or neither"}},
    {"CurvePrefillWithoutWorkerKeys",
     "\n[engine]\nworker_type = \"prefill\"\n[security]\ncurve = true\nserver_secret_key = "
     "\"JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6\"\nclient_public_keys = "
     "[\"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\"]\n",
     {"security.worker_public_key_files", "is empty"}},
    {"HandoffFetchTimeoutZero",
     "\n[service]\nhandoff_fetch_timeout_ms = 0\n",
     {"service.handoff_fetch_timeout_ms", "> 0"}},
    {"HandoffSourcesZero",
     "\n[service]\nmax_handoff_sources = 0\n",
     {"service.max_handoff_sources", ">= 1"}},
    {"NegativeStartupTime",
     "\n[engine]\nstartup_time_s = -1\n",
     {"bad.toml:3:18", "engine.startup_time_s", ">= 0"}},
    {"SglangPageSizeMismatch",
     "\n[engine]\nengine_type = \"sglang\"\nblock_size = 16\n[engine.sglang]\npage_size = 32\n",
     {"bad.toml:6:13", "engine.sglang.page_size", "block_size"}},
    {"SglangChunkNotDivisible",
     "\n[engine]\nengine_type = \"sglang\"\n[engine.sglang]\npage_size = 16\nchunked_prefill_size "
     "= 100\n",
     {"bad.toml:6:24", "engine.sglang.chunked_prefill_size", "divisible"}},
    {"SglangConservativeness",
     "\n[engine.sglang]\nschedule_conservativeness = 1.5\n",
     {"bad.toml:3:29", "engine.sglang.schedule_conservativeness", "[0, 1]"}},
    {"TrtllmPolicy",
     "\n[engine.trtllm]\ncapacity_scheduler_policy = \"max_utilization\"\n",
     {"bad.toml:3:29", "engine.trtllm.capacity_scheduler_policy", "guaranteed_no_evict"}},
    {"ZeroBufferedOutputs",
     "\n[service]\nmax_buffered_outputs = 0\n",
     {"bad.toml:3:24", "service.max_buffered_outputs", ">= 1"}},
    {"ZeroHeartbeat",
     "\n[service]\nfpm_heartbeat_interval_s = 0\n",
     {"bad.toml:3:28", "service.fpm_heartbeat_interval_s", "> 0"}},
    {"ZeroMaxMessage",
     "\n[service]\nmax_message_size = 0\n",
     {"bad.toml:3:20", "service.max_message_size", ">= 1"}},
    {"ZeroBacklog",
     "\n[service]\nmax_submit_backlog = 0\n",
     {"bad.toml:3:22", "service.max_submit_backlog", ">= 1"}},
    {"LongLinger",
     "\n[service]\nlinger_ms = 600000\n",
     {"bad.toml:3:13", "service.linger_ms", "60000"}},
    {"UnknownLayout",
     "\n[kv_events]\nlayout = \"p10\"\n",
     {"bad.toml:3:10", "kv_events.layout", "p6, p7, p8, p9, p12, map, map26"}},
    {"UnknownReplayLayout",
     "\n[kv_events]\nreplay_layout = \"r3\"\n",
     {"bad.toml:3:17", "kv_events.replay_layout", "r1, r2"}},
    {"UnknownParentRoot",
     "\n[kv_events]\nparent_root = \"null\"\n",
     {"bad.toml:3:15", "kv_events.parent_root"}},
    {"LlmdTopicModelWithAt",
     "\n[kv_events]\ntopic = \"kv@pod:8000@org@model\"\n",
     {"bad.toml:3:9", "kv_events.topic", "kv@<pod>@<model>"}},
    {"LlmdTopicTooFewParts",
     "\n[kv_events]\ntopic = \"kv@pod\"\n",
     {"bad.toml:3:9", "kv_events.topic", "exactly 3"}},
    {"ZeroBufferSteps",
     "\n[kv_events]\nbuffer_steps = 0\n",
     {"bad.toml:3:16", "kv_events.buffer_steps", ">= 1"}},
    // Keys of another timing model or engine type would be accepted and ignored: refused.
    {"FixedTimeWithPolynomialModel",
     "\n[engine]\nfixed_prefill_ms = 3\n",
     {"bad.toml:3:20", "engine.fixed_prefill_ms", "applies only to timing_model = fixed",
      "polynomial"}},
    {"FixedDecodeWithInterpolatedModel",
     "\n[engine]\nfixed_decode_ms = 2\ntiming_model = \"polynomial\"\n",
     {"bad.toml:3:19", "engine.fixed_decode_ms", "timing_model = fixed"}},
    {"ProfileWithFixedModel",
     "\n[engine]\ntiming_model = \"fixed\"\nfixed_prefill_ms = 1\nfixed_decode_ms = 1\n"
     "timing_profile_path = \"p.json\"\n",
     {"bad.toml:6:23", "engine.timing_profile_path",
      "applies only to timing_model = interpolated"}},
    {"FifoPreemptionWithSglang",
     "\n[engine]\nengine_type = \"sglang\"\npreemption_mode = \"fifo\"\n",
     {"bad.toml:4:19", "engine.preemption_mode", "applies only to engine_type = vllm", "sglang"}},
    {"SglangKeyWithVllm",
     "\n[engine.sglang]\nschedule_policy = \"lpm\"\n",
     {"bad.toml:3:19", "engine.sglang.schedule_policy", "applies only to engine_type = sglang",
      "vllm"}},
    {"SglangPageSizeWithTrtllm",
     "\n[engine]\nengine_type = \"trtllm\"\n[engine.sglang]\npage_size = 32\n",
     {"bad.toml:5:13", "engine.sglang.page_size", "engine_type = sglang", "trtllm"}},
    {"MaxQueueSizeIsNotSupported",
     "\n[kv_events]\nmax_queue_size = 100000\n",
     {"bad.toml:3:1", "kv_events.max_queue_size", "not supported", "no publisher queue",
      "kv_events.hwm"}},
    {"WorkerIdNotNumeric",
     "\n[fpm]\nworker_id = \"worker-7\"\n",
     {"bad.toml:3:13", "fpm.worker_id", "decimal"}},
    {"WorkerIdTooLarge",
     "\n[fpm]\nworker_id = \"18446744073709551616\"\n",
     {"bad.toml:3:13", "fpm.worker_id"}},
    {"UnknownLogLevel",
     "\n[logging]\nlevel = \"loud\"\n",
     {"bad.toml:3:9", "logging.level", "'loud'"}},
    {"BadScheme",
     "\n[endpoints.submit]\nendpoint = \"udp://127.0.0.1:1\"\n",
     {"bad.toml:3:12", "endpoints.submit.endpoint", "unsupported scheme"}},
    {"EmptyEndpoint",
     "\n[endpoints.cancel]\nendpoint = \"\"\n",
     {"bad.toml:3:12", "endpoints.cancel.endpoint", "empty"}},
    {"SameEndpointTwice",
     "\n[endpoints.cancel]\nendpoint = \"tcp://127.0.0.1:5555\"\n",
     {"bad.toml:3:12", "endpoints.cancel.endpoint", "collides with endpoints.submit.endpoint"}},
    {"SameIpcEndpointTwice",
     "\n[endpoints.submit]\nendpoint = \"ipc:///tmp/mocker-x\"\n"
     "[endpoints.cancel]\nendpoint = \"ipc:///tmp/mocker-x\"\n",
     {"bad.toml:5:12", "endpoints.cancel.endpoint", "collides with endpoints.submit.endpoint"}},
    {"PerRankPortsCollideAcrossSockets",
     "\n[engine]\ndp_size = 1000\n[endpoints.kv_events]\nendpoint = \"tcp://127.0.0.1:20000\"\n"
     "[endpoints.kv_replay]\nendpoint = \"tcp://127.0.0.1:21000\"\n"
     "[endpoints.fpm]\nendpoint = \"tcp://127.0.0.1:20999\"\n",
     {"endpoints.fpm.endpoint", "tcp://127.0.0.1:20999 for dp_rank 0",
      "collides with endpoints.kv_events.endpoint (tcp://127.0.0.1:20999 for dp_rank 999)"}},
    {"WildcardHostCollides",
     "\n[endpoints.fpm]\nendpoint = \"tcp://*:5555\"\n",
     {"bad.toml:3:12", "endpoints.fpm.endpoint", "collides"}},
    {"DpOffsetCollision",  // endpoints given: the default port plan does not apply
     "\n[engine]\ndp_size = 2\n[endpoints.kv_events]\nendpoint = \"tcp://127.0.0.1:5557\"\n",
     {"bad.toml:5:12", "endpoints.kv_replay.endpoint", "dp_rank 1", "dp_size (2)"}},
    {"DpOffsetPortOverflow",
     "\n[engine]\ndp_size = 2\n[kv_events]\nreplay_enabled = false\n[endpoints.fpm]\nendpoint = "
     "\"tcp://127.0.0.1:65535\"\n",
     {"bad.toml:7:12", "endpoints.fpm.endpoint", "exceeds 65535"}},
    {"KvHwmAboveIntMax",
     "\n[kv_events]\nhwm = 2147483648\n",
     {"bad.toml:3:7", "kv_events.hwm", "[0, 2147483647] (0 = unlimited)"}},
    {"SubmitHwmAboveIntMax",
     "\n[service]\nsubmit_rcvhwm = 4294967295\n",
     {"bad.toml:3:17", "service.submit_rcvhwm", "[0, 2147483647]"}},
    {"SglangChunkNotDivisibleByPageSize",
     "\n[engine]\nengine_type = \"sglang\"\n[engine.sglang]\npage_size = 3\n",
     {"bad.toml:5:13", "engine.sglang.chunked_prefill_size", "divisible by block_size 3"}},
    {"ArrayValue",
     "\n[engine]\nnum_gpu_blocks = [1, 2]\n",
     {"bad.toml:3:18", "engine.num_gpu_blocks", "array"}},
};

class BadConfigTest : public ::testing::TestWithParam<BadConfig> {};

TEST_P(BadConfigTest, ErrorNamesFileLineColumnAndField) {
  const BadConfig& bad = GetParam();
  const auto r = parseServiceConfig(bad.toml, "bad.toml");
  ASSERT_FALSE(r.has_value()) << bad.name;
  for (const std::string& fragment : bad.fragments) {
    if (fragment.starts_with("bad.toml:")) {
      // The location leads the message; a complete line:column is followed by ": ".
      const bool complete = std::count(fragment.begin(), fragment.end(), ':') == 2 &&
                            std::isdigit(static_cast<unsigned char>(fragment.back())) != 0;
      EXPECT_EQ(r.error().message.rfind(complete ? fragment + ": " : fragment, 0), 0u)
          << "expected location '" << fragment << "' at the start of: " << r.error().message;
      continue;
    }
    EXPECT_NE(r.error().message.find(fragment), std::string::npos)
        << "missing '" << fragment << "' in: " << r.error().message;
  }
}

INSTANTIATE_TEST_SUITE_P(Catalogue, BadConfigTest, ::testing::ValuesIn(kBadConfigs),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(ServiceConfigTest, DpOffsetsAreFineWhenBasePortsAreSpaced) {
  const auto r = parseServiceConfig(R"(
[engine]
dp_size = 4
[endpoints.kv_events]
endpoint = "tcp://127.0.0.1:6000"
[endpoints.kv_replay]
endpoint = "tcp://127.0.0.1:6100"
[endpoints.fpm]
endpoint = "ipc:///tmp/mocker-fpm"
)",
                                    "dp.toml");
  ASSERT_TRUE(r.has_value()) << r.error().toString();
  EXPECT_EQ(*rankEndpoint(r->endpoints.kv_events, 3), "tcp://127.0.0.1:6003");
  EXPECT_EQ(*rankEndpoint(r->endpoints.fpm, 2), "ipc:///tmp/mocker-fpm_dp2");
}

TEST(ServiceConfigTest, ConnectedAndDisabledEndpointsDoNotCollide) {
  // fpm connects to a consumer's bound SUB at the submit address: not a local bind conflict.
  // kv events are disabled, so their endpoints are not checked at all.
  const auto r = parseServiceConfig(R"(
[endpoints.fpm]
endpoint = "tcp://127.0.0.1:5555"
connect = true
[kv_events]
enabled = false
[endpoints.kv_events]
endpoint = "tcp://127.0.0.1:5555"
)",
                                    "ok.toml");
  ASSERT_TRUE(r.has_value()) << r.error().toString();
}

TEST(ServiceConfigTest, WildcardPortsNeverCollideAndStayWildcardPerRank) {
  const auto r = parseServiceConfig(R"(
[engine]
dp_size = 3
[endpoints.submit]
endpoint = "tcp://127.0.0.1:*"
[endpoints.cancel]
endpoint = "tcp://127.0.0.1:*"
[endpoints.kv_events]
endpoint = "tcp://127.0.0.1:*"
[endpoints.kv_replay]
endpoint = "tcp://127.0.0.1:*"
[endpoints.fpm]
endpoint = "tcp://127.0.0.1:*"
)",
                                    "ephemeral.toml");
  ASSERT_TRUE(r.has_value()) << r.error().toString();
  EXPECT_EQ(*rankEndpoint(r->endpoints.kv_events, 2), "tcp://127.0.0.1:*");
}

TEST(ServiceConfigTest, HighWaterMarkZeroMeansUnlimitedAndIsAccepted) {
  // ZeroMQ reads an HWM of 0 as "no limit"; the service passes the value through unchanged.
  const auto r = parseServiceConfig(
      "[kv_events]\nhwm = 0\n[service]\nsubmit_sndhwm = 0\nsubmit_rcvhwm = 2147483647\n",
      "hwm.toml");
  ASSERT_TRUE(r.has_value()) << r.error().toString();
  EXPECT_EQ(r->kv_events.hwm, 0u);
  EXPECT_EQ(r->service.submit_sndhwm, 0u);
  EXPECT_EQ(r->service.submit_rcvhwm, 2147483647u);
}

TEST(ServiceConfigTest, HighWaterMarksReachZeroMQAsGiven) {
  // Real sockets: ZeroMQ accepts 0 (unlimited) and INT_MAX; a larger value is refused by
  // validation, naming the key, before any socket is made.
  ServiceConfig c = testing::testConfig();
  c.kv_events.enabled = true;
  for (const std::uint32_t hwm : {0u, 2147483647u}) {
    c.kv_events.hwm = hwm;
    c.service.submit_sndhwm = hwm;
    c.service.submit_rcvhwm = hwm;
    const auto server = Server::create(c);
    EXPECT_TRUE(server.has_value()) << hwm << ": " << server.error().message;
  }
  c.kv_events.hwm = 2147483648u;
  const auto server = Server::create(c);
  ASSERT_FALSE(server.has_value());
  EXPECT_EQ(server.error().message.rfind("kv_events.hwm must be in [0, 2147483647]", 0), 0u)
      << server.error().message;
}

TEST(ServiceConfigTest, CheckReturnsTheOffendingKeysAsData) {
  ServiceConfig c;
  c.engine.num_gpu_blocks = 0;
  auto e = checkServiceConfig(c);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->keys, (std::vector<std::string>{"engine.num_gpu_blocks"}));
  EXPECT_EQ(e->error.message, "engine.num_gpu_blocks must be >= 1 (got 0)");

  c = ServiceConfig{};
  c.engine.engine_type = engine::EngineType::Sglang;
  c.engine.block_size = 16;
  c.engine.sglang.page_size = 32;
  e = checkServiceConfig(c);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->keys, (std::vector<std::string>{"engine.sglang.page_size", "engine.block_size",
                                               "engine.engine_type"}));
  EXPECT_EQ(e->error.message,
            "engine.sglang.page_size (32) must equal block_size (16) when both are set");

  // Profile rules are about the key the profile was loaded from.
  c = ServiceConfig{};
  c.engine.timing_model = engine::TimingModelKind::Interpolated;
  c.engine.timing_profile = engine::TimingProfile{.prefill_isl = {1, 1}};
  e = checkServiceConfig(c);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->keys, (std::vector<std::string>{"engine.timing_profile_path"}));
  EXPECT_EQ(e->error.message.rfind("engine: timing_profile.prefill_isl must be strictly", 0), 0u)
      << e->error.message;

  c = ServiceConfig{};
  c.engine.dp_size = 2;
  e = checkServiceConfig(c);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->keys, (std::vector<std::string>{"endpoints.kv_replay.endpoint",
                                               "endpoints.kv_events.endpoint", "engine.dp_size"}));
  EXPECT_EQ(validateServiceConfig(c).error(), e->error);

  c = ServiceConfig{};
  c.kv_events.hwm = 3000000000u;
  e = checkServiceConfig(c);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->keys, (std::vector<std::string>{"kv_events.hwm"}));
  EXPECT_FALSE(checkServiceConfig(ServiceConfig{}).has_value());
}

TEST(ServiceConfigTest, EveryEngineRuleNamesExistingKeys) {
  std::vector<ServiceConfig> broken(8);
  broken[0].engine.num_gpu_blocks = 0;
  broken[1].engine.engine_type = engine::EngineType::Sglang;
  broken[1].engine.max_model_len = 100;
  broken[2].engine.timing_model = engine::TimingModelKind::Fixed;
  broken[3].engine.timing_model = engine::TimingModelKind::Interpolated;
  broken[3].engine.timing_profile = engine::TimingProfile{};
  broken[4].engine.engine_type = engine::EngineType::Sglang;
  broken[4].engine.sglang.page_size = 3;
  broken[5].engine.sglang.schedule_conservativeness = 2;
  broken[6].engine.dp_size = 0;
  broken[7].engine.decode_speedup_ratio = -1;
  const std::vector<std::string> keys = configKeys();
  for (std::size_t i = 0; i < broken.size(); ++i) {
    const auto e = checkServiceConfig(broken[i]);
    ASSERT_TRUE(e.has_value()) << "case " << i;
    ASSERT_FALSE(e->keys.empty()) << "case " << i;
    EXPECT_EQ(e->error.message.rfind("engine", 0), 0u) << e->error.message;
    for (const std::string& key : e->keys) {
      EXPECT_NE(std::find(keys.begin(), keys.end(), key), keys.end())
          << "case " << i << ": '" << key << "' is not a key (" << e->error.message << ")";
    }
  }
}

TEST(ServiceConfigTest, EngineOnlyUseSkipsTheEndpointRulesAndNothingElse) {
  // Default ports collide from dp_size 2 on; an offline tool opens no socket.
  ServiceConfig c;
  c.engine.dp_size = 2;
  c.endpoints.submit.endpoint = "udp://127.0.0.1:1";
  EXPECT_FALSE(validateServiceConfig(c).has_value());
  EXPECT_TRUE(validateServiceConfig(c, ConfigUse::EngineOnly).has_value());

  // Every other rule still applies, with the same key-first message as for a service.
  for (const auto& [key, text, message] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"engine.dp_size", "0", "engine.dp_size must be >= 1 (got 0)"},
           {"engine.dp_size", "1025", "engine.dp_size must be <= 1024 (got 1025)"},
           {"engine.num_gpu_blocks", "0", "engine.num_gpu_blocks must be >= 1 (got 0)"},
           {"service.max_buffered_outputs", "0",
            "service.max_buffered_outputs must be >= 1 (got 0)"},
           {"kv_events.topic", "kv@a", "kv_events.topic 'kv@a' must have the llm-d form"},
       }) {
    ServiceConfig bad = c;
    ASSERT_TRUE(setConfigValue(bad, key, text).has_value()) << key;
    const KeyOrigins origins{{key, "--flag"}};
    const auto r = finishServiceConfig(bad, origins, ConfigUse::EngineOnly);
    ASSERT_FALSE(r.has_value()) << key;
    EXPECT_EQ(r.error().message.rfind("--flag: " + message, 0), 0u) << r.error().message;
  }
}

ServiceConfig nonDefaultConfig() {
  ServiceConfig c;
  c.engine.engine_type = engine::EngineType::Trtllm;
  c.engine.num_gpu_blocks = 77;
  c.engine.block_size = 16;
  c.engine.max_model_len = 4096;
  c.engine.max_num_seqs.reset();
  c.engine.max_num_batched_tokens = 123;
  c.engine.enable_chunked_prefill = false;
  c.engine.decode_load = engine::DecodeLoad::Logical;
  // spec_num_draft_tokens stays none: it requires decode_speedup_ratio 1 (set to 2.5 below).
  c.engine.spec_accept_rates = {0.5, 0.25};
  c.engine.spec_seed = 0xFFFFFFFFFFFFFFF0ull;
  // preemption_mode stays lifo: fifo applies to vllm only (DumpRoundTripsNonDefaultValues).
  c.engine.hash_seed = 0xFFFFFFFFFFFFFFFFull;
  c.engine.chain_seed = 42;
  c.engine.token_seed = 9;
  c.engine.kv_event_visibility = engine::KvEventVisibility::PassStart;
  c.engine.timing_model = engine::TimingModelKind::Fixed;
  c.engine.fixed_prefill_ms = 0.1;
  c.engine.fixed_decode_ms = 1e-9;
  c.engine.speedup_ratio = 1.0 / 3.0;
  c.engine.decode_speedup_ratio = 2.5;
  c.engine.allow_empty_output = true;
  // [engine.sglang] stays default: it applies to sglang only (DumpRoundTripsNonDefaultValues).
  c.service.submit_sndhwm = 5;
  c.service.max_message_size = 1 << 20;
  c.service.startup_time_s = 0.25;
  c.endpoints.submit = {"ipc:///tmp/mocker \"quoted\"\\dir/submit", false};
  c.endpoints.fpm = {"tcp://collector:20380", true};
  c.kv_events.topic = "kv@10.1.2.3:8000@Qwen/Qwen3-0.6B";
  c.kv_events.layout = protocol::KvLayout::P12;
  c.kv_events.replay_layout = publishers::ReplayLayout::R2;
  c.kv_events.force_uint64_hashes = true;
  c.kv_events.clear_on_start = true;
  c.kv_events.replay_enabled = false;
  c.fpm.worker_id = "18446744073709551615";
  c.log_level = spdlog::level::trace;
  return c;
}

TEST(ServiceConfigTest, DumpRoundTripsDefaults) {
  const std::string text = dumpServiceConfig(ServiceConfig{});
  const auto r = parseServiceConfig(text, "dump.toml");
  ASSERT_TRUE(r.has_value()) << r.error().toString() << "\n" << text;
  EXPECT_TRUE(*r == ServiceConfig{});
}

TEST(ServiceConfigTest, DumpRoundTripsNonDefaultValues) {
  const ServiceConfig c = nonDefaultConfig();
  ASSERT_TRUE(validateServiceConfig(c).has_value()) << validateServiceConfig(c).error().message;
  const std::string text = dumpServiceConfig(c);
  const auto r = parseServiceConfig(text, "dump.toml");
  ASSERT_TRUE(r.has_value()) << r.error().toString() << "\n" << text;
  EXPECT_TRUE(*r == c) << text << "\n---\n" << dumpServiceConfig(*r);
  EXPECT_EQ(r->engine.hash_seed, 0xFFFFFFFFFFFFFFFFull);
  EXPECT_EQ(r->engine.speedup_ratio, 1.0 / 3.0);  // bit-exact doubles
  EXPECT_EQ(r->endpoints.submit.endpoint, c.endpoints.submit.endpoint);
  EXPECT_FALSE(r->engine.max_num_seqs.has_value());

  // Keys of one engine type, each with that type.
  ServiceConfig fifo;  // vllm: the engine type whose preemption_mode matters
  fifo.engine.preemption_mode = engine::PreemptionMode::Fifo;
  ServiceConfig sglang;
  sglang.engine.engine_type = engine::EngineType::Sglang;
  sglang.engine.sglang = {.schedule_policy = engine::SchedulePolicy::Lpm,
                          .page_size = 4,
                          .max_prefill_tokens = 100,
                          .chunked_prefill_size = 64,
                          .clip_max_new_tokens = 7,
                          .schedule_conservativeness = 0.3};
  for (const ServiceConfig& one : {fifo, sglang}) {
    ASSERT_TRUE(validateServiceConfig(one).has_value())
        << validateServiceConfig(one).error().message;
    const auto f = parseServiceConfig(dumpServiceConfig(one), "dump.toml");
    ASSERT_TRUE(f.has_value()) << f.error().toString();
    EXPECT_TRUE(*f == one) << dumpServiceConfig(one);
  }
}

TEST(ServiceConfigTest, DumpListsEveryKey) {
  const std::string text = dumpServiceConfig(ServiceConfig{});
  const auto keys = configKeys();
  EXPECT_GE(keys.size(), 55u);
  for (const std::string& key : keys) {
    const auto dot = key.rfind('.');
    std::string table = "[";
    table.append(key, 0, dot).append("]");
    std::string line = "\n";
    line.append(key, dot + 1).append(" = ");
    const auto at = text.find(table);
    ASSERT_NE(at, std::string::npos) << table;
    EXPECT_NE(text.find(line, at), std::string::npos) << key;
  }
}

TEST(ServiceConfigTest, EqualityNoticesAnyDifference) {
  ServiceConfig a;
  ServiceConfig b;
  EXPECT_TRUE(a == b);
  b.kv_events.clear_on_start = true;
  EXPECT_FALSE(a == b);
  b = a;
  b.engine.sglang.page_size = 2;
  EXPECT_FALSE(a == b);
  b = a;
  b.engine.timing_profile = engine::TimingProfile{};
  EXPECT_FALSE(a == b);
}

TEST(ServiceConfigTest, FlagTextThatIsNotUtf8IsRefusedSoTheDumpReloads) {
  // Found by cli_text_fuzz: `--kv-events-topic $'\xff'` was accepted and `config --dump` then
  // wrote TOML that toml++ refuses. Every string key is checked, not only the topic.
  for (const char* key : {"kv_events.topic", "fpm.worker_id", "endpoints.submit.endpoint",
                          "security.server_secret_key_file"}) {
    ServiceConfig c;
    const auto bad = setConfigValue(c, key, std::string("kv\xff\xfe", 4));
    ASSERT_FALSE(bad.has_value()) << key;
    EXPECT_NE(bad.error().message.find("not valid UTF-8 (byte 2)"), std::string::npos)
        << bad.error().message;
  }
  ServiceConfig c;
  ASSERT_TRUE(setConfigValue(c, "kv_events.topic", "k\xc3\xa9y").has_value());  // "kéy"
  const auto reloaded = parseServiceConfig(dumpServiceConfig(c), "dump.toml");
  ASSERT_TRUE(reloaded.has_value()) << reloaded.error().message;
  EXPECT_EQ(reloaded->kv_events.topic, "k\xc3\xa9y");
}

TEST(ServiceConfigTest, SetConfigValueUsesFileSpellings) {
  ServiceConfig c;
  ASSERT_TRUE(setConfigValue(c, "engine.max_num_seqs", "none").has_value());
  EXPECT_FALSE(c.engine.max_num_seqs.has_value());
  ASSERT_TRUE(setConfigValue(c, "engine.max_num_seqs", "12").has_value());
  EXPECT_EQ(c.engine.max_num_seqs, 12u);
  ASSERT_TRUE(setConfigValue(c, "engine.hash_seed", "18446744073709551615").has_value());
  EXPECT_EQ(c.engine.hash_seed, 18446744073709551615u);
  ASSERT_TRUE(setConfigValue(c, "kv_events.layout", "MAP").has_value());
  EXPECT_EQ(c.kv_events.layout, protocol::KvLayout::Map);
  ASSERT_TRUE(setConfigValue(c, "engine.speedup_ratio", "0.5").has_value());
  EXPECT_EQ(c.engine.speedup_ratio, 0.5);
  ASSERT_TRUE(setConfigValue(c, "fpm.enabled", "false").has_value());
  EXPECT_FALSE(c.fpm.enabled);

  EXPECT_FALSE(setConfigValue(c, "engine.num_gpu_blocks", "12x").has_value());
  EXPECT_FALSE(setConfigValue(c, "engine.num_gpu_blocks", "-1").has_value());
  EXPECT_FALSE(setConfigValue(c, "engine.hash_seed", "18446744073709551616").has_value());
  EXPECT_FALSE(setConfigValue(c, "fpm.enabled", "maybe").has_value());
  const auto unknown = setConfigValue(c, "engine.nope", "1");
  ASSERT_FALSE(unknown.has_value());
  EXPECT_NE(unknown.error().message.find("engine.nope"), std::string::npos);
}

// spec_accept_rates is an array of numbers in a file (integers allowed) and comma-separated
// numbers on the command line; anything else is refused with the element that is wrong.
TEST(ServiceConfigTest, NumberListsFromFilesAndFlags) {
  KeyOrigins origins;
  auto c = parseServiceConfigOver(
      ServiceConfig{},
      "[engine]\nspec_num_draft_tokens = 3\nspec_accept_rates = [0.9, 1, 0.25]\n"
      "num_gpu_blocks = \"none\"\n",
      "f.toml", origins);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->engine.spec_num_draft_tokens, 3u);
  EXPECT_EQ(c->engine.spec_accept_rates, (std::vector<double>{0.9, 1.0, 0.25}));
  EXPECT_FALSE(c->engine.num_gpu_blocks.has_value());
  EXPECT_TRUE(finishServiceConfig(*c, origins).has_value());

  auto empty = parseServiceConfigOver(ServiceConfig{}, "[engine]\nspec_accept_rates = []\n",
                                      "f.toml", origins);
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->engine.spec_accept_rates.empty());

  for (const char* text :
       {"[engine]\nspec_accept_rates = [0.5, \"x\"]\n", "[engine]\nspec_accept_rates = [\"x\"]\n",
        "[engine]\nspec_accept_rates = 0.5\n"}) {
    const auto bad = parseServiceConfigOver(ServiceConfig{}, text, "f.toml", origins);
    ASSERT_FALSE(bad.has_value()) << text;
    EXPECT_NE(bad.error().message.find("engine.spec_accept_rates"), std::string::npos)
        << bad.error().message;
  }

  ServiceConfig flags;
  ASSERT_TRUE(setConfigValue(flags, "engine.spec_accept_rates", "1,0.5").has_value());
  EXPECT_EQ(flags.engine.spec_accept_rates, (std::vector<double>{1.0, 0.5}));
  ASSERT_TRUE(setConfigValue(flags, "engine.spec_accept_rates", "").has_value());
  EXPECT_TRUE(flags.engine.spec_accept_rates.empty());
  const auto bad = setConfigValue(flags, "engine.spec_accept_rates", "0.5,,1");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("element 1"), std::string::npos) << bad.error().message;
  // Out of range is the engine's rule, reported with the key.
  ASSERT_TRUE(setConfigValue(flags, "engine.spec_accept_rates", "0.5,2").has_value());
  const auto range = finishServiceConfig(flags, {{"engine.spec_accept_rates", "--flag"}});
  ASSERT_FALSE(range.has_value());
  EXPECT_EQ(range.error().message.rfind("--flag: engine.spec_accept_rates must be finite and in "
                                        "[0, 1] each",
                                        0),
            0u)
      << range.error().message;
  ASSERT_TRUE(setConfigValue(flags, "engine.decode_load", "Logical").has_value());
  EXPECT_EQ(flags.engine.decode_load, engine::DecodeLoad::Logical);
  EXPECT_FALSE(setConfigValue(flags, "engine.decode_load", "virtual").has_value());
}

// The KV handoff keys, from a file and from flags: an engine-only use (mocker replay, which runs
// disaggregated workers) takes them; a service, always aggregated, refuses a changed value.
TEST(ServiceConfigTest, HandoffKeysApplyToServeAndReplay) {
  KeyOrigins origins;
  auto c = parseServiceConfigOver(ServiceConfig{},
                                  "[engine]\nkv_bytes_per_token = 1000000\n"
                                  "kv_transfer_bandwidth_gbps = 1\n"
                                  "kv_transfer_charge = \"Missing_Blocks\"\n"
                                  "kv_hold_timeout_ms = \"none\"\n",
                                  "f.toml", origins);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->engine.kv_bytes_per_token, 1000000u);
  EXPECT_EQ(c->engine.kv_transfer_bandwidth_gbps, 1.0);
  EXPECT_EQ(c->engine.kv_transfer_charge, engine::KvTransferCharge::MissingBlocks);
  EXPECT_FALSE(c->engine.kv_hold_timeout_ms.has_value());
  EXPECT_TRUE(finishServiceConfig(*c, origins, ConfigUse::EngineOnly).has_value());
  EXPECT_TRUE(finishServiceConfig(*c, origins, ConfigUse::Serve).has_value());
  EXPECT_TRUE(finishServiceConfig(ServiceConfig{}, {}, ConfigUse::Serve).has_value());

  ServiceConfig flags;
  ASSERT_TRUE(setConfigValue(flags, "engine.kv_transfer_bandwidth_gbps", "0").has_value());
  const auto bad = finishServiceConfig(
      flags, {{"engine.kv_transfer_bandwidth_gbps", "--kv-transfer-bandwidth-gbps"}},
      ConfigUse::EngineOnly);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message.rfind("--kv-transfer-bandwidth-gbps: "
                                      "engine.kv_transfer_bandwidth_gbps must be finite and > 0",
                                      0),
            0u)
      << bad.error().message;
  EXPECT_FALSE(setConfigValue(flags, "engine.kv_transfer_charge", "all").has_value());
  EXPECT_FALSE(setConfigValue(flags, "engine.kv_bytes_per_token", "-1").has_value());
  ASSERT_TRUE(setConfigValue(flags, "engine.kv_hold_timeout_ms", "-5").has_value());
  EXPECT_FALSE(finishServiceConfig(flags, {}, ConfigUse::EngineOnly).has_value());
}

TEST(ServiceConfigTest, LaterLayerOverridesEarlierAndOriginsFollow) {
  KeyOrigins origins;
  auto c =
      parseServiceConfigOver(ServiceConfig{}, "[engine]\nnum_gpu_blocks = 0\n", "f.toml", origins);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(origins["engine.num_gpu_blocks"], "f.toml:2:18");
  // Without an override the file's bad value is reported at its location...
  const auto bad = finishServiceConfig(*c, origins);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message.rfind("f.toml:2:18: engine.num_gpu_blocks", 0), 0u)
      << bad.error().message;
  // ...and a flag layered on top wins.
  ASSERT_TRUE(setConfigValue(*c, "engine.num_gpu_blocks", "5").has_value());
  origins["engine.num_gpu_blocks"] = "--num-gpu-blocks";
  const auto good = finishServiceConfig(*c, origins);
  ASSERT_TRUE(good.has_value()) << good.error().message;
  EXPECT_EQ(good->engine.num_gpu_blocks, 5u);
}

TEST(ServiceConfigTest, MissingFileIsNotFound) {
  const auto r = loadServiceConfig("/nonexistent/mocker.toml");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::NotFound);
  EXPECT_NE(r.error().message.find("/nonexistent/mocker.toml"), std::string::npos);
}

TEST(ServiceConfigTest, ErrorsReportTheEarliestProblemInTheFile) {
  const auto r = parseServiceConfig("[logging]\nlevel = \"x\"\n[engine]\nbogus = 1\n", "f.toml");
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("f.toml:2:9"), std::string::npos) << r.error().message;
}

// --- Timing profiles --------------------------------------------------------------------------

TEST(TimingProfileTest, LoadsAGoodProfileRelativeToTheConfigFile) {
  TempDir dir;
  dir.write("profile.json", kGoodProfile);
  const std::string config =
      dir.write("mocker.toml",
                "[engine]\ntiming_model = \"interpolated\"\ntiming_profile_path = "
                "\"profile.json\"\n");
  const auto r = loadServiceConfig(config);
  ASSERT_TRUE(r.has_value()) << r.error().toString();
  ASSERT_TRUE(r->engine.timing_profile.has_value());
  EXPECT_EQ(r->engine.timing_profile->prefill_isl, (std::vector<double>{8, 512, 8192}));
  EXPECT_EQ(r->engine.timing_profile->decode_itl[1][1], 34.0);
  EXPECT_EQ(r->timing_profile_path, (dir.path() / "profile.json").string());
  // The dump names the resolved path, so it loads back from anywhere.
  const auto again = parseServiceConfig(dumpServiceConfig(*r), "elsewhere/dump.toml");
  ASSERT_TRUE(again.has_value()) << again.error().toString();
  EXPECT_TRUE(*again == *r);
}

// A path given relative to the working directory (a flag) becomes absolute in the effective
// configuration, so that its dump names the same file when loaded from another directory.
TEST(TimingProfileTest, AFlagsRelativePathIsMadeAbsoluteSoTheDumpLoadsFromAnywhere) {
  TempDir dir;
  const std::string file = dir.write("profile.json", kGoodProfile);
  const std::string relative = std::filesystem::relative(file).string();
  ASSERT_TRUE(std::filesystem::path(relative).is_relative()) << relative;
  ServiceConfig c;
  ASSERT_TRUE(setConfigValue(c, "engine.timing_model", "interpolated").has_value());
  ASSERT_TRUE(setConfigValue(c, "engine.timing_profile_path", relative).has_value());
  const auto r = finishServiceConfig(c, {});
  ASSERT_TRUE(r.has_value()) << r.error().toString();
  EXPECT_TRUE(std::filesystem::path(r->timing_profile_path).is_absolute())
      << r->timing_profile_path;
  EXPECT_TRUE(std::filesystem::equivalent(r->timing_profile_path, file));
  const auto again = parseServiceConfig(dumpServiceConfig(*r), "elsewhere/dump.toml");
  ASSERT_TRUE(again.has_value()) << again.error().toString();
  EXPECT_TRUE(*again == *r);
}

struct BadProfile {
  const char* name;
  const char* json;
  const char* fragment;
};

const std::vector<BadProfile> kBadProfiles = {
    {"NotJson", "{ prefill_isl: ", "invalid JSON"},
    {"NotAnObject", "[1, 2]", "expected a JSON object"},
    {"MissingArray",
     R"({"prefill_isl": [1], "prefill_ttft_ms": [1], "decode_active_kv_tokens": [1],
         "decode_context_length": [1]})",
     "missing array 'decode_itl'"},
    {"UnknownKey",
     R"({"prefill_isl": [1], "prefill_ttft_ms": [1], "decode_active_kv_tokens": [1],
         "decode_context_length": [1], "decode_itl": [[1]], "comment": 1})",
     "unknown key 'comment'"},
    {"StringElement",
     R"({"prefill_isl": [1, "2"], "prefill_ttft_ms": [1, 2], "decode_active_kv_tokens": [1],
         "decode_context_length": [1], "decode_itl": [[1]]})",
     "prefill_isl[1] must be a number"},
    {"NotIncreasing",
     R"({"prefill_isl": [1, 1], "prefill_ttft_ms": [1, 2], "decode_active_kv_tokens": [1],
         "decode_context_length": [1], "decode_itl": [[1]]})",
     "prefill_isl must be strictly increasing"},
    {"LengthMismatch",
     R"({"prefill_isl": [1, 2], "prefill_ttft_ms": [1], "decode_active_kv_tokens": [1],
         "decode_context_length": [1], "decode_itl": [[1]]})",
     "prefill_ttft_ms must be as long as prefill_isl"},
    {"RowCountMismatch",
     R"({"prefill_isl": [1], "prefill_ttft_ms": [1], "decode_active_kv_tokens": [1, 2],
         "decode_context_length": [1], "decode_itl": [[1]]})",
     "decode_itl must be 2 rows"},
    {"ColumnCountMismatch",
     R"({"prefill_isl": [1], "prefill_ttft_ms": [1], "decode_active_kv_tokens": [1],
         "decode_context_length": [1, 2], "decode_itl": [[1]]})",
     "decode_itl[0] must be 2 columns"},
    {"EmptyArray",
     R"({"prefill_isl": [], "prefill_ttft_ms": [], "decode_active_kv_tokens": [1],
         "decode_context_length": [1], "decode_itl": [[1]]})",
     "prefill_isl must be a non-empty array"},
    // Found by timing_profile_fuzz: nlohmann throws out_of_range, not parse_error, for this.
    {"NumberBeyondDouble",
     R"({"prefill_isl": [8, 1e999], "prefill_ttft_ms": [1, 2], "decode_active_kv_tokens": [1],
         "decode_context_length": [1], "decode_itl": [[1]]})",
     "invalid JSON ([json.exception.out_of_range.406] number overflow parsing '1e999')"},
};

class BadProfileTest : public ::testing::TestWithParam<BadProfile> {};

TEST_P(BadProfileTest, ErrorNamesTheFileAndTheProblem) {
  const BadProfile& bad = GetParam();
  TempDir dir;
  const std::string path = dir.write("bad.json", bad.json);
  const auto r = loadTimingProfile(path);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find(path), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find(bad.fragment), std::string::npos) << r.error().message;

  // Through a config file the error also names the key and where it was set.
  const std::string config = dir.write(
      "c.toml", "[engine]\ntiming_model = \"interpolated\"\ntiming_profile_path = \"bad.json\"\n");
  const auto c = loadServiceConfig(config);
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find(config + ":3:23: engine.timing_profile_path"), std::string::npos)
      << c.error().message;
  EXPECT_NE(c.error().message.find(bad.fragment), std::string::npos) << c.error().message;
}

INSTANTIATE_TEST_SUITE_P(Catalogue, BadProfileTest, ::testing::ValuesIn(kBadProfiles),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// Every configuration key must do something. This table says, for each key, what reads it; a
// key added to the table in config_keys.cpp without an entry here fails, and so does an entry
// whose key is gone. Before adding an entry, make sure the reader exists and a test pins the
// effect; a key that cannot act (like vLLM's kv_events.max_queue_size) is refused instead
// (detail::unsupportedKeyError), never accepted and ignored.
TEST(ServiceConfigTest, EveryKeyHasAReader) {
  std::map<std::string, std::string> readers = {
      // EngineConfig fields: engine::Engine reads them (engine tests pin each).
      {"engine.engine_type", "engine"},
      {"engine.num_gpu_blocks", "engine"},
      {"engine.block_size", "engine"},
      {"engine.max_model_len", "engine"},
      {"engine.max_num_seqs", "engine"},
      {"engine.max_num_batched_tokens", "engine"},
      {"engine.enable_prefix_caching", "engine"},
      {"engine.enable_chunked_prefill", "engine"},
      {"engine.enforce_eager", "engine (vllm, roofline CUDA-graph padding)"},
      {"engine.preemption_mode", "engine (vllm)"},
      {"engine.dp_size", "engine, server.cpp (sockets per rank)"},
      {"engine.hash_seed", "engine"},
      {"engine.chain_seed", "engine"},
      {"engine.token_seed", "engine"},
      {"engine.kv_event_visibility", "engine, server.cpp (publish at pass start)"},
      {"engine.worker_type", "engine, server.cpp (handoff socket, handoff submits)"},
      {"engine.timing_model", "engine"},
      {"engine.timing_profile_path", "finishServiceConfig (loads engine.timing_profile)"},
      {"engine.fixed_prefill_ms", "engine (timing_model fixed)"},
      {"engine.fixed_decode_ms", "engine (timing_model fixed)"},
      {"engine.speedup_ratio", "engine (durations), server.cpp (pacing)"},
      {"engine.decode_speedup_ratio", "engine"},
      {"engine.decode_load", "engine (vllm/trtllm decode time)"},
      {"engine.spec_num_draft_tokens", "engine (speculative bursts)"},
      {"engine.spec_accept_rates", "engine (speculative bursts)"},
      {"engine.spec_seed", "engine (speculative bursts)"},
      {"engine.kv_bytes_per_token",
       "engine (handoff transfer time), server.cpp (kv_fetch reply time)"},
      {"engine.kv_transfer_bandwidth_gbps", "engine (disaggregated handoff transfer time)"},
      {"engine.kv_transfer_charge", "engine (decode worker reservation)"},
      {"engine.kv_hold_timeout_ms", "engine (prefill worker hold timeout)"},
      {"faults.inject", "server_faults.cpp (FaultPlan per worker; FaultServeTest)"},
      {"faults.seed", "server_faults.cpp (FaultPlan's request draws; FaultPlanTest)"},
      {"faults.log", "server_faults.cpp and fleet.cpp (FaultLog; FaultServeTest)"},
      {"faults.admin", "server_faults.cpp and fleet.cpp (FaultAdmin; fault_admin_test.py)"},
      {"faults.admin_key_file", "fault_admin.cpp loadAdminKey (fault_admin_test.py)"},
      {"engine.num_g2_blocks", "engine/offload.cpp offloadSettings (OffloadTest)"},
      {"engine.num_g3_blocks", "engine/offload.cpp offloadSettings (OffloadTest)"},
      {"engine.offload_batch_size", "engine/offload.cpp pumpOffloads (OffloadTest)"},
      {"engine.offload_gpu_to_host_gbps", "engine/offload.cpp offloadSettings (OffloadTest)"},
      {"engine.offload_host_to_gpu_gbps", "engine/offload.cpp offloadSettings (OffloadTest)"},
      {"engine.offload_host_to_disk_gbps", "engine/offload.cpp offloadSettings (OffloadTest)"},
      {"engine.offload_disk_to_host_gbps", "engine/offload.cpp offloadSettings (OffloadTest)"},
      {"engine.max_loras", "engine/scheduler_lora.cpp (LoraScheduleTest)"},
      {"engine.max_cpu_loras", "engine/lora.cpp LoraResidency (LoraLoadTest)"},
      {"engine.lora_load_ms", "engine/scheduler_lora.cpp loadLoras (LoraLoadTest)"},
      {"engine.startup_time_s", "server.cpp (submits not read before it)"},
      {"engine.sglang.schedule_policy", "engine (sglang)"},
      {"engine.sglang.page_size", "engine (sglang)"},
      {"engine.sglang.max_prefill_tokens", "engine (sglang)"},
      {"engine.sglang.chunked_prefill_size", "engine (sglang)"},
      {"engine.sglang.clip_max_new_tokens", "engine (sglang)"},
      {"engine.sglang.schedule_conservativeness", "engine (sglang)"},
      {"engine.trtllm.capacity_scheduler_policy",
       "single value (guaranteed_no_evict): anything else is refused"},
      {"service.allow_empty_output", "engine (submit validation)"},
      {"service.max_buffered_outputs", "server.cpp handleSubmit (per-request output buffer)"},
      {"service.fpm_heartbeat_interval_s", "server.cpp → FpmPublisher"},
      {"service.submit_sndhwm", "server.cpp makeRouter (ZMQ_SNDHWM)"},
      {"service.submit_rcvhwm", "server.cpp makeRouter (ZMQ_RCVHWM)"},
      {"service.max_message_size", "server.cpp makeRouter (ZMQ_MAXMSGSIZE)"},
      {"service.max_submit_backlog", "server.cpp submitsPaused"},
      {"limits.max_requests_per_client", "server.cpp limitBroken"},
      {"limits.max_requests", "server.cpp limitBroken"},
      {"limits.max_clients", "server.cpp limitBroken"},
      {"limits.max_request_tokens", "server.cpp limitBroken"},
      {"security.curve", "server.cpp startSecurity / secure (every ROUTER)"},
      {"security.server_secret_key", "security_keys.cpp loadCurveServerKeys"},
      {"security.server_secret_key_file", "security_keys.cpp loadCurveServerKeys"},
      {"security.client_public_keys",
       "security_keys.cpp loadCurveServerKeys → ZapHandler allow-list"},
      {"security.client_public_key_files",
       "security_keys.cpp loadCurveServerKeys → ZapHandler allow-list"},
      {"security.curve_publishers", "server.cpp publisherSecurity (PUB sockets)"},
      {"security.worker_public_key_files",
       "security_keys.cpp loadCurveServerKeys → ZapHandler handoff-domain allow-list"},
      {"security.worker_secret_key_file",
       "security_keys.cpp loadHandoffClientKeys → source DEALERs"},
      {"security.handoff_server_key_file",
       "security_keys.cpp loadHandoffClientKeys → source DEALERs"},
      {"service.linger_ms", "server.cpp (ZMQ_LINGER of every socket)"},
      {"endpoints.submit.endpoint", "server.cpp makeRouter"},
      {"endpoints.submit.connect", "server.cpp makeRouter"},
      {"endpoints.cancel.endpoint", "server.cpp makeRouter"},
      {"endpoints.cancel.connect", "server.cpp makeRouter"},
      {"endpoints.kv_events.endpoint", "server.cpp → ZmqPubSink"},
      {"endpoints.kv_events.connect", "server.cpp → ZmqPubSink"},
      {"endpoints.kv_replay.endpoint", "server.cpp → ZmqReplayServer"},
      {"endpoints.kv_replay.connect",
       "server.cpp → ZmqReplayServer "
       "(ServerTest.KvReplayConnectDialsABoundPeerAndServesItReplays)"},
      {"endpoints.fpm.endpoint", "server.cpp → ZmqPubSink"},
      {"endpoints.fpm.connect", "server.cpp → ZmqPubSink"},
      {"endpoints.handoff.endpoint", "server.cpp handoff ROUTER (prefill worker)"},
      {"endpoints.handoff.connect", "server.cpp handoff ROUTER (prefill worker)"},
      {"endpoints.handoff.advertise", "server.cpp publishHandoffs (ticket source)"},
      {"kv_events.enabled", "server.cpp"},
      {"kv_events.replay_enabled", "server.cpp"},
      {"kv_events.topic", "server.cpp → KvEventPublisher"},
      {"kv_events.hwm", "server.cpp → ZmqPubSink (ZMQ_SNDHWM)"},
      {"kv_events.buffer_steps", "server.cpp → KvEventPublisher (replay ring)"},
      {"kv_events.layout", "server.cpp → KvEventPublisher"},
      {"kv_events.replay_layout", "server.cpp → KvEventPublisher"},
      {"kv_events.parent_root", "server.cpp → KvEventPublisher"},
      {"kv_events.force_uint64_hashes", "server.cpp → KvEventPublisher"},
      {"kv_events.clear_on_start", "server.cpp"},
      {"fpm.enabled", "server.cpp"},
      {"fpm.worker_id", "server.cpp → FpmPublisher"},
      {"logging.level", "mocker serve → setupLogging"},
      {"logging.format", "mocker serve → setupLogging (LoggingTest.JsonFormat*)"},
      {"logging.stats_interval_s", "server.cpp logStats (HttpServeTest.StatsLine*)"},
      {"service.served_model_name", "metrics.cpp model_name label (MetricsTest)"},
      {"service.worker_label", "metrics.cpp worker label (PrometheusTextTest.WorkerLabel*)"},
      {"service.handoff_fetch_timeout_ms", "server.cpp (decode worker kv_fetch deadline)"},
      {"service.max_handoff_sources", "server.cpp (decode worker DEALERs)"},
      {"endpoints.http.endpoint", "http_server.cpp bind (HttpServeTest)"},
      {"endpoints.http.enabled", "server.cpp init (HttpServeTest.NoHttp*)"},
      {"fleet.num_workers", "fleet.cpp Fleet::create (FleetTest)"},
  };
  // The roofline deployment keys: buildRooflineConfig reads them (RooflineSettingsTest).
  for (const std::string& key : configKeys()) {
    if (isRooflineKey(key)) readers.emplace(key, "roofline_settings.cpp buildRooflineConfig");
  }
  std::set<std::string> keys;
  for (const std::string& key : configKeys()) {
    keys.insert(key);
    EXPECT_TRUE(readers.contains(key))
        << key << " has no reader listed: say what reads it here, or refuse the key";
  }
  for (const auto& [key, reader] : readers) {
    EXPECT_TRUE(keys.contains(key)) << key << " is listed but is no longer a key";
  }
  // Refused keys stay out of the table.
  EXPECT_FALSE(keys.contains("kv_events.max_queue_size"));
}

}  // namespace
}  // namespace mocker::service
