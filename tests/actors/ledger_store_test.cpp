#include "actors/ledger_store.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "tests/support/temp_dir.hpp"

namespace tether::ledger {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr std::int64_t feb_29_2024 = 1709164800;  // 00:00 UTC

aggregate_row row(std::string key, std::string model, std::string upstream, std::int64_t hour,
                  usage_totals totals) {
  return aggregate_row{{std::move(key), std::move(model), std::move(upstream), hour}, totals};
}

usage_totals tokens(std::uint64_t prompt, std::uint64_t completion, std::uint64_t requests = 1) {
  return usage_totals{.requests = requests, .prompt = prompt, .completion = completion};
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs SQL on the file with SQLite itself, as another program would; the first column of the
// last row it answers.
std::string raw_sql(const fs::path& p, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string answer;
  EXPECT_EQ(sqlite3_open(p.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(
      db, sql.c_str(),
      [](void* out, int, char** values, char**) {
        *static_cast<std::string*>(out) = values[0] == nullptr ? "" : values[0];
        return 0;
      },
      &answer, &error);
  EXPECT_EQ(rc, SQLITE_OK) << (error == nullptr ? "" : error);
  sqlite3_free(error);
  sqlite3_close(db);
  return answer;
}

// The message of the store_error opening `p` throws; fails the test when it opens or throws
// something else.
std::string open_error(const fs::path& p) {
  try {
    ledger_store store(p);
  } catch (const store_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "opened " << p;
  return {};
}

// A child process's exit code and what it wrote to its pipe, waited for at most 30 s.
struct child_result {
  int exit_code = -1;
  std::string output;
};

child_result run_child(const std::function<int(int fd)>& body) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    int code = 3;
    try {
      code = body(fds[1]);
    } catch (...) {
      code = 4;
    }
    ::_exit(code);
  }
  ::close(fds[1]);
  child_result result;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  char buffer[512];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fds[0], POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      ::kill(pid, SIGKILL);
      ADD_FAILURE() << "the child took longer than 30 s";
      break;
    }
    const auto n = ::read(fds[0], buffer, sizeof buffer);
    if (n <= 0) break;
    result.output.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

void write_text(int fd, const std::string& text) {
  auto written = ::write(fd, text.data(), text.size());
  (void)written;
}

TEST(LedgerStoreTest, WhatIsAddedIsReadBackPerHourDayAndModel) {
  test::temp_dir dir;
  ledger_store store(dir.path() / "ledger.db");
  const usage_totals full{.requests = 3,
                          .estimated_requests = 1,
                          .prompt = 300,
                          .completion = 30,
                          .cached = 100,
                          .waste = 7,
                          .spend_nanousd = 123};
  store.add({row("alice", "m", "u1", feb_29_2024, full),
             row("alice", "m", "u2", feb_29_2024 + 3600, tokens(10, 1)),
             row("alice", "n", "u1", feb_29_2024 + 86400, tokens(20, 2)),
             row("bob", "m", "u1", feb_29_2024, tokens(40, 4))});

  const auto hours = store.query({.key = "alice", .by = group_by::hour});
  ASSERT_EQ(hours.size(), 3u);
  EXPECT_EQ(hours[0], (usage_row{feb_29_2024, "alice", "m", full}));
  EXPECT_EQ(hours[1], (usage_row{feb_29_2024 + 3600, "alice", "m", tokens(10, 1)}));
  EXPECT_EQ(hours[2], (usage_row{feb_29_2024 + 86400, "alice", "n", tokens(20, 2)}));

  // Per day: alice's two upstreams' hours of model m on the 29th are one row.
  auto summed = full;
  summed.add(tokens(10, 1));
  const auto days = store.query({.by = group_by::day});
  ASSERT_EQ(days.size(), 3u);
  EXPECT_EQ(days[0], (usage_row{feb_29_2024, "alice", "m", summed}));
  EXPECT_EQ(days[1], (usage_row{feb_29_2024, "bob", "m", tokens(40, 4)}));
  EXPECT_EQ(days[2], (usage_row{feb_29_2024 + 86400, "alice", "n", tokens(20, 2)}));

  const auto models = store.query({.model = "m", .by = group_by::model});
  ASSERT_EQ(models.size(), 2u);
  EXPECT_EQ(models[0], (usage_row{feb_29_2024, "alice", "m", summed}));
  EXPECT_EQ(models[1], (usage_row{feb_29_2024, "bob", "m", tokens(40, 4)}));

  // The time range: hours starting in [from, to).
  const auto first_hour =
      store.query({.from = feb_29_2024, .to = feb_29_2024 + 3600, .by = group_by::hour});
  ASSERT_EQ(first_hour.size(), 2u);
  EXPECT_EQ(first_hour[0].key, "alice");
  EXPECT_EQ(first_hour[1].key, "bob");
  EXPECT_TRUE(store.query({.key = "carol"}).empty());

  const auto day = store.totals_per_key(feb_29_2024, feb_29_2024 + 86400);
  ASSERT_EQ(day.size(), 2u);
  EXPECT_EQ(day.at("alice"), summed);
  EXPECT_EQ(day.at("bob"), tokens(40, 4));
  const auto next_day = store.totals_per_key(feb_29_2024 + 86400, feb_29_2024 + 2 * 86400);
  ASSERT_EQ(next_day.size(), 1u);
  EXPECT_EQ(next_day.at("alice"), tokens(20, 2));
}

TEST(LedgerStoreTest, FlushesAddToTheStoredRowsAndSurviveAReopen) {
  test::temp_dir dir;
  const auto file = dir.path() / "ledger.db";
  {
    ledger_store store(file);
    store.add({row("alice", "m", "u1", feb_29_2024, tokens(100, 10))});
    store.add({row("alice", "m", "u1", feb_29_2024, tokens(1, 2)),
               row("bob", "m", "u1", feb_29_2024, tokens(5, 5))});
  }
  ledger_store reopened(file);
  const auto rows = reopened.query({.by = group_by::hour});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].totals, tokens(101, 12, 2));
  EXPECT_EQ(rows[1].totals, tokens(5, 5));
  reopened.add({row("alice", "m", "u1", feb_29_2024, tokens(1000, 0))});
  EXPECT_EQ(reopened.query({.key = "alice"})[0].totals, tokens(1101, 12, 3));
  // WAL: a journal mode the file keeps, so another reader (tether usage) does not block it.
  EXPECT_EQ(raw_sql(file, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw_sql(file, "SELECT version FROM tether_schema"), "1");
}

TEST(LedgerStoreTest, AFlushWhileAnotherProgramHoldsTheWriteLockFailsClearlyAndTheNextOneWorks) {
  test::temp_dir dir;
  const auto file = dir.path() / "ledger.db";
  ledger_store store(file);
  store.add({row("alice", "m", "u1", feb_29_2024, tokens(1, 1))});
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(file.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  try {
    store.add({row("alice", "m", "u1", feb_29_2024, tokens(100, 100))});
    ADD_FAILURE() << "a flush went through another program's write lock";
  } catch (const store_error& e) {
    const std::string error = e.what();
    EXPECT_NE(error.find(file.string()), std::string::npos) << error;
    EXPECT_NE(error.find("locked"), std::string::npos) << error;
  }
  ASSERT_EQ(sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  // The refused batch is not there; the next one is added to what was.
  store.add({row("alice", "m", "u1", feb_29_2024, tokens(2, 2))});
  EXPECT_EQ(store.query({})[0].totals, tokens(3, 3, 2));
}

// A batch of 2000 rows, each adding 1 request and `batch` prompt tokens to its row; after n whole
// batches every row holds n requests and n(n+1)/2 prompt tokens.
std::vector<aggregate_row> crash_batch(std::uint64_t batch) {
  std::vector<aggregate_row> rows;
  for (int i = 0; i < 2000; ++i) {
    rows.push_back(row("key-" + std::to_string(i), "m", "u1", feb_29_2024, tokens(batch, 0)));
  }
  return rows;
}

TEST(LedgerStoreTest, AProcessKilledMidFlushLeavesAPrefixOfWholeBatches) {
  // Where in the next batch's add the kill lands varies from round to round: a batch takes a
  // few milliseconds, so the delays after its start spread over it and past it.
  const std::pair<std::uint64_t, std::chrono::microseconds> rounds[] = {
      {3, 0us}, {7, 200us}, {11, 700us}, {17, 1500us}, {23, 3000us}, {29, 6000us}};
  for (const auto& [kill_after, delay] : rounds) {
    test::temp_dir dir;
    const auto file = dir.path() / "ledger.db";
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      try {
        ledger_store store(file);
        for (std::uint64_t b = 1; b <= 100000; ++b) {
          const auto batch = crash_batch(b);
          write_text(fds[1], ">");  // batch b is being added
          store.add(batch);
          write_text(fds[1], "+");  // batch b is committed
        }
      } catch (...) {
        ::_exit(4);
      }
      ::_exit(0);
    }
    ::close(fds[1]);
    std::uint64_t acknowledged = 0;
    bool killed = false;
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    char buffer[256];
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{fds[0], POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      const auto n = ::read(fds[0], buffer, sizeof buffer);
      if (n <= 0) break;  // the child is gone
      for (const char c : std::string_view(buffer, static_cast<std::size_t>(n))) {
        if (c == '+') ++acknowledged;
        // The child has begun adding the batch after the kill_after-th: the kill lands inside
        // its add, a transaction that must then leave no trace.
        if (c == '>' && acknowledged >= kill_after && !killed) {
          std::this_thread::sleep_for(delay);
          ::kill(pid, SIGKILL);
          killed = true;
        }
      }
    }
    ::close(fds[0]);
    if (!killed) ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(killed) << "the child acknowledged only " << acknowledged << " batches";
    ASSERT_TRUE(WIFSIGNALED(status));

    ledger_store reopened(file);
    const auto rows = reopened.query({.by = group_by::hour});
    ASSERT_EQ(rows.size(), 2000u);
    const auto n = rows[0].totals.requests;
    std::cout << "[ figures  ] killed after " << acknowledged << " acknowledged batches and "
              << delay.count() << " us: " << n << " stored\n";
    // Every acknowledged batch is there, and at most the one the kill interrupted after it.
    EXPECT_GE(n, acknowledged);
    EXPECT_LE(n, acknowledged + 1);
    for (const auto& r : rows) {
      ASSERT_EQ(r.totals.requests, n) << r.key << " after " << acknowledged << " batches";
      ASSERT_EQ(r.totals.prompt, n * (n + 1) / 2) << r.key;
    }
  }
}

TEST(LedgerStoreTest, AFileThatIsNotADatabaseIsAClearErrorAndLeftAlone) {
  test::temp_dir dir;
  const std::string text(8192, 'x');
  const auto file = dir.write_file("ledger.db", "these are someone's notes\n" + text);
  const auto error = open_error(file);
  EXPECT_NE(error.find(file.string()), std::string::npos) << error;
  EXPECT_NE(error.find("not a database"), std::string::npos) << error;
  EXPECT_EQ(read_all(file), "these are someone's notes\n" + text);
}

TEST(LedgerStoreTest, ACorruptFileIsAClearErrorAtOpen) {
  test::temp_dir dir;
  const auto file = dir.path() / "ledger.db";
  {
    ledger_store store(file);
    std::vector<aggregate_row> rows;
    for (int i = 0; i < 20000; ++i) {
      rows.push_back(row("key-" + std::to_string(i), "m", "u1", feb_29_2024, tokens(1, 1)));
    }
    store.add(rows);
  }
  const auto size = fs::file_size(file);
  ASSERT_GT(size, 40u * 4096);
  // Garbage over the table's pages in the middle of the file, the header left intact.
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size / 2));
    const std::string garbage(4 * 4096, '\xab');
    f.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  const auto error = open_error(file);
  EXPECT_NE(error.find(file.string()), std::string::npos) << error;
  EXPECT_NE(error.find("the file is corrupt ("), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

TEST(LedgerStoreTest, AFileWrittenByANewerTetherIsRefusedAndLeftAsItWas) {
  test::temp_dir dir;
  const auto file = dir.path() / "ledger.db";
  {
    ledger_store store(file);
    store.add({row("alice", "m", "u1", feb_29_2024, tokens(7, 7))});
  }
  raw_sql(file, "UPDATE tether_schema SET version = 2; CREATE TABLE from_the_future (x);");
  const auto error = open_error(file);
  EXPECT_NE(error.find(file.string()), std::string::npos) << error;
  EXPECT_NE(error.find("newer tether (schema version 2, this one knows up to 1)"),
            std::string::npos)
      << error;
  EXPECT_EQ(raw_sql(file, "SELECT version FROM tether_schema"), "2");
  EXPECT_EQ(raw_sql(file, "SELECT prompt_tokens FROM usage_hourly"), "7");
}

TEST(LedgerStoreTest, AFileAtAnOlderSchemaVersionIsUpgraded) {
  test::temp_dir dir;
  const auto file = dir.path() / "ledger.db";
  // Version 0: the version table and nothing else.
  raw_sql(file,
          "CREATE TABLE tether_schema (version INTEGER NOT NULL);"
          "INSERT INTO tether_schema VALUES (0);");
  {
    ledger_store store(file);
    store.add({row("alice", "m", "u1", feb_29_2024, tokens(3, 4))});
  }
  EXPECT_EQ(raw_sql(file, "SELECT version FROM tether_schema"), "1");
  EXPECT_EQ(raw_sql(file, "SELECT COUNT(*) FROM tether_schema"), "1");
  ledger_store reopened(file);
  EXPECT_EQ(reopened.query({})[0].totals, tokens(3, 4));
}

TEST(LedgerStoreTest, ADatabaseOfAnotherProgramIsRefusedAndLeftAlone) {
  test::temp_dir dir;
  const auto file = dir.path() / "app.db";
  raw_sql(file, "CREATE TABLE customers (name TEXT); INSERT INTO customers VALUES ('ada');");
  const auto error = open_error(file);
  EXPECT_NE(error.find(file.string()), std::string::npos) << error;
  EXPECT_NE(error.find("not a tether ledger"), std::string::npos) << error;
  EXPECT_EQ(raw_sql(file, "SELECT name FROM sqlite_schema WHERE type = 'table'"), "customers");
}

// Root writes any file whatever its mode: the checks run as `nobody` in a child.
int open_as_nobody(int fd, const fs::path& file) {
  if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return 5;
  try {
    ledger_store store(file);
  } catch (const store_error& e) {
    write_text(fd, e.what());
    return 0;
  }
  return 1;
}

TEST(LedgerStoreTest, AReadOnlyFileOrDirectoryIsAClearErrorNotASilentReadOnlyLedger) {
  test::temp_dir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  const auto file = dir.path() / "ledger.db";
  {
    ledger_store store(file);
    store.add({row("alice", "m", "u1", feb_29_2024, tokens(7, 7))});
  }
  ASSERT_EQ(::chmod(file.c_str(), 0444), 0);
  auto r = run_child([&](int fd) { return open_as_nobody(fd, file); });
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(file.string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("read-only"), std::string::npos) << r.output;

  // A writable file in a directory where the WAL's files cannot be made.
  ASSERT_EQ(::chmod(file.c_str(), 0666), 0);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0555), 0);
  r = run_child([&](int fd) { return open_as_nobody(fd, file); });
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(file.string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("its directory must be writable: WAL keeps files next to it"),
            std::string::npos)
      << r.output;

  // No file, and a directory where it cannot be made.
  const auto missing = dir.path() / "new.db";
  r = run_child([&](int fd) { return open_as_nobody(fd, missing); });
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(missing.string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cannot open"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(missing));
  ASSERT_EQ(::chmod(dir.path().c_str(), 0700), 0);
  // What was stored is still there.
  EXPECT_EQ(ledger_store(file).query({})[0].totals, tokens(7, 7));
}

// The message of the store_error a read-only open of `p` throws.
std::string read_only_error(const fs::path& p) {
  try {
    ledger_store store(p, open_mode::read_only);
  } catch (const store_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "opened " << p << " read-only";
  return {};
}

// Each file in the directory with its size and last write: what a read may not change.
std::map<std::string, std::pair<std::uintmax_t, fs::file_time_type>> files_in(const fs::path& d) {
  std::map<std::string, std::pair<std::uintmax_t, fs::file_time_type>> out;
  for (const auto& e : fs::directory_iterator(d)) {
    out[e.path().filename().string()] = {e.file_size(), e.last_write_time()};
  }
  return out;
}

TEST(LedgerStoreTest, AReadOnlyOpenReadsTheFileAndMakesOrChangesNoFile) {
  test::temp_dir dir;
  const auto file = dir.path() / "ledger.db";
  {
    ledger_store store(file);
    store.add({row("alice", "m", "u1", feb_29_2024, tokens(3, 4)),
               row("bob", "n", "u2", feb_29_2024 + 3600, tokens(5, 6))});
  }
  const auto before = files_in(dir.path());
  ASSERT_EQ(before.size(), 1u);  // the gateway's close removed the WAL's files
  const auto bytes = read_all(file);
  {
    const ledger_store reader(file, open_mode::read_only);
    const auto rows = reader.query({.by = group_by::hour});
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0], (usage_row{feb_29_2024, "alice", "m", tokens(3, 4)}));
    EXPECT_EQ(rows[1], (usage_row{feb_29_2024 + 3600, "bob", "n", tokens(5, 6)}));
    EXPECT_EQ(reader.totals_per_key(feb_29_2024, feb_29_2024 + 86400).size(), 2u);
    // Nothing next to it while it is open either (a -wal or -shm would be SQLite's, left behind).
    EXPECT_EQ(files_in(dir.path()), before);
  }
  EXPECT_EQ(files_in(dir.path()), before);
  EXPECT_EQ(read_all(file), bytes);

  ledger_store reader(file, open_mode::read_only);
  try {
    reader.add({row("alice", "m", "u1", feb_29_2024, tokens(1, 1))});
    ADD_FAILURE() << "a read-only store added a batch";
  } catch (const store_error& e) {
    EXPECT_NE(std::string(e.what()).find("opened read-only"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_all(file), bytes);
}

TEST(LedgerStoreTest, AReadOnlyOpenOfAMissingFileSaysSoAndCreatesNothing) {
  test::temp_dir dir;
  const auto file = dir.path() / "ledger.db";
  EXPECT_EQ(read_only_error(file), "no ledger at " + file.string());
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(LedgerStoreTest, AReadOnlyOpenRefusesWhatItCannotReadAndLeavesItAsItWas) {
  test::temp_dir dir;
  // Version 0, as an older tether could leave it: no usage table yet.
  const auto old_file = dir.path() / "old.db";
  raw_sql(old_file,
          "CREATE TABLE tether_schema (version INTEGER NOT NULL);"
          "INSERT INTO tether_schema VALUES (0);");
  auto error = read_only_error(old_file);
  EXPECT_EQ(error, "ledger " + old_file.string() +
                       ": at schema version 0, older than this tether reads (1): start tether "
                       "once with this file to upgrade it");
  EXPECT_EQ(raw_sql(old_file, "SELECT version FROM tether_schema"), "0");
  EXPECT_EQ(raw_sql(old_file, "SELECT COUNT(*) FROM sqlite_schema"), "1");
  // An empty file is an empty database: nothing a gateway wrote yet.
  const auto empty_file = dir.write_file("empty.db", "");
  error = read_only_error(empty_file);
  EXPECT_NE(error.find("at schema version 0"), std::string::npos) << error;
  EXPECT_EQ(fs::file_size(empty_file), 0u);

  const auto new_file = dir.path() / "new.db";
  {
    ledger_store store(new_file);
    store.add({row("alice", "m", "u1", feb_29_2024, tokens(7, 7))});
  }
  raw_sql(new_file, "UPDATE tether_schema SET version = 2");
  error = read_only_error(new_file);
  EXPECT_NE(error.find(new_file.string()), std::string::npos) << error;
  EXPECT_NE(error.find("newer tether (schema version 2, this one knows up to 1)"),
            std::string::npos)
      << error;

  const auto notes =
      dir.write_file("notes.db", "these are someone's notes\n" + std::string(8192, 'x'));
  error = read_only_error(notes);
  EXPECT_NE(error.find(notes.string()), std::string::npos) << error;
  EXPECT_NE(error.find("not a database"), std::string::npos) << error;

  const auto app = dir.path() / "app.db";
  raw_sql(app, "CREATE TABLE customers (name TEXT)");
  error = read_only_error(app);
  EXPECT_NE(error.find("not a tether ledger"), std::string::npos) << error;
  EXPECT_EQ(files_in(dir.path()).size(), 5u);  // no -wal or -shm beside any of them
}

TEST(LedgerStoreTest, AReaderSeesEachBatchAGatewayCommitsWhileItWrites) {
  test::temp_dir dir;
  const auto file = dir.path() / "ledger.db";
  ledger_store gateway(file);
  gateway.add({row("alice", "m", "u1", feb_29_2024, tokens(1, 0))});
  const ledger_store reader(file, open_mode::read_only);
  for (std::uint64_t b = 2; b <= 50; ++b) {
    // Each batch touches two rows: a reader sees both changed or neither.
    gateway.add({row("alice", "m", "u1", feb_29_2024, tokens(1, 0)),
                 row("bob", "m", "u1", feb_29_2024 + 3600, tokens(0, 1))});
    const auto rows = reader.query({.by = group_by::hour});
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].totals, tokens(b, 0, b)) << "after batch " << b;
    EXPECT_EQ(rows[1].totals, tokens(0, b - 1, b - 1)) << "after batch " << b;
  }
  // The reader left the gateway's writing alone: nothing locked, nothing refused.
  gateway.add({row("carol", "m", "u1", feb_29_2024, tokens(9, 9))});
  EXPECT_EQ(reader.query({.key = "carol"}).at(0).totals, tokens(9, 9));
}

TEST(LedgerStoreTest, ReadersInAnotherProcessSeeWholeBatchesWhileAGatewayWritesOnAndIsNotHeldUp) {
  test::temp_dir dir;
  const auto file = dir.path() / "ledger.db";
  { ledger_store(file).add({row("alice", "m", "u1", feb_29_2024, tokens(1, 0))}); }
  // The gateway: another process adding batches as fast as it can, each adding 1 to two rows,
  // until told to stop (its pipe closed); it reports how many it added.
  int stop[2];
  ASSERT_EQ(::pipe(stop), 0);
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(stop[1]);
    ::close(report[0]);
    int code = 0;
    try {
      ledger_store gateway(file);
      std::uint64_t added = 0;
      for (;;) {
        pollfd p{stop[0], POLLIN, 0};
        if (::poll(&p, 1, 0) != 0) break;
        gateway.add({row("alice", "m", "u1", feb_29_2024, tokens(1, 0)),
                     row("bob", "m", "u1", feb_29_2024 + 3600, tokens(1, 0))});
        if (++added == 1) write_text(report[1], "started\n");
      }
      write_text(report[1], std::to_string(added) + "\n");
    } catch (...) {
      code = 4;
    }
    ::_exit(code);
  }
  ::close(stop[0]);
  ::close(report[1]);
  std::string reported;
  const auto read_line = [&] {
    char buffer[64];
    pollfd p{report[0], POLLIN, 0};
    while (reported.find('\n') == std::string::npos && ::poll(&p, 1, 30000) > 0) {
      const auto n = ::read(report[0], buffer, sizeof buffer);
      if (n <= 0) break;
      reported.append(buffer, static_cast<std::size_t>(n));
    }
    const auto end = reported.find('\n');
    auto line = reported.substr(0, end);
    reported.erase(0, end == std::string::npos ? reported.size() : end + 1);
    return line;
  };
  ASSERT_EQ(read_line(), "started");
  // Readers opened and closed while the batches land, as `tether usage` runs: each sees whole
  // batches (bob's row trails alice's by the one batch before the writer started) and never fewer
  // than the reader before it.
  std::uint64_t last = 0;
  for (int i = 0; i < 40; ++i) {
    const ledger_store reader(file, open_mode::read_only);
    const auto rows = reader.query({.by = group_by::hour});
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].totals.requests, rows[1].totals.requests + 1) << "read " << i;
    EXPECT_GE(rows[1].totals.requests, last) << "read " << i;
    last = rows[1].totals.requests;
  }
  ::close(stop[1]);
  const auto added = read_line();
  ::close(report[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  std::cout << "[ figures  ] the writer added " << added
            << " batches during 40 reads; the last read saw " << last << "\n";
  EXPECT_GT(last, 0u);
  // Every batch the writer made is stored: no reader held one up or lost it.
  const auto rows = ledger_store(file, open_mode::read_only).query({.by = group_by::hour});
  EXPECT_EQ(std::to_string(rows.at(1).totals.requests), added);
  EXPECT_EQ(rows.at(0).totals.requests, rows.at(1).totals.requests + 1);
}

TEST(LedgerStoreTest, AReaderSeesTheBatchesAKilledGatewayLeftInItsWal) {
  test::temp_dir dir;
  const auto file = dir.path() / "ledger.db";
  auto r = run_child([&](int fd) {
    ledger_store store(file);
    store.add({row("alice", "m", "u1", feb_29_2024, tokens(11, 22))});
    write_text(fd, "added");
    ::kill(::getpid(), SIGKILL);
    return 0;
  });
  ASSERT_EQ(r.output, "added");
  // Committed, and still only in the WAL: no checkpoint happened.
  ASSERT_TRUE(fs::exists(file.string() + "-wal"));
  ASSERT_GT(fs::file_size(file.string() + "-wal"), 0u);
  const ledger_store reader(file, open_mode::read_only);
  const auto rows = reader.query({});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].totals, tokens(11, 22));
}

TEST(LedgerStoreTest, AReaderOpenedBeforeAGatewayStartsReadsTheFileAsItWas) {
  test::temp_dir dir;
  const auto file = dir.path() / "ledger.db";
  { ledger_store(file).add({row("alice", "m", "u1", feb_29_2024, tokens(1, 1))}); }
  const ledger_store reader(file, open_mode::read_only);
  ledger_store gateway(file);
  gateway.add({row("alice", "m", "u1", feb_29_2024, tokens(5, 5))});
  // The gateway's batch is in its WAL; the file the reader reads is unchanged until a
  // checkpoint, so the reader answers what was stored when it opened, whole.
  EXPECT_EQ(reader.query({}).at(0).totals, tokens(1, 1));
  EXPECT_EQ(ledger_store(file, open_mode::read_only).query({}).at(0).totals, tokens(6, 6, 2));
}

TEST(LedgerStoreTest, AReadOnlyOpenTakesAnyPathAndAFileItCannotWrite) {
  test::temp_dir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  // Characters an SQLite URI gives a meaning to.
  const auto file = dir.path() / "a ?#%&b=c.db";
  { ledger_store(file).add({row("alice", "m", "u1", feb_29_2024, tokens(2, 3))}); }
  EXPECT_EQ(ledger_store(file, open_mode::read_only).query({}).at(0).totals, tokens(2, 3));
  // A user who may read the ledger and write nothing there: the file and directory read-only.
  ASSERT_EQ(::chmod(file.c_str(), 0444), 0);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0555), 0);
  auto r = run_child([&](int fd) {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return 5;
    try {
      const ledger_store reader(file, open_mode::read_only);
      write_text(fd, std::to_string(reader.query({}).at(0).totals.completion));
    } catch (const store_error& e) {
      write_text(fd, e.what());
      return 1;
    }
    return 0;
  });
  ASSERT_EQ(::chmod(dir.path().c_str(), 0700), 0);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "3");
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

TEST(LedgerStoreTest, ALargeBatchIsOneTransactionAndItsSumsAreExact) {
  for (const int n : {1000, 100000}) {
    test::temp_dir dir;
    const auto file = dir.path() / "ledger.db";
    // n distinct rows: 1000 keys × 10 models × n / 10000 hours.
    std::vector<aggregate_row> rows;
    rows.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      rows.push_back(row("key-" + std::to_string(i % 1000),
                         "model-" + std::to_string(i / 1000 % 10), "u1",
                         feb_29_2024 + 3600 * (i / 10000),
                         usage_totals{.requests = 1,
                                      .prompt = static_cast<std::uint64_t>(i),
                                      .completion = 1,
                                      .spend_nanousd = 5}));
    }
    {
      ledger_store store(file);
      for (int flush = 0; flush < 2; ++flush) {
        const auto start = std::chrono::steady_clock::now();
        store.add(rows);
        std::cout << "[ figures  ] " << n << " rows " << (flush == 0 ? "inserted" : "added to")
                  << " in " << ms_since(start) << " ms\n";
      }
    }
    const auto start = std::chrono::steady_clock::now();
    ledger_store store(file);
    std::cout << "[ figures  ] " << n << " rows: file " << fs::file_size(file)
              << " bytes after close; reopened (quick_check included) in " << ms_since(start)
              << " ms\n";
    EXPECT_EQ(store.query({.by = group_by::hour}).size(), static_cast<std::size_t>(n));
    usage_totals all;
    for (const auto& [key, t] : store.totals_per_key(feb_29_2024, feb_29_2024 + 86400 * 30)) {
      all.add(t);
    }
    const auto un = static_cast<std::uint64_t>(n);
    EXPECT_EQ(all, (usage_totals{.requests = 2 * un,
                                 .prompt = un * (un - 1),
                                 .completion = 2 * un,
                                 .spend_nanousd = 10 * un}));
  }
}

}  // namespace
}  // namespace tether::ledger
