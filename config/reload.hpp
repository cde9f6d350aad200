// What a reloaded config file changes in a running gateway: the config to run from now on, with
// every upstream and key kept at the index it had (the budget, the metrics and the requests in
// flight count by index), and what of the file must wait for a restart. Pure: two configs in,
// a plan out; the gateway carries it out (actors/reloader.cpp).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace tether::config {

struct reload_plan {
  // Set when the file cannot be applied (the running config stays); the rest is then empty.
  std::optional<std::string> error;
  // The config new requests run on. Settings that need a restart keep their running values.
  gateway_config next;
  // Upstream indices whose connections must be made anew: added, revived, or whose address,
  // timeouts or pool size changed. The other upstreams keep their pools.
  std::vector<std::size_t> fresh_upstreams;
  // Upstream indices removed by this reload: their pools drain.
  std::vector<std::size_t> retired_upstreams;
  // "server.listen", "cluster", ...: changed in the file, applied only by a restart.
  std::vector<std::string> needs_restart;
  // One line per change, for the log: "upstream b added", "model fast removed", ...
  std::vector<std::string> changes;
};

reload_plan plan_reload(const gateway_config& running, gateway_config loaded);

}  // namespace tether::config
