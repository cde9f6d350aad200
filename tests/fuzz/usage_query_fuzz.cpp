// The query of `GET /v1/usage` (actors/policy/ledger/usage_report.hpp), which an admin key's
// caller writes. Beyond "no crash": the same answer twice; an error is printable ASCII (no byte of
// the caller's value goes back); an accepted query has from before to and, written back as a
// query string with every byte percent-encoded, parses to itself; its times print and parse back;
// the JSON body of a row carrying its names parses (where the names are UTF-8, as config names
// are) and reads the names back; the table has a line per row plus two, and no control byte.
#include <boost/json.hpp>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "actors/policy/ledger/usage_report.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

using tether::ledger::usage_query;

std::string encoded(std::string_view s) {
  constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    out += '%';
    out += hex[u >> 4];
    out += hex[u & 0xf];
  }
  return out;
}

std::string query_string_of(const usage_query& q) {
  std::string out = "group_by=" + std::string(tether::ledger::group_by_name(q.by));
  if (q.key) out += "&key=" + encoded(*q.key);
  if (q.model) out += "&model=" + encoded(*q.model);
  if (q.from != std::numeric_limits<std::int64_t>::min()) out += "&from=" + std::to_string(q.from);
  if (q.to != std::numeric_limits<std::int64_t>::max()) out += "&to=" + std::to_string(q.to);
  return out;
}

bool valid_utf8(std::string_view s) {
  boost::json::string_view sv(s.data(), s.size());
  boost::system::error_code ec;
  boost::json::parse(boost::json::serialize(sv), ec);
  return !ec;
}

void check_accepted(const usage_query& q) {
  TETHER_FUZZ_CHECK(q.from < q.to);
  const auto again = tether::ledger::parse_usage_query(query_string_of(q));
  TETHER_FUZZ_CHECK(std::holds_alternative<usage_query>(again));
  TETHER_FUZZ_CHECK(std::get<usage_query>(again) == q);
  for (const auto t : {q.from, q.to}) {
    if (t == std::numeric_limits<std::int64_t>::min() ||
        t == std::numeric_limits<std::int64_t>::max())
      continue;
    TETHER_FUZZ_CHECK(tether::ledger::parse_usage_time(tether::ledger::utc_date_time(t)) == t);
  }

  const tether::ledger::usage_row row{
      q.from == std::numeric_limits<std::int64_t>::min() ? 0 : q.from, q.key.value_or(""),
      q.model.value_or(""), tether::ledger::usage_totals{.requests = 1, .spend_nanousd = 1234567}};
  const std::vector<tether::ledger::usage_row> rows{row, row};
  const auto body = tether::ledger::usage_json(q, rows);
  if (valid_utf8(row.key) && valid_utf8(row.model)) {
    boost::system::error_code ec;
    const auto doc = boost::json::parse(body, ec);
    TETHER_FUZZ_CHECK(!ec);
    const auto& data = doc.at("data").as_array();
    TETHER_FUZZ_CHECK(data.size() == 2);
    TETHER_FUZZ_CHECK(data[0].at("key").as_string() == boost::json::string_view(row.key));
    TETHER_FUZZ_CHECK(data[0].at("model").as_string() == boost::json::string_view(row.model));
  }
  const auto table = tether::ledger::usage_table(q, rows);
  std::size_t lines = 0;
  for (const char c : table) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') ++lines;
    TETHER_FUZZ_CHECK(c == '\n' || (u >= 0x20 && u != 0x7f));
  }
  TETHER_FUZZ_CHECK(lines == rows.size() + 2);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto answer = tether::ledger::parse_usage_query(input);
  TETHER_FUZZ_CHECK(tether::ledger::parse_usage_query(input) == answer);
  if (const auto* error = std::get_if<std::string>(&answer)) {
    TETHER_FUZZ_CHECK(!error->empty());
    for (const char c : *error) TETHER_FUZZ_CHECK(c >= 0x20 && c < 0x7f);
  } else {
    check_accepted(std::get<usage_query>(answer));
  }
  // A time on its own: whatever it accepts prints and reads back as itself.
  if (const auto t = tether::ledger::parse_usage_time(input)) {
    TETHER_FUZZ_CHECK(*t >= 0);
    TETHER_FUZZ_CHECK(tether::ledger::parse_usage_time(tether::ledger::utc_date_time(*t)) == t);
  }
  return 0;
}
