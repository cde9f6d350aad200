#include "actors/response_headers.hpp"

#include <string>

#include "actors/policy/request/retry_advice.hpp"
#include "actors/policy/request/retry_policy.hpp"

namespace tether {

void add_outcome_headers(net::header_list& headers, int status, outcome o,
                         std::optional<std::chrono::milliseconds> retry_after,
                         std::optional<std::chrono::milliseconds> caller_left) {
  headers.push_back({"x-tether-outcome", std::string{to_string(o)}});
  if (status >= 200 && status < 300) return;
  if (!retry_after) retry_after = parse_retry_after(net::find_header(headers, "retry-after"));
  headers.push_back(
      {"x-should-retry", client_should_retry(o, retry_after, caller_left) ? "true" : "false"});
  if (retry_after && net::find_header(headers, "retry-after") != nullptr)
    headers.push_back({"retry-after-ms", std::to_string(retry_after->count())});
}

net::header_list error_headers(const std::string& request_id, int status, outcome o,
                               std::optional<std::chrono::milliseconds> retry_after,
                               std::optional<std::chrono::milliseconds> caller_left) {
  net::header_list headers{{"content-type", "application/json"}, {"x-request-id", request_id}};
  if (retry_after) {
    headers.push_back({"retry-after", std::to_string((retry_after->count() + 999) / 1000)});
  } else if (o == outcome::overloaded || o == outcome::shutting_down) {
    headers.push_back({"retry-after", "1"});
  }
  add_outcome_headers(headers, status, o, retry_after, caller_left);
  return headers;
}

}  // namespace tether
