#include "actors/policy/request/retry_advice.hpp"

namespace tether {

bool client_should_retry(outcome o, std::optional<std::chrono::milliseconds> retry_after,
                         std::optional<std::chrono::milliseconds> caller_left) {
  switch (o) {
    case outcome::overloaded:
    case outcome::shutting_down:
      // Another gateway behind the same address, or this one a moment later, has room.
      return true;
    case outcome::upstream_rate_limited:
    case outcome::rate_limited:
      // Without a deadline of its own the caller may wait as long as asked; with one, only a
      // wait that ends inside it is worth a retry (an unknown wait is not known to fit).
      return !caller_left || (retry_after && *retry_after <= *caller_left);
    case outcome::budget_exhausted:
      // The wait is to the end of a day or a month: worth a retry only to a caller whose own
      // deadline outlasts it, never as a blind retry.
      return caller_left && retry_after && *retry_after <= *caller_left;
    default:
      // Timeouts, deadlines and upstream failures have already had the retries the budget
      // allows: another try would be a second budget for the same call.
      return false;
  }
}

}  // namespace tether
