#include "config/loader.hpp"

#include <fmt/format.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "config/settings.hpp"

namespace tether::config {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

using env_map = std::map<std::string, std::string>;

env_lookup fake_env(env_map vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// The smallest valid file; tests append the section under test.
const std::string minimal = R"(
[[upstreams]]
name = "a"
base_url = "http://127.0.0.1:8000"

[[models]]
name = "m"
upstream = "a"
)";

load_result load(const std::string& text, env_map env = {}) {
  return load_string(text, "test.toml", fake_env(std::move(env)));
}

// Loads and expects failure with an error containing every fragment.
void expect_error(const std::string& text, const std::string& fragment, env_map env = {}) {
  const auto r = load(text, std::move(env));
  EXPECT_FALSE(r.config.has_value());
  EXPECT_THAT(r.errors, Contains(HasSubstr(fragment))) << "text:\n" << text;
}

gateway_config expect_ok(const std::string& text, env_map env = {}) {
  auto r = load(text, std::move(env));
  EXPECT_THAT(r.errors, IsEmpty()) << "text:\n" << text;
  if (!r.config) return {};
  return *r.config;
}

TEST(LoaderTest, MinimalFileLoadsWithDefaultsApplied) {
  const auto cfg = expect_ok(minimal);
  EXPECT_EQ(cfg.source_file, "test.toml");
  EXPECT_EQ(cfg.server.listen_host, "127.0.0.1");
  EXPECT_EQ(cfg.server.listen_port, 8080);
  EXPECT_EQ(cfg.server.max_request_bytes, 4194304u);
  EXPECT_EQ(cfg.server.drain_timeout, millis(30000));
  EXPECT_FALSE(cfg.server.sched_batch);
  EXPECT_EQ(cfg.server.malloc_tcache_count, 64U);
  EXPECT_EQ(cfg.request.deadline, millis(300000));
  EXPECT_EQ(cfg.request.attempt_timeout, millis(120000));
  EXPECT_EQ(cfg.request.max_retries, 2u);
  EXPECT_EQ(cfg.budget.max_in_flight, 512u);
  EXPECT_EQ(cfg.budget.queue_timeout, millis(0));
  ASSERT_EQ(cfg.upstreams.size(), 1u);
  EXPECT_EQ(cfg.upstreams[0].max_in_flight, 64u);
  EXPECT_EQ(cfg.upstreams[0].connect_timeout, millis(2000));
  EXPECT_EQ(cfg.upstreams[0].idle_timeout, millis(4000));
  EXPECT_EQ(cfg.upstreams[0].url.host, "127.0.0.1");
  EXPECT_EQ(cfg.upstreams[0].url.port, 8000);
  EXPECT_FALSE(cfg.upstreams[0].url.tls);
  EXPECT_EQ(cfg.upstreams[0].url.path_prefix, "");
  ASSERT_EQ(cfg.models.size(), 1u);
  EXPECT_EQ(cfg.models[0].upstream_model, "m");  // defaults to the public name
  EXPECT_TRUE(cfg.keys.empty());
  EXPECT_EQ(cfg.telemetry.log_format, "json");
  EXPECT_EQ(cfg.telemetry.log_level, "info");
  EXPECT_EQ(cfg.telemetry.service_name, "tether");
  EXPECT_EQ(cfg.cluster.budget_listen, "");
  EXPECT_EQ(cfg.cluster.lease_idle, millis(1000));
}

TEST(LoaderTest, ContractExampleValuesAreRead) {
  const auto cfg = expect_ok(minimal + R"(
[server]
listen = "0.0.0.0:9000"
max_header_fields = 50
keepalive_timeout_ms = 0
[request]
deadline_ms = 0
max_retries = 5
[budget]
max_in_flight = 8
queue_max = 0
[telemetry]
log_format = "text"
log_level = "debug"
otlp_endpoint = "http://127.0.0.1:4318/v1/traces"
service_name = "edge"
[cluster]
budget_host = "10.0.0.1:4242"
lease_idle_ms = 0
)");
  EXPECT_EQ(cfg.server.listen_host, "0.0.0.0");
  EXPECT_EQ(cfg.server.listen_port, 9000);
  EXPECT_EQ(cfg.server.max_header_fields, 50u);
  EXPECT_EQ(cfg.server.keepalive_timeout, millis(0));
  EXPECT_EQ(cfg.request.deadline, millis(0));
  EXPECT_EQ(cfg.request.max_retries, 5u);
  EXPECT_EQ(cfg.budget.max_in_flight, 8u);
  EXPECT_EQ(cfg.budget.queue_max, 0u);
  EXPECT_EQ(cfg.telemetry.log_format, "text");
  EXPECT_EQ(cfg.telemetry.log_level, "debug");
  EXPECT_EQ(cfg.telemetry.otlp_endpoint, "http://127.0.0.1:4318/v1/traces");
  EXPECT_EQ(cfg.telemetry.service_name, "edge");
  EXPECT_EQ(cfg.cluster.budget_host, "10.0.0.1:4242");
  EXPECT_EQ(cfg.cluster.lease_idle, millis(0));
}

TEST(LoaderTest, RetryBudgetKeysAreReadWithEnvoysDefaults) {
  const auto defaults = expect_ok(minimal);
  EXPECT_EQ(defaults.request.min_retry_concurrency, 3u);
  EXPECT_EQ(defaults.request.retry_budget_percent, 20u);
  const auto cfg =
      expect_ok(minimal + "[request]\nmin_retry_concurrency = 0\nretry_budget_percent = 50\n");
  EXPECT_EQ(cfg.request.min_retry_concurrency, 0u);
  EXPECT_EQ(cfg.request.retry_budget_percent, 50u);
  EXPECT_THAT(render_effective(cfg), HasSubstr("min_retry_concurrency = 0\n"));
  EXPECT_THAT(render_effective(cfg), HasSubstr("retry_budget_percent = 50\n"));
  expect_error(minimal + "[request]\nretry_budget_percent = 101\n",
               "request.retry_budget_percent: must be between 0 and 100, got 101");
  expect_error(minimal + "[request]\nmin_retry_concurrency = -1\n",
               "request.min_retry_concurrency");
  // An upstream's budget, not a model's: no per-model override.
  expect_error(minimal + "min_retry_concurrency = 1\n", "models[0].min_retry_concurrency");
}

TEST(LoaderTest, ResponseAffinityMaxIsReadBoundedAndNotAModelOverride) {
  EXPECT_EQ(expect_ok(minimal).request.response_affinity_max, 100000u);
  const auto cfg = expect_ok(minimal + "[request]\nresponse_affinity_max = 0\n");
  EXPECT_EQ(cfg.request.response_affinity_max, 0u);
  EXPECT_THAT(render_effective(cfg), HasSubstr("response_affinity_max = 0\n"));
  expect_error(minimal + "[request]\nresponse_affinity_max = 10000001\n",
               "request.response_affinity_max: must be between 0 and 10000000, got 10000001");
  expect_error(minimal + "response_affinity_max = 5\n", "models[0].response_affinity_max");
}

TEST(LoaderTest, UpstreamHealthKeysDefault) {
  const auto cfg = expect_ok(minimal);
  const auto& u = cfg.upstreams.at(0);
  EXPECT_EQ(u.weight, 1u);
  EXPECT_EQ(u.eject_after_failures, 5u);
  EXPECT_EQ(u.eject_base, millis(5000));
  EXPECT_EQ(u.eject_max, millis(300000));
  EXPECT_EQ(u.health_path, "");
  EXPECT_EQ(u.health_interval, millis(5000));
  const auto out = render_effective(cfg);
  EXPECT_THAT(out, HasSubstr("idle_timeout_ms = 4000\nweight = 1\neject_after_failures = 5\n"
                             "eject_base_ms = 5000\neject_max_ms = 300000\n"
                             "health_path = \"\"  # no active check\n"
                             "health_interval_ms = 5000\n"));
}

TEST(LoaderTest, UpstreamHealthKeysAreRead) {
  const auto cfg = expect_ok(minimal + R"(
[[upstreams]]
name = "b"
base_url = "http://127.0.0.1:8001"
weight = 1000
eject_after_failures = 0
eject_base_ms = 1
eject_max_ms = 1
health_path = "/health?ready=1"
health_interval_ms = 100
[[upstreams]]
name = "c"
base_url = "http://127.0.0.1:8002"
weight = 3
eject_after_failures = 1000
eject_base_ms = 250
eject_max_ms = 604800000
health_path = ""
)");
  ASSERT_EQ(cfg.upstreams.size(), 3u);
  const auto& b = cfg.upstreams[1];
  EXPECT_EQ(b.weight, 1000u);
  EXPECT_EQ(b.eject_after_failures, 0u);
  EXPECT_EQ(b.eject_base, millis(1));
  EXPECT_EQ(b.eject_max, millis(1));  // equal to the base: every ejection is as long
  EXPECT_EQ(b.health_path, "/health?ready=1");
  EXPECT_EQ(b.health_interval, millis(100));
  const auto& c = cfg.upstreams[2];
  EXPECT_EQ(c.weight, 3u);
  EXPECT_EQ(c.eject_after_failures, 1000u);
  EXPECT_EQ(c.eject_base, millis(250));
  EXPECT_EQ(c.eject_max, millis(604800000));
  EXPECT_EQ(c.health_path, "");
  EXPECT_EQ(c.health_interval, millis(5000));
  const auto out = render_effective(cfg);
  EXPECT_THAT(out, HasSubstr("weight = 1000\neject_after_failures = 0  # never ejected for "
                             "failures\neject_base_ms = 1\neject_max_ms = 1\n"
                             "health_path = \"/health?ready=1\"\nhealth_interval_ms = 100\n"));
  EXPECT_THAT(out, HasSubstr("weight = 3\neject_after_failures = 1000\n"));
  // The effective config reloads to the same values.
  const auto again = expect_ok(out);
  EXPECT_EQ(render_effective(again), out);
}

TEST(LoaderTest, EjectMaxBelowEjectBaseIsNamedOnEjectMax) {
  const std::string u = minimal + "[[upstreams]]\nname = \"b\"\nbase_url = \"http://h\"\n";
  expect_error(u + "eject_base_ms = 2000\neject_max_ms = 1000\n",
               "test.toml: upstreams[1].eject_max_ms: 1000 is below eject_base_ms (2000)");
  // Against the other's default, still on eject_max_ms.
  expect_error(u + "eject_base_ms = 300001\n",
               "upstreams[1].eject_max_ms: the default 300000 is below eject_base_ms (300001)");
  expect_error(u + "eject_max_ms = 4999\n",
               "upstreams[1].eject_max_ms: 4999 is below eject_base_ms (5000)");
  // A refused value is named once, not compared as well.
  const auto r = load(u + "eject_base_ms = -1\neject_max_ms = 10\n");
  EXPECT_FALSE(r.config);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0], HasSubstr("upstreams[1].eject_base_ms: must not be negative"));
  expect_ok(u + "eject_base_ms = 300001\neject_max_ms = 300001\n");
}

TEST(LoaderTest, ProcessSettingsAreReadAndBoundedOrNamed) {
  const auto cfg = expect_ok("[server]\nsched_batch = true\nmalloc_tcache_count = 0\n" + minimal);
  EXPECT_TRUE(cfg.server.sched_batch);
  EXPECT_EQ(cfg.server.malloc_tcache_count, 0U);
  EXPECT_EQ(
      expect_ok("[server]\nmalloc_tcache_count = 65535\n" + minimal).server.malloc_tcache_count,
      65535U);
  expect_error("[server]\nmalloc_tcache_count = 65536\n" + minimal, "server.malloc_tcache_count");
  expect_error("[server]\nmalloc_tcache_count = -1\n" + minimal, "server.malloc_tcache_count");
  expect_error("[server]\nsched_batch = \"yes\"\n" + minimal,
               "server.sched_batch: expected a boolean, got a string");
  EXPECT_EQ(expect_ok(minimal).server.threads, 0U);  // one per usable CPU
  EXPECT_EQ(expect_ok("[server]\nthreads = 4\n" + minimal).server.threads, 4U);
  expect_error("[server]\nthreads = 1025\n" + minimal, "server.threads");
  expect_error("[server]\nthreads = -1\n" + minimal, "server.threads");
}

TEST(LoaderTest, BadHealthPathIsNamed) {
  const std::string u = minimal + "[[upstreams]]\nname = \"b\"\nbase_url = \"http://h\"\n";
  expect_error(u + "health_path = \"health\"\n",
               "upstreams[1].health_path: expected \"\" (no active check) or a path starting "
               "with \"/\", got \"health\"");
  expect_error(u + "health_path = \"http://h/health\"\n", "starting with \"/\"");
  expect_error(u + "health_path = \"/he alth\"\n",
               "upstreams[1].health_path: must not contain spaces, control characters");
  expect_error(u + "health_path = \"/health\\r\\nX-Injected: 1\"\n",
               "upstreams[1].health_path: must not contain spaces, control characters");
  expect_error(u + "health_path = \"/h\\u007F\"\n", "upstreams[1].health_path: must not contain");
  expect_error(u + "health_path = \"/caf\xC3\xA9\"\n", "non-ASCII");
  expect_error(u + "health_path = 1\n", "upstreams[1].health_path: expected a string, got an");
  expect_error(u + "health_path = \"/" + std::string(1024, 'a') + "\"\n",
               "upstreams[1].health_path: must be at most 1024 bytes, got 1025");
  const auto cfg = expect_ok(u + "health_path = \"/" + std::string(1023, 'a') + "\"\n");
  EXPECT_EQ(cfg.upstreams.at(1).health_path.size(), 1024u);
  EXPECT_EQ(expect_ok(u + "health_path = \"/\"\n").upstreams.at(1).health_path, "/");
}

TEST(LoaderTest, SyntaxErrorNamesFileLineAndColumn) {
  const auto r = load("[server]\nlisten = \"127.0.0.1:8080\"\nmax_request_bytes = = 3\n");
  EXPECT_FALSE(r.config);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0], AllOf(HasSubstr("test.toml: line 3, column"), HasSubstr("syntax")));
}

// toml++ 3.3.0 meets undefined behaviour (a crash or a misreading) when it asks whether one of
// U+00A1..U+0499, U+2C5E..U+3057 (not U+3000) or U+FB26..U+FEFE is whitespace. Where no rewrite
// keeps the file's meaning (outside strings and comments, escaped by a backslash: invalid TOML
// anyway) the file is refused with the place named, before toml++ reads it.
TEST(LoaderTest, CodePointsTheTomlParserMishandlesAreRefusedWithTheirPlace) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"[server]\nlisten = \"127.0.0.1:8080\"\xC3\xA9\n",
       "line 2, column 26: character U+00E9 outside a string or comment"},
      {"[server\xD0\x96]\n", "line 1, column 8: character U+0416"},
      {"a\xE3\x80\x81 = 1\n", "line 1, column 2: character U+3001"},
      {"x = \"\"\"\\\xEF\xB9\x90\"\"\"\n", "line 1, column 9: character U+FE50 after a backslash"},
      {"x = \"\\\xC3\xA9\"\n", "line 1, column 7: character U+00E9 after a backslash"},
      // toml++ reads `2""="\` as one bare token and tests what follows (found by the fuzzer).
      {"x =2\"\"=\"\\\xEF\xB9\x90\"\"\"\n",
       "line 1, column 10: character U+FE50 after a backslash"},
      // A quote right after a bare value opens no string for toml++ (found by the fuzzer): the
      // rewritten string leaves toml++ a plain syntax error to report.
      {"[server]\nmax_json_depth =2\"caf\xC3\xA9\"\n", "line 2, column"},
  };
  for (const auto& [text, where] : cases) {
    const auto r = load(text);
    EXPECT_FALSE(r.config) << text;
    ASSERT_EQ(r.errors.size(), 1u) << text;
    EXPECT_THAT(r.errors[0], AllOf(HasSubstr("test.toml: "), HasSubstr(where))) << text;
  }
}

// In strings and comments those code points keep their meaning: toml++ reads them rewritten
// (a \u escape, a literal string as the basic string of the same value) and never meets them.
TEST(LoaderTest, ThoseCodePointsInStringsAndCommentsAreAccepted) {
  const auto cfg = expect_ok(minimal + "# caf\xC3\xA9 \xD0\x96 \xE3\x80\x81 \xEF\xB9\x90\n" +
                             "[telemetry]\nservice_name = \"caf\xC3\xA9-\xD0\x96\" # \xC2\xA9\n");
  EXPECT_EQ(cfg.telemetry.service_name, "caf\xC3\xA9-\xD0\x96");
  expect_ok(minimal + "[server]\nlisten = '''127.0.0.1:8080'''\n# ''' \xC3\xA9\n" +
            "[request]\n# \"\"\" \xC3\xA9\n");
  const std::vector<std::pair<std::string, std::string>> values{
      {"'caf\xC3\xA9 \"q\" \\n'", "caf\xC3\xA9 \"q\" \\n"},
      {"'''a''b'\xC3\xA9''''", "a''b'\xC3\xA9'"},
      {"'''\n\"\xC3\xA9\"\\'''", "\"\xC3\xA9\"\\"},
      {"\"\"\"\xC3\xA9\"\"\\\"\"\"\"\"", "\xC3\xA9\"\"\"\""},
      {"\"\"\"a \\\n   \xC2\xA9\"\"\"", "a \xC2\xA9"},
      {"\"\\u00e9\xEF\xB9\x90\\t\"", "\xC3\xA9\xEF\xB9\x90\t"},
  };
  for (const auto& [toml_value, value] : values) {
    const auto c = expect_ok(minimal + "[telemetry]\nservice_name = " + toml_value + "\n");
    EXPECT_EQ(c.telemetry.service_name, value) << toml_value;
  }
  // A file without them reaches toml++ as written: its columns are the file's own.
  const auto r = load("x = '\\' = 3\n");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0], HasSubstr("line 1, column 9"));
}

TEST(LoaderTest, MissingFileIsNamed) {
  const auto r = load_file("/nonexistent/tether.toml", fake_env({}));
  EXPECT_FALSE(r.config);
  EXPECT_THAT(r.errors, Contains(HasSubstr("/nonexistent/tether.toml: cannot read the file")));
}

// Token-aware admission: the upstream's token cap (0 = off) and each deployment's default output.
TEST(LoaderTest, TokenCapAndDefaultMaxTokensAreReadAndChecked) {
  const auto defaults = expect_ok(minimal);
  EXPECT_EQ(defaults.upstreams[0].max_tokens_in_flight, 0u);
  EXPECT_EQ(defaults.models[0].default_max_tokens, 1024u);
  const auto set = expect_ok(R"(
[[upstreams]]
name = "a"
base_url = "http://127.0.0.1:8000"
max_tokens_in_flight = 32768

[[models]]
name = "m"
upstream = "a"
default_max_tokens = 256
)");
  EXPECT_EQ(set.upstreams[0].max_tokens_in_flight, 32768u);
  EXPECT_EQ(set.models[0].default_max_tokens, 256u);
  const std::string upstream_head = "[[upstreams]]\nname = \"a\"\nbase_url = \"http://x:1\"\n";
  const std::string model = "[[models]]\nname = \"m\"\nupstream = \"a\"\n";
  expect_error(upstream_head + "max_tokens_in_flight = -1\n" + model,
               "upstreams[0].max_tokens_in_flight: must not be negative");
  expect_error(upstream_head + "max_tokens_in_flight = \"8k\"\n" + model,
               "upstreams[0].max_tokens_in_flight");
  expect_error(minimal + "default_max_tokens = -5\n", "models[0].default_max_tokens");
  expect_error(minimal + "default_max_token = 5\n", "models[0].default_max_token");
}

// routing = "prefix" and its two numbers; a model's deployments route alike (one ring).
TEST(LoaderTest, PrefixRoutingKeysAreReadBoundedAndAgreedOn) {
  const auto defaults = expect_ok(minimal);
  EXPECT_EQ(defaults.models[0].routing, routing_mode::least_work);
  EXPECT_EQ(defaults.models[0].prefix_bytes, 2048u);
  EXPECT_EQ(defaults.models[0].prefix_load_factor, 1.25);
  const auto set =
      expect_ok(minimal + "routing = \"prefix\"\nprefix_bytes = 512\nprefix_load_factor = 2\n");
  EXPECT_EQ(set.models[0].routing, routing_mode::prefix);
  EXPECT_EQ(set.models[0].prefix_bytes, 512u);
  EXPECT_EQ(set.models[0].prefix_load_factor, 2.0);
  EXPECT_EQ(expect_ok(minimal + "prefix_load_factor = 1.5\n").models[0].prefix_load_factor, 1.5);
  expect_error(minimal + "routing = \"round_robin\"\n", "models[0].routing");
  expect_error(minimal + "prefix_bytes = 8\n", "models[0].prefix_bytes");
  expect_error(minimal + "prefix_load_factor = 1.0\n",
               "models[0].prefix_load_factor: must be above 1 and at most 100, got 1");
  expect_error(minimal + "prefix_load_factor = \"1.5\"\n",
               "models[0].prefix_load_factor: expected a number, got a string");
  expect_error(minimal + "routing = \"prefix\"\n\n[[models]]\nname = \"m\"\nupstream = \"a\"\n",
               "disagree on routing, prefix_bytes or prefix_load_factor");
}

// [ledger] and the ledger's settings of [[models]] and [[keys]], unwritten.
TEST(LoaderTest, TheLedgerIsOnWithNoPricesNoBudgetsAndNoAdminByDefault) {
  const auto cfg = expect_ok(minimal + "[[keys]]\nname = \"k\"\nsha256 = \"" +
                             std::string(64, 'a') + "\"\nmodels = [\"*\"]\n");
  EXPECT_TRUE(cfg.ledger.enabled);
  EXPECT_EQ(cfg.ledger.path, "");
  EXPECT_EQ(cfg.ledger.flush_interval, millis(1000));
  EXPECT_EQ(cfg.ledger.member_buffer_max, 100000U);
  const auto& m = cfg.models.at(0);
  EXPECT_FALSE(m.price_input_per_mtok.has_value());
  EXPECT_FALSE(m.price_output_per_mtok.has_value());
  EXPECT_FALSE(m.price_cached_input_per_mtok.has_value());
  const auto& k = cfg.keys.at(0);
  EXPECT_EQ(k.max_tokens_per_day, 0U);
  EXPECT_EQ(k.max_tokens_per_month, 0U);
  EXPECT_EQ(k.max_spend_per_day, 0.0);
  EXPECT_EQ(k.max_spend_per_month, 0.0);
  EXPECT_FALSE(k.admin);
}

const std::string priced_key = R"(price_input_per_mtok = 3
price_output_per_mtok = 15.5
price_cached_input_per_mtok = 0.3
[[keys]]
name = "k"
sha256 = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
models = ["*"]
max_tokens_per_day = 1000000
max_tokens_per_month = 20000000
max_spend_per_day = 2.5
max_spend_per_month = 40
admin = true
[ledger]
enabled = true
path = "/var/lib/tether/usage.db"
flush_interval_ms = 250
member_buffer_max = 5000
)";

// A number takes a float or an integer; a price is set where written (per deployment).
TEST(LoaderTest, PricesBudgetsAdminAndTheLedgerAreRead) {
  const auto cfg = expect_ok(minimal + priced_key);
  const auto& m = cfg.models.at(0);
  EXPECT_EQ(m.price_input_per_mtok, std::optional<double>(3.0));
  EXPECT_EQ(m.price_output_per_mtok, std::optional<double>(15.5));
  EXPECT_EQ(m.price_cached_input_per_mtok, std::optional<double>(0.3));
  const auto& k = cfg.keys.at(0);
  EXPECT_EQ(k.max_tokens_per_day, 1000000U);
  EXPECT_EQ(k.max_tokens_per_month, 20000000U);
  EXPECT_EQ(k.max_spend_per_day, 2.5);
  EXPECT_EQ(k.max_spend_per_month, 40.0);
  EXPECT_TRUE(k.admin);
  EXPECT_TRUE(cfg.ledger.enabled);
  EXPECT_EQ(cfg.ledger.path, "/var/lib/tether/usage.db");
  EXPECT_EQ(cfg.ledger.flush_interval, millis(250));
  EXPECT_EQ(cfg.ledger.member_buffer_max, 5000U);
  EXPECT_EQ(cfg.ledger_file(), "/var/lib/tether/usage.db");
  // A price of 0 is a price (the model is free), not unset.
  const auto zero_price = expect_ok(minimal + "price_output_per_mtok = 0.0\n");
  EXPECT_EQ(zero_price.models.at(0).price_output_per_mtok, std::optional<double>(0.0));
  EXPECT_FALSE(zero_price.models.at(0).price_input_per_mtok.has_value());
  // -0.0 is 0, printed so.
  EXPECT_THAT(render_effective(expect_ok(minimal + "price_output_per_mtok = -0.0\n")),
              HasSubstr("\nprice_output_per_mtok = 0\n"));
}

// Each deployment is its own upstream's price: two deployments of one name may differ, where
// their routing and overrides must agree.
TEST(LoaderTest, DeploymentsOfOneNameMayHaveDifferentPrices) {
  const auto cfg = expect_ok(minimal + "price_input_per_mtok = 3\n" + R"(
[[upstreams]]
name = "b"
base_url = "http://127.0.0.1:8001"
[[models]]
name = "m"
upstream = "b"
price_input_per_mtok = 0.25
price_output_per_mtok = 1
)");
  ASSERT_EQ(cfg.models.size(), 2U);
  EXPECT_EQ(cfg.models[0].price_input_per_mtok, std::optional<double>(3.0));
  EXPECT_FALSE(cfg.models[0].price_output_per_mtok.has_value());
  EXPECT_EQ(cfg.models[1].price_input_per_mtok, std::optional<double>(0.25));
  EXPECT_EQ(cfg.models[1].price_output_per_mtok, std::optional<double>(1.0));
}

std::string key_writing(const std::string& lines) {
  return "[[keys]]\nname = \"k\"\nsha256 = \"" + std::string(64, 'a') + "\"\nmodels = [\"*\"]\n" +
         lines;
}

// Budgets and admin need the ledger; a spend budget needs a price above 0 somewhere. Written as
// 0 or false they ask for nothing, and are taken either way.
TEST(LoaderTest, BudgetsAndAdminWithoutTheLedgerOrASpendBudgetWithoutAPriceAreNamed) {
  const std::string off = "[ledger]\nenabled = false\n";
  const std::string priced = minimal + "price_input_per_mtok = 1\n";
  for (const char* key :
       {"max_tokens_per_day", "max_tokens_per_month", "max_spend_per_day", "max_spend_per_month"}) {
    SCOPED_TRACE(key);
    expect_error(priced + off + key_writing(fmt::format("{} = 5\n", key)),
                 fmt::format("test.toml: keys[0].{0}: {0} needs the ledger: [ledger] enabled = "
                             "false (line ",
                             key));
    expect_ok(priced + off + key_writing(fmt::format("{} = 0\n", key)));
  }
  expect_error(priced + off + key_writing("admin = true\n"),
               "test.toml: keys[0].admin: admin needs the ledger: [ledger] enabled = false");
  expect_ok(priced + off + key_writing("admin = false\n"));

  // No model priced above 0: a spend budget is named, a token budget is fine.
  for (const char* prices : {"", "price_input_per_mtok = 0\nprice_output_per_mtok = 0.0\n"}) {
    SCOPED_TRACE(prices);
    for (const char* key : {"max_spend_per_day", "max_spend_per_month"}) {
      expect_error(minimal + prices + key_writing(fmt::format("{} = 10\n", key)),
                   fmt::format("test.toml: keys[0].{}: no [[models]] entry has a price above 0, "
                               "so every request's spend is 0 and this budget could never be "
                               "reached",
                               key));
    }
    expect_ok(minimal + prices + key_writing("max_tokens_per_day = 10\nadmin = true\n"));
  }
  // One priced deployment anywhere is enough, whichever price it is.
  for (const char* price :
       {"price_input_per_mtok", "price_output_per_mtok", "price_cached_input_per_mtok"}) {
    const auto cfg = expect_ok(minimal + "[[models]]\nname = \"n\"\nupstream = \"a\"\n" + price +
                               " = 0.01\n" + key_writing("max_spend_per_day = 10\n"));
    EXPECT_EQ(cfg.keys.at(0).max_spend_per_day, 10.0);
  }
}

TEST(LoaderTest, ALedgerPathNamingADirectoryOrHoldingControlCharactersIsNamed) {
  for (const char* dir : {"/var/lib/tether/", "data/.", "..", "."}) {
    expect_error(minimal + "[ledger]\npath = \"" + dir + "\"\n",
                 fmt::format("test.toml: ledger.path: \"{}\" names a directory; name the "
                             "database file",
                             dir));
  }
  expect_error(minimal + "[ledger]\npath = \"a\\tb.db\"\n",
               "ledger.path: must not contain control characters");
  expect_error(minimal + "[ledger]\npath = 3\n", "ledger.path: expected a string, got an integer");
  EXPECT_EQ(expect_ok(minimal + "[ledger]\npath = \"..db\"\n").ledger.path, "..db");
}

// `tether check`: an unset price is a comment saying what unset means (no TOML value stands for
// it), the budgets' zeros are noted, and the ledger's file is the one it resolves to.
TEST(LoaderTest, TetherCheckPrintsUnsetPricesNotedAndTheLedgersFile) {
  auto cfg = expect_ok(minimal + "price_output_per_mtok = 0.6\n" + key_writing(""));
  cfg.source_file = "/etc/tether/tether.toml";
  const auto out = render_effective(cfg);
  EXPECT_THAT(out, HasSubstr("\n# price_input_per_mtok unset: not priced: its prompt tokens "
                             "cost nothing\nprice_output_per_mtok = 0.6\n"
                             "# price_cached_input_per_mtok unset: cached prompt tokens cost "
                             "the input price\n"));
  EXPECT_THAT(out, HasSubstr("\nmax_tokens_per_day = 0  # no daily token budget\n"
                             "max_tokens_per_month = 0  # no monthly token budget\n"
                             "max_spend_per_day = 0  # no daily spend budget\n"
                             "max_spend_per_month = 0  # no monthly spend budget\n"
                             "admin = false\n"));
  EXPECT_THAT(out, HasSubstr("\n[ledger]\nenabled = true\n"
                             "path = \"\"  # tether-ledger.db next to the config file\n"
                             "flush_interval_ms = 1000\nmember_buffer_max = 100000\n"
                             "# file: /etc/tether/tether-ledger.db\n"));
  // Off: no file is named.
  cfg.ledger.enabled = false;
  EXPECT_THAT(render_effective(cfg),
              AllOf(HasSubstr("\n[ledger]\nenabled = false\n"), Not(HasSubstr("# file:"))));
  // A price written as 0 is a value (free), not unset: no note.
  auto zero_price = cfg;
  zero_price.models.at(0).price_cached_input_per_mtok = 0.0;
  EXPECT_THAT(render_effective(zero_price), HasSubstr("\nprice_cached_input_per_mtok = 0\n"));
  // The output reloads to the same prices: an unset one stays unset.
  auto text = render_effective(cfg);
  text.replace(text.find("<masked>"), 8, std::string(64, 'a'));
  const auto again = expect_ok(text);
  EXPECT_EQ(again.models.at(0).price_output_per_mtok, std::optional<double>(0.6));
  EXPECT_FALSE(again.models.at(0).price_input_per_mtok.has_value());
  EXPECT_FALSE(again.models.at(0).price_cached_input_per_mtok.has_value());
}

TEST(LoaderTest, ListenAcceptsPortZeroAndBracketedIpv6) {
  auto cfg = expect_ok(minimal + "[server]\nlisten = \"127.0.0.1:0\"\n");
  EXPECT_EQ(cfg.server.listen_port, 0);
  cfg = expect_ok(minimal + "[server]\nlisten = \"[::1]:8081\"\n");
  EXPECT_EQ(cfg.server.listen_host, "::1");
  EXPECT_EQ(cfg.server.listen_port, 8081);
}

std::string with_base_url(const std::string& url) {
  return "[[upstreams]]\nname = \"a\"\nbase_url = \"" + url +
         "\"\n[[models]]\nname = \"m\"\nupstream = \"a\"\n";
}

TEST(LoaderTest, BaseUrlDefaultsPortAndStripsTrailingSlash) {
  auto cfg = expect_ok(with_base_url("https://api.example.com/openai/"));
  const auto& u = cfg.upstreams.at(0).url;
  EXPECT_TRUE(u.tls);
  EXPECT_EQ(u.host, "api.example.com");
  EXPECT_EQ(u.port, 443);
  EXPECT_EQ(u.path_prefix, "/openai");
  EXPECT_EQ(cfg.upstreams[0].base_url, "https://api.example.com/openai/");

  cfg = expect_ok(with_base_url("http://example.com/"));
  EXPECT_EQ(cfg.upstreams.at(0).url.port, 80);
  EXPECT_EQ(cfg.upstreams.at(0).url.path_prefix, "");

  cfg = expect_ok(with_base_url("http://[::1]:8000"));
  EXPECT_EQ(cfg.upstreams.at(0).url.host, "::1");
  EXPECT_EQ(cfg.upstreams.at(0).url.port, 8000);
}

TEST(LoaderTest, FallbackCycleIsNamed) {
  expect_error(minimal + R"(fallbacks = ["b"]
[[models]]
name = "b"
upstream = "a"
fallbacks = ["m"]
)",
               "fallback cycle: m -> b -> m");
  expect_error(R"(
[[upstreams]]
name = "a"
base_url = "http://h"
[[models]]
name = "x"
upstream = "a"
fallbacks = ["y"]
[[models]]
name = "y"
upstream = "a"
fallbacks = ["z"]
[[models]]
name = "z"
upstream = "a"
fallbacks = ["x"]
)",
               "fallback cycle: x -> y -> z -> x");
}

TEST(LoaderTest, AcyclicFallbackChainLoads) {
  const auto cfg = expect_ok(minimal + R"(fallbacks = ["b", "c"]
[[models]]
name = "b"
upstream = "a"
fallbacks = ["c"]
[[models]]
name = "c"
upstream = "a"
)");
  EXPECT_EQ(cfg.models.at(0).fallbacks, (std::vector<std::string>{"b", "c"}));
}

// The upstreams' API decides what their deployments serve, unless `surfaces` lists it.
TEST(LoaderTest, ApiAndSurfacesAreReadWithTheApisDefaults) {
  const auto cfg = expect_ok(R"(
[[upstreams]]
name = "oai"
base_url = "http://127.0.0.1:8000"
[[upstreams]]
name = "ant"
base_url = "https://api.anthropic.com"
api = "anthropic"
[[upstreams]]
name = "vllm"
base_url = "http://127.0.0.1:8001"
surfaces = ["chat", "messages", "count_tokens"]
[[models]]
name = "m"
upstream = "oai"
)");
  ASSERT_EQ(cfg.upstreams.size(), 3U);
  EXPECT_EQ(cfg.upstreams[0].api, upstream_api::openai);
  EXPECT_EQ(names_of(cfg.upstreams[0].surfaces), "chat, completions, embeddings, responses");
  EXPECT_EQ(cfg.upstreams[1].api, upstream_api::anthropic);
  EXPECT_EQ(names_of(cfg.upstreams[1].surfaces), "messages, count_tokens");
  EXPECT_EQ(cfg.upstreams[2].api, upstream_api::openai);
  EXPECT_EQ(names_of(cfg.upstreams[2].surfaces), "chat, messages, count_tokens");
}

// A request falls back on its own surface: a fallback that cannot answer there is refused.
TEST(LoaderTest, FallbackChainAcrossSurfacesIsRejected) {
  const std::string two = R"(
[[upstreams]]
name = "oai"
base_url = "http://127.0.0.1:8000"
[[upstreams]]
name = "ant"
base_url = "http://127.0.0.1:8001"
api = "anthropic"
)";
  expect_error(two + R"(
[[models]]
name = "claude"
upstream = "ant"
fallbacks = ["gpt"]
[[models]]
name = "gpt"
upstream = "oai"
)",
               "models[0].fallbacks: \"gpt\" does not serve messages, count_tokens (which "
               "\"claude\" serves): a fallback chain stays on the request's surface");
  // A fallback serving more than its model is fine; the same surfaces too.
  expect_ok(two + R"(
[[models]]
name = "claude"
upstream = "ant"
fallbacks = ["claude-2"]
[[models]]
name = "claude-2"
upstream = "ant"
[[models]]
name = "claude-2"
upstream = "oai"
)");
}

TEST(LoaderTest, MissingUpstreamsAndModelsAreRequired) {
  const auto r = load("[server]\nlisten = \"127.0.0.1:1\"\n");
  EXPECT_FALSE(r.config);
  EXPECT_THAT(r.errors, Contains(HasSubstr("test.toml: upstreams: at least one")));
  EXPECT_THAT(r.errors, Contains(HasSubstr("test.toml: models: at least one")));
}

const std::string with_key_env = R"(
[[upstreams]]
name = "a"
base_url = "https://api.example.com"
api_key_env = "A_KEY"
[[models]]
name = "m"
upstream = "a"
)";

TEST(LoaderTest, ApiKeyIsResolvedFromTheNamedVariable) {
  const auto cfg = expect_ok(with_key_env, {{"A_KEY", "sk-123"}});
  EXPECT_EQ(cfg.upstreams.at(0).api_key_env, "A_KEY");
  EXPECT_EQ(cfg.upstreams.at(0).api_key, "sk-123");
}

TEST(LoaderTest, MissingApiKeyVariableIsNamedWithoutAValue) {
  expect_error(with_key_env,
               "upstreams[0].api_key_env: environment variable A_KEY is not set or empty");
  expect_error(with_key_env, "A_KEY is not set or empty", {{"A_KEY", ""}});
}

TEST(LoaderTest, KeyPastedIntoApiKeyEnvIsRejectedWithoutEchoingIt) {
  const std::string secret = "sk-live-PASTED-SECRET";
  std::string text = with_key_env;
  text.replace(text.find("A_KEY"), 5, secret);
  const auto r = load(text);
  EXPECT_FALSE(r.config);
  EXPECT_THAT(r.errors, Contains(HasSubstr("upstreams[0].api_key_env: is not a valid")));
  for (const auto& e : r.errors) EXPECT_THAT(e, Not(HasSubstr(secret)));
}

std::string with_key(const std::string& digest, const std::string& models = R"(["*"])") {
  return minimal + "[[keys]]\nname = \"team\"\nsha256 = \"" + digest + "\"\nmodels = " + models +
         "\nmax_in_flight = 4\n";
}

TEST(LoaderTest, Sha256IsStoredLowerCase) {
  const auto cfg = expect_ok(with_key(std::string(32, 'A') + std::string(32, 'f')));
  ASSERT_EQ(cfg.keys.size(), 1u);
  EXPECT_EQ(cfg.keys[0].sha256_hex, std::string(32, 'a') + std::string(32, 'f'));
  EXPECT_EQ(cfg.keys[0].models, std::vector<std::string>{"*"});
  EXPECT_EQ(cfg.keys[0].max_in_flight, 4u);
}

TEST(LoaderTest, AKeysQueueShareAndHighestPriorityDefaultAndAreRead) {
  const auto plain = expect_ok(with_key(std::string(64, 'a')));
  ASSERT_EQ(plain.keys.size(), 1u);
  EXPECT_EQ(plain.keys[0].weight, 1u);
  EXPECT_EQ(plain.keys[0].max_priority, priority::normal);
  const auto set =
      expect_ok(with_key(std::string(64, 'a')) + "weight = 3\nmax_priority = \"high\"\n");
  EXPECT_EQ(set.keys[0].weight, 3u);
  EXPECT_EQ(set.keys[0].max_priority, priority::high);
}

TEST(LoaderTest, UnknownModelInKeyIsNamed) {
  expect_error(with_key(std::string(64, 'a'), R"(["m", "ghost"])"),
               "keys[0].models: \"ghost\" is not a configured model");
  expect_ok(with_key(std::string(64, 'a'), R"(["m"])"));
}

TEST(LoaderTest, EnvOverridesDeadlineAndAttemptTimeoutInSeconds) {
  const auto cfg = expect_ok(minimal + "[request]\ndeadline_ms = 1000\n",
                             {{"PROXY_REQUEST_DEADLINE", "1.5"}, {"PROXY_REQUEST_TIMEOUT", "30"}});
  EXPECT_EQ(cfg.request.deadline, millis(1500));
  EXPECT_EQ(cfg.request.attempt_timeout, millis(30000));
  EXPECT_EQ(expect_ok(minimal, {{"PROXY_REQUEST_DEADLINE", " 0.25 "}}).request.deadline,
            millis(250));
  EXPECT_EQ(expect_ok(minimal, {{"PROXY_REQUEST_DEADLINE", "0"}}).request.deadline, millis(0));
  // Empty counts as unset.
  EXPECT_EQ(expect_ok(minimal, {{"PROXY_REQUEST_TIMEOUT", ""}}).request.attempt_timeout,
            millis(120000));
}

TEST(LoaderTest, EnvOverrideGarbageIsNamed) {
  for (const char* bad : {"abc", "-1", "1e3", "1.", ".5", "1,5", "10s"}) {
    expect_error(minimal, "test.toml: PROXY_REQUEST_DEADLINE: environment variable",
                 {{"PROXY_REQUEST_DEADLINE", bad}});
  }
  expect_error(minimal, "PROXY_REQUEST_TIMEOUT", {{"PROXY_REQUEST_TIMEOUT", "0"}});
  expect_error(minimal, "PROXY_REQUEST_TIMEOUT", {{"PROXY_REQUEST_TIMEOUT", "99999999999999999"}});
}

TEST(LoaderTest, DeploymentsOfOneNameAreKeptAsSeparateEntries) {
  const auto cfg = expect_ok(R"(
[[upstreams]]
name = "a"
base_url = "http://a"
[[upstreams]]
name = "b"
base_url = "http://b"
[[models]]
name = "llama"
upstream = "a"
upstream_model = "meta/llama"
[[models]]
name = "llama"
upstream = "b"
)");
  ASSERT_EQ(cfg.models.size(), 2u);
  EXPECT_EQ(cfg.models[0].upstream, "a");
  EXPECT_EQ(cfg.models[0].upstream_model, "meta/llama");
  EXPECT_EQ(cfg.models[1].upstream, "b");
  EXPECT_EQ(cfg.models[1].upstream_model, "llama");
  ASSERT_NE(cfg.find_upstream("b"), nullptr);
  EXPECT_EQ(cfg.find_upstream("b")->url.host, "b");
  EXPECT_EQ(cfg.find_upstream("c"), nullptr);
}

TEST(LoaderTest, DeploymentsDisagreeingOnFallbacksOrOverridesAreRejected) {
  const std::string base = minimal + "fallbacks = [\"z\"]\ndeadline_ms = 5000\n" +
                           "[[models]]\nname = \"z\"\nupstream = \"a\"\n";
  expect_error(base + "[[models]]\nname = \"m\"\nupstream = \"a\"\ndeadline_ms = 5000\n",
               "models[2].fallbacks: deployments of \"m\" disagree on fallbacks");
  expect_error(base + "[[models]]\nname = \"m\"\nupstream = \"a\"\nfallbacks = [\"z\"]\n",
               "models[2]: deployments of \"m\" disagree on request overrides");
  expect_ok(base + "[[models]]\nname = \"m\"\nupstream = \"a\"\nfallbacks = [\"z\"]\n" +
            "deadline_ms = 5000\n");
}

TEST(LoaderTest, PerModelOverridesAreVisibleThroughEffectiveRequest) {
  const auto cfg = expect_ok(minimal + R"(deadline_ms = 5000
max_retries = 0
[[models]]
name = "other"
upstream = "a"
[request]
deadline_ms = 60000
attempt_timeout_ms = 7000
)");
  const auto m = cfg.effective_request("m");
  EXPECT_EQ(m.deadline, millis(5000));
  EXPECT_EQ(m.max_retries, 0u);
  EXPECT_EQ(m.attempt_timeout, millis(7000));  // not overridden: from [request]
  const auto other = cfg.effective_request("other");
  EXPECT_EQ(other.deadline, millis(60000));
  EXPECT_EQ(other.max_retries, 2u);
  EXPECT_EQ(cfg.effective_request("unknown").deadline, millis(60000));
  expect_error(minimal + "deadline_ms = -5\n", "models[0].deadline_ms: must not be negative");
}

TEST(LoaderTest, AllErrorsAreCollectedNotJustTheFirst) {
  const auto r = load(R"(
bogus = true
[server]
listen = "nope"
[[upstreams]]
name = "a"
base_url = "ftp://h"
[[models]]
name = "m"
upstream = "ghost"
fallbacks = ["none"]
[telemetry]
log_format = "xml"
)");
  EXPECT_FALSE(r.config);
  EXPECT_GE(r.errors.size(), 6u);
  for (const char* key : {"bogus", "server.listen", "upstreams[0].base_url", "models[0].upstream",
                          "models[0].fallbacks", "telemetry.log_format"}) {
    EXPECT_THAT(r.errors, Contains(HasSubstr(std::string("test.toml: ") + key + ":")));
  }
}

const std::string full = R"(
[server]
listen = "127.0.0.1:0"
max_json_depth = 64
[request]
stream_idle_timeout_ms = 1234
[budget]
queue_timeout_ms = 250
[[upstreams]]
name = "secure"
base_url = "https://api.example.com/proxy/"
api_key_env = "UPSTREAM_KEY"
max_in_flight = 3
weight = 2
eject_max_ms = 60000
health_path = "/health"
[[upstreams]]
name = "local"
base_url = "http://[::1]:9000"
[[models]]
name = "big"
upstream = "secure"
upstream_model = "vendor/big \"quoted\""
fallbacks = ["small"]
attempt_timeout_ms = 999
price_input_per_mtok = 2.5
price_output_per_mtok = 10
price_cached_input_per_mtok = 1.25
[[models]]
name = "big"
upstream = "local"
fallbacks = ["small"]
attempt_timeout_ms = 999
price_input_per_mtok = 0.000001
[[models]]
name = "small"
upstream = "local"
[[keys]]
name = "team-a"
sha256 = "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"
models = ["big"]
max_tokens_per_month = 90000000
max_spend_per_day = 12.75
admin = true
[telemetry]
otlp_endpoint = "http://127.0.0.1:4318/v1/traces"
[cluster]
budget_listen = "127.0.0.1:4242"
[ledger]
path = "ledger/usage.db"
flush_interval_ms = 250
)";

const env_map full_env = {{"UPSTREAM_KEY", "sk-planted-secret-4f1c"},
                          {"PROXY_REQUEST_DEADLINE", "12"}};

TEST(LoaderTest, RenderEffectiveMasksSecrets) {
  const auto cfg = expect_ok(full, full_env);
  const std::string out = render_effective(cfg);
  EXPECT_THAT(out, Not(HasSubstr("sk-planted-secret-4f1c")));
  EXPECT_THAT(out, Not(HasSubstr("0123456789abcdef")));
  EXPECT_THAT(out, Not(HasSubstr("0123456789ABCDEF")));
  EXPECT_THAT(out, HasSubstr("api_key_env = \"UPSTREAM_KEY\"  # key: set"));
  EXPECT_THAT(out, HasSubstr("sha256 = \"<masked>\""));
  EXPECT_THAT(out, HasSubstr("deadline_ms = 12000"));          // env override applied
  EXPECT_THAT(out, HasSubstr("max_request_bytes = 4194304"));  // defaults included

  auto missing = cfg;
  missing.upstreams[0].api_key.clear();
  EXPECT_THAT(render_effective(missing), HasSubstr("# key: missing"));
}

TEST(LoaderTest, RenderEffectiveRoundTripsThroughTheLoader) {
  const auto cfg = expect_ok(full, full_env);
  std::string out = render_effective(cfg);
  // The digest is masked like a key; the round trip restores it as the environment restores
  // the upstream key.
  const std::string digest(cfg.keys.at(0).sha256_hex);
  out.replace(out.find("<masked>"), 8, digest);
  auto again = load_string(out, "test.toml", fake_env(full_env));
  ASSERT_THAT(again.errors, IsEmpty()) << out;
  const auto& cfg2 = *again.config;
  EXPECT_EQ(render_effective(cfg2), render_effective(cfg));
  EXPECT_EQ(cfg2.upstreams.at(0).api_key, "sk-planted-secret-4f1c");
  EXPECT_EQ(cfg2.upstreams.at(1).url.host, "::1");
  EXPECT_EQ(cfg2.upstreams.at(0).weight, 2u);
  EXPECT_EQ(cfg2.upstreams.at(0).eject_max, millis(60000));
  EXPECT_EQ(cfg2.upstreams.at(0).health_path, "/health");
  EXPECT_EQ(cfg2.upstreams.at(1).health_path, "");
  EXPECT_EQ(cfg2.models.at(0).upstream_model, "vendor/big \"quoted\"");
  EXPECT_EQ(cfg2.effective_request("big").attempt_timeout, millis(999));
  EXPECT_EQ(cfg2.effective_request("small").attempt_timeout, millis(120000));
  EXPECT_EQ(cfg2.request.deadline, millis(12000));
  EXPECT_EQ(cfg2.keys.at(0).sha256_hex, digest);
  EXPECT_EQ(cfg2.server.listen_port, 0);
  EXPECT_EQ(cfg2.cluster.budget_listen, "127.0.0.1:4242");
  EXPECT_EQ(cfg2.models.at(0).price_input_per_mtok, std::optional<double>(2.5));
  EXPECT_EQ(cfg2.models.at(0).price_output_per_mtok, std::optional<double>(10.0));
  EXPECT_EQ(cfg2.models.at(0).price_cached_input_per_mtok, std::optional<double>(1.25));
  EXPECT_EQ(cfg2.models.at(1).price_input_per_mtok, std::optional<double>(0.000001));
  EXPECT_FALSE(cfg2.models.at(1).price_output_per_mtok.has_value());
  EXPECT_FALSE(cfg2.models.at(2).price_input_per_mtok.has_value());
  EXPECT_EQ(cfg2.keys.at(0).max_tokens_per_month, 90000000U);
  EXPECT_EQ(cfg2.keys.at(0).max_spend_per_day, 12.75);
  EXPECT_TRUE(cfg2.keys.at(0).admin);
  EXPECT_EQ(cfg2.ledger.path, "ledger/usage.db");
  EXPECT_EQ(cfg2.ledger.flush_interval, millis(250));
  EXPECT_EQ(cfg2.ledger_file(), "ledger/usage.db");
}

TEST(LoaderTest, DemoConfigLoadsCleanly) {
  const auto path = std::filesystem::path(TETHER_SOURCE_DIR) / "config" / "demo.toml";
  const auto r = load_file(path.string(), fake_env({}));
  ASSERT_THAT(r.errors, IsEmpty());
  const auto& cfg = *r.config;
  EXPECT_EQ(cfg.server.listen_host, "127.0.0.1");
  EXPECT_EQ(cfg.server.listen_port, 8080);
  ASSERT_EQ(cfg.upstreams.size(), 1u);
  EXPECT_EQ(cfg.upstreams[0].name, "mock");
  EXPECT_EQ(cfg.upstreams[0].url.port, 9100);
  EXPECT_EQ(cfg.telemetry.log_format, "text");
  std::map<std::string, std::string> routes;
  for (const auto& m : cfg.models) routes[m.name] = m.upstream_model;
  EXPECT_EQ(routes, (std::map<std::string, std::string>{{"demo", "mock"},
                                                        {"demo-stream-slow", "mock-stream-20x100"},
                                                        {"demo-slow", "mock-delay-2000"},
                                                        {"demo-flaky", "mock-flaky-50"}}));
  for (const auto& m : cfg.models) {
    if (m.name == "demo-flaky") {
      EXPECT_EQ(m.fallbacks, std::vector<std::string>{"demo"});
    } else {
      EXPECT_THAT(m.fallbacks, IsEmpty());
    }
  }
}

TEST(LoaderTest, EngineKeysDefaultToNothingEngineSpecific) {
  const auto cfg = expect_ok(minimal);
  const auto& u = cfg.upstreams.at(0);
  EXPECT_EQ(u.engine, engine_kind::openai);
  EXPECT_EQ(u.upstream_stream, upstream_stream_mode::as_requested);
  EXPECT_EQ(u.metrics_path, "");
  EXPECT_EQ(u.metrics_interval, millis(1000));
  EXPECT_EQ(u.release_grace_max, millis(500));
  EXPECT_THAT(render_effective(cfg),
              HasSubstr("engine = \"openai\"\nupstream_stream = \"as_requested\"\n"
                        "metrics_path = \"\"  # the engine's metrics are not polled\n"
                        "metrics_interval_ms = 1000\nrelease_grace_max_ms = 500\n"));
}

TEST(LoaderTest, EngineKeysAreReadAndLlamaCppStreamsByDefault) {
  const auto cfg = expect_ok(minimal + R"(
[[upstreams]]
name = "b"
base_url = "http://127.0.0.1:8001"
engine = "llamacpp"
metrics_path = "/metrics"
metrics_interval_ms = 100
release_grace_max_ms = 0
[[upstreams]]
name = "c"
base_url = "http://127.0.0.1:8002"
engine = "llamacpp"
upstream_stream = "as_requested"
[[upstreams]]
name = "d"
base_url = "http://127.0.0.1:8003"
engine = "vllm"
upstream_stream = "always"
metrics_running_series = "my:running"
metrics_queued_series = "my_queued"
)");
  ASSERT_EQ(cfg.upstreams.size(), 4u);
  const auto& b = cfg.upstreams[1];
  EXPECT_EQ(b.engine, engine_kind::llamacpp);
  EXPECT_EQ(b.upstream_stream, upstream_stream_mode::always);  // llama.cpp's default
  EXPECT_EQ(b.metrics_path, "/metrics");
  EXPECT_EQ(b.metrics_interval, millis(100));
  EXPECT_EQ(b.release_grace_max, millis(0));
  EXPECT_EQ(cfg.upstreams[2].upstream_stream, upstream_stream_mode::as_requested);
  const auto& d = cfg.upstreams[3];
  EXPECT_EQ(d.engine, engine_kind::vllm);
  EXPECT_EQ(d.upstream_stream, upstream_stream_mode::always);
  EXPECT_EQ(d.metrics_running_series, "my:running");
  EXPECT_EQ(d.metrics_queued_series, "my_queued");
  const auto out = render_effective(cfg);
  EXPECT_THAT(out, HasSubstr("engine = \"llamacpp\"\nupstream_stream = \"always\"\n"
                             "metrics_path = \"/metrics\"\nmetrics_interval_ms = 100\n"
                             "release_grace_max_ms = 0  # a cancelled attempt's slot goes back "
                             "at the close\n"));
  EXPECT_THAT(out, HasSubstr("metrics_running_series = \"my:running\"\n"
                             "metrics_queued_series = \"my_queued\"\n"));
  // The effective config reloads to the same values.
  EXPECT_EQ(render_effective(expect_ok(out)), out);
}

// A file the loader refuses, and what its error says (the file, the key, the problem).
struct refused_case {
  std::string text;
  std::string message;
};

// The second upstream of a file, where its keys are written.
const std::string second_upstream =
    minimal + "[[upstreams]]\nname = \"b\"\nbase_url = \"http://h\"\n";

TEST(LoaderTest, EachRefusedValueIsNamedWithItsFileKeyAndProblem) {
  const std::vector<refused_case> cases{
      // Unknown top level key is named.
      {"bogus = 1\n" + minimal, "test.toml: bogus: unknown key (line 1)"},
      // Unknown key in nested table is named.
      {minimal + "[server]\nlisten_addr = \"x\"\n", "test.toml: server.listen_addr: unknown key"},
      // Unknown key in array table is named with index.
      {minimal + "[[upstreams]]\nname = \"b\"\nbase_url = \"http://h\"\ntimeout = 3\n",
       "test.toml: upstreams[1].timeout: unknown key"},
      {minimal + "[[keys]]\nname=\"k\"\nsha256=\"" + std::string(64, 'a') +
           "\"\nmodels=[\"*\"]\nrole=\"admin\"\n",
       "test.toml: keys[0].role: unknown key"},
      // Wrong type names the expected type.
      {minimal + "[server]\nmax_request_bytes = \"big\"\n",
       "server.max_request_bytes: expected an integer, got a string"},
      {minimal + "[telemetry]\nlog_level = 3\n",
       "telemetry.log_level: expected a string, got an integer"},
      {"server = 1\n" + minimal, "server: expected a table, got an integer"},
      {"upstreams = 1\n[[models]]\nname=\"m\"\nupstream=\"a\"\n",
       "upstreams: expected an array of tables ([[upstreams]])"},
      {minimal + "fallbacks = [\"x\", 2]\n", "models[0].fallbacks[1]: expected a string"},
      // Negative and out of range numbers are rejected.
      {minimal + "[request]\ndeadline_ms = -1\n",
       "request.deadline_ms: must not be negative, got -1"},
      {minimal + "[request]\nattempt_timeout_ms = 0\n", "request.attempt_timeout_ms"},
      {minimal + "[budget]\nmax_in_flight = 0\n", "budget.max_in_flight"},
      {minimal + "[server]\nmax_connections = 5000000000\n", "server.max_connections"},
      {minimal + "[request]\nmax_retries = 1000\n",
       "request.max_retries: must be between 0 and 100, got 1000"},
      // Bad listen is rejected.
      {minimal + "[server]\nlisten = \"localhost\"\n", "server.listen: expected \"host:port\""},
      {minimal + "[server]\nlisten = \"localhost:http\"\n", "server.listen"},
      {minimal + "[server]\nlisten = \"127.0.0.1:70000\"\n", "server.listen"},
      {minimal + "[server]\nlisten = \":8080\"\n", "missing host"},
      // Upstream health keys out of range are named.
      {minimal + "weight = 1\n", "models[0].weight: unknown key"},  // an upstream's key
      {second_upstream + "weight = 0\n",
       "test.toml: upstreams[1].weight: must be between 1 and 1000, "
       "got 0 (line"},
      {second_upstream + "weight = 1001\n",
       "upstreams[1].weight: must be between 1 and 1000, got 1001"},
      {second_upstream + "weight = 1.5\n", "upstreams[1].weight: expected an integer, got a float"},
      {second_upstream + "eject_after_failures = -1\n",
       "upstreams[1].eject_after_failures: must not be negative, got -1"},
      {second_upstream + "eject_after_failures = 1001\n",
       "upstreams[1].eject_after_failures: must be between 0 and 1000, got 1001"},
      {second_upstream + "eject_base_ms = 0\n",
       "upstreams[1].eject_base_ms: must be between 1 and"},
      {second_upstream + "eject_max_ms = 0\n", "upstreams[1].eject_max_ms: must be between 1 and"},
      {second_upstream + "eject_max_ms = 604800001\n", "upstreams[1].eject_max_ms"},
      {second_upstream + "health_interval_ms = 99\n",
       "upstreams[1].health_interval_ms: must be between 100 and"},
      {second_upstream + "health_interval_ms = \"5s\"\n",
       "upstreams[1].health_interval_ms: expected an integer, got a string"},
      // Bad engine keys are named.
      {second_upstream + "engine = \"tgi\"\n",
       "upstreams[1].engine: expected \"openai\", \"llamacpp\", \"vllm\" or \"sglang\", "
       "got \"tgi\""},
      {second_upstream + "upstream_stream = \"yes\"\n",
       "upstreams[1].upstream_stream: expected \"always\" or \"as_requested\", got \"yes\""},
      {second_upstream + "metrics_path = \"metrics\"\n",
       "upstreams[1].metrics_path: expected \"\" (not polled) or a path starting with"},
      {second_upstream + "metrics_path = \"/m etrics\"\n",
       "upstreams[1].metrics_path: must not contain"},
      {second_upstream + "metrics_interval_ms = 99\n",
       "upstreams[1].metrics_interval_ms: must be between 100 and"},
      {second_upstream + "metrics_running_series = \"1abc\"\n",
       "upstreams[1].metrics_running_series: must be a Prometheus metric name"},
      {second_upstream + "metrics_queued_series = \"a-b\"\n",
       "upstreams[1].metrics_queued_series: must be a Prometheus metric name"},
      {second_upstream + "release_grace_max_ms = 60001\n",
       "upstreams[1].release_grace_max_ms: must be between 0 and 60000, got 60001"},
      {minimal + "engine = \"llamacpp\"\n", "models[0].engine: unknown key"},
      {second_upstream + "metrics_path = \"/metrics\"\n",
       "upstreams[1].metrics_path: engine \"openai\" names no series of running requests"},
      // Bad api or surfaces are named.
      {second_upstream + "api = \"gemini\"\n",
       "upstreams[1].api: expected \"openai\" or \"anthropic\", got \"gemini\""},
      {second_upstream + "surfaces = [\"chat\", \"images\"]\n",
       "upstreams[1].surfaces: \"images\" is not a surface (expected one of chat, "
       "completions, embeddings, responses, messages, count_tokens)"},
      {second_upstream + "surfaces = []\n", "upstreams[1].surfaces: must list at least one"},
      {second_upstream + "surfaces = [\"chat\", \"chat\"]\n",
       "upstreams[1].surfaces: \"chat\" is listed twice"},
      {second_upstream + "api = \"anthropic\"\nsurfaces = [\"chat\"]\n",
       "upstreams[1].surfaces: \"chat\" is not served by an api = \"anthropic\" upstream "
       "(it serves messages, count_tokens)"},
      // Base url with other scheme is rejected.
      {with_base_url("ftp://h.example"),
       "upstreams[0].base_url: \"ftp://h.example\": scheme must be http or https"},
      {with_base_url("127.0.0.1:8000"), "upstreams[0].base_url"},
      {with_base_url("not a url"), "upstreams[0].base_url"},
      // Base url ending in /v1 is rejected with the reason.
      {with_base_url("https://api.openai.com/v1"), "must not end in /v1"},
      {with_base_url("https://api.openai.com/v1/"), "must not end in /v1"},
      {with_base_url("http://h/openai/v1"), "must not end in /v1"},
      // Base url with query fragment or userinfo is rejected.
      {with_base_url("http://h/?a=1"), "a query is not allowed"},
      {with_base_url("http://h/#x"), "a fragment is not allowed"},
      {with_base_url("http://user:pw@h/"), "credentials in the URL are not allowed"},
      {with_base_url("http:///path"), "a host is required"},
      {with_base_url("http://h:0"), "the port must be between 1 and 65535"},
      // Dangling upstream reference is named.
      {minimal + "[[models]]\nname = \"n\"\nupstream = \"nope\"\n",
       "test.toml: models[1].upstream: \"nope\" is not a configured upstream"},
      // Dangling fallback is named.
      {minimal + "fallbacks = [\"gpt-x\"]\n",
       "test.toml: models[0].fallbacks: \"gpt-x\" is not a configured model"},
      // Self fallback is rejected.
      {minimal + "fallbacks = [\"m\"]\n", "models[0].fallbacks: \"m\" names the model itself"},
      // Duplicate upstream name is rejected.
      {minimal + "[[upstreams]]\nname = \"a\"\nbase_url = \"http://other\"\n",
       "upstreams[1].name: duplicate upstream name \"a\" (first at upstreams[0])"},
      // Missing required keys are named.
      {"[[upstreams]]\nname = \"a\"\n[[models]]\nupstream = \"a\"\n",
       "upstreams[0].base_url: missing required key"},
      {"[[upstreams]]\nname = \"a\"\n[[models]]\nupstream = \"a\"\n",
       "models[0].name: missing required key"},
      // Bad sha256 is rejected.
      {with_key("abc"), "keys[0].sha256: expected the 64 hex digits"},
      {with_key(std::string(63, 'a') + "g"), "keys[0].sha256"},
      {minimal + "[[keys]]\nname=\"k\"\nmodels=[\"*\"]\n", "keys[0].sha256: missing"},
      // A bad key weight or priority is named.
      {with_key(std::string(64, 'a')) + "weight = 0\n", "keys[0].weight"},
      {with_key(std::string(64, 'a')) + "weight = 1001\n", "keys[0].weight"},
      {with_key(std::string(64, 'a')) + "max_priority = \"urgent\"\n",
       "keys[0].max_priority: expected \"high\", \"normal\" or \"low\", got \"urgent\""},
      // The header's value may be in any case; a config file is written one way.
      {with_key(std::string(64, 'a')) + "max_priority = \"High\"\n", "keys[0].max_priority"},
      // Bad log format and level are rejected.
      {minimal + "[telemetry]\nlog_format = \"xml\"\n",
       "telemetry.log_format: expected \"json\" or \"text\", got \"xml\""},
      {minimal + "[telemetry]\nlog_level = \"verbose\"\n", "telemetry.log_level"},
      // Cluster hosting and using at once is rejected.
      {minimal + "[cluster]\nbudget_listen = \"0.0.0.0:4242\"\nbudget_host = \"h:4242\"\n",
       "cluster: budget_listen and budget_host are both set"},
      {minimal + "[cluster]\nbudget_host = \"h\"\n", "cluster.budget_host"},
      {minimal + "[cluster]\nlease_idle_ms = -1\n", "cluster.lease_idle_ms"},
  };
  for (const auto& c : cases) expect_error(c.text, c.message);
}

// Where a test writes a key of a section: in its own table, in a second [[upstreams]] entry, in
// the first [[models]] entry (minimal's last table) or in a [[keys]] entry.
std::string file_with(section where, const std::string& lines) {
  switch (where) {
    case section::upstreams:
      return second_upstream + lines;
    case section::models:
      return minimal + lines;
    case section::keys:
      return minimal + "[[keys]]\nname = \"k\"\nsha256 = \"" + std::string(64, 'a') +
             "\"\nmodels = [\"*\"]\n" + lines;
    default:
      return minimal + "[" + std::string(name_of(where)) + "]\n" + lines;
  }
}

std::string path_in(section where, std::string_view key) {
  switch (where) {
    case section::upstreams:
      return fmt::format("upstreams[1].{}", key);
    case section::models:
      return fmt::format("models[0].{}", key);
    case section::keys:
      return fmt::format("keys[0].{}", key);
    default:
      return fmt::format("{}.{}", name_of(where), key);
  }
}

// A setting checked against another needs that one written beside it.
std::string beside(std::string_view key) {
  if (key == "eject_base_ms") return "eject_max_ms = 604800000\n";
  if (key == "eject_max_ms") return "eject_base_ms = 1\n";
  return "";
}

// Each declared number (and each [request] override, in a [[models]] entry) at its bounds: read
// and printed at both, refused one past them with the message the bounds make.
TEST(LoaderTest, EveryDeclaredNumberIsReadAtItsBoundsAndRefusedPastThem) {
  std::vector<std::pair<section, const setting*>> numbers;
  for (const auto& s : all_settings()) {
    if (s.type != setting_type::integer && s.type != setting_type::duration) continue;
    numbers.emplace_back(s.where, &s);
    if (s.model_override) numbers.emplace_back(section::models, &s);
  }
  ASSERT_GT(numbers.size(), 40U);
  constexpr auto i64_max = std::numeric_limits<std::int64_t>::max();
  for (const auto& [where, s] : numbers) {
    SCOPED_TRACE(path_in(where, s->key));
    for (const auto v : {s->min, s->max}) {
      const auto cfg =
          expect_ok(file_with(where, fmt::format("{} = {}\n{}", s->key, v, beside(s->key))));
      EXPECT_THAT(render_effective(cfg), HasSubstr(fmt::format("\n{} = {}", s->key, v)));
    }
    expect_error(
        file_with(where, fmt::format("{} = {}\n", s->key, s->min - 1)),
        s->min == 0 ? fmt::format("{}: must not be negative, got -1", path_in(where, s->key))
        : s->max == i64_max ? fmt::format("{}: must be at least {}, got {}", path_in(where, s->key),
                                          s->min, s->min - 1)
                            : fmt::format("{}: must be between {} and {}, got {}",
                                          path_in(where, s->key), s->min, s->max, s->min - 1));
    if (s->max < i64_max) {
      expect_error(file_with(where, fmt::format("{} = {}\n", s->key, s->max + 1)),
                   fmt::format("{}: must be between {} and {}, got {}", path_in(where, s->key),
                               s->min, s->max, s->max + 1));
    }
    expect_error(file_with(where, fmt::format("{} = \"1\"\n", s->key)),
                 fmt::format("{}: expected an integer, got a string", path_in(where, s->key)));
  }
}

// Each declared number (a double): read as an integer or a float inside its bounds and at them,
// printed as read; past them, infinite, not a number or not a number at all: refused, named.
TEST(LoaderTest, EveryDeclaredFloatIsReadAsAnIntegerOrAFloatWithinItsBoundsAndNamedPastThem) {
  std::vector<const setting*> numbers;
  for (const auto& s : all_settings()) {
    if (s.type == setting_type::number) numbers.push_back(&s);
  }
  ASSERT_GE(numbers.size(), 6U);  // the load factor, three prices, two spend budgets
  for (const auto* s : numbers) {
    const auto at = path_in(s->where, s->key);
    SCOPED_TRACE(at);
    // A spend budget is written beside a priced model (else it is refused for that).
    const auto file = [&](const std::string& value) {
      const auto line = fmt::format("{} = {}\n", s->key, value);
      return s->where == section::keys ? minimal + "price_input_per_mtok = 1\n" + key_writing(line)
                                       : file_with(s->where, line);
    };
    const auto min = static_cast<double>(s->min);
    const auto max = static_cast<double>(s->max);
    const std::vector<std::pair<std::string, std::string>> taken{
        {fmt::format("{}", s->max), fmt::format("{}", s->max)},
        {fmt::format("{}.0", s->max), fmt::format("{}", s->max)},
        {fmt::format("{}", min + 0.5), fmt::format("{}", min + 0.5)},
        {fmt::format("{}", min + 1e-7), fmt::format("{}", min + 1e-7)},
    };
    for (const auto& [written, printed] : taken) {
      const auto cfg = expect_ok(file(written));
      EXPECT_THAT(render_effective(cfg), HasSubstr(fmt::format("\n{} = {}\n", s->key, printed)))
          << written;
    }
    const auto range = [&](double v) {
      if (s->above_min)
        return fmt::format("must be above {} and at most {}, got {}", s->min, s->max, v);
      if (v < 0) return fmt::format("must not be negative, got {}", v);
      return fmt::format("must be between {} and {}, got {}", s->min, s->max, v);
    };
    if (s->above_min) {
      expect_error(file(fmt::format("{}", s->min)), at + ": " + range(min));
    } else {
      expect_ok(file(fmt::format("{}", s->min)));
    }
    expect_error(file(fmt::format("{}", min - 0.5)), at + ": " + range(min - 0.5));
    expect_error(file(fmt::format("{}", max + 0.5)), at + ": " + range(max + 0.5));
    for (const char* never : {"inf", "-inf", "nan"}) {
      expect_error(file(never), fmt::format("{}: must ", at));
      expect_error(file(never), fmt::format(", got {}", never));
    }
    expect_error(file("\"1.5\""), at + ": expected a number, got a string");
    expect_error(file("true"), at + ": expected a number, got a boolean");
  }
}

// Each declared choice and boolean: every value read and printed; another refused, named.
TEST(LoaderTest, EveryDeclaredChoiceAndBooleanIsReadAndAnythingElseNamed) {
  for (const auto& s : all_settings()) {
    SCOPED_TRACE(path_in(s.where, s.key));
    if (s.type == setting_type::boolean) {
      for (const char* v : {"true", "false"}) {
        const auto cfg = expect_ok(file_with(s.where, fmt::format("{} = {}\n", s.key, v)));
        EXPECT_THAT(render_effective(cfg), HasSubstr(fmt::format("\n{} = {}\n", s.key, v)));
      }
      expect_error(file_with(s.where, fmt::format("{} = 1\n", s.key)),
                   fmt::format("{}: expected a boolean, got an integer", path_in(s.where, s.key)));
    } else if (s.type == setting_type::choice) {
      for (const auto v : s.choices) {
        const auto cfg = expect_ok(file_with(s.where, fmt::format("{} = \"{}\"\n", s.key, v)));
        EXPECT_THAT(render_effective(cfg), HasSubstr(fmt::format("\n{} = \"{}\"\n", s.key, v)));
      }
      expect_error(file_with(s.where, fmt::format("{} = \"Nope\"\n", s.key)),
                   fmt::format("{}: expected ", path_in(s.where, s.key)));
      expect_error(file_with(s.where, fmt::format("{} = \"Nope\"\n", s.key)), "got \"Nope\"");
    }
  }
}

// A key a section does not declare is named as unknown, in every section.
TEST(LoaderTest, AKeyNoDeclarationNamesIsUnknownInEverySection) {
  for (const auto where :
       {section::server, section::request, section::budget, section::upstreams, section::models,
        section::keys, section::telemetry, section::cluster, section::ledger}) {
    expect_error(file_with(where, "no_such_key = 1\n"),
                 fmt::format("test.toml: {}: unknown key", path_in(where, "no_such_key")));
  }
}

// The settings the loader reads by hand (text, lists, several fields): each written with a value
// other than its default is read and printed as written. A declaration without a case here
// fails, so a new hand-read setting cannot be left unread.
TEST(LoaderTest, EveryHandReadSettingIsReadAndPrinted) {
  struct written {
    section where;
    std::string_view key;
    std::string value;    // as written in the file
    std::string printed;  // as tether check prints it: "key = ..."
  };
  const std::string digest(64, 'c');
  const std::vector<written> cases{
      {section::server, "listen", "\"[::1]:9\"", "listen = \"[::1]:9\""},
      {section::upstreams, "name", "\"other\"", "name = \"other\""},
      {section::upstreams, "base_url", "\"https://h:8443/p\"",
       "base_url = \"https://h:8443/p\"\n"
       "# resolved: https://h:8443, path prefix \"/p\""},
      {section::upstreams, "api_key_env", "\"K\"", "api_key_env = \"K\"  # key: set"},
      {section::upstreams, "surfaces", "[\"embeddings\"]", "surfaces = [\"embeddings\"]"},
      {section::upstreams, "health_path", "\"/h\"", "health_path = \"/h\""},
      {section::upstreams, "metrics_path", "\"/m\"\nengine = \"vllm\"", "metrics_path = \"/m\""},
      {section::upstreams, "metrics_running_series", "\"r:s\"", "metrics_running_series = \"r:s\""},
      {section::upstreams, "metrics_queued_series", "\"q_s\"", "metrics_queued_series = \"q_s\""},
      {section::models, "name", "\"n\"", "name = \"n\""},
      {section::models, "upstream", "\"b\"\n" + second_upstream.substr(minimal.size()),
       "upstream = \"b\""},
      {section::models, "upstream_model", "\"vendor/m\"", "upstream_model = \"vendor/m\""},
      {section::models, "fallbacks", "[\"z\"]\n[[models]]\nname = \"z\"\nupstream = \"a\"",
       "fallbacks = [\"z\"]"},
      {section::keys, "name", "\"team\"", "name = \"team\""},
      {section::keys, "sha256", "\"" + digest + "\"", "sha256 = \"<masked>\""},
      {section::keys, "models", "[\"m\"]", "models = [\"m\"]"},
      {section::cluster, "budget_listen", "\"127.0.0.1:7\"", "budget_listen = \"127.0.0.1:7\""},
      {section::cluster, "budget_host", "\"h:7\"", "budget_host = \"h:7\""},
      {section::telemetry, "otlp_endpoint", "\"http://c:4318/v1/traces\"",
       "otlp_endpoint = \"http://c:4318/v1/traces\""},
      {section::telemetry, "service_name", "\"edge\"", "service_name = \"edge\""},
      {section::ledger, "path", "\"../usage.db\"", "path = \"../usage.db\""},
  };
  for (const auto& s : all_settings()) {
    if (s.type != setting_type::text && s.type != setting_type::list &&
        s.type != setting_type::custom)
      continue;
    const auto it = std::find_if(cases.begin(), cases.end(), [&](const written& w) {
      return w.where == s.where && w.key == s.key;
    });
    if (it == cases.end()) {
      ADD_FAILURE() << name_of(s.where) << "." << s.key << " is read by hand and has no case here";
      continue;
    }
    SCOPED_TRACE(path_in(s.where, s.key));
    // A [[models]] or [[keys]] entry's key replaces the one the test file already writes.
    std::string text;
    if (s.where == section::models) {
      text = "[[upstreams]]\nname = \"a\"\nbase_url = \"http://127.0.0.1:8000\"\n[[models]]\n" +
             std::string(s.key == "name" ? "" : "name = \"m\"\n") +
             std::string(s.key == "upstream" ? "" : "upstream = \"a\"\n") + std::string(s.key) +
             " = " + it->value + "\n";
    } else if (s.where == section::keys) {
      text = minimal + "[[keys]]\n" + std::string(s.key == "name" ? "" : "name = \"k\"\n") +
             std::string(s.key == "sha256" ? "" : "sha256 = \"" + std::string(64, 'a') + "\"\n") +
             std::string(s.key == "models" ? "" : "models = [\"*\"]\n") + std::string(s.key) +
             " = " + it->value + "\n";
    } else if (s.where == section::upstreams) {
      text = minimal + "[[upstreams]]\n" + std::string(s.key == "name" ? "" : "name = \"b\"\n") +
             std::string(s.key == "base_url" ? "" : "base_url = \"http://h\"\n") +
             std::string(s.key) + " = " + it->value + "\n";
    } else {
      text = file_with(s.where, std::string(s.key) + " = " + it->value + "\n");
    }
    const auto cfg = expect_ok(text, {{"K", "secret"}});
    EXPECT_THAT(render_effective(cfg), HasSubstr(it->printed + "\n")) << text;
  }
}
}  // namespace
}  // namespace tether::config
