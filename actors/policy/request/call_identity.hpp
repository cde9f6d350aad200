// Which call a request is a try of (docs/contract.md, "One call, one deadline"): the id the call
// table (call_table.hpp) knows it by. A client's retry has the same caller (its gateway key, or
// on an open gateway its address), surface, model and call identity, and a body identical apart
// from `stream` and `stream_options` (its fingerprint, model_request.hpp). The identity is an
// Idempotency-Key header, which ties tries whose bodies differ; else, with
// call_identity = "session", the client's session header (batch and evaluation jobs send the
// same body many times on purpose: without a session they are separate calls); with "body" the
// body alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"
#include "config/surface.hpp"
#include "net/http_types.hpp"

namespace tether {

// The headers that name a call, found in one pass over the request's head.
struct call_headers {
  // The client's session (the access line's client_session): the first present of
  // x-claude-code-session-id (Claude Code), session-id (Codex CLI) and x-client-request-id
  // (Codex CLI); null when none is, or when it is not a sane id (request_id.hpp's rule: at most
  // 128 of [A-Za-z0-9._-]), so that what identifies a call is what the log shows.
  const std::string* session = nullptr;
  const std::string* idempotency_key = nullptr;  // a non-empty Idempotency-Key
};
call_headers read_call_headers(const net::header_list& headers);

// Whether the call id of a request with these headers will need its body's fingerprint, for a
// model whose identity is unknown yet: `by_session` / `by_body`, some model identifies calls by
// session / by body.
bool needs_body_fingerprint(const call_headers& h, bool by_session, bool by_body);

struct call_caller {
  std::int64_t key = -1;  // the gateway key's index; -1: an open gateway, the peer names it
  std::string_view peer;  // the caller's address, as bytes
};

// The call id; nullopt: the request is no call the gateway can tell (the identity is off, or
// "session" with neither an Idempotency-Key nor a session, or no fingerprint was taken).
std::optional<std::uint64_t> call_id_of(config::call_identity_mode mode, const call_caller& caller,
                                        surface where, std::string_view model,
                                        const call_headers& h,
                                        std::optional<std::uint64_t> body_fingerprint);

}  // namespace tether
