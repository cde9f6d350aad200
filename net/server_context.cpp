#include "net/server_context.hpp"

namespace tether::net {

bool session_registry::try_add(const std::shared_ptr<downstream_session>& session,
                               std::size_t max) {
  std::lock_guard lock(mutex_);
  if (closed_ || sessions_.size() >= max) return false;
  sessions_.emplace(session.get(), session);
  return true;
}

void session_registry::remove(const downstream_session* session) {
  std::lock_guard lock(mutex_);
  sessions_.erase(session);
}

std::size_t session_registry::size() const {
  std::lock_guard lock(mutex_);
  return sessions_.size();
}

std::vector<std::shared_ptr<downstream_session>> session_registry::snapshot() const {
  std::vector<std::shared_ptr<downstream_session>> live;
  std::lock_guard lock(mutex_);
  live.reserve(sessions_.size());
  for (const auto& [key, weak] : sessions_) {
    if (auto session = weak.lock()) live.push_back(std::move(session));
  }
  return live;
}

void session_registry::close() {
  std::lock_guard lock(mutex_);
  closed_ = true;
}

}  // namespace tether::net
