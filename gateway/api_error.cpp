#include "gateway/api_error.h"

#include <nlohmann/json.hpp>

namespace mocker::gateway {

const char* errorType(int status) {
  switch (status) {
    case 400:
      return "BadRequestError";
    case 401:
      return "AuthenticationError";
    case 403:
      return "PermissionDeniedError";
    case 404:
      return "NotFoundError";
    case 405:
      return "MethodNotAllowed";
    case 413:
      return "RequestTooLarge";
    case 429:
      return "RateLimitError";
    case 431:
      return "RequestHeaderFieldsTooLarge";
    case 503:
      return "ServiceUnavailableError";
    case 504:
      return "GatewayTimeoutError";
    default:
      return "InternalServerError";
  }
}

int workerErrorStatus(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument:
    case ErrorCode::Corruption:
    case ErrorCode::Unsupported:
      return 400;
    case ErrorCode::NotFound:
      return 404;
    case ErrorCode::PermissionDenied:
      return 403;
    case ErrorCode::ResourceExhausted:
      return 429;
    case ErrorCode::IoError:
      return 503;
    case ErrorCode::Internal:
      break;
  }
  return 500;
}

std::string errorBody(const ApiError& error) {
  nlohmann::ordered_json inner = {{"message", error.message},
                                  {"type", error.type ? *error.type : errorType(error.status)},
                                  {"param", error.param ? nlohmann::ordered_json(*error.param)
                                                        : nlohmann::ordered_json(nullptr)},
                                  {"code", error.status}};
  // Messages may quote request bytes: never throw on invalid UTF-8, replace it.
  return nlohmann::ordered_json{{"error", inner}}.dump(
      -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace mocker::gateway
