#include "actors/access_log.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <fmt/format.h>
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "actors/policy/json_text.hpp"

namespace tether {
namespace {

bool json_format = true;

// "2026-11-30T21:03:18.123Z". The seconds' text changes once a second: each thread keeps it.
void append_iso_now(std::string& out) {
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
  out += cached;
  out += '.';
  out += static_cast<char>('0' + milli / 100);
  out += static_cast<char>('0' + milli / 10 % 10);
  out += static_cast<char>('0' + milli % 10);
  out += 'Z';
}

std::string iso_now() {
  std::string out;
  append_iso_now(out);
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

namespace {

// A JSON object written field by field: times as plain decimals with µs precision ("12.345"),
// which a reader of the log can take in at a glance (a generic serializer prints "1.2345E1").
class json_line {
 public:
  explicit json_line(std::size_t capacity) {
    out_.reserve(capacity);
    out_.push_back('{');
  }
  json_line& str(std::string_view key, std::string_view value) {
    append_json_string(key_(key), value);
    return *this;
  }
  json_line& now(std::string_view key) {
    auto& out = key_(key);
    out += '"';
    append_iso_now(out);
    out += '"';
    return *this;
  }
  json_line& boolean(std::string_view key, bool v) { return raw(key, v ? "true" : "false"); }
  json_line& integer(std::string_view key, long long v) {
    append_integer(key_(key), v);
    return *this;
  }
  json_line& ms(std::string_view key, std::optional<double> v) {
    if (!v) return raw(key, "null");
    append_decimal_3(key_(key), *v);
    return *this;
  }
  json_line& raw(std::string_view key, std::string_view json) {
    key_(key).append(json);
    return *this;
  }
  std::string done() {
    out_.push_back('}');
    return std::move(out_);
  }

 private:
  std::string& key_(std::string_view key) {
    if (out_.size() > 1) out_.push_back(',');
    out_.push_back('"');
    out_.append(key);
    out_.append("\":");
    return out_;
  }

  std::string out_;
};

}  // namespace

void write_access_log(const access_record& r) {
  if (!spdlog::default_logger()->should_log(spdlog::level::info)) return;
  if (json_format) {
    std::string attempts = "[";
    for (const auto& a : r.attempts) {
      if (attempts.size() > 1) attempts.push_back(',');
      json_line al{160};
      al.str("upstream", a.upstream).str("model", a.model);
      if (a.status) {
        al.integer("status", *a.status);
      } else {
        al.raw("status", "null");
      }
      al.str("outcome", to_string(a.result)).ms("start_ms", a.start_ms).ms("end_ms", a.end_ms);
      attempts += al.done();
    }
    attempts.push_back(']');
    json_line l{640};
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
        .ms("cancel_latency_ms", r.cancel_latency_ms)
        .raw("attempts", attempts);
    // The line as it is: no format string to parse.
    spdlog::default_logger_raw()->log(spdlog::level::info, spdlog::string_view_t(l.done()));
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
