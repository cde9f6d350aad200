// The declarations against what is written about them: README.md's reference tables (key,
// default, unit and range), docs/contract.md's configuration example (every key, at its
// default) and the settings the man page, the README and the contract name as "section.key".
// A setting added, removed or changed in config/settings.cpp without its documentation fails
// here, and the message prints the row to paste.
#include "config/settings.hpp"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace tether::config {
namespace {

std::string read_doc(const std::string& relative) {
  std::ifstream in(std::filesystem::path(TETHER_SOURCE_DIR) / relative);
  EXPECT_TRUE(in) << relative;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::optional<section> section_named(std::string_view name) {
  for (std::size_t i = 0; i < section_count; ++i) {
    const auto s = static_cast<section>(i);
    if (name_of(s) == name) return s;
  }
  return std::nullopt;
}

// The cells of a Markdown table row ("\|" is a bar inside a cell).
std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::string cell;
  for (std::size_t i = 1; i < row.size(); ++i) {
    if (row[i] == '\\' && i + 1 < row.size() && row[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (row[i] == '|') {
      out.push_back(cell.substr(cell.find_first_not_of(' '),
                                cell.find_last_not_of(' ') - cell.find_first_not_of(' ') + 1));
      cell.clear();
    } else {
      cell += row[i];
    }
  }
  return out;
}

struct readme_row {
  std::string default_cell;
  std::string range_cell;
};

// README.md's "### `[server]`" ... tables: section → key → its row.
std::map<section, std::map<std::string, readme_row>> readme_tables(const std::string& text) {
  std::map<section, std::map<std::string, readme_row>> out;
  // The table's section; none outside a configuration table. (Not an optional: GCC 12 sees it
  // as maybe uninitialized as a map key.)
  bool in_table = false;
  section in = section::server;
  static const std::regex heading(R"(^### `\[{1,2}([a-z]+)\]{1,2}`)");
  for (const auto& line : lines_of(text)) {
    std::smatch m;
    if (line.starts_with("#")) {
      in_table = false;
      if (std::regex_search(line, m, heading)) {
        if (auto s = section_named(m[1].str())) {
          in = *s;
          in_table = true;
        }
      }
      continue;
    }
    if (!in_table || !line.starts_with("| ") || line.starts_with("| key") ||
        line.starts_with("| ---"))
      continue;
    const auto c = cells(line);
    if (c.size() < 3) continue;
    // "`a`, `b`": one row for two keys.
    static const std::regex key(R"(^`([a-z_0-9]+)`$)");
    std::string names = c[0];
    std::size_t from = 0;
    while (from <= names.size()) {
      auto to = names.find(", ", from);
      if (to == std::string::npos) to = names.size();
      const auto one = names.substr(from, to - from);
      std::smatch k;
      out[in][std::regex_match(one, k, key) ? k[1].str() : one] = {c[1], c[2]};
      from = to + 2;
    }
  }
  return out;
}

const char* const number_words[] = {"zero", "one",   "two",   "three", "four", "five",
                                    "six",  "seven", "eight", "nine",  "ten"};

TEST(SettingsDocsTest, TheReadmeTablesHaveEveryDeclaredSettingWithItsDefaultAndRange) {
  const auto tables = readme_tables(read_doc("README.md"));
  std::size_t overrides = 0;
  for (const auto& s : all_settings()) overrides += s.model_override ? 1 : 0;
  for (const auto& s : all_settings()) {
    const auto sec = tables.find(s.where);
    ASSERT_NE(sec, tables.end()) << "README.md has no table for [" << name_of(s.where) << "]";
    const auto row = sec->second.find(std::string(s.key));
    if (row == sec->second.end()) {
      ADD_FAILURE() << "README.md's [" << name_of(s.where) << "] table lacks " << s.key
                    << "; the declaration's row:\n"
                    << reference_row(s);
      continue;
    }
    EXPECT_TRUE(row->second.default_cell.starts_with(default_text(s)))
        << name_of(s.where) << "." << s.key << ": README says default " << row->second.default_cell
        << ", the declaration " << default_text(s);
    EXPECT_EQ(row->second.range_cell, range_text(s))
        << name_of(s.where) << "." << s.key << ": README's unit and range";
  }
  // Every row is a declared setting (the models' overrides are one row, counted).
  for (const auto& [where, rows] : tables) {
    for (const auto& [key, row] : rows) {
      if (where == section::models && key.starts_with("the ")) {
        ASSERT_LT(overrides, std::size(number_words));
        EXPECT_EQ(key, std::string("the ") + number_words[overrides] + " `[request]` keys");
        continue;
      }
      const auto declared = settings_of(where);
      EXPECT_TRUE(std::any_of(declared.begin(), declared.end(),
                              [&](const setting& s) { return s.key == key; }))
          << "README.md documents " << name_of(where) << "." << key << ", which is not declared";
    }
  }
  EXPECT_THAT(read_doc("README.md"),
              ::testing::HasSubstr(std::string("These ") + number_words[overrides] +
                                   " keys may also be written in a `[[models]]` entry"));
}

// docs/contract.md's ```toml example: section → key → the value written.
std::map<section, std::map<std::string, std::string>> contract_example(const std::string& text) {
  std::map<section, std::map<std::string, std::string>> out;
  const auto start = text.find("## Configuration (TOML)\n```toml\n");
  EXPECT_NE(start, std::string::npos);
  if (start == std::string::npos) return out;
  const auto body = text.substr(start, text.find("\n```\n", start) - start);
  static const std::regex header(R"(^\[{1,2}([a-z]+)\]{1,2})");
  static const std::regex entry(R"re(^([a-z_0-9]+) = ("(?:[^"\\]|\\.)*"|\[[^\]]*\]|[^ ]+))re");
  bool in_table = false;
  section in = section::server;
  for (const auto& line : lines_of(body)) {
    std::smatch m;
    if (std::regex_search(line, m, header)) {
      const auto s = section_named(m[1].str());
      in_table = s.has_value();
      if (s) in = *s;
    } else if (in_table && std::regex_search(line, m, entry)) {
      out[in][m[1].str()] = m[2].str();
    }
  }
  return out;
}

TEST(SettingsDocsTest, TheContractsExampleWritesEveryDeclaredSettingAtItsDefault) {
  const auto example = contract_example(read_doc("docs/contract.md"));
  for (const auto& s : all_settings()) {
    // A model's overrides are [request]'s keys, not written twice.
    const auto sec = example.find(s.where);
    ASSERT_NE(sec, example.end()) << "docs/contract.md has no [" << name_of(s.where) << "]";
    const auto value = sec->second.find(std::string(s.key));
    if (value == sec->second.end()) {
      ADD_FAILURE() << "docs/contract.md's [" << name_of(s.where) << "] lacks " << s.key << " = "
                    << (s.required ? "<example>" : default_toml(s));
      continue;
    }
    // Required keys, lists and defaults that depend on another key are examples there.
    if (s.required || s.type == setting_type::list || !s.default_doc.empty()) continue;
    EXPECT_EQ(value->second, default_toml(s))
        << "docs/contract.md: " << name_of(s.where) << "." << s.key;
  }
  for (const auto& [where, values] : example) {
    for (const auto& [key, value] : values) {
      const auto declared = settings_of(where);
      EXPECT_TRUE(std::any_of(declared.begin(), declared.end(),
                              [&](const setting& s) { return s.key == key; }))
          << "docs/contract.md writes " << name_of(where) << "." << key
          << ", which is not declared";
    }
  }
}

// "server.drain_timeout_ms", "request.deadline_ms": each names a declared setting. Not a file
// name that ends like one ("tether-ledger.db").
TEST(SettingsDocsTest, EverySettingTheDocsNameBySectionAndKeyIsDeclared) {
  static const std::regex named(
      R"((?:^|[^\w-])(server|request|budget|telemetry|cluster|ledger)\.([a-z][a-z_0-9]*[a-z0-9])\b)");
  for (const char* doc : {"cmake/debian/tether.1", "README.md", "docs/contract.md"}) {
    const auto text = read_doc(doc);
    std::set<std::string> seen;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), named);
         it != std::sregex_iterator(); ++it) {
      const auto where = section_named((*it)[1].str());
      const auto key = (*it)[2].str();
      const auto declared = settings_of(*where);
      const auto name = (*it)[1].str() + "." + key;
      if (!seen.insert(name).second) continue;
      EXPECT_TRUE(std::any_of(declared.begin(), declared.end(),
                              [&](const setting& s) { return s.key == key; }))
          << doc << " names " << name << ", which is not declared";
    }
  }
}

// The contract's reload paragraph lists what waits for a restart; the declarations decide it.
TEST(SettingsDocsTest, TheContractNamesEverySettingThatNeedsARestart) {
  const auto text = read_doc("docs/contract.md");
  const auto from = text.find("`SIGHUP` reloads the config file");
  ASSERT_NE(from, std::string::npos);
  const auto paragraph = text.substr(from, text.find("\n\n", from) - from);
  for (const auto& s : all_settings()) {
    if (s.reload != on_reload::restart) continue;
    const auto whole = fmt::format("`{}.*`", name_of(s.where));
    const auto table = fmt::format("`[{}]`", name_of(s.where));
    const auto one = fmt::format("`{}.{}`", name_of(s.where), s.key);
    EXPECT_TRUE(paragraph.find(whole) != std::string::npos ||
                paragraph.find(table) != std::string::npos ||
                paragraph.find(one) != std::string::npos)
        << "docs/contract.md's reload paragraph does not say " << one << " needs a restart";
  }
}

// The reload plan keeps a restart setting's running value only in a one-table section
// (config/reload.cpp): an entry of [[upstreams]] or [[keys]] has no running twin by position.
TEST(SettingsTest, OnlyOneTableSectionsHaveSettingsThatNeedARestart) {
  for (const auto& s : all_settings()) {
    if (s.where == section::upstreams || s.where == section::models || s.where == section::keys) {
      EXPECT_NE(s.reload, on_reload::restart) << s.key;
    }
  }
}

// The ledger's actor and file are made at start; prices and budgets are read per request.
TEST(SettingsTest, TheLedgerWaitsForARestartWhilePricesAndBudgetsApplyOnReload) {
  const auto ledger = settings_of(section::ledger);
  ASSERT_EQ(ledger.size(), 4U);
  for (const auto& s : ledger) EXPECT_EQ(s.reload, on_reload::restart) << s.key;
  std::set<std::string_view> applied;
  for (const auto where : {section::models, section::keys}) {
    for (const auto& s : settings_of(where)) {
      if (s.key.starts_with("price_") || s.key.starts_with("max_tokens_per_") ||
          s.key.starts_with("max_spend_per_") || s.key == "admin") {
        EXPECT_EQ(s.reload, on_reload::applies) << s.key;
        applied.insert(s.key);
      }
    }
  }
  EXPECT_EQ(applied.size(), 8U);
}

// What needs the ledger (refused while it is off): the keys' budgets and admin, nothing else.
TEST(SettingsTest, TheKeysBudgetsAndAdminAreWhatNeedsTheLedger) {
  std::set<std::string> needing;
  for (const auto& s : all_settings()) {
    if (s.needs_ledger) needing.insert(fmt::format("{}.{}", name_of(s.where), s.key));
  }
  EXPECT_EQ(needing, (std::set<std::string>{"keys.max_tokens_per_day", "keys.max_tokens_per_month",
                                            "keys.max_spend_per_day", "keys.max_spend_per_month",
                                            "keys.admin"}));
  key_config k;
  const auto settings = settings_of(section::keys);
  const auto named = [&](std::string_view key) {
    return *std::find_if(settings.begin(), settings.end(),
                         [&](const setting& s) { return s.key == key; });
  };
  for (const char* key : {"max_tokens_per_day", "max_spend_per_month", "admin"}) {
    EXPECT_FALSE(in_use(named(key), &k)) << key;
  }
  k.max_tokens_per_day = 1;
  k.max_spend_per_month = 0.01;
  k.admin = true;
  for (const char* key : {"max_tokens_per_day", "max_spend_per_month", "admin"}) {
    EXPECT_TRUE(in_use(named(key), &k)) << key;
  }
}

// A number's own ops: a double member, and an optional one that reads unset until set.
TEST(SettingsTest, ANumberIsReadAndWrittenThroughItsOwnOps) {
  const auto models = settings_of(section::models);
  const auto named = [&](std::string_view key) -> const setting& {
    return *std::find_if(models.begin(), models.end(),
                         [&](const setting& s) { return s.key == key; });
  };
  const auto& factor = named("prefix_load_factor");
  const auto& price = named("price_cached_input_per_mtok");
  ASSERT_EQ(factor.type, setting_type::number);
  ASSERT_EQ(price.type, setting_type::number);
  EXPECT_TRUE(factor.above_min);
  EXPECT_FALSE(price.above_min);

  model_config m;
  EXPECT_EQ(factor.ops->get_number(&m), std::optional<double>(1.25));
  EXPECT_EQ(factor.ops->toml(&m), "1.25");
  factor.ops->set_number(&m, 2.5);
  EXPECT_EQ(m.prefix_load_factor, 2.5);

  EXPECT_EQ(price.ops->get_number(&m), std::nullopt);
  EXPECT_EQ(price.ops->toml(&m), "");
  EXPECT_FALSE(in_use(price, &m));
  price.ops->set_number(&m, 0.0);
  EXPECT_EQ(m.price_cached_input_per_mtok, std::optional<double>(0.0));
  EXPECT_EQ(price.ops->toml(&m), "0");
  EXPECT_FALSE(in_use(price, &m));
  price.ops->set_number(&m, 0.075);
  EXPECT_EQ(price.ops->get_number(&m), std::optional<double>(0.075));
  EXPECT_EQ(price.ops->toml(&m), "0.075");
  EXPECT_TRUE(in_use(price, &m));
  // The other price members are untouched.
  EXPECT_FALSE(m.price_input_per_mtok.has_value());

  model_config copy;
  EXPECT_FALSE(price.ops->same(&copy, &m));
  price.ops->copy(&copy, &m);
  EXPECT_TRUE(price.ops->same(&copy, &m));

  EXPECT_EQ(range_text(factor), "number, > 1, ≤ 100");
  EXPECT_EQ(range_text(price), "USD per million tokens, 0–1000000");
  EXPECT_EQ(default_text(price), "unset");
}

TEST(SettingsTest, KeysAreUniqueWithinASectionAndSectionsAreContiguous) {
  std::set<std::pair<section, std::string_view>> keys;
  std::set<section> done;
  std::optional<section> current;
  for (const auto& s : all_settings()) {
    EXPECT_TRUE(keys.emplace(s.where, s.key).second) << s.key;
    if (current != s.where) {
      EXPECT_FALSE(done.contains(s.where)) << name_of(s.where) << " is split in the table";
      if (current) done.insert(*current);
      current = s.where;
    }
    EXPECT_FALSE(s.model_override && s.where != section::request) << s.key;
    EXPECT_FALSE(s.doc.empty()) << s.key;
  }
}

}  // namespace
}  // namespace tether::config
