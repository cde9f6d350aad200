// One caller's request from arrival to the end of its last upstream socket.
#pragma once

#include <caf/all.hpp>

#include <memory>
#include <optional>
#include <string>

#include "actors/policy/ledger/budget_check.hpp"
#include "actors/policy/wire/surface.hpp"
#include "actors/runtime.hpp"
#include "net/downstream.hpp"

namespace tether {

struct request_spec {
  std::string request_id;
  std::string path;               // "/v1/chat/completions", ...
  std::string query;              // the target's query with its '?' ("" when none): forwarded
  surface where = surface::chat;  // the API `path` serves
  std::string model;              // public name
  bool stream = false;
  net::shared_body body;  // as received; every attempt sends it from this one buffer
  std::int64_t key = -1;
  priority queue_class = priority::normal;  // X-Priority, capped at the key's max_priority
  std::optional<std::chrono::milliseconds> deadline;  // effective; nullopt = unbounded
  // The caller's own X-Request-Deadline-Ms, if it sent one: whether a client retry fits.
  std::optional<std::chrono::milliseconds> caller_deadline;
  std::optional<std::int64_t> client_retry;  // the SDK's x-stainless-retry-count, for the log
  std::string client_session;                // the client's session header, for the log
  // The call this request is a try of (actors/policy/request/call_table.hpp; nullopt: none the
  // gateway can tell), which try, and the moment the call's deadline passes (the first try's, or
  // this one's when earlier): what the table keeps when the try does not end ok.
  std::optional<std::uint64_t> call;
  std::uint32_t call_try = 1;
  std::optional<std::chrono::steady_clock::time_point> call_due;
  // The upstream attempts the call's earlier tries spent (this try retries only what they left),
  // and, when they spent them all and the last ended at the upstream, that outcome: this try is
  // answered with it at once.
  std::uint32_t call_attempts = 0;
  std::optional<outcome> call_spent;
  std::chrono::steady_clock::time_point arrival;
  std::string traceparent;
  // The caller's anthropic-version and anthropic-beta (Anthropic surfaces only), passed on.
  std::string anthropic_version;
  std::string anthropic_beta;
  // The upstream that made the response this one continues (previous_response_id), if known.
  std::optional<std::size_t> prefer_upstream;
  // The affinity key, when the model's chain has one with routing = "prefix".
  std::optional<std::uint64_t> affinity;
  // The token weight's parts (actors/policy/admission/token_weight.hpp): each attempt's weight adds
  // its deployment's default_max_tokens when the body names no output limit.
  std::uint64_t prompt_tokens = 0;
  std::optional<std::uint64_t> max_output_tokens;
  // The key has an rpm or tpm: no attempt starts before the budget admits the request, charged
  // `rate_tokens` (its token weight on the model's first deployment).
  bool check_rate = false;
  std::uint64_t rate_tokens = 0;
  // The key has ledger budgets: after its rates, the ledger admits the request, estimated at
  // `budget_estimate` (the token weight, and its spend at the first deployment's prices).
  bool check_budget = false;
  ledger::period_usage budget_estimate;
  // A chat or completions stream whose body asks for no usage: with the ledger on, the upstream
  // is asked for it (stream_options.include_usage) and its usage chunk kept from the caller.
  bool ask_usage = false;
  // Where the attempts ask for their slots: the caller's io thread's budget shard (null: the
  // runtime's budget).
  caf::actor budget;
};

// Spawns the request actor (unlinked: the caller links it under its supervisor).
caf::actor spawn_request(caf::actor_system& system, runtime_ptr rt,
                         std::shared_ptr<net::response_channel> channel, request_spec spec);

}  // namespace tether
