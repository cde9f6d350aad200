#include "actors/ledger_actor.hpp"

#include <optional>

#include "actors/access_log.hpp"
#include "actors/actor_timers.hpp"

namespace tether {

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {

class ledger_state : public std::enable_shared_from_this<ledger_state> {
 public:
  ledger_state(caf::event_based_actor* self, ledger_setup setup)
      : self_(self),
        setup_(std::move(setup)),
        book_([store = setup_.store](std::int64_t from, std::int64_t to) {
          return store->totals_per_key(from, to);
        }) {
    if (!setup_.wall_clock) setup_.wall_clock = unix_now;
    if (setup_.timers) timers_.emplace(setup_.timers, self_->address());
  }

  void arm() {
    if (timers_) timers_->after(setup_.flush_interval, ledger_tick_atom::value);
  }

  void record(const ledger::ledger_entry& e) {
    try {
      const auto now = setup_.wall_clock();
      book_.record(e, now);
      if (e.worked) show_usage(e.key, now);
    } catch (const ledger::store_error& err) {
      // Reading a new period's totals failed: the record is not lost, the period is read again
      // at the next one.
      complain(err);
    }
  }

  caf::message admit(const std::string& key, const ledger::budget_limits& limits,
                     const ledger::period_usage& estimate) {
    try {
      const auto v = book_.admit(key, limits, estimate, setup_.wall_clock());
      return caf::make_message(v.admitted, v.retry_after_s, std::string{ledger::name_of(v.limit)},
                               v.settled);
    } catch (const ledger::store_error& err) {
      // The budget cannot be read: the request is admitted (a budget is a limit on spend, not a
      // reason to stop serving) and the operator is told.
      complain(err);
      return caf::make_message(true, std::int64_t{0}, std::string{}, false);
    }
  }

  // The tally's rows join the book, counted in the hour they are taken in.
  void collect() {
    if (!setup_.tally) return;
    const auto rows = setup_.tally->take();
    if (rows.empty()) return;
    try {
      const auto now = setup_.wall_clock();
      for (const auto& r : rows) book_.add(r.key, r.model, r.upstream, r.totals, now);
    } catch (const ledger::store_error& err) {
      complain(err);
    }
  }

  // Every batch waiting, oldest first; stops at the first that fails (it stays the next).
  void flush() {
    collect();
    while (const auto* batch = book_.next_batch()) {
      try {
        setup_.store->add(batch->rows);
      } catch (const ledger::store_error& err) {
        complain(err);
        return;
      }
      book_.written();
      if (failing_) {
        failing_ = false;
        log_info("ledger: writing to " + setup_.store->path().string() + " again");
      }
    }
  }

  caf::result<std::vector<ledger::usage_row>> query(const ledger::usage_query& q) {
    flush();
    try {
      return setup_.store->query(q);
    } catch (const ledger::store_error& err) {
      return caf::make_error(caf::sec::runtime_error, std::string{err.what()});
    }
  }

  std::uint64_t pending() const { return book_.unwritten_rows(); }

  // tether_key_usage, for the alert on a key near its budget: set as each record lands, and for
  // every key at each flush, so that a new day or month shows as it begins.
  void show_usage(const std::string& key, std::int64_t now) {
    if (!setup_.stats) return;
    const auto day = book_.settled(key, ledger::period::day, now);
    const auto month = book_.settled(key, ledger::period::month, now);
    setup_.stats->key_usage_set(key, false, day.tokens, day.spend_nanousd);
    setup_.stats->key_usage_set(key, true, month.tokens, month.spend_nanousd);
  }
  void show_all_usage() {
    if (!setup_.stats) return;
    try {
      const auto now = setup_.wall_clock();
      for (const auto& key : book_.keys(now)) show_usage(key, now);
    } catch (const ledger::store_error& err) {
      complain(err);
    }
  }

 private:
  // Once per streak of failures: a file that stays unwritable must not flood the log.
  void complain(const ledger::store_error& err) {
    if (failing_) return;
    failing_ = true;
    log_error(std::string{"ledger: "} + err.what());
  }

  caf::event_based_actor* self_;
  ledger_setup setup_;
  ledger::ledger_book book_;
  std::optional<actor_timers> timers_;
  bool failing_ = false;
};

}  // namespace

caf::behavior ledger_actor(caf::event_based_actor* self, ledger_setup setup) {
  auto st = std::make_shared<ledger_state>(self, std::move(setup));
  // The gateway's stop: what is recorded is written before the actor ends.
  self->set_exit_handler([self, st](caf::exit_msg& msg) {
    st->flush();
    self->quit(msg.reason);
  });
  st->arm();
  return {
      [st](ledger_record_atom, const ledger::ledger_entry& e) { st->record(e); },
      [st](ledger_admit_atom, const std::string& key, const ledger::budget_limits& limits,
           const ledger::period_usage& estimate) { return st->admit(key, limits, estimate); },
      [st](ledger_query_atom, const ledger::usage_query& q) { return st->query(q); },
      [st](ledger_tick_atom) {
        st->flush();
        st->show_all_usage();
        st->arm();
      },
      [st](ledger_flush_atom) {
        st->flush();
        return st->pending();
      },
      [st](ledger_pending_atom) { return st->pending(); },
  };
}

}  // namespace tether
