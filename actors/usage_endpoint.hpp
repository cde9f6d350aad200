// GET /v1/usage (docs/contract.md, "The ledger"): an admin key's view of every key's usage. The
// gateway checks the key; this reads the query, asks the ledger actor (which flushes first, so
// every request recorded so far counts) and answers the caller when the ledger has answered, from
// a short-lived actor: the io thread never waits on the file.
#pragma once

#include <caf/all.hpp>

#include <memory>
#include <string>

#include "net/downstream.hpp"

namespace tether {

// `query` is the target's query string without its '?'. `ledger` null: the ledger is off.
void answer_usage(caf::actor_system& system, const caf::actor& ledger, const std::string& query,
                  const std::string& request_id, std::shared_ptr<net::response_channel> channel);

}  // namespace tether
