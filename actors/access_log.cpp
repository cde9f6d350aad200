#include "actors/access_log.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <fmt/format.h>
#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "actors/policy/wire/json_text.hpp"
#include "net/io_runtime.hpp"

namespace tether {
namespace {

bool json_format = true;

// "2026-11-30T21:03:18.123Z" (iso_now_size characters) at `out`. The seconds' text changes once
// a second: each thread keeps it.
constexpr std::size_t iso_now_size = 24;
char* write_iso_now(char* out) {
  thread_local std::time_t cached_second = -1;
  thread_local char cached[80];  // 19 used; room for what snprintf could write
  const auto now = std::chrono::system_clock::now();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const std::time_t secs = ms / 1000;
  if (secs != cached_second) {
    std::tm tm{};
    gmtime_r(&secs, &tm);
    std::snprintf(cached, sizeof cached, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    cached_second = secs;
  }
  const auto milli = static_cast<int>(ms % 1000);
  out = std::copy(cached, cached + 19, out);
  *out++ = '.';
  *out++ = static_cast<char>('0' + milli / 100);
  *out++ = static_cast<char>('0' + milli / 10 % 10);
  *out++ = static_cast<char>('0' + milli % 10);
  *out++ = 'Z';
  return out;
}

std::string iso_now() {
  std::string out(iso_now_size, '\0');
  write_iso_now(out.data());
  return out;
}

void emit(spdlog::level::level_enum lvl, const std::string& message) {
  if (json_format) {
    boost::json::object o;
    o["ts"] = iso_now();
    o["level"] = spdlog::level::to_string_view(lvl).data();
    o["msg"] = message;
    spdlog::log(lvl, "{}", boost::json::serialize(o));
  } else {
    spdlog::log(lvl, "{} {} {}", iso_now(), spdlog::level::to_string_view(lvl).data(), message);
  }
}

}  // namespace

void setup_logging(const std::string& format, const std::string& level) {
  json_format = format != "text";
  // Logs go to stdout (contract); the line is formatted here, spdlog only writes it.
  auto logger = spdlog::stdout_logger_mt("tether");
  logger->set_pattern("%v");
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

void set_log_level(const std::string& level) {
  spdlog::default_logger()->set_level(spdlog::level::from_str(level));
}

namespace {

// A JSON object written field by field into one buffer: each field first makes sure of the room
// the most it can take needs (json_text.hpp's bounds), then writes by copying, not by a string
// append with its checks per piece: times as plain decimals with µs precision ("12.345"), which a
// reader of the log can take in at a glance (a generic serializer prints "1.2345E1").
class json_line {
 public:
  // `out` is reused: its capacity (per thread, write_access_log) usually holds the line already.
  explicit json_line(std::string& out) : out_(out) {
    out_.resize(std::max(out_.capacity(), initial_room));
    p_ = out_.data();
    *p_++ = '{';
    open_ = p_;
  }
  json_line& str(std::string_view key, std::string_view value) {
    p_ = write_json_string(key_(key, json_string_max(value.size())), value);
    return *this;
  }
  json_line& now(std::string_view key) {
    p_ = key_(key, iso_now_size + 2);
    *p_++ = '"';
    p_ = write_iso_now(p_);
    *p_++ = '"';
    return *this;
  }
  json_line& boolean(std::string_view key, bool v) { return raw(key, v ? "true" : "false"); }
  json_line& integer(std::string_view key, long long v) {
    p_ = write_integer(key_(key, json_number_max), v);
    return *this;
  }
  json_line& ms(std::string_view key, std::optional<double> v) {
    if (!v) return raw(key, "null");
    p_ = write_decimal_3(key_(key, json_number_max), *v);
    return *this;
  }
  json_line& raw(std::string_view key, std::string_view json) {
    p_ = std::copy(json.begin(), json.end(), key_(key, json.size()));
    return *this;
  }
  // Starts an array of objects under `key`, the line's last field; each element is begun by
  // object() and closed by end_object(), the array by end_array().
  json_line& array(std::string_view key) {
    p_ = key_(key, 1);
    *p_++ = '[';
    open_ = p_;
    return *this;
  }
  json_line& object() {
    room(2);
    if (p_ != open_) *p_++ = ',';
    *p_++ = '{';
    open_ = p_;
    return *this;
  }
  json_line& end_object() {
    room(1);
    *p_++ = '}';
    return *this;
  }
  json_line& end_array() {
    room(1);
    *p_++ = ']';
    return *this;
  }
  // The line, at the start of `out`; `out` keeps its size, so that the next line's resize to
  // its capacity writes nothing.
  std::string_view done() {
    room(1);
    *p_++ = '}';
    return {out_.data(), static_cast<std::size_t>(p_ - out_.data())};
  }

 private:
  static constexpr std::size_t initial_room = 1024;  // room for a usual line, at once

  // At least n more characters fit after p_ (growing keeps what is written, moves the marks).
  void room(std::size_t n) {
    const auto used = static_cast<std::size_t>(p_ - out_.data());
    if (out_.size() - used >= n) return;
    const auto open = static_cast<std::size_t>(open_ - out_.data());
    out_.resize(std::max(out_.size() * 2, used + n));
    p_ = out_.data() + used;
    open_ = out_.data() + open;
  }
  // The key and its punctuation, with room for a value of at most value_max characters after.
  char* key_(std::string_view key, std::size_t value_max) {
    room(key.size() + 4 + value_max);  // comma, quotes, colon
    if (p_ != open_) *p_++ = ',';
    *p_++ = '"';
    p_ = std::copy(key.begin(), key.end(), p_);
    *p_++ = '"';
    *p_++ = ':';
    return p_;
  }

  std::string& out_;
  char* p_ = nullptr;
  char* open_ = nullptr;  // just after the latest '{' or '[': no comma before its first field
};

std::string_view format_access_line_into(std::string& out, const access_record& r) {
  json_line l{out};
  l.now("ts")
      .str("type", "access")
      .str("request_id", r.request_id)
      .str("model", r.model)
      .str("path", r.path)
      .boolean("stream", r.stream)
      .str("outcome", to_string(r.result))
      .integer("status", r.status)
      .ms("deadline_ms", r.deadline_ms)
      .ms("queue_wait_ms", r.queue_wait_ms)
      .ms("ttfb_ms", r.ttfb_ms)
      .ms("duration_ms", r.duration_ms)
      .ms("caller_left_ms", r.caller_left_ms)
      .ms("work_ended_ms", r.work_ended_ms)
      .ms("cancel_latency_ms", r.cancel_latency_ms);
  if (r.client_retry) {
    l.integer("client_retry", *r.client_retry);
  } else {
    l.raw("client_retry", "null");
  }
  if (r.client_session) {
    l.str("client_session", *r.client_session);
  } else {
    l.raw("client_session", "null");
  }
  if (r.call_try) {
    l.integer("call_try", *r.call_try);
  } else {
    l.raw("call_try", "null");
  }
  if (r.key) {
    l.str("key", *r.key);
  } else {
    l.raw("key", "null");
  }
  for (const auto& [name, n] : {std::pair{"prompt_tokens", r.prompt_tokens},
                                std::pair{"completion_tokens", r.completion_tokens},
                                std::pair{"cached_tokens", r.cached_tokens}}) {
    if (n) {
      l.integer(name, static_cast<std::int64_t>(*n));
    } else {
      l.raw(name, "null");
    }
  }
  l.array("attempts");
  for (const auto& a : r.attempts) {
    l.object().str("upstream", a.upstream).str("model", a.model);
    if (a.status) {
      l.integer("status", *a.status);
    } else {
      l.raw("status", "null");
    }
    l.str("outcome",
          a.stale_connection ? std::string_view{"stale_connection"} : to_string(a.result))
        .ms("start_ms", a.start_ms)
        .ms("head_ms", a.head_ms)
        .ms("end_ms", a.end_ms)
        .ms("engine_released_ms", a.engine_released_ms)
        .end_object();
  }
  l.end_array();
  return l.done();
}

}  // namespace

namespace {

// An io thread's pending flush of stdout (each io context has one thread: io_executor.hpp).
thread_local bool flush_posted = false;

// The access lines of one round of an io thread's handlers leave in one write, by a flush posted
// behind them: under load one system call carries several requests' lines instead of one each.
// Off an io thread the line is flushed at once.
void flush_soon() {
  auto* io = net::io_runtime::current();
  if (io == nullptr) {
    std::fflush(stdout);
    return;
  }
  if (flush_posted) return;
  flush_posted = true;
  io->post(
      [](void*) {
        flush_posted = false;
        std::fflush(stdout);
      },
      nullptr);
}

}  // namespace

std::string format_access_line(const access_record& r) {
  std::string out;
  out.resize(format_access_line_into(out, r).size());
  return out;
}

void write_access_log(const access_record& r) {
  if (!spdlog::default_logger()->should_log(spdlog::level::info)) return;
  if (json_format) {
    // Each thread keeps its line's buffer: no allocation per line once it has grown.
    thread_local std::string line;
    // Written to stdout as the logger's sink writes its lines (one locked write of the whole
    // line), not through the logger: its pattern copied the line into a buffer of 250 bytes that
    // an access line outgrows, so every request paid for allocations. The stream's own lock
    // keeps this line whole between the logger's.
    const std::string_view text = format_access_line_into(line, r);
    flockfile(stdout);
    fwrite_unlocked(text.data(), 1, text.size(), stdout);
    putc_unlocked('\n', stdout);
    funlockfile(stdout);
    flush_soon();
  } else {
    auto show = [](const std::optional<double>& v) {
      return v ? fmt::format("{:.1f}", *v) : std::string{"-"};
    };
    spdlog::info(
        "{} access id={} model={} path={} stream={} outcome={} status={} ttfb_ms={} "
        "duration_ms={:.1f} caller_left_ms={} work_ended_ms={} attempts={}",
        iso_now(), r.request_id, r.model, r.path, r.stream, to_string(r.result), r.status,
        show(r.ttfb_ms), r.duration_ms, show(r.caller_left_ms), show(r.work_ended_ms),
        r.attempts.size());
  }
}

void log_info(const std::string& message) {
  emit(spdlog::level::info, message);
}
void log_warn(const std::string& message) {
  emit(spdlog::level::warn, message);
}
void log_error(const std::string& message) {
  emit(spdlog::level::err, message);
}

}  // namespace tether
