// ApiError: an OpenAI-style error (HTTP status + body `{"error": {"message", "type", "param",
// "code"}}`) as the gateway returns it for every refused request (gateway/README.md "Errors").
//
// Plain value type; thread-compatible.
#pragma once

#include <optional>
#include <string>

#include "base/result.h"

namespace mocker::gateway {

struct ApiError {
  int status = 400;     ///< HTTP status: 400, 401, 404, 405, 413, 429, 500, 503
  std::string message;  ///< names what is wrong ("max_tokens: expected integer, got string")
  std::optional<std::string> param;  ///< the offending request field, when there is one
  /// The error's `type` where vLLM names it other than by the status (its LoRA endpoints'
  /// "InvalidUserInput"); absent: errorType(status).
  std::optional<std::string> type;
};

/// The error's `type` as vLLM names it: "BadRequestError" (400), "AuthenticationError" (401),
/// "PermissionDeniedError" (403, the OpenAI SDK's name), "NotFoundError" (404), "MethodNotAllowed"
/// (405), "RequestTooLarge" (413), "RateLimitError" (429), "RequestHeaderFieldsTooLarge" (431),
/// "ServiceUnavailableError" (503), "GatewayTimeoutError" (504), "InternalServerError" (others).
const char* errorType(int status);

/// The HTTP status of a worker's `error` reply to a request, by its client-protocol code
/// (gateway/README.md "Errors"): what the request asked for is wrong — invalid_argument,
/// corruption, unsupported 400; not_found 404; permission_denied 403; a limit reached, may
/// succeed later — resource_exhausted 429; the worker could not do I/O — io_error 503;
/// internal 500.
int workerErrorStatus(ErrorCode code);

/// `{"error": {"message": ..., "type": ..., "param": ..., "code": status}}` (`type`:
/// error.type, else errorType(status)).
std::string errorBody(const ApiError& error);

}  // namespace mocker::gateway
