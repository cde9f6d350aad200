// Orphaned work on an upstream: its engine running (or queueing) more requests than tether has
// live there. The engine's count is a snapshot taken somewhere inside the poll's round trip and
// tether's work ends (the socket closed) a decode step or two before the engine lets go, so one
// poll's excess proves nothing; an excess seen by every one of grace_polls consecutive polls, two
// whole poll intervals, is work no live request of tether's accounts for. Pure: fed by the
// metrics poll (actors/engine_metrics_actor.cpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace tether {

class orphan_watch {
 public:
  static constexpr std::size_t grace_polls = 3;

  // A poll that read the engine's count (running + queued), and tether's live work on that
  // upstream as the poll saw it (the larger of the counts when it was sent and when it came back).
  void observe(std::int64_t engine, std::int64_t tether);
  // A poll that read nothing: the engine's count is unknown, the streak starts again.
  void forget();
  // The excess that held through each of the last grace_polls polls (the least of them); 0 until
  // that many polls in a row saw one.
  std::int64_t orphaned() const;

 private:
  std::array<std::int64_t, grace_polls> excess_{};
  std::size_t next_ = 0;
  std::size_t streak_ = 0;  // consecutive polls read, up to grace_polls
};

}  // namespace tether
