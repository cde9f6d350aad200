#include "actors/usage_endpoint.hpp"

#include <chrono>
#include <variant>

#include "actors/ledger_actor.hpp"
#include "actors/policy/ledger/usage_report.hpp"
#include "actors/policy/request/outcome.hpp"
#include "actors/response_headers.hpp"

namespace tether {

namespace {

void answer_error(net::response_channel& channel, const std::string& request_id, int status,
                  outcome o, const std::string& message) {
  channel.send_full(status, error_headers(request_id, status, o),
                    error_body(o, message, request_id));
}

// Asks the ledger and answers the caller, then ends. Bounded: a ledger stuck on its file answers
// the caller with an error, not never.
void read_usage(caf::event_based_actor* self, caf::actor ledger, ledger::usage_query q,
                std::string request_id, std::shared_ptr<net::response_channel> channel) {
  self->request(ledger, std::chrono::seconds(10), ledger_query_atom::value, q)
      .then(
          [self, q, request_id, channel](std::vector<ledger::usage_row>& rows) {
            channel->send_full(200,
                               {{"content-type", "application/json"}, {"x-request-id", request_id}},
                               ledger::usage_json(q, rows));
            self->quit();
          },
          [self, request_id, channel](caf::error& err) {
            std::string message{"the ledger could not be read: "};
            message += self->system().render(err);
            answer_error(*channel, request_id, 500, outcome::internal_error, message);
            self->quit();
          });
}

}  // namespace

void answer_usage(caf::actor_system& system, const caf::actor& ledger, const std::string& query,
                  const std::string& request_id, std::shared_ptr<net::response_channel> channel) {
  if (!ledger) {
    answer_error(*channel, request_id, 404, outcome::bad_request,
                 "the ledger is off ([ledger] enabled = false)");
    return;
  }
  auto parsed = ledger::parse_usage_query(query);
  if (auto* wrong = std::get_if<std::string>(&parsed)) {
    answer_error(*channel, request_id, 400, outcome::bad_request, *wrong);
    return;
  }
  // With arguments: CAF 0.17 spawns an argument-less function through a null tuple, which
  // UBSan flags.
  system.spawn(read_usage, ledger, std::get<ledger::usage_query>(std::move(parsed)), request_id,
               std::move(channel));
}

}  // namespace tether
