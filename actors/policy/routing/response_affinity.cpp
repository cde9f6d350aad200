#include "actors/policy/routing/response_affinity.hpp"

#include <boost/json.hpp>

namespace tether {
namespace {

// The longest id kept: real ones are a few dozen bytes; a longer string is not an id worth a
// slot in the map.
constexpr std::size_t max_id_bytes = 256;

std::optional<std::string> string_member(const boost::json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  const auto& s = v->get_string();
  if (s.empty() || s.size() > max_id_bytes) return std::nullopt;
  return std::string(s);
}

std::optional<boost::json::object> parse_object(std::string_view text) {
  // Not the parser's default of 32: a request body the gateway accepted may be deeper (its own
  // limit is server.max_json_depth), and boost::json's parser does not recurse.
  boost::json::parse_options opts;
  opts.max_depth = 100000;
  boost::system::error_code ec;
  auto v = boost::json::parse(text, ec, {}, opts);
  if (ec || !v.is_object()) return std::nullopt;
  return std::move(v.get_object());
}

}  // namespace

void response_affinity::learn(std::string_view id, std::size_t upstream) {
  if (id.empty() || id.size() > max_id_bytes) return;
  std::lock_guard lock{mutex_};
  if (capacity_ == 0) return;
  auto [it, fresh] = upstream_of_.try_emplace(std::string(id), upstream);
  if (!fresh) {
    it->second = upstream;
    return;
  }
  order_.push_back(it->first);
  trim();
}

std::optional<std::size_t> response_affinity::find(std::string_view id) const {
  std::lock_guard lock{mutex_};
  auto it = upstream_of_.find(std::string(id));
  if (it == upstream_of_.end()) return std::nullopt;
  return it->second;
}

std::size_t response_affinity::size() const {
  std::lock_guard lock{mutex_};
  return upstream_of_.size();
}

void response_affinity::set_capacity(std::size_t capacity) {
  std::lock_guard lock{mutex_};
  capacity_ = capacity;
  trim();
}

void response_affinity::trim() {
  while (order_.size() > capacity_) {
    upstream_of_.erase(order_.front());
    order_.pop_front();
  }
}

std::optional<std::string> previous_response_id_of(std::string_view body) {
  // Most requests do not continue a response: they cost one search, not a parse.
  if (body.find("previous_response_id") == std::string_view::npos) return std::nullopt;
  auto o = parse_object(body);
  if (!o) return std::nullopt;
  return string_member(*o, "previous_response_id");
}

std::optional<std::string> response_id_of(std::string_view body) {
  auto o = parse_object(body);
  if (!o) return std::nullopt;
  return string_member(*o, "id");
}

std::optional<std::string> response_id_of_event(std::string_view event) {
  // The data of the event: its `data:` lines joined by newlines (SSE), here usually one.
  std::string data;
  while (!event.empty()) {
    auto end = event.find('\n');
    auto line = event.substr(0, end);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.starts_with("data:")) {
      line.remove_prefix(5);
      if (line.starts_with(' ')) line.remove_prefix(1);
      if (!data.empty()) data += '\n';
      data += line;
    }
    if (end == std::string_view::npos) break;
    event.remove_prefix(end + 1);
  }
  if (data.find("\"response\"") == std::string::npos) return std::nullopt;
  auto o = parse_object(data);
  if (!o) return std::nullopt;
  const auto* r = o->if_contains("response");
  if (r == nullptr || !r->is_object()) return std::nullopt;
  return string_member(r->get_object(), "id");
}

}  // namespace tether
