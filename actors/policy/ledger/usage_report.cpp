#include "actors/policy/ledger/usage_report.hpp"

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <limits>

namespace tether::ledger {

namespace {

// 1970-01-01 to 9999-12-31: four-digit years, none before the ledger's first hour could be.
constexpr std::int64_t first_time = 0;
constexpr std::int64_t end_of_times = 253402300800;  // 10000-01-01T00:00:00Z

// The query's parameters, each allowed once.
constexpr std::array<std::string_view, 5> parameters{"key", "model", "from", "to", "group_by"};

std::optional<unsigned> digits(std::string_view text) {
  if (text.empty() || text.size() > 9) return std::nullopt;
  unsigned v = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  return v;
}

std::optional<int> hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return std::nullopt;
}

// Form decoding: %XX is the byte, '+' a space; a '%' without two hex digits is an error.
std::optional<std::string> percent_decode(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '+') {
      out += ' ';
    } else if (in[i] != '%') {
      out += in[i];
    } else {
      if (i + 2 >= in.size()) return std::nullopt;
      const auto hi = hex_digit(in[i + 1]);
      const auto lo = hex_digit(in[i + 2]);
      if (!hi || !lo) return std::nullopt;
      out += static_cast<char>(*hi * 16 + *lo);
      i += 2;
    }
  }
  return out;
}

// A parameter's name in a message: as written when it is a plain word, else not at all (the
// caller's bytes do not go back into a response or a terminal).
std::string name_for_message(std::string_view name) {
  const bool plain =
      !name.empty() && name.size() <= 32 && std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-' || c == '.';
      });
  if (!plain) return "(not a plain name)";
  std::string quoted{"'"};
  quoted.append(name);
  quoted += '\'';
  return quoted;
}

std::string time_text(std::int64_t unix_s, group_by by) {
  auto text = utc_date_time(unix_s);  // 2026-12-08T13:00:00Z
  if (by == group_by::day) return text.substr(0, 10);
  text[10] = ' ';
  return text.substr(0, 16);  // 2026-12-08 13:00
}

// A cell of the terminal table: control bytes (a name may hold any) shown as '?', so that a
// name cannot move the cursor or break the line.
std::string cell_text(std::string_view s) {
  std::string out(s);
  for (auto& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = '?';
  }
  return out;
}

// Columns a cell takes on the terminal: its UTF-8 code points.
std::size_t columns_of(std::string_view s) {
  return static_cast<std::size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xc0) != 0x80; }));
}

std::string fixed_nanousd(std::uint64_t nanousd) {
  auto fraction = std::to_string(nanousd % 1'000'000'000);
  fraction.insert(0, 9 - fraction.size(), '0');
  return std::to_string(nanousd / 1'000'000'000) + "." + fraction;
}

}  // namespace

std::optional<std::int64_t> parse_usage_time(std::string_view text) {
  using namespace std::chrono;
  std::int64_t t = 0;
  if (!text.empty() && text.size() <= 12 &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    std::from_chars(text.data(), text.data() + text.size(), t);
  } else {
    const bool date = text.size() == 10;
    const bool date_time = text.size() == 20 && text[10] == 'T' && text[13] == ':' &&
                           text[16] == ':' && text[19] == 'Z';
    if ((!date && !date_time) || text[4] != '-' || text[7] != '-') return std::nullopt;
    const auto y = digits(text.substr(0, 4));
    const auto m = digits(text.substr(5, 2));
    const auto d = digits(text.substr(8, 2));
    if (!y || !m || !d) return std::nullopt;
    const year_month_day ymd{year{static_cast<int>(*y)}, month{*m}, day{*d}};
    if (!ymd.ok()) return std::nullopt;
    t = duration_cast<seconds>(sys_days{ymd}.time_since_epoch()).count();
    if (date_time) {
      const auto hh = digits(text.substr(11, 2));
      const auto mm = digits(text.substr(14, 2));
      const auto ss = digits(text.substr(17, 2));
      if (!hh || !mm || !ss || *hh > 23 || *mm > 59 || *ss > 59) return std::nullopt;
      t += *hh * 3600 + *mm * 60 + *ss;
    }
  }
  if (t < first_time || t >= end_of_times) return std::nullopt;
  return t;
}

std::optional<group_by> parse_group_by(std::string_view text) {
  if (text == "hour") return group_by::hour;
  if (text == "day") return group_by::day;
  if (text == "model") return group_by::model;
  return std::nullopt;
}

std::string_view group_by_name(group_by by) {
  switch (by) {
    case group_by::hour:
      return "hour";
    case group_by::day:
      return "day";
    case group_by::model:
      return "model";
  }
  return "day";
}

std::optional<std::string> set_usage_parameter(usage_query& q, std::string_view name,
                                               std::string_view value) {
  if (name == "key") {
    q.key = std::string(value);
  } else if (name == "model") {
    q.model = std::string(value);
  } else if (name == "from" || name == "to") {
    const auto t = parse_usage_time(value);
    if (!t) {
      return std::string{
          "is not a time: a UTC date (2026-12-08), date-time (2026-12-08T13:00:00Z) or unix "
          "seconds, from 1970 to 9999"};
    }
    (name == "from" ? q.from : q.to) = *t;
  } else if (name == "group_by") {
    const auto by = parse_group_by(value);
    if (!by) return std::string{"must be hour, day or model"};
    q.by = *by;
  } else {
    return std::string{"is not a parameter (they are key, model, from, to and group_by)"};
  }
  return std::nullopt;
}

std::optional<std::string> check_usage_query(const usage_query& q) {
  if (q.from >= q.to) return std::string{"'from' must be before 'to'"};
  return std::nullopt;
}

std::variant<usage_query, std::string> parse_usage_query(std::string_view query_string) {
  usage_query q;
  std::array<bool, parameters.size()> seen{};
  while (!query_string.empty()) {
    const auto amp = query_string.find('&');
    const auto pair = query_string.substr(0, amp);
    query_string =
        amp == std::string_view::npos ? std::string_view{} : query_string.substr(amp + 1);
    if (pair.empty()) continue;  // "a=1&&b=2", a trailing '&': nothing asked
    const auto eq = pair.find('=');
    const auto name = percent_decode(pair.substr(0, eq));
    if (!name) return std::string{"a parameter's name has a bad percent-encoding"};
    const auto at = std::find(parameters.begin(), parameters.end(), *name);
    if (at == parameters.end()) {
      return "unknown parameter " + name_for_message(*name) +
             " (the parameters are key, model, from, to and group_by)";
    }
    auto& was_seen = seen[static_cast<std::size_t>(at - parameters.begin())];
    if (was_seen) return "parameter '" + *name + "' is given more than once";
    was_seen = true;
    if (eq == std::string_view::npos) return "parameter '" + *name + "' has no value (name=value)";
    const auto value = percent_decode(pair.substr(eq + 1));
    if (!value) return "parameter '" + *name + "' has a bad percent-encoding";
    if (auto error = set_usage_parameter(q, *name, *value)) {
      return "parameter '" + *name + "' " + *error;
    }
  }
  if (auto error = check_usage_query(q)) return std::move(*error);
  return q;
}

std::string utc_date_time(std::int64_t unix_s) {
  using namespace std::chrono;
  const auto day_start = unix_s - (((unix_s % 86400) + 86400) % 86400);
  const year_month_day ymd{sys_days{days{day_start / 86400}}};
  const auto in_day = unix_s - day_start;
  char buffer[64];
  const int n = std::snprintf(buffer, sizeof buffer, "%04d-%02u-%02uT%02d:%02d:%02dZ",
                              static_cast<int>(ymd.year()), static_cast<unsigned>(ymd.month()),
                              static_cast<unsigned>(ymd.day()), static_cast<int>(in_day / 3600),
                              static_cast<int>(in_day / 60 % 60), static_cast<int>(in_day % 60));
  return std::string(buffer, static_cast<std::size_t>(std::max(n, 0)));
}

std::string nanousd_decimal(std::uint64_t nanousd) {
  auto text = fixed_nanousd(nanousd);
  while (text.back() == '0') text.pop_back();
  if (text.back() == '.') text.pop_back();
  return text;
}

std::string usage_json(const usage_query& q, const std::vector<usage_row>& rows) {
  const auto bound = [](std::int64_t t, std::int64_t open) {
    if (t == open) return std::string{"null"};
    std::string quoted{"\""};
    quoted += utc_date_time(t);
    quoted += '"';
    return quoted;
  };
  std::string out = "{\"object\":\"list\",\"group_by\":\"";
  out += group_by_name(q.by);
  out += "\",\"from\":" + bound(q.from, std::numeric_limits<std::int64_t>::min());
  out += ",\"to\":" + bound(q.to, std::numeric_limits<std::int64_t>::max());
  out += ",\"data\":[";
  bool first = true;
  for (const auto& r : rows) {
    if (!first) out += ',';
    first = false;
    const auto& t = r.totals;
    out += "{\"start\":\"" + utc_date_time(r.start) + "\"";
    out += ",\"key\":" + boost::json::serialize(boost::json::string_view(r.key));
    out += ",\"model\":" + boost::json::serialize(boost::json::string_view(r.model));
    out += ",\"requests\":" + std::to_string(t.requests);
    out += ",\"estimated_requests\":" + std::to_string(t.estimated_requests);
    out += ",\"prompt_tokens\":" + std::to_string(t.prompt);
    out += ",\"completion_tokens\":" + std::to_string(t.completion);
    out += ",\"cached_tokens\":" + std::to_string(t.cached);
    out += ",\"waste_tokens\":" + std::to_string(t.waste);
    // Written from the integer, not through a double: the decimal is exact.
    out += ",\"spend_usd\":" + nanousd_decimal(t.spend_nanousd) + "}";
  }
  out += "]}";
  return out;
}

std::string usage_table(const usage_query& q, const std::vector<usage_row>& rows) {
  // Text columns are aligned left, counts right.
  constexpr std::size_t text_columns = 3;
  using line = std::array<std::string, 10>;
  std::vector<line> lines;
  lines.push_back({q.by == group_by::model ? "since" : std::string(group_by_name(q.by)), "key",
                   "model", "requests", "estimated", "prompt", "completion", "cached", "waste",
                   "spend_usd"});
  usage_totals total;
  const auto counts = [](const usage_totals& t) {
    return std::array<std::string, 7>{
        std::to_string(t.requests),    std::to_string(t.estimated_requests),
        std::to_string(t.prompt),      std::to_string(t.completion),
        std::to_string(t.cached),      std::to_string(t.waste),
        fixed_nanousd(t.spend_nanousd)};
  };
  const auto add_line = [&](std::string first, std::string key, std::string model,
                            const usage_totals& t) {
    line l{std::move(first), std::move(key), std::move(model)};
    std::ranges::move(counts(t), l.begin() + text_columns);
    lines.push_back(std::move(l));
  };
  for (const auto& r : rows) {
    add_line(time_text(r.start, q.by), r.key.empty() ? "-" : cell_text(r.key),
             r.model.empty() ? "-" : cell_text(r.model), r.totals);
    total.add(r.totals);
  }
  add_line("total", "", "", total);
  std::array<std::size_t, 10> width{};
  for (const auto& l : lines) {
    for (std::size_t c = 0; c < l.size(); ++c) width[c] = std::max(width[c], columns_of(l[c]));
  }
  std::string out;
  for (const auto& l : lines) {
    std::string text;
    for (std::size_t c = 0; c < l.size(); ++c) {
      const auto pad = std::string(width[c] - columns_of(l[c]), ' ');
      if (c != 0) text += "  ";
      text += c < text_columns ? l[c] + pad : pad + l[c];
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text + "\n";
  }
  return out;
}

}  // namespace tether::ledger
