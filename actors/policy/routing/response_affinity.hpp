// Which upstream produced a Responses API response, so that a follow-up naming it in
// `previous_response_id` goes where the conversation's state is (the upstream holds it, not the
// gateway). A bounded map learned from the ids of the responses the gateway relays: past its
// capacity the oldest id is dropped, and an id it does not know is routed as usual. Shared by
// every request and every config generation (upstream indices outlive reloads), so internally
// synchronised.
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace tether {

class response_affinity {
 public:
  explicit response_affinity(std::size_t capacity) : capacity_(capacity) {}

  // Remembers that `id` was produced on `upstream` (again: the newer answer wins). A capacity
  // of 0 remembers nothing.
  void learn(std::string_view id, std::size_t upstream);
  std::optional<std::size_t> find(std::string_view id) const;
  std::size_t size() const;
  // A reload's new [request] response_affinity_max: the oldest ids go at once if it shrank.
  void set_capacity(std::size_t capacity);

 private:
  void trim();  // mutex_ held

  mutable std::mutex mutex_;
  std::size_t capacity_;
  std::unordered_map<std::string, std::size_t> upstream_of_;
  std::deque<std::string> order_;  // oldest first; each id once
};

// The top-level string `previous_response_id` of a Responses request body, if it has one.
std::optional<std::string> previous_response_id_of(std::string_view body);
// The `id` of a whole Responses API response object.
std::optional<std::string> response_id_of(std::string_view body);
// The response id an SSE event of a Responses stream carries (`response.created` and the other
// events whose data holds the `response` object), from the event's raw bytes.
std::optional<std::string> response_id_of_event(std::string_view event);

}  // namespace tether
