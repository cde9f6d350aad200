#include "actors/access_log.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <boost/json.hpp>
#include <chrono>

namespace tether {
namespace {

bool json_format = true;

boost::json::value opt(const std::optional<double>& v) {
  if (!v) return nullptr;
  return *v;
}

double round3(double v) { return static_cast<double>(static_cast<long long>(v * 1000)) / 1000; }

std::string iso_now() {
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::time_t secs = ms / 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
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

void write_access_log(const access_record& r) {
  if (!spdlog::default_logger()->should_log(spdlog::level::info)) return;
  if (json_format) {
    boost::json::object o;
    o["ts"] = iso_now();
    o["type"] = "access";
    o["request_id"] = r.request_id;
    o["model"] = r.model;
    o["path"] = r.path;
    o["stream"] = r.stream;
    o["outcome"] = to_string(r.result);
    o["status"] = r.status;
    o["deadline_ms"] = opt(r.deadline_ms);
    o["queue_wait_ms"] = round3(r.queue_wait_ms);
    o["ttfb_ms"] = opt(r.ttfb_ms ? std::optional<double>(round3(*r.ttfb_ms)) : std::nullopt);
    o["duration_ms"] = round3(r.duration_ms);
    o["caller_left_ms"] = opt(r.caller_left_ms);
    o["work_ended_ms"] = opt(r.work_ended_ms);
    o["cancel_latency_ms"] = opt(r.cancel_latency_ms);
    boost::json::array attempts;
    for (const auto& a : r.attempts) {
      boost::json::object ao;
      ao["upstream"] = a.upstream;
      ao["model"] = a.model;
      ao["status"] = a.status ? boost::json::value(*a.status) : boost::json::value(nullptr);
      ao["outcome"] = to_string(a.result);
      ao["start_ms"] = round3(a.start_ms);
      ao["end_ms"] = opt(a.end_ms);
      attempts.push_back(std::move(ao));
    }
    o["attempts"] = std::move(attempts);
    spdlog::info("{}", boost::json::serialize(o));
  } else {
    spdlog::info("{} access id={} model={} path={} stream={} outcome={} status={} duration_ms={:.1f} "
                 "ttfb_ms={} attempts={} work_ended_ms={}",
                 iso_now(), r.request_id, r.model, r.path, r.stream, to_string(r.result), r.status,
                 r.duration_ms, r.ttfb_ms ? std::to_string(*r.ttfb_ms) : "null", r.attempts.size(),
                 r.work_ended_ms ? std::to_string(*r.work_ended_ms) : "null");
  }
}

void log_info(const std::string& message) { emit(spdlog::level::info, message); }
void log_warn(const std::string& message) { emit(spdlog::level::warn, message); }
void log_error(const std::string& message) { emit(spdlog::level::err, message); }

}  // namespace tether
