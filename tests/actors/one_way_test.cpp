// one_way under CAF's test coordinator: a wrapped handler matches exactly the messages the handler
// itself would, sees their values (a mutable reference too), and answers nothing, not even a
// request (which is why only one-way messages may reach one).
#include "actors/one_way.hpp"

#include <gtest/gtest.h>

#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/actors/coordinator_fixture.hpp"

namespace tether {
namespace {

using name_atom = caf::atom_constant<caf::atom("name")>;
using count_atom = caf::atom_constant<caf::atom("count")>;
using ask_atom = caf::atom_constant<caf::atom("ask")>;

struct seen {
  std::vector<std::string> names;
  std::vector<int> counts;
  int asks = 0;
};

caf::behavior recorder(caf::event_based_actor*, std::shared_ptr<seen> log) {
  return {
      // Takes the string over, as the request actor takes a response's body.
      one_way([log](name_atom, std::string& name) { log->names.push_back(std::move(name)); }),
      one_way([log](count_atom, int n) { log->counts.push_back(n); }),
      one_way([log](ask_atom) { ++log->asks; }),
  };
}

using OneWayTest = coordinator_fixture;

TEST_F(OneWayTest, EachMessageReachesTheHandlerOfItsTypesWithItsValues) {
  auto log = std::make_shared<seen>();
  auto actor = system_.spawn(recorder, log);
  caf::anon_send(actor, name_atom::value, std::string{"a long enough name to be on the heap"});
  caf::anon_send(actor, count_atom::value, 7);
  caf::anon_send(actor, name_atom::value, std::string{"b"});
  run();

  EXPECT_EQ(log->names, (std::vector<std::string>{"a long enough name to be on the heap", "b"}));
  EXPECT_EQ(log->counts, std::vector<int>{7});
  caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  run();
}

// What a request to the recorder came back with, if anything.
struct asked {
  bool answered = false;
  std::optional<caf::error> failed;
};

// With arguments: CAF 0.17 spawns an argument-less function actor through a null tuple (UBSan).
void ask_once(caf::event_based_actor* self, caf::actor target, std::shared_ptr<asked> out) {
  self->request(target, std::chrono::seconds(1), ask_atom::value)
      .then([out] { out->answered = true; }, [out](caf::error& e) { out->failed = e; });
}

TEST_F(OneWayTest, ARequestIsHandledButNeverAnswered) {
  auto log = std::make_shared<seen>();
  auto actor = system_.spawn(recorder, log);
  auto result = std::make_shared<asked>();
  system_.spawn(ask_once, actor, result);
  run();
  EXPECT_EQ(log->asks, 1);
  EXPECT_FALSE(result->answered);
  EXPECT_FALSE(result->failed.has_value());  // no reply, not even an empty one: only the timeout

  sched_.advance_time(std::chrono::seconds(1));
  run();
  EXPECT_FALSE(result->answered);
  ASSERT_TRUE(result->failed.has_value());
  EXPECT_EQ(*result->failed, caf::sec::request_timeout);
  caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  run();
}

}  // namespace
}  // namespace tether
