// LoraAdapters: the LoRA adapters `mocker gateway` serves under their own model names, as
// vLLM's OpenAI server does (gateway/README.md, "LoRA adapters"). `--lora-modules name=path`
// (or `name`) names them at start; with `--allow-runtime-lora-updating`,
// `POST /v1/load_lora_adapter` and `POST /v1/unload_lora_adapter` add and remove them at run
// time. A generation request whose `model` is an adapter's name is sent to the workers with
// `lora` set to it; GET /v1/models lists the base model, then each adapter in load order with
// `parent` = the base model and `root` = its path.
//
// The path is only echoed (the mock loads no weights). The gateway sends a load or unload to
// every worker (the client protocol's lora_load / lora_unload: gateway/lora_rollout.h) between
// checkLoad / checkUnload and add / remove; load() and unload() do both steps at once.
//
// Pure value type; not thread-safe (the gateway's I/O thread owns it).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/result.h"
#include "gateway/api_error.h"

namespace mocker::gateway {

struct LoraAdapter {
  std::string name;
  std::string path;  ///< `root` in /v1/models; `name` when none was given
  /// `parent` in /v1/models (vLLM's `base_model_name`); empty = the gateway's base model.
  std::string base_model_name;
  friend bool operator==(const LoraAdapter&, const LoraAdapter&) = default;
};

/// One `--lora-modules` value: `name=path` (vLLM's form), `name` alone (path = name), or vLLM's
/// JSON form when it starts with `{`: `{"name": "...", "path": "...", "base_model_name": "..."}`
/// (name and path required strings, base_model_name an optional string or null; any other key
/// is refused, as vLLM's dataclass refuses it). The name: 1..256 bytes, no control characters
/// (the engine's rule for adapter names).
Result<LoraAdapter> parseLoraModule(std::string_view spec);

class LoraAdapters {
 public:
  /// Adapters of the base model `base_model`. Refused: a name given twice, or the base model's.
  static Result<LoraAdapters> create(std::string base_model, std::vector<LoraAdapter> adapters);

  /// The adapter named `model`, or null (the base model, or an unknown name).
  const LoraAdapter* find(std::string_view model) const;
  const std::vector<LoraAdapter>& adapters() const { return adapters_; }
  const std::string& baseModel() const { return base_model_; }

  /// The body of POST /v1/load_lora_adapter (`{"lora_name", "lora_path"}`): on success the
  /// adapter is served and the answer is vLLM's text ("Success: LoRA adapter 'x' added
  /// successfully."); errors as vLLM's (400 InvalidUserInput: a name or path missing, a name
  /// already loaded; 400: malformed JSON or a name the engine would refuse).
  std::variant<std::string, ApiError> load(std::string_view body);
  /// The body of POST /v1/unload_lora_adapter (`{"lora_name"}`; vLLM's `lora_int_id` alone
  /// finds nothing, as in vLLM): the adapter is no longer served (requests already sent with it
  /// finish); 404 NotFoundError for a name not loaded, 400 InvalidUserInput without a name.
  std::variant<std::string, ApiError> unload(std::string_view body);

  /// load() in two steps: the adapter the body names, checked as load() checks it, and then
  /// (once the workers loaded it) served: add() answers vLLM's success text.
  std::variant<LoraAdapter, ApiError> checkLoad(std::string_view body) const;
  std::string add(LoraAdapter adapter);
  /// unload() in two steps: the name of the adapter the body names, checked as unload() checks
  /// it; remove() stops serving it and answers vLLM's success text.
  std::variant<std::string, ApiError> checkUnload(std::string_view body) const;
  std::string remove(const std::string& name);
  /// The body's `lora_name` when it is a JSON object with a non-empty string there.
  static std::optional<std::string> bodyName(std::string_view body);

 private:
  std::string base_model_;
  std::vector<LoraAdapter> adapters_;  // load order
};

}  // namespace mocker::gateway
