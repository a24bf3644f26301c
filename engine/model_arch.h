// ModelArch: the shapes of a transformer decoder that the roofline timing model needs
// (docs/engine.md, "Roofline timing"), and a pure parser from a Hugging Face config.json text.
// Handles Llama-style dense models, Qwen2/Qwen3 dense and Qwen3-MoE / Mixtral-style MoE configs.
// The engine never reads files: the service and tools read config.json and pass its text here.
//
// Plain value type; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace mocker::engine {

struct ModelArch {
  std::string name;                     ///< free text (e.g. "meta-llama/Llama-3.1-8B")
  std::uint32_t num_layers = 0;         ///< decoder layers (num_hidden_layers)
  std::uint32_t hidden_size = 0;        ///< model dimension
  std::uint32_t num_heads = 0;          ///< query heads (num_attention_heads)
  std::uint32_t num_kv_heads = 0;       ///< key/value heads (GQA); = num_heads for MHA
  std::uint32_t head_dim = 0;           ///< per-head dimension
  std::uint32_t intermediate_size = 0;  ///< dense MLP hidden size (0 allowed for all-MoE models)
  std::uint32_t vocab_size = 0;
  std::uint32_t num_experts = 0;            ///< routed experts per MoE layer; 0 = dense model
  std::uint32_t experts_per_token = 0;      ///< top-k routing (num_experts_per_tok)
  std::uint32_t moe_intermediate_size = 0;  ///< hidden size of one expert's MLP
  bool gated_mlp = true;                    ///< SwiGLU gate + up projection (3 matrices per MLP)
  bool tie_word_embeddings = false;  ///< LM head shares the embedding matrix (weights counted once)
  double weight_bytes = 2.0;         ///< bytes per weight element (2 = bf16/fp16, 1 = fp8)
  double kv_bytes = 2.0;             ///< bytes per KV-cache element (2 = bf16/fp16, 1 = fp8)
};

/// Parses a Hugging Face config.json text. Required: num_hidden_layers, hidden_size,
/// num_attention_heads, vocab_size, and intermediate_size for dense models; optional:
/// num_key_value_heads (= heads), head_dim (= hidden / heads), num_experts or num_local_experts
/// with num_experts_per_tok and moe_intermediate_size (= intermediate_size), torch_dtype
/// (bfloat16/float16/float32 serve as 2-byte weights, as vLLM's dtype "auto" does),
/// tie_word_embeddings. A multimodal config's "text_config" object is used when present.
/// Errors name the missing or malformed field ("config.json: missing field 'hidden_size'").
Result<ModelArch> parseHfModelConfig(std::string_view json_text);

/// The first broken rule of `arch` as a message naming the field ("model.hidden_size must be
/// >= 1 (got 0)"), or nullopt. `prefix` is prepended to the field names.
std::optional<std::string> checkModelArch(const ModelArch& arch, std::string_view prefix);

/// Parameters of the whole model (embedding, every layer, final norm, LM head unless tied).
double modelParameters(const ModelArch& arch);

/// Bytes of KV cache per token over every layer: 2 (K and V) · layers · kv_heads · head_dim ·
/// kv_bytes. Divide by the tensor-parallel degree for the bytes per GPU.
double kvBytesPerToken(const ModelArch& arch);

/// Parses a dtype name to bytes per element: bfloat16/bf16/float16/fp16/half/auto/float32 = 2
/// (served in 16 bits), fp8/float8*/fp8_e4m3/fp8_e5m2 = 1. Error names `field`.
Result<double> parseDtypeBytes(std::string_view field, std::string_view dtype);

}  // namespace mocker::engine
