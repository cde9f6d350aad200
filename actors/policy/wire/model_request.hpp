// The few facts the gateway needs from an OpenAI request body, and the one edit it makes.
// The body is otherwise passed through byte for byte (contract: "the rest passes untouched"),
// so the model is spliced in place rather than re-serialising the whole document.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace tether {

struct model_request_info {
  std::string model;
  bool stream = false;
  // The largest of the top-level `max_tokens`, `max_completion_tokens` and `max_output_tokens`
  // that is a non-negative integer (a repeated key's last value counts): the output the request
  // may make, which its token weight reserves. Any other value is the upstream's to refuse.
  std::optional<std::uint64_t> max_output_tokens;
  // Asked for: the body's fingerprint (fingerprint.hpp) without its top-level `stream` and
  // `stream_options` members, whose value a client's retry may change (a call's id,
  // actors/policy/request/call_identity.hpp).
  std::optional<std::uint64_t> body_fingerprint;
};

struct body_error {
  std::string message;  // says what is wrong, never quotes the body
};

// Validates: JSON (UTF-8, depth ≤ max_depth), an object, exactly one string `model`. With
// `fingerprint_body`, the same pass also fingerprints the body; without it, nothing is added to
// the pass.
std::variant<model_request_info, body_error> inspect_model_request(std::string_view body,
                                                                   std::uint32_t max_depth,
                                                                   bool fingerprint_body = false);

// Replaces the value of the top-level "model" key. Precondition: inspect_model_request accepted
// the body.
std::string rewrite_model(std::string_view body, std::string_view new_model);

// The body that asks for a stream: every top-level `stream` and `stream_options` member dropped
// and `"stream":true` put first, with `"stream_options":{"include_usage":true}` when
// `with_usage` (OpenAI's chat and completions tell the usage in a stream only when asked).
// The other members keep their bytes. Precondition: inspect_model_request accepted the body.
std::string ask_for_stream(std::string_view body, bool with_usage);

// The body that names the request to an SGLang engine (engine = "sglang"): every top-level `rid`
// member dropped and `"rid":"<rid>"` put last, so that `POST /abort_request {"rid"}` reaches
// the work this attempt started whatever rid the caller sent (SGLang refuses a rid still live,
// so each attempt has its own). `rid` is quoted as it is: tether's ids need no escapes. The
// other members keep their bytes. Precondition: inspect_model_request accepted the body.
std::string with_rid(std::string_view body, std::string_view rid);

}  // namespace tether
