#include "actors/usage_command.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string_view>
#include <utility>

#include "actors/ledger_store.hpp"
#include "actors/policy/ledger/usage_report.hpp"
#include "config/loader.hpp"

namespace tether {

namespace {

constexpr const char* usage_text =
    "usage: tether usage --config FILE [--from TIME] [--to TIME] [--key KEY] [--model MODEL]\n"
    "                    [--by hour|day|model] [--json]\n"
    "  prints the ledger of the gateway FILE configures, read from its database file\n"
    "  TIME: a UTC date (2026-12-08), a date-time (2026-12-08T13:00:00Z) or unix seconds;\n"
    "        --from is inclusive, --to exclusive (a date as --to: the start of that day)\n";

int bad_arguments(const std::string& why) {
  std::fprintf(stderr, "tether usage: %s\n%s", why.c_str(), usage_text);
  return 2;
}

}  // namespace

int run_usage_command(const std::vector<std::string>& args) {
  // Each option, and the query parameter it sets (the same parsing as GET /v1/usage).
  constexpr std::pair<std::string_view, std::string_view> options[] = {{"--from", "from"},
                                                                       {"--to", "to"},
                                                                       {"--key", "key"},
                                                                       {"--model", "model"},
                                                                       {"--by", "group_by"}};
  std::optional<std::string> config_file;
  bool json = false;
  ledger::usage_query query;
  std::vector<std::string_view> given;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage_text, stdout);
      return 0;
    }
    if (arg == "--json") {
      if (json) return bad_arguments("--json is given more than once");
      json = true;
      continue;
    }
    const bool is_config = arg == "--config";
    const auto* option = std::find_if(std::begin(options), std::end(options),
                                      [&](const auto& o) { return o.first == arg; });
    if (!is_config && option == std::end(options)) {
      return bad_arguments("unknown argument '" + std::string(arg) + "'");
    }
    if (std::find(given.begin(), given.end(), arg) != given.end()) {
      return bad_arguments(std::string(arg) + " is given more than once");
    }
    given.push_back(arg);
    if (i + 1 >= args.size()) return bad_arguments(std::string(arg) + " needs a value");
    const std::string& value = args[++i];
    if (is_config) {
      config_file = value;
    } else if (auto error = ledger::set_usage_parameter(query, option->second, value)) {
      return bad_arguments(std::string(arg) + " " + *error);
    }
  }
  if (!config_file) return bad_arguments("--config FILE is required");
  if (ledger::check_usage_query(query)) return bad_arguments("--from must be before --to");

  // The config names the ledger's file; the environment holds what serving needs and reading the
  // ledger does not (the upstreams' keys, the deadline overrides): a shell without the gateway's
  // secrets may still read its ledger. A variable that is not set reads as "1", which each of
  // them accepts.
  const config::env_lookup env = [real = config::process_env()](const std::string& name) {
    auto value = real(name);
    return value && !value->empty() ? value : std::optional<std::string>("1");
  };
  auto loaded = config::load_file(*config_file, env);
  if (!loaded.errors.empty()) {
    for (const auto& e : loaded.errors) std::fprintf(stderr, "config error: %s\n", e.c_str());
    return 1;
  }
  try {
    const ledger::ledger_store store(loaded.config->ledger_file(), ledger::open_mode::read_only);
    const auto rows = store.query(query);
    const auto text =
        json ? ledger::usage_json(query, rows) + "\n" : ledger::usage_table(query, rows);
    std::fputs(text.c_str(), stdout);
  } catch (const ledger::store_error& e) {
    std::fprintf(stderr, "tether usage: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace tether
