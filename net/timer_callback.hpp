// What a timer runs: a move-only callable kept inline when it fits. Every timer tether arms
// captures little (an actor's address and its message, or a weak pointer), which std::function
// would still put on the heap because the captures are not trivially copyable: one allocation per
// timer, and a request arms several.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace tether::net {

class timer_callback {
 public:
  timer_callback() = default;
  timer_callback(std::nullptr_t) {}  // NOLINT(google-explicit-constructor): as std::function
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, timer_callback> &&
                                              !std::is_same_v<std::decay_t<F>, std::nullptr_t>>>
  // A lambda converts, as to std::function.
  timer_callback(F&& f) {  // NOLINT(google-explicit-constructor)
    using fn = std::decay_t<F>;
    if constexpr (sizeof(fn) <= inline_size && alignof(fn) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<fn>) {
      ::new (static_cast<void*>(storage_)) fn(std::forward<F>(f));
      ops_ = &inline_ops<fn>::table;
    } else {
      ::new (static_cast<void*>(storage_)) fn*(new fn(std::forward<F>(f)));
      ops_ = &boxed_ops<fn>::table;
    }
  }
  timer_callback(timer_callback&& other) noexcept { other.move_to(*this); }
  timer_callback& operator=(timer_callback&& other) noexcept {
    if (this != &other) {
      reset();
      other.move_to(*this);
    }
    return *this;
  }
  timer_callback& operator=(std::nullptr_t) {
    reset();
    return *this;
  }
  timer_callback(const timer_callback&) = delete;
  timer_callback& operator=(const timer_callback&) = delete;
  ~timer_callback() { reset(); }

  explicit operator bool() const { return ops_ != nullptr; }
  void operator()() { ops_->call(storage_); }

 private:
  static constexpr std::size_t inline_size = 40;

  struct ops {
    void (*call)(void*);
    void (*move)(void* from, void* to);  // leaves `from` destroyed
    void (*destroy)(void*);
  };

  template <class F>
  struct inline_ops {
    static void call(void* p) { (*static_cast<F*>(p))(); }
    static void move(void* from, void* to) {
      ::new (to) F(std::move(*static_cast<F*>(from)));
      static_cast<F*>(from)->~F();
    }
    static void destroy(void* p) { static_cast<F*>(p)->~F(); }
    static constexpr ops table{&call, &move, &destroy};
  };

  template <class F>
  struct boxed_ops {
    static F* get(void* p) { return *static_cast<F**>(p); }
    static void call(void* p) { (*get(p))(); }
    static void move(void* from, void* to) { ::new (to) F*(get(from)); }
    static void destroy(void* p) { delete get(p); }
    static constexpr ops table{&call, &move, &destroy};
  };

  void move_to(timer_callback& to) noexcept {
    if (!ops_) return;
    ops_->move(storage_, to.storage_);
    to.ops_ = ops_;
    ops_ = nullptr;
  }
  void reset() {
    if (!ops_) return;
    ops_->destroy(storage_);
    ops_ = nullptr;
  }

  alignas(std::max_align_t) unsigned char storage_[inline_size];
  const ops* ops_ = nullptr;
};

}  // namespace tether::net
