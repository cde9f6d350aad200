// Which cut attempts' budget slots the engine's own count lets go (contract: "The budget holds
// until the engine has let go", with metrics_path set). A cut attempt lingers, holding its slot,
// from tether's close of its connection until the engine has stopped working on it. The engine's
// running + queued count, read by a poll sent at `sent`, covers tether's live work (the slots
// whose connections are still open) and whatever the engine still does for the cut attempts
// closed before `sent` (and for other clients). So of the k attempts closed before the poll, all
// but the count's excess over the live work have been let go: those k - excess are released,
// oldest close first (the likeliest to have ended). What cannot be told apart stays held, until a
// later poll or the attempt's own bound (release_grace_max_ms).
//
// The live work is taken as the smaller of tether's counts at the poll's send and at its answer:
// a request that ended during the round trip may be missing from the engine's count, and
// counting it live would release one attempt too many; a request that began during it and is in
// the engine's count only holds an attempt longer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace tether {

template <class Handle>
class engine_release_book {
 public:
  // A cut attempt began to linger: closed at `closed_ns`, expected let go by `due_ns` (its
  // observed decode steps), quitting by itself at `bound_ns` whatever the engine says.
  void lingering(Handle h, std::int64_t closed_ns, std::int64_t due_ns, std::int64_t bound_ns) {
    entries_.push_back({std::move(h), closed_ns, due_ns, bound_ns});
  }

  // A poll sent at `sent_ns` read `engine_work` (running + queued) while tether's live work was
  // at least `live_work`: the attempts released, to be told so; they leave the book. Attempts
  // past their own bound by `now_ns` have quit by themselves and leave it too.
  std::vector<Handle> on_count(std::int64_t sent_ns, std::int64_t engine_work,
                               std::int64_t live_work, std::int64_t now_ns) {
    std::erase_if(entries_, [now_ns](const entry& e) { return e.bound_ns <= now_ns; });
    std::vector<entry*> before;
    for (auto& e : entries_) {
      if (e.closed_ns < sent_ns) before.push_back(&e);
    }
    const auto excess =
        std::max<std::int64_t>(0, engine_work - std::max<std::int64_t>(0, live_work));
    const auto released =
        std::max<std::int64_t>(0, static_cast<std::int64_t>(before.size()) - excess);
    std::sort(before.begin(), before.end(),
              [](const entry* a, const entry* b) { return a->closed_ns < b->closed_ns; });
    std::vector<Handle> out;
    for (std::int64_t i = 0; i < released; ++i) {
      out.push_back(std::move(before[static_cast<std::size_t>(i)]->handle));
      before[static_cast<std::size_t>(i)]->released = true;
    }
    std::erase_if(entries_, [](const entry& e) { return e.released; });
    return out;
  }

  // When the next poll would be worth sending: the earliest time an attempt still held is
  // expected to have been let go; nullopt when none is held.
  std::optional<std::int64_t> next_due() const {
    std::optional<std::int64_t> due;
    for (const auto& e : entries_) {
      if (!due || e.due_ns < *due) due = e.due_ns;
    }
    return due;
  }

  // A poll read no count: the attempts expected let go by `now_ns` are released on their
  // decode steps alone, as without metrics_path.
  std::vector<Handle> take_due(std::int64_t now_ns) {
    std::vector<Handle> out;
    for (auto& e : entries_) {
      if (e.due_ns <= now_ns) {
        out.push_back(std::move(e.handle));
        e.released = true;
      }
    }
    std::erase_if(entries_, [](const entry& e) { return e.released; });
    return out;
  }

  // Every attempt held (the engine is followed afresh after a reload changed its settings).
  std::vector<Handle> take_all() {
    std::vector<Handle> out;
    for (auto& e : entries_) out.push_back(std::move(e.handle));
    entries_.clear();
    return out;
  }

  std::size_t size() const { return entries_.size(); }

 private:
  struct entry {
    Handle handle;
    std::int64_t closed_ns;
    std::int64_t due_ns;
    std::int64_t bound_ns;
    bool released = false;
  };
  std::vector<entry> entries_;
};

}  // namespace tether
