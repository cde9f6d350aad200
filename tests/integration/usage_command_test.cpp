// `tether usage` (actors/usage_command.cpp): the real binary run on a ledger file filled through
// ledger_store, as a gateway fills it; what it prints, its exit codes, and that it reads beside a
// writer without making or changing a file.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "actors/ledger_store.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

namespace tether::test {
namespace {

namespace fs = std::filesystem;
using ledger::aggregate_row;
using ledger::usage_totals;

constexpr std::int64_t dec_8_2026 = 1796688000;  // 00:00 UTC

struct run_result {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

run_result run_usage(std::vector<std::string> args) {
  args.insert(args.begin(), "usage");
  child_process p{TETHER_BINARY, std::move(args)};
  const auto code = p.wait_exit(std::chrono::seconds(20));
  EXPECT_TRUE(code.has_value()) << "tether usage did not exit within 20 s";
  return {code.value_or(-1), p.output()};
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A gateway's config in `dir`; its ledger is tether-ledger.db next to it (the default).
fs::path write_config(const temp_dir& dir) {
  return dir.write_file("tether.toml",
                        "[[upstreams]]\nname = \"u1\"\nbase_url = \"http://127.0.0.1:9\"\n"
                        "[[models]]\nname = \"llama-3\"\nupstream = \"u1\"\n");
}

aggregate_row row(std::string key, std::string model, std::int64_t hour, usage_totals t) {
  return aggregate_row{{std::move(key), std::move(model), "u1", hour}, t};
}

void fill(ledger::ledger_store& store) {
  store.add({row("alice", "llama-3", dec_8_2026 + 13 * 3600,
                 usage_totals{.requests = 3,
                              .estimated_requests = 1,
                              .prompt = 300,
                              .completion = 30,
                              .cached = 100,
                              .waste = 7,
                              .spend_nanousd = 1234567}),
             row("alice", "llama-3", dec_8_2026 + 14 * 3600,
                 usage_totals{.requests = 1, .prompt = 10, .completion = 1, .spend_nanousd = 10}),
             row("bob", "llama-3", dec_8_2026 + 86400,
                 usage_totals{.requests = 2, .prompt = 40, .completion = 4}),
             row("alice", "small", dec_8_2026 + 86400 + 3600,
                 usage_totals{.requests = 1, .prompt = 5, .completion = 5})});
}

TEST(UsageCommandTest, PrintsTheLedgerNextToTheConfigAsATableAndAsJson) {
  temp_dir dir;
  const auto config = write_config(dir);
  const auto file = dir.path() / "tether-ledger.db";
  {
    ledger::ledger_store store(file);
    fill(store);
  }
  const auto before = names_in(dir.path());
  const auto bytes = read_all(file);

  auto r = run_usage({"--config", config.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output,
            "day         key    model    requests  estimated  prompt  completion  cached  waste  "
            "  spend_usd\n"
            "2026-12-08  alice  llama-3         4          1     310          31     100      7  "
            "0.001234577\n"
            "2026-12-09  alice  small           1          0       5           5       0      0  "
            "0.000000000\n"
            "2026-12-09  bob    llama-3         2          0      40           4       0      0  "
            "0.000000000\n"
            "total                              7          1     355          40     100      7  "
            "0.001234577\n");

  r = run_usage({"--config", config.string(), "--key", "alice", "--by", "hour", "--from",
                 "2026-12-08T14:00:00Z", "--to", "2026-12-10"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output,
            "hour              key    model    requests  estimated  prompt  completion  cached  "
            "waste    spend_usd\n"
            "2026-12-08 14:00  alice  llama-3         1          0      10           1       0  "
            "    0  0.000000010\n"
            "2026-12-09 01:00  alice  small           1          0       5           5       0  "
            "    0  0.000000000\n"
            "total                                    2          0      15           6       0  "
            "    0  0.000000010\n");

  r = run_usage({"--json", "--config", config.string(), "--by", "model", "--model", "llama-3"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_FALSE(r.output.empty());
  EXPECT_EQ(r.output.back(), '\n');
  const auto doc = boost::json::parse(r.output).as_object();
  EXPECT_EQ(doc.at("object"), "list");
  EXPECT_EQ(doc.at("group_by"), "model");
  EXPECT_TRUE(doc.at("from").is_null());
  EXPECT_TRUE(doc.at("to").is_null());
  const auto& data = doc.at("data").as_array();
  ASSERT_EQ(data.size(), 2u);
  const auto& alice = data[0].as_object();
  EXPECT_EQ(alice.at("start"), "2026-12-08T13:00:00Z");  // the first hour with usage
  EXPECT_EQ(alice.at("key"), "alice");
  EXPECT_EQ(alice.at("model"), "llama-3");
  EXPECT_EQ(alice.at("requests"), 4);
  EXPECT_EQ(alice.at("estimated_requests"), 1);
  EXPECT_EQ(alice.at("prompt_tokens"), 310);
  EXPECT_EQ(alice.at("completion_tokens"), 31);
  EXPECT_EQ(alice.at("cached_tokens"), 100);
  EXPECT_EQ(alice.at("waste_tokens"), 7);
  // The decimal as written, not a double's rounding of it.
  EXPECT_NE(r.output.find("\"spend_usd\":0.001234577}"), std::string::npos) << r.output;
  EXPECT_EQ(data[1].at("key"), "bob");
  EXPECT_EQ(data[1].at("start"), "2026-12-09T00:00:00Z");

  // Nothing was made next to the ledger, and the ledger is as it was.
  EXPECT_EQ(names_in(dir.path()), before);
  EXPECT_EQ(read_all(file), bytes);
}

TEST(UsageCommandTest, ReadsWhatAGatewayCommitsWhileItHoldsTheFile) {
  temp_dir dir;
  const auto config = write_config(dir);
  ledger::ledger_store gateway(dir.path() / "tether-ledger.db");
  fill(gateway);
  auto r = run_usage({"--config", config.string(), "--key", "bob", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(boost::json::parse(r.output).at("data").as_array().at(0).at("requests"), 2);

  gateway.add({row("bob", "llama-3", dec_8_2026 + 86400,
                   usage_totals{.requests = 5, .prompt = 1, .spend_nanousd = 2'500'000'000})});
  r = run_usage({"--config", config.string(), "--key", "bob", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto doc = boost::json::parse(r.output);
  const auto& bob = doc.at("data").as_array().at(0);
  EXPECT_EQ(bob.at("requests"), 7);
  EXPECT_NE(r.output.find("\"spend_usd\":2.5}"), std::string::npos) << r.output;
  // And the gateway goes on writing: the reader took no lock it kept.
  gateway.add({row("bob", "llama-3", dec_8_2026 + 86400, usage_totals{.requests = 1})});
  EXPECT_EQ(gateway.query({.key = "bob"}).at(0).totals.requests, 8u);
}

TEST(UsageCommandTest, AShellWithoutTheGatewaysSecretsReadsItsLedger) {
  temp_dir dir;
  // The child's environment has no such variable (tests/support/process.hpp): `tether check`
  // and serving refuse this config there; reading its ledger needs no key.
  const auto config =
      dir.write_file("tether.toml",
                     "[[upstreams]]\nname = \"u1\"\nbase_url = \"http://127.0.0.1:9\"\n"
                     "api_key_env = \"TETHER_USAGE_TEST_UPSTREAM_KEY\"\n"
                     "[[models]]\nname = \"llama-3\"\nupstream = \"u1\"\n");
  {
    ledger::ledger_store store(dir.path() / "tether-ledger.db");
    fill(store);
  }
  child_process check{TETHER_BINARY, {"check", "--config", config.string()}};
  ASSERT_EQ(check.wait_exit(std::chrono::seconds(20)), std::optional<int>(1)) << check.output();
  EXPECT_NE(check.output().find("TETHER_USAGE_TEST_UPSTREAM_KEY is not set"), std::string::npos)
      << check.output();
  const auto r = run_usage({"--config", config.string(), "--by", "model", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(boost::json::parse(r.output).at("data").as_array().size(), 3u) << r.output;
}

TEST(UsageCommandTest, AMissingOrUnreadableLedgerIsExitCodeOneNamingTheFile) {
  temp_dir dir;
  const auto config = write_config(dir);
  const auto file = dir.path() / "tether-ledger.db";
  auto r = run_usage({"--config", config.string()});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output, "tether usage: no ledger at " + file.string() + "\n");
  EXPECT_EQ(names_in(dir.path()), std::set<std::string>{"tether.toml"});

  dir.write_file("tether-ledger.db", "not a database, someone's notes\n" + std::string(4096, 'x'));
  r = run_usage({"--config", config.string()});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("tether usage: ledger " + file.string() + ": "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("not a database"), std::string::npos) << r.output;

  // A config that does not load: its error, and 1 as `tether check` has it.
  const auto broken = dir.write_file("broken.toml", "[[upstreams]]\nname = 5\n");
  r = run_usage({"--config", broken.string()});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("config error: " + broken.string()), std::string::npos) << r.output;
}

TEST(UsageCommandTest, BadArgumentsAreExitCodeTwoWithTheUsage) {
  temp_dir dir;
  const auto config = write_config(dir).string();
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{}, "--config FILE is required"},
      {{"--key", "alice"}, "--config FILE is required"},
      {{"--config", config, "--by", "week"}, "--by must be hour, day or model"},
      {{"--config", config, "--from", "yesterday"}, "--from is not a time"},
      {{"--config", config, "--to", "2026-02-30"}, "--to is not a time"},
      {{"--config", config, "--from", "2026-12-09", "--to", "2026-12-08"},
       "--from must be before --to"},
      {{"--config", config, "--key", "a", "--key", "b"}, "--key is given more than once"},
      {{"--config", config, "--json", "--json"}, "--json is given more than once"},
      {{"--config", config, "--kye", "a"}, "unknown argument '--kye'"},
      {{"--config", config, "--model"}, "--model needs a value"},
      {{"--config"}, "--config needs a value"}};
  for (const auto& [args, message] : cases) {
    const auto r = run_usage(args);
    EXPECT_EQ(r.exit_code, 2) << message << ": " << r.output;
    EXPECT_TRUE(r.output.starts_with("tether usage: " + message)) << r.output;
    EXPECT_NE(r.output.find("usage: tether usage --config FILE"), std::string::npos) << r.output;
  }
  // --help is no error.
  const auto help = run_usage({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_EQ(help.output.find("usage: tether usage --config FILE"), 0u) << help.output;
  EXPECT_EQ(names_in(dir.path()), std::set<std::string>{"tether.toml"});
}

}  // namespace
}  // namespace tether::test
