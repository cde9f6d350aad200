// What the upstream saw: counters and a bounded log of requests, served as GET /_stats. Tests of
// the gateway assert on it, so its times are wall-clock epoch ms with sub-ms precision (comparable
// with the test process's own clock). Not thread-safe: the mock runs one io thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bench/mock/kv_budget.hpp"

namespace tether::mock {

double epoch_ms_now();

enum class request_outcome { in_progress, completed, closed_by_client };

struct request_record {
  std::uint64_t id = 0;
  std::uint64_t connection = 0;
  std::uint64_t generation = 0;  // counters only count records of the current generation
  std::string path;
  std::string query;  // after the '?', as received; "" when none
  std::string model;
  bool stream = false;
  std::vector<std::pair<std::string, std::string>> headers;  // lower-case names, as received
  double started_ms = 0;
  std::optional<double> ended_ms;
  std::optional<unsigned> status;  // what was sent
  request_outcome outcome = request_outcome::in_progress;
  std::optional<double> closed_ms;
  std::optional<double> work_owed_ms;
  std::uint32_t chunks_sent = 0;
  double last_chunk_ms = 0;  // when the last event went out (wall clock)
  bool active = true;
};

struct connection_ticket {
  std::uint64_t id = 0;
  std::uint64_t generation = 0;
  bool counted = true;
};

class stats_registry {
 public:
  static constexpr std::size_t max_log_entries = 20000;

  connection_ticket connection_opened();
  // Connections used for /_stats and /_reset are the test's own, not the upstream traffic it
  // observes: they leave the connection counters so that "one connection" means one.
  void connection_is_control(connection_ticket& ticket);
  void connection_closed(connection_ticket& ticket);

  // `client_gone`: the client had closed the connection before the request was read. It is
  // logged, ended as closed by the client at the moment it began, and never counted as work.
  std::shared_ptr<request_record> request_started(
      const connection_ticket& ticket, std::string path, std::string model, bool stream,
      std::vector<std::pair<std::string, std::string>> headers, bool client_gone = false);
  // The model is only known once the body is parsed, after the record exists.
  void set_model(request_record& record, std::string model, bool stream);
  void request_completed(request_record& record);
  void request_closed_by_client(request_record& record, std::optional<double> work_owed_ms);

  // Position k (0-based, since the last reset) of a request for this flaky model.
  std::uint64_t next_flaky_index(const std::string& model);

  // The KV budgets of the mock-kv models; /_stats reports their counters, /_reset zeroes them.
  kv_books& kv() { return kv_; }

  // GET /health answers with this status (POST /_health?status=N sets it; a reset keeps it),
  // and counts each check.
  unsigned health_check() {
    ++health_checks_;
    return health_status_;
  }
  void set_health_status(unsigned status) { health_status_ = status; }

  // GET /metrics: the requests in progress as llama.cpp reports them (requests_processing; none
  // deferred, since the mock queues nothing).
  std::string engine_metrics() const;

  void reset();
  std::string to_json(std::optional<std::uint64_t> since) const;

 private:
  void end_active(request_record& record);

  std::uint64_t generation_ = 0;
  std::uint64_t next_request_id_ = 1;
  std::uint64_t next_connection_id_ = 1;
  std::uint64_t requests_ = 0;
  std::uint64_t completed_ = 0;
  std::uint64_t closed_by_client_ = 0;
  std::uint64_t connections_opened_ = 0;
  std::uint64_t connections_open_ = 0;
  std::uint64_t active_ = 0;
  std::uint64_t max_active_ = 0;
  std::uint64_t health_checks_ = 0;
  unsigned health_status_ = 200;
  std::deque<std::shared_ptr<request_record>> log_;
  std::unordered_map<std::string, std::uint64_t> flaky_counters_;
  kv_books kv_;
};

}  // namespace tether::mock
