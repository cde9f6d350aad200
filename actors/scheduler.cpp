#include "actors/scheduler.hpp"

#include <caf/defaults.hpp>
#include <caf/detail/set_thread_name.hpp>
#include <caf/detail/thread_safe_actor_clock.hpp>
#include <caf/policy/unprofiled.hpp>
#include <caf/resumable.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/scheduler/coordinator.hpp>
#include <caf/scheduler/worker.hpp>
#include <caf/settings.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_set>
#include <vector>

#include "net/io_runtime.hpp"

namespace tether {

// The io_runtime whose context worker `id` runs (nullptr: none lent to it). Defined below the
// coordinator, which holds them.
net::io_runtime* lent_io(caf::scheduler::abstract_coordinator* parent, std::size_t id);
// Whether `job` is an actor made to roam (roam(), below).
bool roams(caf::scheduler::abstract_coordinator* parent, const caf::resumable* job);

// CAF's work-stealing policy (its configuration keys, its aggressive polling and stealing, its
// sleep on a condition variable), but each worker's jobs in a std::deque under the mutex that
// guards that sleep: CAF 0.17's double_ended_queue allocates and frees a node for every job it
// schedules (several per request), and its external enqueue took the mutex anyway to see whether to
// wake the worker. CAF's "moderate" phase is left out: an idle worker polling with
// sleep_for(50 µs) noticed the io thread's work only at its next poll (later still with the
// kernel's timer slack), paid at every io → actor hop; sleeping on the condition variable, it
// is woken by the enqueue at once.
//
// Given an io_runtime lent to it (worker k gets the k-th), a worker runs that io context instead
// of a loop of its own, and runs its jobs in a handler of the context (pump), a batch at a time
// behind the io handlers queued meanwhile. Why: with the io on a thread of its own, every request
// crossed threads four times (caller's bytes → request actor → upstream write; upstream's answer →
// actor → caller's write), each crossing a futex or eventfd wake-up, and on one CPU a context
// switch. On one thread, an io handler's message only queues a job, and an actor's post to a socket
// only queues a handler: most context switches and some system calls per request go; a job and
// its io share one thread's allocator cache too.
// Workers without an io context (none lent to them) work as above.
class stealing : public caf::policy::unprofiled {
 public:
  // A worker's jobs. Called with the worker's mutex held, but for looks_empty().
  class job_queue {
   public:
    bool empty() const { return jobs_.empty(); }
    // Without the mutex, possibly stale: an empty poll costs no lock, and a job enqueued just
    // after the look is found by the next poll or wakes the sleep that checks under the mutex.
    bool looks_empty() const { return size_.load(std::memory_order_relaxed) == 0; }
    // As looks_empty(): a hint, without the mutex.
    std::size_t size_hint() const { return size_.load(std::memory_order_relaxed); }
    void push_back(caf::resumable* job) {
      jobs_.push_back(job);
      sync();
    }
    void push_front(caf::resumable* job) {
      jobs_.push_front(job);
      if (urgent_end_ > 0) ++urgent_end_;
      sync();
    }
    // Ahead of every job queued the usual way, behind the urgent ones queued before it.
    void push_urgent(caf::resumable* job) {
      jobs_.insert(jobs_.begin() + static_cast<std::ptrdiff_t>(urgent_end_), job);
      ++urgent_end_;
      sync();
    }
    caf::resumable* pop_front() {
      auto* job = jobs_.front();
      jobs_.pop_front();
      if (urgent_end_ > 0) --urgent_end_;
      sync();
      return job;
    }
    caf::resumable* pop_back() {
      auto* job = jobs_.back();
      jobs_.pop_back();
      urgent_end_ = std::min(urgent_end_, jobs_.size());
      sync();
      return job;
    }

   private:
    void sync() { size_.store(jobs_.size(), std::memory_order_relaxed); }
    std::deque<caf::resumable*> jobs_;
    // jobs_[0, urgent_end_): the urgent jobs not yet run, and any put before them since.
    std::size_t urgent_end_ = 0;
    std::atomic<std::size_t> size_{0};
  };

  struct coordinator_data {
    explicit coordinator_data(caf::scheduler::abstract_coordinator*) {}
    std::atomic<std::size_t> next_worker{0};
  };

  struct worker_data {
    explicit worker_data(caf::scheduler::abstract_coordinator* p)
        : aggressive_attempts(caf::get_or(p->system().config(),
                                          "work-stealing.aggressive-poll-attempts",
                                          caf::defaults::work_stealing::aggressive_poll_attempts)),
          aggressive_steal_interval(
              caf::get_or(p->system().config(), "work-stealing.aggressive-steal-interval",
                          caf::defaults::work_stealing::aggressive_steal_interval)),
          relaxed_steal_interval(caf::get_or(p->system().config(),
                                             "work-stealing.relaxed-steal-interval",
                                             caf::defaults::work_stealing::relaxed_steal_interval)),
          relaxed_sleep(caf::get_or(p->system().config(), "work-stealing.relaxed-sleep-duration",
                                    caf::defaults::work_stealing::relaxed_sleep_duration)) {}
    // Each worker gets a copy of the first (CAF's worker constructor): fresh queue and mutex.
    worker_data(const worker_data& other)
        : aggressive_attempts(other.aggressive_attempts),
          aggressive_steal_interval(other.aggressive_steal_interval),
          relaxed_steal_interval(other.relaxed_steal_interval),
          relaxed_sleep(other.relaxed_sleep) {}
    worker_data& operator=(const worker_data&) = delete;

    job_queue jobs;  // guarded by mutex
    std::mutex mutex;
    std::condition_variable wake;
    bool sleeping = false;  // guarded by mutex
    // The first worker while it runs the lent io context: its jobs run in a handler of that
    // context (pump), posted when jobs arrive and none is posted.
    net::io_runtime* io = nullptr;  // set before pumping, by the worker itself
    bool pumping = false;           // guarded by mutex
    bool pump_posted = false;       // guarded by mutex
    bool shut_down = false;         // the worker's own
    // While pump runs a batch: the jobs this worker's own actors wake (internal_enqueue, only
    // ever called on this thread), last woken first, as CAF's push to the queue's front would
    // run them. Kept off the queue and its mutex (a lock to push and one to pop for each of
    // several jobs per request); put back at its front when the batch ends. The worker's own.
    bool in_pump = false;
    std::vector<caf::resumable*> woken;
    std::minstd_rand rng{std::random_device{}()};
    std::size_t aggressive_attempts;
    std::size_t aggressive_steal_interval;
    std::size_t relaxed_steal_interval;
    caf::timespan relaxed_sleep;
  };

  // An actor's job goes to the worker that last ran it (its home): a request's actors start on
  // the io thread that serves its caller and stay there, with its sockets and timers, whoever
  // sends them a message. A job without a home (a new actor, a function job) stays with the
  // worker whose thread woke it: spreading them round-robin sent most of a request's jobs to
  // another CPU and back, a hand-off each way per message, which cost more CPU per request than
  // the second CPU gave back. Idle workers without an io context still steal. Other threads
  // (the main thread, the middleman's) go round-robin.
  template <class Coordinator>
  void central_enqueue(Coordinator* self, caf::resumable* job) {
    using worker_type = typename Coordinator::worker_type;
    auto* here = static_cast<worker_type*>(this_thread_worker);
    if (here != nullptr && here->parent() != self) here = nullptr;
    if (auto* home = home_of(self, here, job)) {
      home->external_enqueue(job);
      return;
    }
    if (here != nullptr) {
      here->external_enqueue(job);
      return;
    }
    auto* w = self->worker_by_id(d(self).next_worker++ % self->num_workers());
    w->external_enqueue(job);
  }

  // The worker of `coordinator` that last ran `job`'s actor, or nullptr (not an actor, never ran,
  // last ran outside this coordinator's workers). `here`: the calling thread's worker, if any,
  // looked at first.
  template <class Coordinator>
  static typename Coordinator::worker_type* home_of(Coordinator* coordinator,
                                                    typename Coordinator::worker_type* here,
                                                    caf::resumable* job) {
    const auto n = coordinator->num_workers();
    if (n < 2 || job->subtype() != caf::resumable::scheduled_actor) return nullptr;
    // A scheduled_actor is a resumable by non-virtual inheritance: the cast is exact.
    auto* last = static_cast<caf::scheduled_actor*>(job)->context();
    if (last == nullptr) return nullptr;
    // Home and the waking thread agree (the common case): where it goes either way, roaming or not.
    if (here != nullptr && last == here) return here;
    if (roams(coordinator, job)) return nullptr;
    for (std::size_t i = 0; i < n; ++i) {
      auto* w = coordinator->worker_by_id(i);
      if (w == last) return w;
    }
    return nullptr;
  }

  // The worker whose thread this is (set by the worker itself), or nullptr.
  static inline thread_local void* this_thread_worker = nullptr;

  // Set while a timer's message is sent on this thread (urgent_delivery).
  static inline thread_local bool urgent_here = false;

  template <class Worker>
  void external_enqueue(Worker* self, caf::resumable* job) {
    auto& data = d(self);
    {
      std::lock_guard<std::mutex> guard{data.mutex};
      if (urgent_here && this_thread_worker == self)
        data.jobs.push_urgent(job);
      else
        data.jobs.push_back(job);
      if (data.sleeping) data.wake.notify_one();
      if (!data.pumping || data.pump_posted) return;
      data.pump_posted = true;
    }
    data.io->post(&pump<Worker>, self);
  }

  // Runs the lent worker's jobs inside its io context, a batch at a time: after each batch the
  // io handlers queued meanwhile go first.
  template <class Worker>
  static void pump(void* arg) {
    auto* self = static_cast<Worker*>(arg);
    auto& data = d(self);
    auto batch = std::clamp(jobs_per_queued * data.jobs.size_hint(), pump_batch, max_pump_batch);
    data.in_pump = true;
    for (std::size_t i = 0;; ++i) {
      // A due timer's wake (a deadline's socket close among them) does not wait for more than
      // the usual turn of jobs.
      if (i > 0 && i % pump_batch == 0 && i < batch && data.io->timers_due()) batch = i;
      caf::resumable* job = nullptr;
      if (i < batch && !data.woken.empty()) {
        job = data.woken.back();
        data.woken.pop_back();
      } else {
        std::lock_guard<std::mutex> guard{data.mutex};
        data.in_pump = false;
        return_woken(data);
        if (data.jobs.empty()) {
          data.pump_posted = false;
          return;
        }
        if (i == batch) break;
        job = data.jobs.pop_front();
        data.in_pump = true;
      }
      if (!run_job(self, job)) {
        std::lock_guard<std::mutex> guard{data.mutex};
        data.in_pump = false;
        return_woken(data);  // for the shutdown's sweep of the queue
        data.shut_down = true;
        data.io->stop();
        return;
      }
    }
    data.io->post(&pump<Worker>, self);
  }

  // Puts the woken jobs back at the queue's front, the last woken first. Called with the mutex.
  static void return_woken(worker_data& data) {
    for (auto* job : data.woken) data.jobs.push_front(job);
    data.woken.clear();
  }

  // One job, as CAF's worker loop runs it (without its logging context, below); false: the
  // worker is to shut down.
  template <class Worker>
  static bool run_job(Worker* self, caf::resumable* job) {
    // Every spawn (actor_system::spawn_impl) registers the calling thread with CAF's logger again.
    if (caf::logger::current_logger() != nullptr) caf::logger::set_current_actor_system(nullptr);
    switch (job->resume(self, self->max_throughput())) {
      case caf::resumable::resume_later:
        stealing{}.external_enqueue(self, job);  // to the end of the queue, like CAF's
        break;
      case caf::resumable::done:
      case caf::resumable::awaiting_message:
        intrusive_ptr_release(job);
        break;
      case caf::resumable::shutdown_execution_unit:
        return false;
    }
    return true;
  }

  // A worker with a lent io context runs it until it stops; jobs meanwhile run in pump. false:
  // the worker is to shut down.
  template <class Worker>
  static bool run_lent_io(Worker* self) {
    auto& data = d(self);
    data.io = lent_io(self->parent(), self->id());
    if (data.io == nullptr) return true;
    bool post = false;
    {
      std::lock_guard<std::mutex> guard{data.mutex};
      data.pumping = true;
      post = !data.jobs.empty();
      data.pump_posted = post;
    }
    if (post) data.io->post(&pump<Worker>, self);
    data.io->run_here();
    std::lock_guard<std::mutex> guard{data.mutex};
    data.pumping = false;
    return !data.shut_down;
  }

  // Jobs the pump runs before the io handlers queued meanwhile get their turn (a request's life
  // is many jobs), and messages a job handles before the next job. With a backlog queued, a turn
  // takes about what its jobs will wake too, up to a limit: otherwise the io handlers read new
  // requests far faster than the jobs finish them, and a stall's whole backlog is in flight at
  // once, cold in the cache, finishing late together.
  static constexpr std::size_t pump_batch = 32;
  static constexpr std::size_t max_pump_batch = 512;
  static constexpr std::size_t jobs_per_queued = 4;
  static constexpr std::size_t max_messages_per_resume = 64;

  template <class Worker>
  void internal_enqueue(Worker* self, caf::resumable* job) {
    auto& data = d(self);
    if (auto* home = home_of(self->parent(), self, job); home != nullptr && home != self) {
      home->external_enqueue(job);
      return;
    }
    if (data.in_pump) {
      data.woken.push_back(job);
      return;
    }
    std::lock_guard<std::mutex> guard{data.mutex};
    data.jobs.push_front(job);
  }

  template <class Worker>
  void resume_job_later(Worker* self, caf::resumable* job) {
    external_enqueue(self, job);  // to the end of the queue, like CAF's
  }

  template <class Worker>
  caf::resumable* dequeue(Worker* self) {
    auto& data = d(self);
    for (std::size_t i = 0; i < data.aggressive_attempts; ++i) {
      if (auto* job = take_head(data)) return job;
      if (i % data.aggressive_steal_interval == 0) {
        if (auto* job = try_steal(self)) return job;
      }
    }
    // Nothing is going on: sleep until an enqueue signals, stealing now and then.
    for (std::size_t i = 1;; ++i) {
      {
        std::unique_lock<std::mutex> guard{data.mutex};
        data.sleeping = true;
        data.wake.wait_for(guard, data.relaxed_sleep, [&] { return !data.jobs.empty(); });
        data.sleeping = false;
        if (!data.jobs.empty()) return data.jobs.pop_front();
      }
      if (i % data.relaxed_steal_interval == 0) {
        if (auto* job = try_steal(self)) return job;
      }
    }
  }

  template <class Worker, class UnaryFunction>
  void foreach_resumable(Worker* self, UnaryFunction f) {
    while (auto* job = take_head(d(self))) f(job);
  }

  template <class Coordinator, class UnaryFunction>
  void foreach_central_resumable(Coordinator*, UnaryFunction) {}

 private:
  static caf::resumable* take_head(worker_data& data) {
    if (data.jobs.looks_empty()) return nullptr;
    std::lock_guard<std::mutex> guard{data.mutex};
    return data.jobs.empty() ? nullptr : data.jobs.pop_front();
  }

  template <class Worker>
  caf::resumable* try_steal(Worker* self) {
    auto* parent = self->parent();
    const auto n = parent->num_workers();
    if (n < 2) return nullptr;
    auto victim = std::uniform_int_distribution<std::size_t>{0, n - 1}(d(self).rng);
    if (victim == self->id()) victim = n - 1 == victim ? 0 : n - 1;
    auto& data = d(parent->worker_by_id(victim));
    if (data.jobs.looks_empty()) return nullptr;
    std::lock_guard<std::mutex> guard{data.mutex};
    // The other end, as CAF's take_tail.
    return data.jobs.empty() ? nullptr : data.jobs.pop_back();
  }
};

constexpr int worker_nice = 5;

}  // namespace tether

// CAF 0.17's worker loop wraps every job in CAF_PUSH_AID_FROM_PTR, which is compiled in even with
// logging off: a dynamic_cast from resumable* to abstract_actor* (a cross-cast through virtual
// bases) and two trips through the logger's mutex-guarded map of thread ids, per resume, and a
// request's life is many resumes: a large share of the work tether does per request.
// This is that loop without the logging context. The thread also never registers with CAF's
// logger (CAF_SET_LOGGER_SYS), so the library's own push/pop of that context on every actor launch
// and destruction finds no logger and returns at once; tether logs through spdlog, and CAF's
// logger is set to quiet.
template <>
void caf::scheduler::worker<tether::stealing>::run() {
  tether::stealing::this_thread_worker = this;
  if (!tether::stealing::run_lent_io(this)) return;
  // The policy's resume hooks (before_resume, after_resume, after_completion, before_shutdown)
  // are unprofiled's no-ops: run_job leaves them out, for this loop and the pump alike.
  while (tether::stealing::run_job(this, policy_.dequeue(this))) {
  }
}

template <>
void caf::scheduler::worker<tether::stealing>::start() {
  auto* self = this;
  this_thread_ = std::thread{[self] {
    const bool runs_io = tether::lent_io(self->parent(), self->id()) != nullptr;
    caf::detail::set_thread_name(runs_io ? "tether.io" : "tether.worker");
    // The io thread writes what callers see (answers, a passed deadline's 504) and closes what
    // they left; the other workers keep the books. When both want one CPU, the io thread goes
    // first: nice +5 gives it ≈3× a worker's share (CFS weights 1024:335), so a deadline storm's
    // answers come sooner without costing throughput. Raising one's own niceness needs no
    // privilege.
    if (!runs_io) setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), tether::worker_nice);
    self->system().thread_started();
    self->run();
    self->system().thread_terminates();
  }};
}

namespace tether {
namespace {

// CAF 0.17 calls clock().cancel_timeouts(self) from every actor's cleanup. Its clock answers that
// by queueing an event for its own thread and waking it: one futex wake and two context switches
// per actor exit, three actors per request, mostly for nothing — most of tether's actors set no
// CAF timeout (their timers live on the io threads). The few that do call request(...) with a
// timeout: a request actor whose key has a rate limit (its rate check to the budget), the
// reloader, the cluster link. This clock remembers which actors set a timeout and forwards the
// cancellation only for those: CAF's clock keeps per-actor entries only for
// set_{ordinary,multi,request}_timeout.
class quiet_clock final : public caf::detail::thread_safe_actor_clock {
 public:
  using super = caf::detail::thread_safe_actor_clock;

  void set_ordinary_timeout(time_point t, caf::abstract_actor* self, caf::atom_value type,
                            std::uint64_t id) override {
    note(self);
    super::set_ordinary_timeout(t, self, type, id);
  }

  void set_request_timeout(time_point t, caf::abstract_actor* self, caf::message_id id) override {
    note(self);
    super::set_request_timeout(t, self, id);
  }

  void set_multi_timeout(time_point t, caf::abstract_actor* self, caf::atom_value type,
                         std::uint64_t id) override {
    note(self);
    super::set_multi_timeout(t, self, type, id);
  }

  void cancel_timeouts(caf::abstract_actor* self) override {
    // Most of the time no actor has one: then no lock. An actor that set one did so before its
    // own cleanup, which sees its count.
    if (noted_.load(std::memory_order_acquire) == 0) return;
    {
      std::lock_guard<std::mutex> guard{mutex_};
      if (users_.erase(self) == 0) return;
      noted_.store(users_.size(), std::memory_order_release);
    }
    super::cancel_timeouts(self);
  }

 private:
  void note(caf::abstract_actor* self) {
    std::lock_guard<std::mutex> guard{mutex_};
    users_.insert(self);
    noted_.store(users_.size(), std::memory_order_release);
  }

  std::mutex mutex_;
  std::atomic<std::size_t> noted_{0};  // users_.size(), readable without the mutex
  // Removed in cancel_timeouts, which CAF calls before the actor is destroyed: no stale pointer.
  std::unordered_set<caf::abstract_actor*> users_;
};

class coordinator final : public caf::scheduler::coordinator<stealing> {
 public:
  using super = caf::scheduler::coordinator<stealing>;

  coordinator(caf::actor_system& sys, std::vector<net::io_runtime*> ios)
      : super(sys), ios_(std::move(ios)) {}

  quiet_clock& clock() noexcept override { return clock_; }
  net::io_runtime* io(std::size_t worker) const noexcept {
    return worker < ios_.size() ? ios_[worker] : nullptr;
  }

  bool roams(const caf::resumable* job) const noexcept {
    for (const auto& each : roaming_) {
      const auto* r = each.load(std::memory_order_relaxed);
      if (r == nullptr) return false;
      if (r == job) return true;
    }
    return false;
  }
  // False when the table is full (the actor then keeps a home like any other).
  bool add_roaming(const caf::resumable* job) noexcept {
    for (auto& each : roaming_) {
      const caf::resumable* expected = nullptr;
      if (each.compare_exchange_strong(expected, job) || expected == job) return true;
    }
    return false;
  }

 protected:
  void start() override {
    // The base class still runs a dispatch thread for its own (now unused) clock; it sleeps.
    thread_ = std::thread{[this] {
      caf::detail::set_thread_name("tether.clock");
      system().thread_started();
      clock_.run_dispatch_loop();
      system().thread_terminates();
    }};
    super::start();
  }

  void stop() override {
    super::stop();
    clock_.cancel_dispatch_loop();
    thread_.join();
  }

 private:
  quiet_clock clock_;
  std::thread thread_;
  std::vector<net::io_runtime*> ios_;  // the k-th is lent to worker k
  // The actors that roam, filled from the front; a handful (the budget, its link, the
  // supervisor, the health actor), looked through at every enqueue. Entries stay after the actor
  // exits: a later actor at that address roams too, which only changes where it runs.
  std::array<std::atomic<const caf::resumable*>, 8> roaming_{};
};

}  // namespace

net::io_runtime* lent_io(caf::scheduler::abstract_coordinator* parent, std::size_t id) {
  return static_cast<coordinator*>(parent)->io(id);
}

bool roams(caf::scheduler::abstract_coordinator* parent, const caf::resumable* job) {
  return static_cast<coordinator*>(parent)->roams(job);
}

urgent_delivery::urgent_delivery() : was_(stealing::urgent_here) {
  stealing::urgent_here = true;
}

urgent_delivery::~urgent_delivery() {
  stealing::urgent_here = was_;
}

bool roam(caf::actor_system& system, const caf::actor& actor) {
  auto* sched = dynamic_cast<coordinator*>(&system.scheduler());
  auto* scheduled =
      dynamic_cast<caf::scheduled_actor*>(caf::actor_cast<caf::abstract_actor*>(actor));
  if (sched == nullptr || scheduled == nullptr) return false;
  return sched->add_roaming(scheduled);
}

void use_tether_scheduler(caf::actor_system_config& cfg, std::vector<net::io_runtime*> ios) {
  // An actor resumes at most this many messages before the next job (CAF's default: no limit).
  // On a thread that also runs io, an actor whose mailbox kept filling would otherwise hold
  // every socket up.
  if (!ios.empty()) cfg.set("scheduler.max-throughput", stealing::max_messages_per_resume);
  cfg.module_factories.push_back(
      [ios = std::move(ios)](caf::actor_system& sys) -> caf::actor_system::module* {
        return new coordinator(sys, ios);
      });
}

void use_tether_scheduler(caf::actor_system_config& cfg, net::io_runtime* io) {
  use_tether_scheduler(
      cfg, io == nullptr ? std::vector<net::io_runtime*>{} : std::vector<net::io_runtime*>{io});
}

}  // namespace tether
