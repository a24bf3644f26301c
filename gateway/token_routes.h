// POST /tokenize and POST /detokenize (vLLM's shapes): a request body in, the reply out, with the
// gateway's tokenizer. Pure (no I/O); thread-compatible.
#pragma once

#include <string>

#include "gateway/http_connection.h"
#include "gateway/openai_request.h"
#include "gateway/tokenizer.h"

namespace mocker::gateway {

/// /tokenize: a completion-style `prompt` or a chat-style `messages` (one prompt), checked under
/// `limits` but of any length (no completion room needed): `{"count", "max_model_len",
/// "tokens"}`, max_model_len being `limits`'.
HttpReply tokenizeReply(const std::string& body, const Tokenizer& tokenizer, RequestLimits limits);

/// /detokenize: `tokens`, a list of token ids, spelt by `tokenizer`: `{"prompt"}`.
HttpReply detokenizeReply(const std::string& body, const Tokenizer& tokenizer);

}  // namespace mocker::gateway
