#include "actors/policy/request/call_identity.hpp"

#include "actors/policy/request/request_id.hpp"
#include "actors/policy/wire/fingerprint.hpp"

namespace tether {

call_headers read_call_headers(const net::header_list& headers) {
  // By rank, the first present of the session headers wins whatever their order in the head.
  const std::string* sessions[3] = {nullptr, nullptr, nullptr};
  call_headers out;
  for (const auto& h : headers) {
    // Names are lower-case (net/http_types.hpp); the length tells them apart first.
    switch (h.name.size()) {
      case 24:
        if (h.name == "x-claude-code-session-id" && !sessions[0]) sessions[0] = &h.value;
        break;
      case 10:
        if (h.name == "session-id" && !sessions[1]) sessions[1] = &h.value;
        break;
      case 19:
        if (h.name == "x-client-request-id" && !sessions[2]) sessions[2] = &h.value;
        break;
      case 15:
        if (h.name == "idempotency-key" && !out.idempotency_key && !h.value.empty())
          out.idempotency_key = &h.value;
        break;
      default:
        break;
    }
  }
  for (const auto* s : sessions) {
    if (s == nullptr) continue;
    if (is_sane_request_id(*s)) out.session = s;
    break;
  }
  return out;
}

bool needs_body_fingerprint(const call_headers& h, bool by_session, bool by_body) {
  if (h.idempotency_key != nullptr) return false;  // it ties tries whose bodies differ
  return by_body || (by_session && h.session != nullptr);
}

std::optional<std::uint64_t> call_id_of(config::call_identity_mode mode, const call_caller& caller,
                                        surface where, std::string_view model,
                                        const call_headers& h,
                                        std::optional<std::uint64_t> body_fingerprint) {
  using config::call_identity_mode;
  if (mode == call_identity_mode::off) return std::nullopt;
  fingerprint f;
  // Tags keep the three kinds of identity apart, and a key's index apart from an address.
  if (caller.key >= 0) {
    f.tag('K');
    f.tag(static_cast<std::uint64_t>(caller.key));
  } else {
    f.tag('P');
    f.add(caller.peer);
  }
  f.tag(static_cast<std::uint64_t>(where));
  if (h.idempotency_key != nullptr) {
    f.tag('I');
    f.add(*h.idempotency_key);
    return f.value();
  }
  if (!body_fingerprint) return std::nullopt;
  if (mode == call_identity_mode::session) {
    if (h.session == nullptr) return std::nullopt;
    f.tag('S');
    f.add(*h.session);
  } else {
    f.tag('B');
  }
  f.add(model);
  f.tag(*body_fingerprint);
  return f.value();
}

}  // namespace tether
