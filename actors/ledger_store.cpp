#include "actors/ledger_store.hpp"

#include <sqlite3.h>

#include <optional>
#include <string_view>
#include <utility>

namespace tether::ledger {

namespace {

// Each step upgrades the schema from its index to the next version, inside the transaction
// that records the new version: a file is at one version or the next, never between.
constexpr const char* migrations[] = {
    // 0 → 1: the hourly aggregates. WITHOUT ROWID: the primary key is the row's identity and
    // the upsert's target, so the table is its own index.
    "CREATE TABLE usage_hourly ("
    "  key TEXT NOT NULL, model TEXT NOT NULL, upstream TEXT NOT NULL, hour INTEGER NOT NULL,"
    "  requests INTEGER NOT NULL, estimated_requests INTEGER NOT NULL,"
    "  prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,"
    "  cached_tokens INTEGER NOT NULL, waste_tokens INTEGER NOT NULL,"
    "  spend_nanousd INTEGER NOT NULL,"
    "  PRIMARY KEY (key, model, upstream, hour)) WITHOUT ROWID;"
    "CREATE INDEX usage_hourly_by_hour ON usage_hourly (hour);",
};
static_assert(std::size(migrations) == ledger_store::schema_version);

constexpr const char* upsert_sql =
    "INSERT INTO usage_hourly (key, model, upstream, hour, requests, estimated_requests,"
    " prompt_tokens, completion_tokens, cached_tokens, waste_tokens, spend_nanousd)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
    " ON CONFLICT (key, model, upstream, hour) DO UPDATE SET"
    " requests = requests + excluded.requests,"
    " estimated_requests = estimated_requests + excluded.estimated_requests,"
    " prompt_tokens = prompt_tokens + excluded.prompt_tokens,"
    " completion_tokens = completion_tokens + excluded.completion_tokens,"
    " cached_tokens = cached_tokens + excluded.cached_tokens,"
    " waste_tokens = waste_tokens + excluded.waste_tokens,"
    " spend_nanousd = spend_nanousd + excluded.spend_nanousd";

constexpr const char* sums_sql =
    "SUM(requests), SUM(estimated_requests), SUM(prompt_tokens), SUM(completion_tokens),"
    " SUM(cached_tokens), SUM(waste_tokens), SUM(spend_nanousd)";

// SQLite's integers are signed 64-bit; counts past 2^63 are beyond any ledger's life.
sqlite3_int64 to_db(std::uint64_t v) {
  return static_cast<sqlite3_int64>(v);
}
std::uint64_t from_db(sqlite3_int64 v) {
  return v < 0 ? 0 : static_cast<std::uint64_t>(v);
}

}  // namespace

struct ledger_store::impl {
  std::filesystem::path path;
  open_mode mode = open_mode::read_write;
  sqlite3* db = nullptr;
  sqlite3_stmt* upsert = nullptr;

  ~impl() {
    sqlite3_finalize(upsert);
    // The last connection's close checkpoints the WAL into the file and removes it.
    if (db != nullptr) sqlite3_close_v2(db);
  }

  [[noreturn]] void fail(std::string_view what, int rc) const {
    std::string message = "ledger " + path.string() + ": " + std::string(what) + ": ";
    message += db != nullptr && sqlite3_errcode(db) == rc ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    // A database in WAL mode is read through files next to it: a read-only directory makes even
    // a read fail with SQLite's "attempt to write a readonly database".
    if ((rc & 0xff) == SQLITE_READONLY) {
      message += " (the file and its directory must be writable: WAL keeps files next to it)";
    }
    throw store_error(message);
  }

  void exec(const char* sql, std::string_view what) {
    const int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) fail(what, rc);
  }

  // A statement finalized however its scope is left.
  struct statement {
    sqlite3_stmt* s = nullptr;
    ~statement() { sqlite3_finalize(s); }
  };

  void prepare(statement& st, const std::string& sql, std::string_view what) const {
    const int rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &st.s, nullptr);
    if (rc != SQLITE_OK) fail(what, rc);
  }

  // The single text or integer a pragma or query answers; empty when it answers no row.
  std::string single_text(const char* sql, std::string_view what) const {
    statement st;
    prepare(st, sql, what);
    const int rc = sqlite3_step(st.s);
    if (rc == SQLITE_DONE) return {};
    if (rc != SQLITE_ROW) fail(what, rc);
    const auto* text = sqlite3_column_text(st.s, 0);
    return text == nullptr ? std::string{} : std::string(reinterpret_cast<const char*>(text));
  }

  [[noreturn]] void refuse(const std::string& why) const {
    throw store_error("ledger " + path.string() + ": " + why);
  }

  // The schema version the file records; none for an empty database. A database with tables and
  // no version is not a ledger.
  std::optional<int> stored_version() const {
    const bool versioned = !single_text(
                                "SELECT name FROM sqlite_schema WHERE type = 'table'"
                                " AND name = 'tether_schema'",
                                "cannot read its schema")
                                .empty();
    if (versioned) {
      const auto v = single_text("SELECT CAST(MAX(version) AS INTEGER) FROM tether_schema",
                                 "cannot read its version");
      return v.empty() ? 0 : std::stoi(v);
    }
    if (!single_text("SELECT name FROM sqlite_schema LIMIT 1", "cannot read its schema").empty()) {
      refuse("the database is not a tether ledger (it has tables and no tether_schema)");
    }
    return std::nullopt;
  }

  void refuse_newer(int version) const {
    if (version > schema_version) {
      refuse("written by a newer tether (schema version " + std::to_string(version) +
             ", this one knows up to " + std::to_string(schema_version) + ")");
    }
  }

  void open() {
    if (mode == open_mode::read_only) return open_read_only();
    const int rc = sqlite3_open_v2(
        path.c_str(), &db,
        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE,
        nullptr);
    if (rc != SQLITE_OK) fail("cannot open", rc);
    // SQLite opens a write-protected file read-only without a word; the ledger must write.
    if (sqlite3_db_readonly(db, "main") == 1) {
      throw store_error("ledger " + path.string() + ": the file is read-only");
    }
    // Another process holding the write lock (a second tether on the same file) is waited for
    // briefly, then an error rather than a stall of the ledger.
    sqlite3_busy_timeout(db, 2000);
    // The first read of the file: a file that is not a database fails here.
    single_text("SELECT COUNT(*) FROM sqlite_schema", "cannot read it");
    if (single_text("PRAGMA journal_mode = WAL", "cannot switch it to WAL mode") != "wal") {
      throw store_error("ledger " + path.string() + ": cannot switch it to WAL mode");
    }
    // In WAL mode, NORMAL syncs at checkpoints only: a killed process loses nothing committed
    // (the WAL is in the file system); a power cut may lose the last transactions, whole.
    exec("PRAGMA synchronous = NORMAL", "cannot set synchronous");
    auto check = single_text("PRAGMA quick_check", "cannot check it");
    if (check != "ok") {
      // Its first finding, on one line: "*** in database main ***\nPage 23: …".
      constexpr std::string_view header = "*** in database main ***\n";
      if (check.starts_with(header)) check.erase(0, header.size());
      check = check.substr(0, check.find('\n'));
      throw store_error("ledger " + path.string() + ": the file is corrupt (" + check + ")");
    }
    migrate();
    const int prc =
        sqlite3_prepare_v3(db, upsert_sql, -1, SQLITE_PREPARE_PERSISTENT, &upsert, nullptr);
    if (prc != SQLITE_OK) fail("cannot prepare the upsert", prc);
  }

  void migrate() {
    // IMMEDIATE takes the write lock now: a file or directory that cannot be written fails at
    // start-up, not at the first flush.
    exec("BEGIN IMMEDIATE", "cannot write it");
    try {
      const auto stored = stored_version();
      if (!stored) {
        exec("CREATE TABLE tether_schema (version INTEGER NOT NULL)", "cannot create its schema");
        exec("INSERT INTO tether_schema (version) VALUES (0)", "cannot create its schema");
      }
      const int version = stored.value_or(0);
      refuse_newer(version);
      for (int v = version; v < schema_version; ++v) {
        exec(migrations[v], "cannot upgrade its schema");
      }
      if (version < schema_version) {
        exec(("UPDATE tether_schema SET version = " + std::to_string(schema_version)).c_str(),
             "cannot upgrade its schema");
      }
      exec("COMMIT", "cannot write it");
    } catch (...) {
      sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }

  // `tether usage`: reads what is committed, whether or not a gateway has the file open, and
  // never makes or changes a file. SQLite reads a WAL database through the -wal and -shm files
  // next to it, creating them when missing, and a read-only connection cannot remove them when
  // it closes. While a gateway has the file open they exist (and after a crash, the -wal holds
  // committed batches): they are used. Without a -wal, the file alone is the whole database and
  // is read as immutable, which touches nothing else; a gateway starting meanwhile writes to a
  // -wal of its own and changes the file only at a checkpoint, a thousand pages of flushes later.
  void open_read_only() {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) throw store_error("no ledger at " + path.string());
    const bool live = std::filesystem::exists(path.string() + "-wal", ec);
    const int rc = sqlite3_open_v2(
        read_only_uri(live).c_str(), &db,
        SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE,
        nullptr);
    if (rc != SQLITE_OK) fail("cannot open", rc);
    sqlite3_busy_timeout(db, 2000);
    // The first read of the file: a file that is not a database fails here. The read-write open's
    // quick_check is left out: it reads every page, and a corrupt page the query reaches is an
    // error naming the file all the same.
    single_text("SELECT COUNT(*) FROM sqlite_schema", "cannot read it");
    const int version = stored_version().value_or(0);
    refuse_newer(version);
    if (version < oldest_readable_version) {
      refuse("at schema version " + std::to_string(version) + ", older than this tether reads (" +
             std::to_string(oldest_readable_version) +
             "): start tether once with this file to upgrade it");
    }
  }

  // The file as an SQLite URI (file:///abs/path?mode=ro), every byte of the path but the plainest
  // percent-encoded so that none is read as the URI's own ('?', '#', '%').
  std::string read_only_uri(bool live) const {
    const auto absolute = std::filesystem::absolute(path).string();
    std::string uri = "file://";
    constexpr char hex[] = "0123456789ABCDEF";
    for (const char c : absolute) {
      const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
      if (plain || c == '/' || c == '.' || c == '_' || c == '-' || c == '~') {
        uri += c;
      } else {
        uri += '%';
        const auto u = static_cast<unsigned char>(c);
        uri += hex[u >> 4];
        uri += hex[u & 0xf];
      }
    }
    uri += live ? "?mode=ro" : "?mode=ro&immutable=1";
    return uri;
  }

  static usage_totals totals_at(sqlite3_stmt* s, int first) {
    usage_totals t;
    t.requests = from_db(sqlite3_column_int64(s, first));
    t.estimated_requests = from_db(sqlite3_column_int64(s, first + 1));
    t.prompt = from_db(sqlite3_column_int64(s, first + 2));
    t.completion = from_db(sqlite3_column_int64(s, first + 3));
    t.cached = from_db(sqlite3_column_int64(s, first + 4));
    t.waste = from_db(sqlite3_column_int64(s, first + 5));
    t.spend_nanousd = from_db(sqlite3_column_int64(s, first + 6));
    return t;
  }
};

ledger_store::ledger_store(const std::filesystem::path& path, open_mode mode)
    : impl_(std::make_unique<impl>()) {
  impl_->path = path;
  impl_->mode = mode;
  impl_->open();
}

ledger_store::~ledger_store() = default;
ledger_store::ledger_store(ledger_store&&) noexcept = default;
ledger_store& ledger_store::operator=(ledger_store&&) noexcept = default;

const std::filesystem::path& ledger_store::path() const {
  return impl_->path;
}

void ledger_store::add(const std::vector<aggregate_row>& rows) {
  auto& s = *impl_;
  if (s.mode == open_mode::read_only) s.refuse("opened read-only: cannot add a batch");
  if (rows.empty()) return;
  s.exec("BEGIN IMMEDIATE", "cannot write it");
  try {
    for (const auto& row : rows) {
      sqlite3_bind_text(s.upsert, 1, row.key.key.data(), static_cast<int>(row.key.key.size()),
                        SQLITE_STATIC);
      sqlite3_bind_text(s.upsert, 2, row.key.model.data(), static_cast<int>(row.key.model.size()),
                        SQLITE_STATIC);
      sqlite3_bind_text(s.upsert, 3, row.key.upstream.data(),
                        static_cast<int>(row.key.upstream.size()), SQLITE_STATIC);
      sqlite3_bind_int64(s.upsert, 4, row.key.hour);
      const auto& t = row.totals;
      sqlite3_bind_int64(s.upsert, 5, to_db(t.requests));
      sqlite3_bind_int64(s.upsert, 6, to_db(t.estimated_requests));
      sqlite3_bind_int64(s.upsert, 7, to_db(t.prompt));
      sqlite3_bind_int64(s.upsert, 8, to_db(t.completion));
      sqlite3_bind_int64(s.upsert, 9, to_db(t.cached));
      sqlite3_bind_int64(s.upsert, 10, to_db(t.waste));
      sqlite3_bind_int64(s.upsert, 11, to_db(t.spend_nanousd));
      const int rc = sqlite3_step(s.upsert);
      sqlite3_reset(s.upsert);
      if (rc != SQLITE_DONE) s.fail("cannot add a batch", rc);
    }
    sqlite3_clear_bindings(s.upsert);
    s.exec("COMMIT", "cannot commit a batch");
  } catch (...) {
    sqlite3_clear_bindings(s.upsert);
    sqlite3_exec(s.db, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::map<std::string, usage_totals> ledger_store::totals_per_key(std::int64_t from,
                                                                 std::int64_t to) const {
  std::string sql = "SELECT key, ";
  sql += sums_sql;
  sql += " FROM usage_hourly WHERE hour >= ?1 AND hour < ?2 GROUP BY key";
  impl::statement st;
  impl_->prepare(st, sql, "cannot read totals");
  sqlite3_bind_int64(st.s, 1, from);
  sqlite3_bind_int64(st.s, 2, to);
  std::map<std::string, usage_totals> out;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    const auto* key = reinterpret_cast<const char*>(sqlite3_column_text(st.s, 0));
    out.emplace(key == nullptr ? std::string{} : std::string(key), impl::totals_at(st.s, 1));
  }
  if (rc != SQLITE_DONE) impl_->fail("cannot read totals", rc);
  return out;
}

std::vector<usage_row> ledger_store::query(const usage_query& q) const {
  // The day an hour is in, by floor division (an hour before 1970 is in the day before it).
  const char* start = q.by == group_by::hour  ? "hour"
                      : q.by == group_by::day ? "hour - (((hour % 86400) + 86400) % 86400)"
                                              : "MIN(hour)";
  std::string sql = "SELECT ";
  sql += start;
  sql += " AS start, key, model, ";
  sql += sums_sql;
  sql += " FROM usage_hourly WHERE hour >= ?1 AND hour < ?2";
  if (q.key) sql += " AND key = ?3";
  if (q.model) sql += " AND model = ?4";
  sql += q.by == group_by::model ? " GROUP BY key, model" : " GROUP BY start, key, model";
  sql += " ORDER BY start, key, model";
  impl::statement st;
  impl_->prepare(st, sql, "cannot read usage");
  sqlite3_bind_int64(st.s, 1, q.from);
  sqlite3_bind_int64(st.s, 2, q.to);
  if (q.key)
    sqlite3_bind_text(st.s, 3, q.key->data(), static_cast<int>(q.key->size()), SQLITE_STATIC);
  if (q.model) {
    sqlite3_bind_text(st.s, 4, q.model->data(), static_cast<int>(q.model->size()), SQLITE_STATIC);
  }
  std::vector<usage_row> out;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    usage_row row;
    row.start = sqlite3_column_int64(st.s, 0);
    const auto* key = reinterpret_cast<const char*>(sqlite3_column_text(st.s, 1));
    const auto* model = reinterpret_cast<const char*>(sqlite3_column_text(st.s, 2));
    row.key = key == nullptr ? std::string{} : key;
    row.model = model == nullptr ? std::string{} : model;
    row.totals = impl::totals_at(st.s, 3);
    out.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) impl_->fail("cannot read usage", rc);
  return out;
}

}  // namespace tether::ledger
