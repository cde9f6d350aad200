// What every actor of the gateway shares, built once at start and read-only afterwards
// (the router's counters and the metrics are internally synchronised).
#pragma once

#include <caf/all.hpp>

#include <memory>
#include <vector>

#include "actors/metrics.hpp"
#include "actors/policy/retry_budget.hpp"
#include "actors/policy/router.hpp"
#include "config/config.hpp"
#include "net/otlp_exporter.hpp"
#include "net/timer_service.hpp"
#include "net/upstream.hpp"

namespace tether {

struct gateway_runtime {
  config::gateway_config cfg;
  std::unique_ptr<router> routes;
  std::unique_ptr<metrics> stats;
  std::unique_ptr<retry_budget> retries;  // per upstream, asked before every retry
  std::vector<std::unique_ptr<net::upstream_transport>> upstreams;  // by upstream index
  std::unique_ptr<net::timer_service> timers;  // cancellable timers for the request actors
  std::unique_ptr<net::otlp_exporter> tracer;  // null when telemetry.otlp_endpoint is empty
  caf::actor budget;
  caf::actor supervisor;
};

using runtime_ptr = std::shared_ptr<gateway_runtime>;

}  // namespace tether
