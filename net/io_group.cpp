#include "net/io_group.hpp"

#include <stdexcept>
#include <utility>

namespace tether::net {

io_group::io_group(io_runtime& one) : members_{&one} {}

io_group::io_group(std::vector<io_runtime*> members) : members_(std::move(members)) {
  if (members_.empty()) throw std::invalid_argument("an io_group needs a member");
}

std::size_t io_group::here() const {
  const io_runtime* current = io_runtime::current();
  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (members_[i] == current) return i;
  }
  return 0;
}

}  // namespace tether::net
