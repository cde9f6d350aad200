// For the parser targets: tether's header_list (wire order, lower-case names) against Beast's
// fields of the same message.
#pragma once

#include <cstddef>
#include <vector>

#include "net/header_text.hpp"
#include "net/http_types.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace tether::fuzz {

// Beast's fields put a field after the last one of the same name; tether's keep the wire's
// order. Grouped the same way (a stable move within each name), they must be the same list.
template <class Fields>
void check_same_fields(const net::header_list& ours, const Fields& beast) {
  std::vector<net::http_header> grouped;
  for (const auto& h : ours) {
    auto at = grouped.end();
    for (auto it = grouped.begin(); it != grouped.end(); ++it)
      if (it->name == h.name) at = it + 1;
    grouped.insert(at, h);
  }
  std::size_t i = 0;
  for (const auto& field : beast) {
    TETHER_FUZZ_CHECK(i < grouped.size());
    TETHER_FUZZ_CHECK(grouped[i].name == net::to_lower_ascii(field.name_string()));
    TETHER_FUZZ_CHECK(grouped[i].value == field.value());
    ++i;
  }
  TETHER_FUZZ_CHECK(i == grouped.size());
}

}  // namespace tether::fuzz
