// The ledger's storage (contract: "The ledger"): one SQLite file in WAL mode holding a row per
// key × model × upstream × UTC hour. A flush adds a batch of aggregates to it in one transaction,
// so a process killed at any point leaves the file with a prefix of the batches, each whole. Not
// an actor: the ledger actor owns one and calls it off the request path; `tether usage` opens the
// file directly. Every failure — a file that cannot be opened or written, one that is not a
// database or not a ledger, a corrupt one, one written by a newer tether — is a store_error whose
// message names the file, never a crash.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/policy/ledger/usage_aggregator.hpp"
#include "actors/policy/ledger/usage_query.hpp"
#include "actors/policy/ledger/usage_record.hpp"

namespace tether::ledger {

class store_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// read_write: the gateway's ledger, which creates, checks, upgrades and writes the file.
// read_only: `tether usage` beside a gateway that may own the file: it never creates, writes or
// upgrades it (nor SQLite's files next to it when no gateway has them open).
enum class open_mode { read_write, read_only };

class ledger_store {
 public:
  // The schema this build writes; a file at an older version is upgraded when opened.
  static constexpr int schema_version = 1;
  // The oldest schema a read-only open can answer queries from (version 1 made usage_hourly).
  static constexpr int oldest_readable_version = 1;

  // Opens the file, creating it if missing, and checks it can be read and written. Read-only: a
  // missing file, one at a schema too old to read or too new, is a store_error; add() is one too.
  explicit ledger_store(const std::filesystem::path& path, open_mode mode = open_mode::read_write);
  ~ledger_store();
  ledger_store(ledger_store&&) noexcept;
  ledger_store& operator=(ledger_store&&) noexcept;

  const std::filesystem::path& path() const;

  // Adds each row's totals to what is stored for its key × model × upstream × hour, all rows
  // or none.
  void add(const std::vector<aggregate_row>& rows);

  // Each key's totals over the rows whose hour starts in [from, to): a budget's settled usage.
  std::map<std::string, usage_totals> totals_per_key(std::int64_t from, std::int64_t to) const;

  // The rows the query selects, summed per key and model (across upstreams) and per hour, day
  // or not at all; ordered by start, key, model.
  std::vector<usage_row> query(const usage_query& q) const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace tether::ledger
