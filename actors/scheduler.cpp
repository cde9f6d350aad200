#include "actors/scheduler.hpp"

#include <caf/detail/set_thread_name.hpp>
#include <caf/detail/thread_safe_actor_clock.hpp>
#include <caf/policy/work_stealing.hpp>
#include <caf/scheduler/coordinator.hpp>
#include <caf/scheduler/worker.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <mutex>
#include <thread>
#include <unordered_set>

namespace tether {

// CAF's work-stealing policy under its own name, so that tether's workers can run their own loop
// (below) while every queueing decision stays CAF's.
struct stealing : caf::policy::work_stealing {};

constexpr int worker_nice = 5;

}  // namespace tether

// CAF 0.17's worker loop wraps every job in CAF_PUSH_AID_FROM_PTR, which is compiled in even with
// logging off: a dynamic_cast from resumable* to abstract_actor* (a cross-cast through virtual
// bases, ≈1,300 instructions) and two trips through the logger's mutex-guarded map of thread ids,
// per resume, ≈15 resumes per request — ≈9% of tether's instructions per request (callgrind).
// This is that loop without the logging context. The thread also never registers with CAF's
// logger (CAF_SET_LOGGER_SYS), so the library's own push/pop of that context on every actor launch
// and destruction finds no logger and returns at once; tether logs through spdlog, and CAF's
// logger is set to quiet.
template <>
void caf::scheduler::worker<tether::stealing>::run() {
  for (;;) {
    auto* job = policy_.dequeue(this);
    // Every spawn (actor_system::spawn_impl) registers the calling thread with CAF's logger again.
    if (caf::logger::current_logger() != nullptr) caf::logger::set_current_actor_system(nullptr);
    policy_.before_resume(this, job);
    auto res = job->resume(this, max_throughput_);
    policy_.after_resume(this, job);
    switch (res) {
      case resumable::resume_later:
        policy_.resume_job_later(this, job);
        break;
      case resumable::done:
        policy_.after_completion(this, job);
        intrusive_ptr_release(job);
        break;
      case resumable::awaiting_message:
        intrusive_ptr_release(job);
        break;
      case resumable::shutdown_execution_unit:
        policy_.after_completion(this, job);
        policy_.before_shutdown(this);
        return;
    }
  }
}

template <>
void caf::scheduler::worker<tether::stealing>::start() {
  auto* self = this;
  this_thread_ = std::thread{[self] {
    caf::detail::set_thread_name("tether.worker");
    // The io thread writes what callers see (answers, a passed deadline's 504) and closes what
    // they left; the workers keep the books. When both want one CPU, the io thread goes first:
    // nice +5 gives it ≈3× a worker's share (CFS weights 1024:335). Bench, interleaved A/B on one
    // CPU: deadline storm answer p99 13–14 → 10 ms, c=16 throughput not lower (13.4k/14.1k vs
    // 7.4k/12.3k req/s). Raising one's own niceness needs no privilege.
    setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), tether::worker_nice);
    self->system().thread_started();
    self->run();
    self->system().thread_terminates();
  }};
}

namespace tether {
namespace {

// CAF 0.17 calls clock().cancel_timeouts(self) from every actor's cleanup. Its clock answers that
// by queueing an event for its own thread and waking it: one futex wake and two context switches
// per actor exit, three actors per request, for nothing — tether's actors set no CAF timeouts
// (their timers live on the io threads). This clock remembers which actors did set one (request
// timeouts of the cluster link, receive timeouts) and forwards the cancellation only for those:
// CAF's clock keeps per-actor entries only for set_{ordinary,multi,request}_timeout.
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
    {
      std::lock_guard<std::mutex> guard{mutex_};
      if (users_.erase(self) == 0) return;
    }
    super::cancel_timeouts(self);
  }

 private:
  void note(caf::abstract_actor* self) {
    std::lock_guard<std::mutex> guard{mutex_};
    users_.insert(self);
  }

  std::mutex mutex_;
  // Removed in cancel_timeouts, which CAF calls before the actor is destroyed: no stale pointer.
  std::unordered_set<caf::abstract_actor*> users_;
};

class coordinator final : public caf::scheduler::coordinator<stealing> {
 public:
  using super = caf::scheduler::coordinator<stealing>;

  explicit coordinator(caf::actor_system& sys) : super(sys) {}

  quiet_clock& clock() noexcept override { return clock_; }

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
};

}  // namespace

void use_tether_scheduler(caf::actor_system_config& cfg) {
  cfg.module_factories.push_back(
      [](caf::actor_system& sys) -> caf::actor_system::module* { return new coordinator(sys); });
}

}  // namespace tether
