#include "net/timer_heap.hpp"

#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <cstdint>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

namespace tether::net {
namespace asio = boost::asio;
using steady = std::chrono::steady_clock;

namespace {

constexpr std::size_t not_queued = std::numeric_limits<std::size_t>::max();

// The heap's entry is also the handle its owner holds: one allocation per timer.
struct node final : timer {
  void cancel() override;

  std::weak_ptr<timer_heap::core> core;
  steady::time_point when;
  std::uint64_t seq = 0;  // equal times fire in the order they were armed
  timer_callback fire;
  std::optional<io_executor> target;
  std::size_t index = not_queued;    // position in the heap, guarded by the core's mutex
  std::atomic<bool> claimed{false};  // by the wake that fires it or the cancel, whichever first
};

// Nodes are kept for reuse on the thread that frees them: every request arms several timers, and
// a list of this thread's own spare blocks is cheaper than malloc and free (with glibc's own
// per-thread cache, free still does far more work than a push on a list). A thread keeps at most
// `spare_max`; a block freed on another thread than it was taken on joins that thread's list.
template <class T>
class recycling_allocator {
 public:
  using value_type = T;
  recycling_allocator() = default;
  template <class U>
  recycling_allocator(const recycling_allocator<U>&) noexcept {}  // NOLINT: rebinding, as std's

  T* allocate(std::size_t n) {
    auto* spare = spares();
    if (n == 1 && spare != nullptr && !spare->blocks.empty()) {
      void* p = spare->blocks.back();
      spare->blocks.pop_back();
      return static_cast<T*>(p);
    }
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    auto* spare = spares();
    if (n == 1 && spare != nullptr && spare->blocks.size() < spare_max) {
      spare->blocks.push_back(p);  // reserved up front: does not throw
      return;
    }
    ::operator delete(p);
  }
  template <class U>
  bool operator==(const recycling_allocator<U>&) const noexcept {
    return true;
  }

 private:
#if defined(__SANITIZE_ADDRESS__)
  static constexpr std::size_t spare_max = 0;  // every block back to ASan, which checks its use
#else
  static constexpr std::size_t spare_max = 4096;
#endif
  struct spare_list {
    spare_list() { blocks.reserve(spare_max); }
    ~spare_list() {
      gone = true;
      for (void* p : blocks) ::operator delete(p);
    }
    spare_list(const spare_list&) = delete;
    spare_list& operator=(const spare_list&) = delete;
    std::vector<void*> blocks;
  };
  // nullptr once the thread's list is destroyed (a timer freed later in the thread's exit).
  static spare_list* spares() {
    if (gone) return nullptr;
    static thread_local spare_list list;
    return &list;
  }
  static inline thread_local bool gone = false;
};

bool earlier(const node& a, const node& b) {
  return a.when < b.when || (a.when == b.when && a.seq < b.seq);
}

}  // namespace

struct timer_heap::core : std::enable_shared_from_this<timer_heap::core> {
  explicit core(asio::io_context& io) : strand(asio::make_strand(io)), wake(strand) {}

  // ---- the heap (mutex held) ----
  void place(std::size_t i, std::shared_ptr<node> n) {
    n->index = i;
    heap[i] = std::move(n);
  }
  void sift_up(std::size_t i) {
    auto n = std::move(heap[i]);
    while (i > 0) {
      const auto parent = (i - 1) / 2;
      if (!earlier(*n, *heap[parent])) break;
      place(i, std::move(heap[parent]));
      i = parent;
    }
    place(i, std::move(n));
  }
  void sift_down(std::size_t i) {
    auto n = std::move(heap[i]);
    const auto size = heap.size();
    for (;;) {
      auto child = 2 * i + 1;
      if (child >= size) break;
      if (child + 1 < size && earlier(*heap[child + 1], *heap[child])) ++child;
      if (!earlier(*heap[child], *n)) break;
      place(i, std::move(heap[child]));
      i = child;
    }
    place(i, std::move(n));
  }
  void push(std::shared_ptr<node> n) {
    heap.push_back(nullptr);
    place(heap.size() - 1, std::move(n));
    sift_up(heap.size() - 1);
  }
  std::shared_ptr<node> remove_at(std::size_t i) {
    auto removed = std::move(heap[i]);
    removed->index = not_queued;
    auto last = std::move(heap.back());
    heap.pop_back();
    if (i < heap.size()) {
      place(i, std::move(last));
      if (i > 0 && earlier(*heap[i], *heap[(i - 1) / 2])) {
        sift_up(i);
      } else {
        sift_down(i);
      }
    }
    return removed;
  }

  // ---- the one Asio timer (on the strand) ----
  void rearm() {
    steady::time_point next;
    {
      std::lock_guard lock(mutex);
      if (stopped || heap.empty()) return;
      next = heap.front()->when;
      if (armed && next >= armed_for) return;  // the wait already pending comes first
      armed = true;
      armed_for = next;
    }
    wake.expires_at(next);  // a pending wait completes as aborted, and is ignored
    wake.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->on_wake();
    });
  }

  void on_wake() {
    std::vector<std::pair<timer_callback, std::optional<io_executor>>> due;
    {
      std::lock_guard lock(mutex);
      armed = false;
      const auto now = steady::now();
      while (!heap.empty() && heap.front()->when <= now) {
        auto n = remove_at(0);
        if (n->claimed.exchange(true)) continue;  // being cancelled
        due.emplace_back(std::move(n->fire), std::move(n->target));
      }
    }
    rearm();
    // A target on this thread fires here, in the timer's order, rather than behind whatever the
    // io queue holds: a deadline's socket close must not wait for a long batch of actor jobs.
    for (auto& [fire, target] : due) {
      if (target && !target->running_in_this_thread()) {
        asio::post(*target, std::move(fire));
      } else {
        fire();
      }
    }
  }

  mutable std::mutex mutex;
  std::vector<std::shared_ptr<node>> heap;
  std::uint64_t next_seq = 0;
  bool stopped = false;
  bool armed = false;  // a wait is pending, due at armed_for
  steady::time_point armed_for{};
  asio::strand<asio::io_context::executor_type> strand;
  asio::steady_timer wake;
};

void node::cancel() {
  if (claimed.exchange(true)) return;  // fired (or firing), or cancelled before
  auto c = core.lock();
  if (!c) return;
  timer_callback released;  // destroyed outside the lock
  {
    std::lock_guard lock(c->mutex);
    if (index != not_queued) c->remove_at(index);
    released = std::move(fire);
    fire = nullptr;
  }
}

timer_heap::timer_heap(asio::execution_context& ctx)
    : asio::execution_context::service(ctx),
      core_(std::make_shared<core>(static_cast<asio::io_context&>(ctx))) {}

timer_heap::~timer_heap() = default;

timer_heap& timer_heap::of(asio::io_context& io) {
  return asio::use_service<timer_heap>(io);
}

void timer_heap::shutdown() {
  std::vector<std::shared_ptr<node>> dropped;
  std::lock_guard lock(core_->mutex);
  core_->stopped = true;
  for (auto& n : core_->heap) n->index = not_queued;
  dropped.swap(core_->heap);
  for (auto& n : dropped) n->fire = nullptr;
}

std::shared_ptr<timer> timer_heap::start(steady::time_point when, timer_callback fire,
                                         std::optional<io_executor> target) {
  auto n = std::allocate_shared<node>(recycling_allocator<node>{});
  n->core = core_;
  n->when = when;
  n->fire = std::move(fire);
  n->target = std::move(target);
  bool first = false;
  {
    std::lock_guard lock(core_->mutex);
    if (core_->stopped) {
      n->fire = nullptr;
      return n;
    }
    n->seq = core_->next_seq++;
    core_->push(n);
    first = core_->heap.front() == n && (!core_->armed || when < core_->armed_for);
  }
  // Only a timer that is now the earliest needs the Asio timer moved: with a steady stream of
  // requests of one deadline, each new one is the latest, and arming is the lock alone.
  if (first) asio::post(core_->strand, [c = core_] { c->rearm(); });
  return n;
}

bool timer_heap::due(std::chrono::steady_clock::time_point now) const {
  std::lock_guard lock(core_->mutex);
  return !core_->heap.empty() && core_->heap.front()->when <= now;
}

std::size_t timer_heap::size() const {
  std::lock_guard lock(core_->mutex);
  return core_->heap.size();
}

}  // namespace tether::net
