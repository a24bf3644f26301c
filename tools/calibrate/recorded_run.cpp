#include "tools/calibrate/recorded_run.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include "base/lines.h"
#include "tools/calibrate/csv_cells.h"
#include "tools/replay/mooncake_trace.h"
#include "tools/replay/run_identity.h"

namespace mocker::calibrate {
namespace {

using nlohmann::json;

/// A turn of the trace with the key that pairs it with recorded and simulated requests.
struct TraceTurn {
  std::string key;
  const replay::Turn* turn = nullptr;
  double arrival_ms = 0.0;  ///< first turns only (later turns depend on the replay)
};

std::string turnKey(const std::string& session_id, std::size_t turn_index) {
  return session_id + "#" + std::to_string(turn_index);
}

/// Every turn in source-line order.
std::vector<TraceTurn> traceTurns(const replay::Workload& trace) {
  std::vector<TraceTurn> turns;
  for (const replay::Session& s : trace.sessions) {
    for (std::size_t i = 0; i < s.turns.size(); ++i) {
      turns.push_back(
          {turnKey(s.session_id, i), &s.turns[i], i == 0 ? s.first_arrival_ms.value_or(0.0) : 0.0});
    }
  }
  std::stable_sort(turns.begin(), turns.end(), [](const TraceTurn& a, const TraceTurn& b) {
    return a.turn->line < b.turn->line;
  });
  return turns;
}

using detail::parseNumber;
using detail::rowError;
using detail::singleQuoted;
using detail::splitCsv;

constexpr const char* kCsvColumns[] = {"request_id",    "arrival_ms", "input_length",
                                       "output_length", "ttft_ms",    "e2e_ms"};

/// Checks one recorded request against its trace turn (lengths, arrival of a first turn).
Status checkAgainstTrace(const RecordedRequest& r, const TraceTurn& t, bool first_turn,
                         std::string_view source, std::size_t line) {
  if (r.input_length != t.turn->input_length) {
    return rowError(source, line, "input_length",
                    std::to_string(r.input_length) + " disagrees with the trace (line " +
                        std::to_string(t.turn->line) + ": " + std::to_string(t.turn->input_length) +
                        ")");
  }
  if (r.output_length != t.turn->output_length) {
    return rowError(source, line, "output_length",
                    std::to_string(r.output_length) + " disagrees with the trace (line " +
                        std::to_string(t.turn->line) + ": " +
                        std::to_string(t.turn->output_length) + ")");
  }
  if (first_turn && std::abs(r.arrival_ms - t.arrival_ms) > 1e-3) {
    std::ostringstream m;
    m << r.arrival_ms << " disagrees with the trace's timestamp (line " << t.turn->line << ": "
      << t.arrival_ms << ")";
    return rowError(source, line, "arrival_ms", m.str());
  }
  if (!(r.ttft_ms >= 0.0) || !(r.e2e_ms >= r.ttft_ms)) {
    return rowError(source, line, "e2e_ms", "expected 0 <= ttft_ms <= e2e_ms");
  }
  return {};
}

}  // namespace

Result<std::vector<RecordedRequest>> parseGroundTruthCsv(std::string_view text,
                                                         std::string_view source,
                                                         const replay::Workload& trace) {
  const std::vector<TraceTurn> turns = traceTurns(trace);
  std::vector<RecordedRequest> out;
  const auto row = [&](const std::vector<std::string_view>& cells, const detail::CsvColumns& column,
                       std::size_t line_no) -> Status {
    if (out.size() == turns.size()) {
      return invalidArgument(std::string(source) + " line " + std::to_string(line_no) +
                             ": more rows than the trace has requests (" +
                             std::to_string(turns.size()) + ")");
    }
    const TraceTurn& t = turns[out.size()];
    RecordedRequest r{.key = t.key};
    const auto cell = [&](const char* name) { return cells[column.at(name)]; };
    const std::string_view id = cell("request_id");
    if (t.turn->request_id && id != *t.turn->request_id) {
      return rowError(source, line_no, "request_id",
                      singleQuoted(id) + " but the trace's line " + std::to_string(t.turn->line) +
                          " is " + singleQuoted(*t.turn->request_id));
    }
    for (const auto& [name, target] :
         {std::pair{"arrival_ms", &r.arrival_ms}, std::pair{"ttft_ms", &r.ttft_ms},
          std::pair{"e2e_ms", &r.e2e_ms}}) {
      const Result<double> v = parseNumber(cell(name));
      if (!v) return rowError(source, line_no, name, v.error().message);
      *target = *v;
    }
    for (const auto& [name, target] : {std::pair{"input_length", &r.input_length},
                                       std::pair{"output_length", &r.output_length}}) {
      const Result<double> v = parseNumber(cell(name));
      if (!v || *v < 0 || *v != std::floor(*v) || *v > 4e9) {
        return rowError(source, line_no, name, "expected a non-negative integer");
      }
      *target = static_cast<std::uint32_t>(*v);
    }
    const bool first_turn = t.key.ends_with("#0");
    if (Status s = checkAgainstTrace(r, t, first_turn, source, line_no); !s) return s;
    out.push_back(std::move(r));
    return {};
  };
  if (Status s = detail::forEachCsvRow(text, source, kCsvColumns, row); !s) return s.error();
  if (out.size() != turns.size()) {
    return invalidArgument(std::string(source) + ": " + std::to_string(out.size()) +
                           " rows but the trace has " + std::to_string(turns.size()) + " requests");
  }
  return out;
}

namespace {

Result<double> jsonNumber(const json& row, const char* field, std::string_view source,
                          std::size_t line) {
  const auto it = row.find(field);
  if (it == row.end()) return rowError(source, line, field, "missing");
  if (!it->is_number()) return rowError(source, line, field, "expected a number");
  return it->get<double>();
}

}  // namespace

Result<std::vector<RecordedRequest>> parseRequestsJsonl(std::string_view text,
                                                        std::string_view source,
                                                        const replay::Workload& trace) {
  std::map<std::string, const replay::Turn*, std::less<>> by_key;
  for (const TraceTurn& t : traceTurns(trace)) by_key.emplace(t.key, t.turn);
  std::vector<RecordedRequest> out;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const json row = json::parse(line, nullptr, false);
    if (!row.is_object()) {
      return invalidArgument(std::string(source) + " line " + std::to_string(line_no) +
                             ": not a JSON object");
    }
    const auto status = row.find("terminal_status");
    if (status == row.end() || !status->is_string()) {
      return rowError(source, line_no, "terminal_status", "missing or not a string");
    }
    if (*status != "completed") continue;
    const auto sid = row.find("session_id");
    const auto turn = row.find("turn_index");
    if (sid == row.end() || !sid->is_string()) {
      return rowError(source, line_no, "session_id", "missing or not a string");
    }
    if (turn == row.end() || !turn->is_number_unsigned()) {
      return rowError(source, line_no, "turn_index", "missing or not an unsigned integer");
    }
    RecordedRequest r{.key = turnKey(sid->get<std::string>(), turn->get<std::size_t>())};
    const auto found = by_key.find(r.key);
    if (found == by_key.end()) {
      return rowError(source, line_no, "session_id",
                      "session '" + sid->get<std::string>() + "' turn " +
                          std::to_string(turn->get<std::size_t>()) + " is not in the trace");
    }
    for (const auto& [name, target] :
         {std::pair{"arrival_time_ms", &r.arrival_ms}, std::pair{"ttft_ms", &r.ttft_ms},
          std::pair{"e2e_latency_ms", &r.e2e_ms}}) {
      const Result<double> v = jsonNumber(row, name, source, line_no);
      if (!v) return v.error();
      *target = *v;
    }
    for (const auto& [name, target] : {std::pair{"input_length", &r.input_length},
                                       std::pair{"output_length", &r.output_length}}) {
      const auto it = row.find(name);
      if (it == row.end() || !it->is_number_unsigned() ||
          it->get<std::uint64_t>() > 4'000'000'000) {
        return rowError(source, line_no, name, "missing or not an unsigned integer");
      }
      *target = it->get<std::uint32_t>();
    }
    const TraceTurn t{r.key, found->second, r.arrival_ms};
    // Arrivals of replayed requests are dispatch times (speedup applied), so only lengths and
    // the latency order are checked here.
    if (Status s = checkAgainstTrace(r, t, false, source, line_no); !s) return s.error();
    out.push_back(std::move(r));
  }
  if (out.empty()) {
    return invalidArgument(std::string(source) + ": no completed requests");
  }
  return out;
}

namespace {

Result<json> readJson(const std::string& path) {
  const Result<std::string> text = replay::readTextFile(path);
  if (!text) return text.error();
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return invalidArgument(path + ": not a JSON object");
  }
  return j;
}

/// A run.json value as `mocker config --dump` spells it.
Result<std::string> settingText(const json& v, const std::string& path, const std::string& key) {
  if (v.is_boolean()) return std::string(v.get<bool>() ? "true" : "false");
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number_float()) {
    std::ostringstream s;
    s.precision(17);
    s << v.get<double>();
    return s.str();
  }
  if (v.is_string()) return v.get<std::string>();
  return invalidArgument(path + ": field 'mocker_engine." + key + "': unsupported value " +
                         v.dump());
}

/// A setting recorded twice — under mocker's key and the engine's own — must agree.
Status checkSettingsAgree(const json& meta, const std::string& path) {
  const auto mine = meta.find("mocker_engine");
  const auto theirs = meta.find("engine");
  if (theirs == meta.end() || !theirs->is_object()) return {};
  static constexpr std::pair<const char*, const char*> kSame[] = {
      {"block_size", "block_size"},
      {"num_gpu_blocks", "num_gpu_blocks"},
      {"max_num_seqs", "max_num_seqs"},
      {"max_num_batched_tokens", "max_num_batched_tokens"},
      {"max_model_len", "max_model_len"},
      {"enable_prefix_caching", "enable_prefix_caching"},
      {"enable_chunked_prefill", "enable_chunked_prefill"},
      {"enforce_eager", "enforce_eager"},
      {"dp_size", "data_parallel_size"},
  };
  for (const auto& [key, engine_key] : kSame) {
    const auto a = mine->find(key);
    const auto b = theirs->find(engine_key);
    if (a == mine->end() || b == theirs->end() || a->is_null() || b->is_null()) continue;
    if (*a != *b) {
      return invalidArgument(path + ": field 'mocker_engine." + key + "' (" + a->dump() +
                             ") conflicts with 'engine." + engine_key + "' (" + b->dump() + ")");
    }
  }
  return {};
}

/// vLLM's expert-parallel group: TP × DP GPUs when engine.enable_expert_parallel is true.
Status loadExpertParallel(const json& engine, const std::string& path, RecordedRun& run) {
  const auto on = engine.find("enable_expert_parallel");
  if (on == engine.end() || on->is_null()) return {};
  if (!on->is_boolean()) {
    return invalidArgument(path +
                           ": field 'engine.enable_expert_parallel': expected true or false");
  }
  if (!on->get<bool>()) return {};
  std::uint64_t dp = 1;
  if (const auto d = engine.find("data_parallel_size"); d != engine.end() && !d->is_null()) {
    if (!d->is_number_unsigned() || d->get<std::uint64_t>() == 0 ||
        d->get<std::uint64_t>() > 1024) {
      return invalidArgument(path + ": field 'engine.data_parallel_size': expected an integer " +
                             "in 1..=1024");
    }
    dp = d->get<std::uint64_t>();
  }
  run.expert_parallel = static_cast<std::uint32_t>(dp * run.tensor_parallel.value_or(1));
  return {};
}

Status loadRunJson(const std::string& path, RecordedRun& run) {
  const Result<json> meta = readJson(path);
  if (!meta) return meta.error();
  const auto engine = meta->find("mocker_engine");
  if (engine == meta->end() || !engine->is_object()) {
    return invalidArgument(path + ": field 'mocker_engine': missing or not an object");
  }
  if (Status s = checkSettingsAgree(*meta, path); !s) return s;
  for (const auto& [key, value] : engine->items()) {
    if (value.is_null()) {
      // An unrecorded value: run.json's estimate when it has one, else the default.
      const auto est = meta->find(key + "_estimate");
      if (est != meta->end() && est->is_object() && est->contains("value") &&
          (*est)["value"].is_number()) {
        run.engine_settings.emplace_back(key, (*est)["value"].dump());
        run.estimated_settings.push_back(key);
      }
      continue;
    }
    Result<std::string> text = settingText(value, path, key);
    if (!text) return text.error();
    run.engine_settings.emplace_back(key, std::move(*text));
  }
  if (const auto m = meta->find("model"); m != meta->end() && m->is_string()) {
    run.model = m->get<std::string>();
  }
  if (const auto hw = meta->find("hardware"); hw != meta->end() && hw->is_object()) {
    if (const auto l = hw->find("label"); l != hw->end() && l->is_string()) {
      run.gpu_label = l->get<std::string>();
    }
  }
  if (const auto e = meta->find("engine"); e != meta->end() && e->is_object()) {
    if (const auto tp = e->find("tensor_parallel_size"); tp != e->end()) {
      if (!tp->is_number_unsigned() || tp->get<std::uint64_t>() == 0) {
        return invalidArgument(path + ": field 'engine.tensor_parallel_size': expected an " +
                               "integer >= 1");
      }
      run.tensor_parallel = tp->get<std::uint32_t>();
    }
    if (Status s = loadExpertParallel(*e, path, run); !s) return s;
  }
  return {};
}

std::uint32_t runTraceBlockSize(const std::string& run_json_path) {
  const Result<json> meta = readJson(run_json_path);
  if (meta) {
    const auto w = meta->find("workload");
    if (w != meta->end() && w->is_object()) {
      const auto b = w->find("trace_block_size");
      if (b != w->end() && b->is_number_unsigned() && b->get<std::uint64_t>() >= 1) {
        return b->get<std::uint32_t>();
      }
    }
  }
  return 16;
}

Result<RecordedRun> loadRunDirectory(const std::filesystem::path& dir, const std::string& given) {
  RecordedRun run{.name = dir.filename().string(), .path = given};
  if (run.name.empty()) run.name = dir.parent_path().filename().string();
  const std::string run_json = (dir / "run.json").string();
  const std::string trace_path = (dir / "trace.jsonl").string();
  const std::string gt_path = (dir / "ground_truth.csv").string();
  for (const std::string& p : {run_json, trace_path, gt_path}) {
    if (!std::filesystem::is_regular_file(p)) {
      return Error{ErrorCode::NotFound, given + ": missing " + p + " (a recorded run directory " +
                                            "holds trace.jsonl, ground_truth.csv and run.json)"};
    }
  }
  if (Status s = loadRunJson(run_json, run); !s) return s.error();
  const replay::TraceOptions options{.trace_block_size = runTraceBlockSize(run_json)};
  Result<replay::Workload> trace = replay::loadMooncakeTrace(trace_path, options);
  if (!trace) return trace.error();
  run.workload = std::move(*trace);
  const Result<std::string> gt = replay::readTextFile(gt_path);
  if (!gt) return gt.error();
  Result<std::vector<RecordedRequest>> requests = parseGroundTruthCsv(*gt, gt_path, run.workload);
  if (!requests) return requests.error();
  run.requests = std::move(*requests);
  const std::filesystem::path config = dir / "config.json";
  if (std::filesystem::is_regular_file(config)) run.model_config_path = config.string();
  Result<std::string> sha = replay::fileSha256(trace_path);
  if (!sha) return sha.error();
  run.trace_sha256 = std::move(*sha);
  return run;
}

Result<RecordedRun> loadRequestsJsonl(const std::string& path, std::uint32_t block_size) {
  RecordedRun run{.name = std::filesystem::path(path).filename().string(),
                  .path = path,
                  .kind = RecordedRunKind::RequestsJsonl};
  const std::string sidecar = path + ".run.json";
  const Result<json> meta = readJson(sidecar);
  if (!meta) return meta.error().withContext("the sidecar of " + path);
  const auto id = meta->find("identity");
  if (id == meta->end() || !id->is_object()) {
    return invalidArgument(sidecar + ": field 'identity': missing or not an object");
  }
  const auto trace_path = id->find("trace_path");
  if (trace_path == id->end() || !trace_path->is_string()) {
    return invalidArgument(sidecar + ": field 'identity.trace_path': missing (a synthetic " +
                           "workload cannot be replayed again)");
  }
  if (const auto mode = id->find("mode");
      mode != id->end() && *mode != "offline" && *mode != "live") {
    return invalidArgument(sidecar + ": field 'identity.mode': unknown mode " + mode->dump());
  }
  if (const auto fmt = id->find("format"); fmt == id->end() || *fmt != "mooncake") {
    return invalidArgument(sidecar + ": field 'identity.format': only mooncake traces can be " +
                           "calibrated on");
  }
  const auto engine = id->find("engine_config");
  if (engine != id->end() && engine->is_object()) {
    for (const auto& [key, value] : engine->items()) {
      if (value.is_null()) {
        run.engine_settings.emplace_back(key, "none");
        continue;
      }
      Result<std::string> text = settingText(value, sidecar, key);
      if (!text) return text.error();
      run.engine_settings.emplace_back(key, std::move(*text));
    }
  }
  std::string trace = trace_path->get<std::string>();
  if (!std::filesystem::exists(trace)) {
    // Relative to where the replay ran; fall back to the JSONL's directory.
    const std::filesystem::path beside = std::filesystem::path(path).parent_path() / trace;
    if (std::filesystem::exists(beside)) trace = beside.string();
  }
  Result<std::string> sha = replay::fileSha256(trace);
  if (!sha) return sha.error().withContext(sidecar + ": field 'identity.trace_path'");
  if (const auto want = id->find("trace_sha256");
      want != id->end() && want->is_string() && *want != *sha) {
    return invalidArgument(sidecar + ": field 'identity.trace_sha256': " + trace +
                           " has changed since the run (sha256 " + *sha + ")");
  }
  run.trace_sha256 = *sha;
  Result<replay::Workload> workload =
      replay::loadMooncakeTrace(trace, {.trace_block_size = block_size});
  if (!workload) return workload.error();
  run.workload = std::move(*workload);
  const Result<std::string> text = replay::readTextFile(path);
  if (!text) return text.error();
  Result<std::vector<RecordedRequest>> requests = parseRequestsJsonl(*text, path, run.workload);
  if (!requests) return requests.error();
  run.requests = std::move(*requests);
  return run;
}

}  // namespace

Result<RecordedRun> loadRecordedRun(const std::string& path, std::uint32_t jsonl_trace_block_size) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec)) return loadRunDirectory(p, path);
  if (std::filesystem::is_regular_file(p, ec)) {
    return loadRequestsJsonl(path, jsonl_trace_block_size);
  }
  return Error{ErrorCode::NotFound,
               path + ": no such recorded run (a run directory or a --requests-jsonl file)"};
}

}  // namespace mocker::calibrate
