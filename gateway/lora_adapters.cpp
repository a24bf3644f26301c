#include "gateway/lora_adapters.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>

#include "engine/lora.h"
#include "protocol/detail/utf8.h"

namespace mocker::gateway {
namespace {

/// An adapter name the engine accepts: UTF-8, 1..256 bytes, no control characters.
Status checkName(std::string_view name, std::string_view field) {
  if (const auto bad = protocol::detail::findInvalidUtf8(name)) {
    return invalidArgument(std::string(field) + ": not valid UTF-8 (at byte " +
                           std::to_string(*bad) + ")");
  }
  return engine::checkLoraName(name, field);
}

ApiError invalidInput(std::string message, std::string param) {
  return {.status = 400,
          .message = std::move(message),
          .param = std::move(param),
          .type = "InvalidUserInput"};
}

/// The body's string field `key`: absent, null or "" ⇒ nullopt (vLLM treats them alike);
/// another type ⇒ an error.
std::variant<std::optional<std::string>, ApiError> optString(const nlohmann::json& body,
                                                             const char* key) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::optional<std::string>{};
  if (!it->is_string()) {
    return ApiError{.status = 400,
                    .message = std::string(key) + ": expected a string, got " + it->type_name(),
                    .param = key};
  }
  const auto& s = it->get_ref<const std::string&>();
  return s.empty() ? std::optional<std::string>{} : std::optional<std::string>(s);
}

std::variant<nlohmann::json, ApiError> parseBody(std::string_view body) {
  auto parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return ApiError{.status = 400, .message = "invalid JSON body"};
  if (!parsed.is_object()) {
    return ApiError{.status = 400, .message = "the body must be a JSON object"};
  }
  return parsed;
}

/// vLLM's JSON form of a `--lora-modules` value (LoRAModulePath's fields).
Result<LoraAdapter> parseLoraModuleJson(std::string_view spec) {
  const auto j = nlohmann::json::parse(spec, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return invalidArgument(
        "--lora-modules: invalid JSON (expected {\"name\": ..., \"path\": "
        "..., \"base_model_name\": ...})");
  }
  LoraAdapter a;
  for (const auto& [key, value] : j.items()) {
    std::string* field = key == "name"              ? &a.name
                         : key == "path"            ? &a.path
                         : key == "base_model_name" ? &a.base_model_name
                                                    : nullptr;
    if (field == nullptr) {
      return invalidArgument("--lora-modules: unknown key '" + key +
                             "' (expected name, path, base_model_name)");
    }
    if (key == "base_model_name" && value.is_null()) continue;
    if (!value.is_string()) {
      return invalidArgument("--lora-modules: '" + key + "' must be a string, got " +
                             value.type_name());
    }
    *field = value.get<std::string>();
  }
  if (!j.contains("name") || !j.contains("path")) {
    return invalidArgument("--lora-modules: the JSON form needs \"name\" and \"path\"");
  }
  if (const auto bad = protocol::detail::findInvalidUtf8(a.base_model_name)) {
    return invalidArgument("--lora-modules: base_model_name of '" + a.name + "': not valid UTF-8");
  }
  return a;
}

}  // namespace

Result<LoraAdapter> parseLoraModule(std::string_view spec) {
  LoraAdapter a;
  if (spec.starts_with('{')) {
    MOCKER_TRY(a, parseLoraModuleJson(spec));
  } else {
    const std::size_t eq = spec.find('=');
    a.name = std::string(spec.substr(0, eq));
    a.path = std::string(eq == std::string_view::npos ? spec : spec.substr(eq + 1));
  }
  if (const Status s = checkName(a.name, "--lora-modules: name"); !s) return s.error();
  if (a.path.empty()) {
    return invalidArgument("--lora-modules: '" + a.name +
                           "=': the path is empty (give name=path "
                           "or the name alone)");
  }
  if (const auto bad = protocol::detail::findInvalidUtf8(a.path)) {
    return invalidArgument("--lora-modules: path of '" + a.name + "': not valid UTF-8");
  }
  return a;
}

Result<LoraAdapters> LoraAdapters::create(std::string base_model,
                                          std::vector<LoraAdapter> adapters) {
  LoraAdapters out;
  out.base_model_ = std::move(base_model);
  for (LoraAdapter& a : adapters) {
    if (a.name == out.base_model_) {
      return invalidArgument("--lora-modules: '" + a.name +
                             "' is the base model's name (--model); an adapter needs its own");
    }
    if (out.find(a.name) != nullptr) {
      return invalidArgument("--lora-modules: adapter '" + a.name + "' is given twice");
    }
    out.adapters_.push_back(std::move(a));
  }
  return out;
}

const LoraAdapter* LoraAdapters::find(std::string_view model) const {
  const auto it = std::find_if(adapters_.begin(), adapters_.end(),
                               [&](const LoraAdapter& a) { return a.name == model; });
  return it == adapters_.end() ? nullptr : &*it;
}

std::optional<std::string> LoraAdapters::bodyName(std::string_view body) {
  auto parsed = parseBody(body);
  if (std::holds_alternative<ApiError>(parsed)) return std::nullopt;
  auto name = optString(std::get<nlohmann::json>(parsed), "lora_name");
  if (std::holds_alternative<ApiError>(name)) return std::nullopt;
  return std::get<std::optional<std::string>>(name);
}

std::variant<LoraAdapter, ApiError> LoraAdapters::checkLoad(std::string_view body) const {
  auto parsed = parseBody(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return std::move(*e);
  const auto& json = std::get<nlohmann::json>(parsed);
  auto name = optString(json, "lora_name");
  if (auto* e = std::get_if<ApiError>(&name)) return std::move(*e);
  auto path = optString(json, "lora_path");
  if (auto* e = std::get_if<ApiError>(&path)) return std::move(*e);
  auto& n = std::get<std::optional<std::string>>(name);
  auto& p = std::get<std::optional<std::string>>(path);
  if (!n || !p) {
    return invalidInput("Both 'lora_name' and 'lora_path' must be provided.",
                        n ? "lora_path" : "lora_name");
  }
  if (find(*n) != nullptr) {
    return invalidInput("The lora adapter '" + *n + "' has already been loaded.", "lora_name");
  }
  if (const Status s = checkName(*n, "lora_name"); !s) {
    return ApiError{.status = 400, .message = s.error().message, .param = "lora_name"};
  }
  if (*n == base_model_) {
    return ApiError{.status = 400,
                    .message = "lora_name: '" + *n + "' is the base model's name",
                    .param = "lora_name"};
  }
  return LoraAdapter{.name = *n, .path = std::move(*p)};
}

std::string LoraAdapters::add(LoraAdapter adapter) {
  adapters_.push_back(std::move(adapter));
  return "Success: LoRA adapter '" + adapters_.back().name + "' added successfully.";
}

std::variant<std::string, ApiError> LoraAdapters::load(std::string_view body) {
  auto checked = checkLoad(body);
  if (auto* e = std::get_if<ApiError>(&checked)) return std::move(*e);
  return add(std::move(std::get<LoraAdapter>(checked)));
}

std::variant<std::string, ApiError> LoraAdapters::checkUnload(std::string_view body) const {
  auto parsed = parseBody(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return std::move(*e);
  const auto& json = std::get<nlohmann::json>(parsed);
  auto name = optString(json, "lora_name");
  if (auto* e = std::get_if<ApiError>(&name)) return std::move(*e);
  const auto& n = std::get<std::optional<std::string>>(name);
  if (!n) {
    const auto id = json.find("lora_int_id");
    if (id == json.end() || id->is_null()) {
      return invalidInput("either 'lora_name' and 'lora_int_id' needs to be provided.",
                          "lora_name");
    }
    // vLLM looks an adapter up by its name only: `lora_int_id` alone finds none.
    return ApiError{
        .status = 404, .message = "The lora adapter 'None' cannot be found.", .param = "lora_name"};
  }
  if (find(*n) == nullptr) {
    return ApiError{.status = 404,
                    .message = "The lora adapter '" + *n + "' cannot be found.",
                    .param = "lora_name"};
  }
  return *n;
}

std::string LoraAdapters::remove(const std::string& name) {
  std::erase_if(adapters_, [&](const LoraAdapter& a) { return a.name == name; });
  return "Success: LoRA adapter '" + name + "' removed successfully.";
}

std::variant<std::string, ApiError> LoraAdapters::unload(std::string_view body) {
  auto checked = checkUnload(body);
  if (auto* e = std::get_if<ApiError>(&checked)) return std::move(*e);
  return remove(std::get<std::string>(checked));
}

}  // namespace mocker::gateway
