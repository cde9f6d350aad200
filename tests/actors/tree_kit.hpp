// What the request, attempt and connection actor tests share: the tree runs under CAF's test
// coordinator (a message is delivered when the test runs the scheduler), its timers on a clock
// the test advances, and the test plays net/'s part on both sides — the upstream's head, body
// and close (fake_upstream), and the caller's channel (recording_channel). No socket, no wall
// clock: each race is set up message by message.
#pragma once

#include <caf/all.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "actors/budget_actor.hpp"
#include "actors/messages.hpp"
#include "actors/request_actor.hpp"
#include "actors/runtime.hpp"
#include "net/downstream.hpp"
#include "net/timer_service.hpp"
#include "net/upstream.hpp"
#include "tests/actors/coordinator_fixture.hpp"
#include "tests/actors/manual_timers.hpp"

namespace tether::tree_kit {

using namespace std::chrono_literals;
using tether::manual_timers;

// An upstream whose exchanges the test drives: it says when the head, the body and the close
// come, through the events the connection actor gave (as net/ would, from its thread).
class fake_upstream final : public net::upstream_transport {
 public:
  struct exchange final : net::upstream_exchange {
    void cancel() override { cancelled = true; }
    bool cancelled = false;
  };
  struct started {
    net::upstream_request request;
    std::shared_ptr<net::upstream_events> events;
    std::shared_ptr<exchange> ex;
    // net/'s calls for a complete response; on_closed comes separately (close()).
    void respond(int status, std::string body, std::string type = "application/json") const {
      events->on_connected(false);
      events->on_head(status, {{"content-type", std::move(type)}});
      if (!body.empty()) events->on_body(std::move(body));
      events->on_end();
    }
    // net/'s calls for an event stream's head and its first event.
    void start_stream(std::string first_event) const {
      events->on_connected(false);
      events->on_head(200, {{"content-type", "text/event-stream"}});
      events->on_body(std::move(first_event));
    }
    void close() const { events->on_closed(); }
  };

  std::shared_ptr<net::upstream_exchange> start(
      net::upstream_request request, std::shared_ptr<net::upstream_events> events,
      std::shared_ptr<const net::connection_affinity>) override {
    auto ex = std::make_shared<exchange>();
    exchanges.push_back({std::move(request), std::move(events), ex});
    return ex;
  }

  std::vector<started> exchanges;
};

// The caller's side of the connection, as one line per call: "full 504", "start 200",
// "chunk <bytes>", "end", "abort".
class recording_channel final : public net::response_channel {
 public:
  void send_full(int status, net::header_list headers, std::string body) override {
    calls.push_back("full " + std::to_string(status));
    last_headers = std::move(headers);
    last_body = std::move(body);
  }
  void start_stream(int status, net::header_list headers) override {
    calls.push_back("start " + std::to_string(status));
    last_headers = std::move(headers);
  }
  void send_chunk(std::string data) override { calls.push_back("chunk " + data); }
  void end_stream() override { calls.emplace_back("end"); }
  void abort() override { calls.emplace_back("abort"); }
  std::shared_ptr<const net::connection_affinity> affinity() const override { return nullptr; }

  // How many answers were begun (a whole response or a stream's head).
  std::size_t answers() const {
    return static_cast<std::size_t>(std::count_if(calls.begin(), calls.end(), [](const auto& c) {
      return c.starts_with("full ") || c.starts_with("start ");
    }));
  }

  std::vector<std::string> calls;
  net::header_list last_headers;
  std::string last_body;
};

// "m" served by upstream "a" (capacity `cap`), falling back to "m2" on upstream "b".
inline config::gateway_config two_upstreams(std::uint32_t cap = 4) {
  config::gateway_config cfg;
  for (const char* name : {"a", "b"}) {
    config::upstream_config u;
    u.name = name;
    u.max_in_flight = cap;
    cfg.upstreams.push_back(u);
  }
  config::model_config m;
  m.name = "m";
  m.upstream = "a";
  m.upstream_model = "m";
  m.fallbacks = {"m2"};
  config::model_config m2;
  m2.name = "m2";
  m2.upstream = "b";
  m2.upstream_model = "m2";
  cfg.models = {m, m2};
  cfg.request.max_retries = 1;
  cfg.request.retry_backoff = 100ms;
  cfg.request.attempt_timeout = 0ms;
  cfg.budget.max_in_flight = 16;
  return cfg;
}

// One gateway's shared state with the fakes in place of net/, the real budget actor, and a
// test-coordinated actor system.
class tree_test : public coordinator_fixture {
 protected:
  explicit tree_test(config::gateway_config cfg = two_upstreams()) {
    rt_ = std::make_shared<gateway_runtime>();
    rt_->cfg = std::move(cfg);
    rt_->routes = std::make_unique<router>(rt_->cfg);
    std::vector<std::string> names;
    for (const auto& u : rt_->cfg.upstreams) {
      names.push_back(u.name);
      auto up = std::make_unique<fake_upstream>();
      upstreams_.push_back(up.get());
      rt_->upstreams.push_back(std::move(up));
      rt_->decode_steps.push_back(
          u.engine == config::engine_kind::openai ? nullptr : std::make_shared<decode_step>());
    }
    rt_->stats = std::make_unique<metrics>(names);
    rt_->retries = std::make_unique<retry_budget>(rt_->cfg.upstreams.size(), 10, 100);
    rt_->health = std::make_shared<upstream_health>(
        [stats = rt_->stats.get()](std::size_t i) { return stats->upstream_work(i); });
    rt_->health->configure(rt_->cfg);
    auto timers = std::make_unique<manual_timers>();
    timers_ = timers.get();
    rt_->timers = std::move(timers);
    rt_->budget =
        system_.spawn(budget_actor, budget_limits_from(rt_->cfg), rt_->stats.get(), timers_);
    run();
  }

  ~tree_test() override {
    // Whatever a test left running goes down, its exchanges closed, before the system ends.
    for (auto& r : requests_) caf::anon_send_exit(r, caf::exit_reason::kill);
    run();
    for (auto* up : upstreams_)
      for (auto& e : up->exchanges) e.close();
    run();
    advance(std::chrono::hours(1));  // a connection in its release grace lets go
    caf::anon_send_exit(rt_->budget, caf::exit_reason::kill);
    run();
  }

  caf::actor spawn_request(std::string model = "m",
                           std::optional<std::chrono::milliseconds> deadline = 10s,
                           bool stream = false) {
    request_spec spec;
    spec.request_id = "r" + std::to_string(requests_.size());
    spec.path = "/v1/chat/completions";
    spec.model = model;
    spec.stream = stream;
    spec.body = R"({"model":")" + model + R"(","messages":[]})";
    spec.deadline = deadline;
    // On the test's clock, which the request actor reads too.
    spec.arrival = std::chrono::steady_clock::time_point{
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(timers_->now())};
    auto r = tether::spawn_request(system_, rt_, channel_, std::move(spec));
    requests_.push_back(r);
    run();
    return r;
  }

  void advance(std::chrono::nanoseconds by) {
    timers_->advance(by);
    run();
  }

  // Becomes true when `a` has ended (a watcher's down_msg).
  std::shared_ptr<bool> watch(const caf::actor& a) {
    auto ended = std::make_shared<bool>(false);
    // Held: an actor nobody holds is collected at once.
    watchers_.push_back(system_.spawn(
        [](caf::event_based_actor* self, std::shared_ptr<bool> out,
           caf::actor who) -> caf::behavior {
          self->monitor(who);
          self->set_down_handler([self, out](caf::down_msg&) {
            *out = true;
            self->quit();
          });
          return {[](std::int32_t) {}};
        },
        ended, a));
    run();
    return ended;
  }

  // How many slots the budget counts as held, asked by a probe actor.
  std::uint64_t slots_held() {
    auto answer = std::make_shared<std::uint64_t>(0);
    // Its state comes as arguments, not captures: CAF 0.17 dereferences a null pointer to the
    // empty argument tuple of a spawn without arguments, which UBSan reports.
    system_.spawn(
        [](caf::event_based_actor* self, std::shared_ptr<std::uint64_t> out, caf::actor budget) {
          self->request(budget, caf::infinite, slots_atom::value)
              .then([out](std::uint64_t held) { *out = held; }, [](caf::error&) {});
        },
        answer, rt_->budget);
    run();
    return *answer;
  }

  fake_upstream& upstream(std::size_t i) { return *upstreams_.at(i); }

  runtime_ptr rt_;
  manual_timers* timers_ = nullptr;
  std::vector<fake_upstream*> upstreams_;
  std::shared_ptr<recording_channel> channel_ = std::make_shared<recording_channel>();
  std::vector<caf::actor> requests_;
  std::vector<caf::actor> watchers_;
};

}  // namespace tether::tree_kit
