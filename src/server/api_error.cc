#include "server/api_error.h"

namespace dfl::server {

ApiError::ApiError(int status_, std::string message, std::string param_, std::string code_)
    : std::runtime_error(std::move(message)),
      status(status_),
      type(error_type_for_status(status_)),
      param(std::move(param_)),
      code(std::move(code_)) {}

const char* error_type_for_status(int status) {
  switch (status) {
    case 400:
    case 404:
    case 413: return "invalid_request_error";
    case 401: return "authentication_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    default: return "server_error";
  }
}

}  // namespace dfl::server
