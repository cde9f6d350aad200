#include "bench/mock/stats.hpp"

#include <algorithm>
#include <chrono>

#include <boost/json.hpp>

#include "bench/mock/sglang.hpp"

namespace tether::mock {
namespace {

namespace json = boost::json;

json::value optional_value(const std::optional<double>& v) {
  return v ? json::value(*v) : json::value(nullptr);
}

const char* outcome_name(request_outcome o) {
  switch (o) {
    case request_outcome::completed:
      return "completed";
    case request_outcome::closed_by_client:
      return "closed_by_client";
    case request_outcome::in_progress:
      break;
  }
  return "in_progress";
}

json::object record_json(const request_record& r) {
  json::object headers;
  for (const auto& [name, value] : r.headers) {
    // A repeated field keeps all its values, joined as HTTP allows for list-valued fields.
    auto it = headers.find(name);
    if (it == headers.end()) {
      headers[name] = value;
    } else {
      auto& joined = it->value().as_string();
      joined.append(", ");
      joined.append(value);
    }
  }
  json::object o;
  o["id"] = r.id;
  o["connection"] = r.connection;
  o["path"] = r.path;
  if (!r.query.empty()) o["query"] = r.query;
  o["model"] = r.model;
  o["stream"] = r.stream;
  o["headers"] = std::move(headers);
  o["started_ms"] = r.started_ms;
  o["ended_ms"] = optional_value(r.ended_ms);
  o["status"] = r.status ? json::value(*r.status) : json::value(nullptr);
  o["outcome"] = outcome_name(r.outcome);
  o["closed_ms"] = optional_value(r.closed_ms);
  o["work_owed_ms"] = optional_value(r.work_owed_ms);
  o["chunks_sent"] = r.chunks_sent;
  o["last_chunk_ms"] = r.last_chunk_ms;
  return o;
}

}  // namespace

double epoch_ms_now() {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
  return static_cast<double>(us) / 1000.0;
}

connection_ticket stats_registry::connection_opened() {
  ++connections_opened_;
  ++connections_open_;
  return {next_connection_id_++, generation_, true};
}

void stats_registry::connection_is_control(connection_ticket& ticket) {
  if (!ticket.counted) return;
  ticket.counted = false;
  --connections_open_;
  if (ticket.generation == generation_ && connections_opened_ > 0) --connections_opened_;
}

void stats_registry::connection_closed(connection_ticket& ticket) {
  if (!ticket.counted) return;
  ticket.counted = false;
  --connections_open_;
}

std::shared_ptr<request_record> stats_registry::request_started(
    const connection_ticket& ticket, std::string path, std::string model, bool stream,
    std::vector<std::pair<std::string, std::string>> headers, bool client_gone) {
  auto record = std::make_shared<request_record>();
  record->id = next_request_id_++;
  record->connection = ticket.id;
  record->generation = generation_;
  record->path = std::move(path);
  record->model = std::move(model);
  record->stream = stream;
  record->headers = std::move(headers);
  record->started_ms = epoch_ms_now();
  ++requests_;
  if (client_gone) {
    record->active = false;
    record->outcome = request_outcome::closed_by_client;
    record->closed_ms = record->started_ms;
    record->ended_ms = record->started_ms;
    if (record->generation == generation_) ++closed_by_client_;
  } else {
    ++active_;
    max_active_ = std::max(max_active_, active_);
  }
  log_.push_back(record);
  while (log_.size() > max_log_entries) log_.pop_front();
  return record;
}

void stats_registry::set_model(request_record& record, std::string model, bool stream) {
  record.model = std::move(model);
  record.stream = stream;
}

void stats_registry::end_active(request_record& record) {
  if (!record.active) return;
  record.active = false;
  --active_;
}

void stats_registry::request_completed(request_record& record) {
  if (record.outcome != request_outcome::in_progress) return;
  record.outcome = request_outcome::completed;
  record.ended_ms = epoch_ms_now();
  end_active(record);
  if (record.generation == generation_) ++completed_;
}

void stats_registry::request_closed_by_client(request_record& record,
                                              std::optional<double> work_owed_ms) {
  if (record.outcome != request_outcome::in_progress) return;
  record.outcome = request_outcome::closed_by_client;
  record.closed_ms = epoch_ms_now();
  record.ended_ms = record.closed_ms;
  record.work_owed_ms = work_owed_ms;
  end_active(record);
  if (record.generation == generation_) ++closed_by_client_;
}

std::string stats_registry::engine_metrics() const {
  std::string out =
      "# HELP llamacpp:requests_processing Number of requests processing.\n"
      "# TYPE llamacpp:requests_processing gauge\n"
      "llamacpp:requests_processing ";
  out += std::to_string(active_);
  out +=
      "\n# HELP llamacpp:requests_deferred Number of requests deferred.\n"
      "# TYPE llamacpp:requests_deferred gauge\n"
      "llamacpp:requests_deferred 0\n";
  return out;
}

std::uint64_t stats_registry::next_flaky_index(const std::string& model) {
  return flaky_counters_[model]++;
}

void stats_registry::reset() {
  ++generation_;
  requests_ = completed_ = closed_by_client_ = connections_opened_ = health_checks_ = 0;
  max_active_ = active_;
  log_.clear();
  flaky_counters_.clear();
  kv_.reset();
  sglang_reset();
}

std::string stats_registry::to_json(std::optional<std::uint64_t> since) const {
  json::array log;
  for (const auto& record : log_) {
    if (since && record->id <= *since) continue;
    log.push_back(record_json(*record));
  }
  json::object o;
  o["now_ms"] = epoch_ms_now();
  o["requests"] = requests_;
  o["completed"] = completed_;
  o["closed_by_client"] = closed_by_client_;
  o["connections_opened"] = connections_opened_;
  o["connections_open"] = connections_open_;
  o["active"] = active_;
  o["max_active"] = max_active_;
  o["health_checks"] = health_checks_;
  o["kv_admitted"] = kv_.admitted();
  o["kv_over_budget"] = kv_.over_budget();
  o["kv_peak_tokens"] = kv_.peak_tokens();
  o["kv_peak_demand_tokens"] = kv_.peak_demand_tokens();
  o["kv_tokens_in_flight"] = kv_.tokens_in_flight();
  o["log"] = std::move(log);
  if (sglang_mode()) o["sglang"] = sglang_json();
  return json::serialize(o);
}

}  // namespace tether::mock
