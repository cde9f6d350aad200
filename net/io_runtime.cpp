#include "net/io_runtime.hpp"

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "net/timer_heap.hpp"

namespace tether::net {

namespace asio = boost::asio;

namespace {

thread_local io_runtime* running_here = nullptr;

// Marks the calling thread as running `io` for as long as it lives.
struct running_scope {
  explicit running_scope(io_runtime* io) : previous(running_here) { running_here = io; }
  ~running_scope() { running_here = previous; }
  running_scope(const running_scope&) = delete;
  running_scope& operator=(const running_scope&) = delete;
  io_runtime* previous;
};

}  // namespace

struct io_runtime::impl {
  // One thread runs the context, whichever mode: io_executor.hpp relies on it.
  impl() : context(1), guard(asio::make_work_guard(context)) {}

  asio::io_context context;
  // Keeps run() returning only on stop(), even while no socket is open yet.
  asio::executor_work_guard<asio::io_context::executor_type> guard;
  std::thread thread;  // its own thread; none in lent mode
  // Lent mode: the thread in run_here(), so that join() can wait for it to leave.
  std::mutex lent_mutex;
  std::condition_variable lent_left;
  std::thread::id lent_runner;  // guarded by lent_mutex; default id: none

  // A handler that throws must not take the whole io thread (and every socket on it) down: the
  // exception is dropped and the loop goes on until stop().
  void run_until_stopped() {
    for (;;) {
      try {
        context.run();
        return;
      } catch (...) {
      }
    }
  }
};

io_runtime::io_runtime() : impl_(std::make_unique<impl>()) {
  impl_->thread = std::thread([this] {
    const running_scope here{this};
    impl_->run_until_stopped();
  });
}

io_runtime::io_runtime(lent_thread_t) : impl_(std::make_unique<impl>()) {}

void io_runtime::run_here() {
  {
    std::lock_guard<std::mutex> guard{impl_->lent_mutex};
    impl_->lent_runner = std::this_thread::get_id();
  }
  const running_scope here{this};
  impl_->run_until_stopped();
  std::lock_guard<std::mutex> guard{impl_->lent_mutex};
  impl_->lent_runner = std::thread::id{};
  impl_->lent_left.notify_all();
}

bool io_runtime::timers_due() {
  return asio::has_service<timer_heap>(impl_->context) &&
         timer_heap::of(impl_->context).due(std::chrono::steady_clock::now());
}

void io_runtime::post(void (*fn)(void*), void* arg) {
  asio::post(impl_->context, [fn, arg] { fn(arg); });
}

bool io_runtime::run_and_wait(std::function<void()> fn, std::chrono::milliseconds limit) {
  struct job {
    std::function<void()> fn;
    std::promise<void> done;
  };
  auto* j = new job{std::move(fn), {}};
  auto done = j->done.get_future();
  post(
      [](void* arg) {
        auto* j = static_cast<job*>(arg);
        j->fn();
        j->done.set_value();
        delete j;
      },
      j);
  return done.wait_for(limit) == std::future_status::ready;
}

bool io_runtime::stopped() const {
  return impl_->context.stopped();
}

io_runtime::~io_runtime() {
  join();
}

void io_runtime::join() {
  stop();
  {
    // The lent thread finishes the handler it is in; from that handler itself, waiting would
    // deadlock.
    std::unique_lock<std::mutex> guard{impl_->lent_mutex};
    const auto self = std::this_thread::get_id();
    impl_->lent_left.wait(guard, [&] {
      return impl_->lent_runner == std::thread::id{} || impl_->lent_runner == self;
    });
  }
  auto& thread = impl_->thread;
  if (thread.get_id() == std::this_thread::get_id()) {
    // Destroyed from one of its own handlers: joining would deadlock.
    thread.detach();
  } else if (thread.joinable()) {
    thread.join();
  }
}

io_runtime* io_runtime::current() {
  return running_here;
}

void* io_runtime::native() {
  return &impl_->context;
}

void io_runtime::stop() {
  impl_->guard.reset();
  impl_->context.stop();
}

}  // namespace tether::net
