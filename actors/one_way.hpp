// Message handlers that answer nothing, for the messages a request's actors send each other (all
// sent with send or anon_send, never request). CAF 0.17 turns a handler's void result into an
// empty reply and builds a response promise for every message handled, only to find no one
// waiting for it; a handler that returns caf::delegated<> says the reply is seen to elsewhere,
// and CAF builds nothing. Never wrap a handler that a request(...) reaches: its sender would wait
// until its timeout.
#pragma once

#include <type_traits>
#include <utility>

#include <caf/delegated.hpp>
#include <caf/detail/type_list.hpp>
#include <caf/detail/type_traits.hpp>

namespace tether {

namespace detail {

template <class F, class Args>
struct one_way_handler;

// Declares the wrapped handler's own parameter types, so that CAF matches messages against them
// exactly as it would against the handler itself.
template <class F, class... Ts>
struct one_way_handler<F, caf::detail::type_list<Ts...>> {
  F f;
  caf::delegated<> operator()(Ts... xs) {
    f(std::forward<Ts>(xs)...);
    return {};
  }
};

}  // namespace detail

template <class F>
auto one_way(F f) {
  // A handler with a result has a reply to give, which the wrapper would drop unseen.
  static_assert(std::is_void_v<typename caf::detail::get_callable_trait<F>::result_type>,
                "one_way wraps handlers that return nothing");
  using args = typename caf::detail::get_callable_trait<F>::arg_types;
  return detail::one_way_handler<F, args>{std::move(f)};
}

}  // namespace tether
