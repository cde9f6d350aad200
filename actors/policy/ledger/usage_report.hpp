// Reading the ledger (contract: "The ledger": `GET /v1/usage?key=&model=&from=&to=&group_by=`
// and `tether usage`): the query's parameters read into a usage_query, and the rows the store
// answers rendered as the JSON body or as a table for the terminal. A parameter that is unknown,
// repeated or malformed is an error rather than ignored: a typo must not silently widen the
// query. Error messages name the parameter, never echo its value (a key's name is the caller's).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "actors/policy/ledger/usage_query.hpp"

namespace tether::ledger {

// The query string of `GET /v1/usage` (without the '?'): `&`-separated name=value pairs,
// percent-encoded ('+' is a space, as HTML forms and URLSearchParams write one). Parameters:
// key, model (exact names; empty is the empty name), from (inclusive), to (exclusive), group_by
// (hour|day|model; default day). Answers the query or a message naming the bad parameter.
std::variant<usage_query, std::string> parse_usage_query(std::string_view query_string);

// Sets one parameter of `q` by its name in the HTTP query (key, model, from, to, group_by);
// nullopt, or what is wrong with it, to follow the parameter's name ("must be hour, day or
// model"). `tether usage` sets its options through this too.
std::optional<std::string> set_usage_parameter(usage_query& q, std::string_view name,
                                               std::string_view value);

// What is wrong with the query as a whole: a range that selects nothing (from not before to).
std::optional<std::string> check_usage_query(const usage_query& q);

// A time for from/to: a UTC date `2026-12-08` (its start, also as `to`), a date-time
// `2026-12-08T13:00:00Z`, or unix seconds; years 1970 to 9999. Unix seconds.
std::optional<std::int64_t> parse_usage_time(std::string_view text);

std::optional<group_by> parse_group_by(std::string_view text);
std::string_view group_by_name(group_by by);

// `2026-12-08T13:00:00Z`.
std::string utc_date_time(std::int64_t unix_s);

// Billionths of a dollar as the exact decimal in dollars: 1234567 → "0.001234567", 2500000000 →
// "2.5", 0 → "0".
std::string nanousd_decimal(std::uint64_t nanousd);

// The body of `GET /v1/usage`: {"object":"list","group_by":…,"from":…,"to":…,"data":[…]}, from
// and to null where the query leaves them open.
std::string usage_json(const usage_query& q, const std::vector<usage_row>& rows);

// The rows as a table: a header line, a line per row with the columns aligned, a total line.
std::string usage_table(const usage_query& q, const std::vector<usage_row>& rows);

}  // namespace tether::ledger
