// The ledger actor (docs/contract.md, "The ledger"): the one owner of the ledger's file. Request
// actors leave each request's usage in its tally as they end (a key with budgets sends it, one-way)
// and ask it at admission when their key has budgets; it aggregates the records
// (actors/policy/ledger/ledger_book.hpp) and writes them to the store in one transaction every
// flush interval, off every request's path. A write that fails keeps its batch and is tried again
// at the next interval; an exit (the gateway's stop) writes what is left first, so a clean stop
// loses nothing.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "actors/ledger_store.hpp"
#include "actors/ledger_tally.hpp"
#include "actors/metrics.hpp"
#include "actors/policy/ledger/ledger_book.hpp"
#include "net/timer_service.hpp"

// Local messages only (the ledger's cluster deltas travel in their own form).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tether::ledger::ledger_entry)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tether::ledger::budget_limits)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tether::ledger::period_usage)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tether::ledger::usage_query)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<tether::ledger::usage_row>)

namespace tether {

// (ledger_record_atom, ledger_entry): a request's end, one-way.
using ledger_record_atom = caf::atom_constant<caf::atom("l_record")>;
// (ledger_admit_atom, key: string, budget_limits, estimate: period_usage) → (admitted: bool,
// retry_after_s: int64, limit: string (the setting's name), settled: bool)
using ledger_admit_atom = caf::atom_constant<caf::atom("l_admit")>;
// (ledger_query_atom, usage_query) → vector<usage_row>, after a flush: the records so far count;
// or an error (the store could not be read), whose text names the file.
using ledger_query_atom = caf::atom_constant<caf::atom("l_query")>;
// (ledger_tick_atom): the actor's own timer, every flush interval.
using ledger_tick_atom = caf::atom_constant<caf::atom("l_tick")>;
// (ledger_flush_atom) → uint64 rows still waiting: a flush now (tests, the bench).
using ledger_flush_atom = caf::atom_constant<caf::atom("l_flush")>;
// (ledger_pending_atom) → uint64: rows waiting for the store (a test's and the bench's view).
using ledger_pending_atom = caf::atom_constant<caf::atom("l_pending")>;

struct ledger_setup {
  std::shared_ptr<ledger::ledger_store> store;
  std::chrono::milliseconds flush_interval{1000};
  metrics* stats = nullptr;  // may be null (tests)
  net::timer_service* timers = nullptr;
  // Unix seconds: the hour a record counts in and the periods budgets count in. The system
  // clock unless a test's.
  std::function<std::int64_t()> wall_clock;
  // Where request actors without budgets leave their records (null: every record comes as a
  // message); taken at each flush.
  std::shared_ptr<ledger::ledger_tally> tally;
};

caf::behavior ledger_actor(caf::event_based_actor* self, ledger_setup setup);

// The wall clock in unix seconds.
std::int64_t unix_now();

}  // namespace tether
