#include "bench/mock/sglang.hpp"

#include <deque>
#include <memory>
#include <optional>

#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>

#include "bench/mock/stats.hpp"

namespace tether::mock {
namespace {

namespace json = boost::json;

struct generation {
  std::string rid;
  double started_ms = 0;
  std::optional<double> stopped_ms;
  std::string stopped_by;  // "end" or "abort"
  std::optional<boost::asio::steady_timer> timer;
};

struct abort_record {
  std::string rid;
  double at_ms = 0;
  bool found = false;  // a live generation had that rid
};

bool enabled = false;
unsigned abort_status = 200;
std::deque<std::shared_ptr<generation>> generations;
std::deque<abort_record> aborts;
constexpr std::size_t max_records = 10000;

void stop(generation& g, const char* by) {
  if (g.stopped_ms) return;
  g.stopped_ms = epoch_ms_now();
  g.stopped_by = by;
  if (g.timer) g.timer->cancel();
}

}  // namespace

void set_sglang_mode(bool on) {
  enabled = on;
}

bool sglang_mode() {
  return enabled;
}

void sglang_generation_started(const boost::asio::any_io_executor& executor, std::string rid,
                               std::chrono::milliseconds length) {
  auto g = std::make_shared<generation>();
  g->rid = std::move(rid);
  g->started_ms = epoch_ms_now();
  g->timer.emplace(executor);
  g->timer->expires_after(length);
  g->timer->async_wait([g](boost::system::error_code ec) {
    if (!ec) stop(*g, "end");
  });
  if (generations.size() >= max_records) generations.pop_front();
  generations.push_back(std::move(g));
}

unsigned sglang_abort(std::string_view body) {
  boost::system::error_code ec;
  auto parsed = json::parse(body, ec);
  const auto* object = ec ? nullptr : parsed.if_object();
  const auto* rid = object ? object->if_contains("rid") : nullptr;
  abort_record rec;
  rec.at_ms = epoch_ms_now();
  if (rid != nullptr && rid->is_string()) rec.rid = std::string(rid->as_string());
  if (abort_status < 300) {
    for (auto& g : generations) {
      if (g->rid == rec.rid && !g->stopped_ms) {
        stop(*g, "abort");
        rec.found = true;
      }
    }
  }
  if (aborts.size() >= max_records) aborts.pop_front();
  aborts.push_back(std::move(rec));
  return abort_status;
}

void set_sglang_abort_status(unsigned status) {
  abort_status = status;
}

json::object sglang_json() {
  json::array gens;
  for (const auto& g : generations) {
    json::object o;
    o["rid"] = g->rid;
    o["started_ms"] = g->started_ms;
    o["stopped_ms"] = g->stopped_ms ? json::value(*g->stopped_ms) : json::value(nullptr);
    o["stopped_by"] = g->stopped_ms ? json::value(g->stopped_by) : json::value(nullptr);
    gens.push_back(std::move(o));
  }
  json::array abs;
  for (const auto& a : aborts) {
    abs.push_back(json::object{{"rid", a.rid}, {"at_ms", a.at_ms}, {"found", a.found}});
  }
  return json::object{{"generations", std::move(gens)}, {"aborts", std::move(abs)}};
}

void sglang_reset() {
  generations.clear();  // a timer still pending keeps its generation until it fires
  aborts.clear();
}

}  // namespace tether::mock
