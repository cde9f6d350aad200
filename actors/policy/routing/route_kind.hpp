// How the router chose an attempt's deployment, for tether_route_decisions_total: counted for
// the models with routing = "prefix" only (a least-work model's every attempt would cost the
// plain path a count). prefix_home: the affinity key's home, the first deployment in service on
// its ring path; prefix_spill: a later one, the home being past the load bound; least_work: the
// two-draw choice (a retry, a request with no key, every deployment out of service).
#pragma once

#include <cstdint>
#include <string_view>

namespace tether {

enum class route_kind : std::uint8_t { none, least_work, prefix_home, prefix_spill };

constexpr std::string_view to_string(route_kind k) {
  switch (k) {
    case route_kind::least_work:
      return "least_work";
    case route_kind::prefix_home:
      return "prefix_home";
    case route_kind::prefix_spill:
      return "prefix_spill";
    case route_kind::none:
      break;
  }
  return "none";
}

}  // namespace tether
