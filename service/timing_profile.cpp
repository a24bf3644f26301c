// loadTimingProfile / parseTimingProfile (declared in service/config.h): the JSON file format of
// an interpolated timing profile (docs/engine.md). The array checks themselves are the engine's
// (validateEngineConfig), so the loader and the engine cannot disagree.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "service/config.h"

namespace mocker::service {
namespace {

using nlohmann::json;

const char* typeName(const json& j) { return j.type_name(); }

Result<std::vector<double>> numbers(const json& j, const std::string& where) {
  if (!j.is_array()) {
    return invalidArgument(where + " must be an array of numbers, got " + typeName(j));
  }
  std::vector<double> out;
  out.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_number()) {
      return invalidArgument(where + "[" + std::to_string(i) + "] must be a number, got " +
                             typeName(j[i]));
    }
    out.push_back(j[i].get<double>());
  }
  return out;
}

}  // namespace

Result<engine::TimingProfile> parseTimingProfile(std::string_view json_text,
                                                 std::string_view source_name) {
  const std::string source(source_name);
  const auto fail = [&](const std::string& what) {
    return invalidArgument("timing profile " + source + ": " + what);
  };
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    // parse_error for bad syntax, out_of_range for a number beyond double ("1e999"): both are
    // the file's fault, neither may escape.
    return fail(std::string("invalid JSON (") + e.what() + ")");
  }
  if (!root.is_object()) return fail(std::string("expected a JSON object, got ") + typeName(root));

  static constexpr std::string_view kKeys[] = {"prefill_isl", "prefill_ttft_ms",
                                               "decode_active_kv_tokens", "decode_context_length",
                                               "decode_itl"};
  for (const auto& [key, value] : root.items()) {
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys)) {
      return fail("unknown key '" + key +
                  "' (expected prefill_isl, prefill_ttft_ms, decode_active_kv_tokens, "
                  "decode_context_length, decode_itl)");
    }
  }
  for (const std::string_view key : kKeys) {
    if (!root.contains(key)) return fail("missing array '" + std::string(key) + "'");
  }

  engine::TimingProfile p;
  const auto read = [&](std::string_view key, std::vector<double>& out) -> Status {
    auto v = numbers(root[std::string(key)], std::string(key));
    if (!v) return fail(v.error().message);
    out = std::move(*v);
    return {};
  };
  MOCKER_TRY_VOID(read("prefill_isl", p.prefill_isl));
  MOCKER_TRY_VOID(read("prefill_ttft_ms", p.prefill_ttft_ms));
  MOCKER_TRY_VOID(read("decode_active_kv_tokens", p.decode_active_kv_tokens));
  MOCKER_TRY_VOID(read("decode_context_length", p.decode_context_length));
  const json& itl = root["decode_itl"];
  if (!itl.is_array()) {
    return fail(std::string("decode_itl must be an array of rows, got ") + typeName(itl));
  }
  for (std::size_t r = 0; r < itl.size(); ++r) {
    auto row = numbers(itl[r], "decode_itl[" + std::to_string(r) + "]");
    if (!row) return fail(row.error().message);
    p.decode_itl.push_back(std::move(*row));
  }

  // Shape and ordering rules are the engine's.
  engine::EngineConfig probe;
  probe.timing_model = engine::TimingModelKind::Interpolated;
  probe.timing_profile = p;
  if (auto st = engine::validateEngineConfig(probe); !st) return fail(st.error().message);
  return p;
}

Result<engine::TimingProfile> loadTimingProfile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{ErrorCode::NotFound, "timing profile " + path + ": cannot open file"};
  std::ostringstream text;
  text << in.rdbuf();
  return parseTimingProfile(text.str(), path);
}

}  // namespace mocker::service
