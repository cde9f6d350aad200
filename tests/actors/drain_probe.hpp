// Asks an actor for the drain from a probe actor, which keeps the answer when it comes: under the
// test coordinator nothing may block for it.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <memory>
#include <optional>

#include "actors/messages.hpp"

namespace tether {

using drain_answer = std::shared_ptr<std::optional<std::uint64_t>>;

// The probe's state comes as arguments: CAF 0.17 dereferences a null pointer to the empty
// argument tuple of a spawn without arguments, which UBSan reports.
inline void ask_drain_from_probe(caf::actor_system& system, const caf::actor& target,
                                 drain_answer answer) {
  system.spawn(
      [](caf::event_based_actor* self, drain_answer into, caf::actor to) {
        self->request(to, caf::infinite, drain_atom::value)
            .then([into](drained_atom, std::uint64_t cancelled) { *into = cancelled; },
                  [](caf::error&) {});
      },
      std::move(answer), target);
}

}  // namespace tether
