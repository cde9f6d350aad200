// SIGHUP: the config file read again and, when it is valid, applied to the requests that arrive
// after it (config/reload.hpp decides what changes). Requests in flight keep the generation they
// started with; an upstream the file no longer names drains. An invalid file changes nothing.
#pragma once

#include <caf/all.hpp>

#include <string>

#include "actors/gateway.hpp"
#include "actors/runtime.hpp"

namespace tether {

class reloader {
 public:
  // `local_budget`: this node's budget actor (a cluster member's own, not its link to the host),
  // whose caps follow the file.
  reloader(caf::actor_system& system, const net::io_group& io, gateway& gw, runtime_ptr first,
           caf::actor local_budget);

  // Reads the file the gateway started from; logs what it did; true when it was applied. Called
  // by the thread that takes the signals; blocks until new requests see the new config.
  bool reload();

 private:
  bool refuse(const std::vector<std::string>& errors);

  caf::actor_system& system_;
  net::io_group io_;
  gateway& gw_;
  runtime_ptr current_;
  caf::actor local_budget_;
};

}  // namespace tether
