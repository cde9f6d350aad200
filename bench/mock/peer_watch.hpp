// The connections whose request is being worked on, checked for a client that has already gone
// before a new request is counted. The io thread learns of one connection's close and another's
// new request in whatever order epoll lists them, so a client that closed one connection and then
// sent on another could be seen sending first: max_active would count both, though they never
// overlapped. Settling the closes that already happened first keeps the counts in the order the
// client acted, which is what the cap tests compare against the gateway's caps. For the same
// reason a request whose own client had already closed its connection when it was read (the
// gateway cut it while it waited unread in the socket) is not counted as work: this server would
// stop it at once.
#pragma once

#include <memory>
#include <unordered_map>

namespace tether::mock {

class watched_connection {
 public:
  virtual ~watched_connection() = default;
  virtual int native_handle() = 0;
  // The client closed or reset the connection: record it and close ours.
  virtual void peer_gone() = 0;
};

class peer_watch {
 public:
  void add(const std::shared_ptr<watched_connection>& c);
  void remove(const watched_connection* c);
  // Calls peer_gone() on every watched connection whose client has closed or reset it (its
  // socket reads end of stream or an error). Without blocking: one poll() over all of them.
  void settle();
  // Whether the client of socket `fd` has closed or reset it: end of stream or an error waits,
  // with no bytes before it.
  static bool has_gone(int fd);

 private:
  std::unordered_map<const watched_connection*, std::weak_ptr<watched_connection>> watched_;
};

}  // namespace tether::mock
