// The few facts the gateway needs from an OpenAI request body, and the one edit it makes.
// The body is otherwise passed through byte for byte (contract: "the rest passes untouched"),
// so the model is spliced in place rather than re-serialising the whole document.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

namespace tether {

struct model_request_info {
  std::string model;
  bool stream = false;
};

struct body_error {
  std::string message;  // says what is wrong, never quotes the body
};

// Validates: JSON (UTF-8, depth ≤ max_depth), an object, exactly one string `model`.
std::variant<model_request_info, body_error> inspect_model_request(std::string_view body,
                                                                   std::uint32_t max_depth);

// Replaces the value of the top-level "model" key. Precondition: inspect_model_request accepted
// the body.
std::string rewrite_model(std::string_view body, std::string_view new_model);

}  // namespace tether
