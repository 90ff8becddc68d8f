// An OpenAI API error: the HTTP status plus the body `{"error": {"message", "type", "param",
// "code"}}`. Thrown by the request parser and made by the server for every refusal, so every
// error a client sees has the same shape.
#pragma once

#include <stdexcept>
#include <string>

namespace dfl::server {

struct ApiError : std::runtime_error {
  int status;          // HTTP status: 400, 401, 404, 413, 429, 500, 503, 504
  std::string type;    // "invalid_request_error", "authentication_error", ...
  std::string param;   // the offending request field ("messages[1].content"), or empty → null
  std::string code;    // machine-readable code ("context_length_exceeded"), or empty → null

  ApiError(int status, std::string message, std::string param = {}, std::string code = {});
};

// The `type` OpenAI uses for an HTTP status (400/404/413 → invalid_request_error, 401 →
// authentication_error, 429 → rate_limit_error, 503 → service_unavailable, else server_error).
const char* error_type_for_status(int status);

}  // namespace dfl::server
