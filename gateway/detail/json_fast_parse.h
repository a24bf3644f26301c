// A fast path for the JSON of OpenAI request bodies (openai_request.cpp): nlohmann's lexer costs
// ~100 instructions a byte (it keeps every byte of a token for its error messages), which made
// parsing a 64-token prompt the gateway's largest cost per request. parseJsonFast reads the
// common shape — an object of integers, plain strings, literals, arrays and objects — straight
// into the same nlohmann::json value that nlohmann::json::parse builds, and gives up (nullopt) on
// anything else: a string with an escape or a control byte or invalid UTF-8, a number with a
// fraction or an exponent or over 18 digits, nesting deeper than 64, any syntax error, anything
// after the value. The caller then parses with nlohmann::json::parse, whose value or error is the
// answer: the fast path never changes what a body means, only how fast a common one is read.
//
// Pure function; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace mocker::gateway::detail {

/// `text`'s value, exactly as nlohmann::json::parse(text) gives it, when `text` is an object of
/// the common shape; nullopt otherwise (parse it with nlohmann).
///
/// With `prompt_ids`: when the object's (last) "prompt" member is a non-empty list of token ids
/// (integers in [0, 2^32), no sign, fraction or exponent), the ids go to *prompt_ids and that
/// member is left out of the value (a 64-token prompt is then one vector, not 64 JSON values);
/// otherwise *prompt_ids is empty and "prompt" is in the value as usual.
std::optional<nlohmann::json> parseJsonFast(
    std::string_view text, std::optional<std::vector<std::uint32_t>>* prompt_ids = nullptr);

}  // namespace mocker::gateway::detail
