#include "actors/engine_abort.hpp"

#include <chrono>
#include <memory>
#include <string>

#include "actors/metrics.hpp"
#include "actors/upstream_auth.hpp"

namespace tether {
namespace {

// The abort's answer, counted once the exchange has closed: a whole 2xx answer is "sent";
// anything else (no connection, a reset, an error status, no answer within the connect
// timeout) is "failed". Nothing is retried and nothing else waits for it.
class abort_events final : public net::upstream_events {
 public:
  abort_events(std::shared_ptr<metrics> stats, std::size_t upstream)
      : stats_(std::move(stats)), upstream_(upstream) {}

  void on_connected(bool) override {}
  void on_head(int status, net::header_list) override { status_ = status; }
  void on_body(std::string) override {}
  void on_end() override { whole_ = true; }
  void on_failure(net::upstream_failure, std::string) override {}
  void on_closed() override {
    stats_->engine_abort_done(upstream_, whole_ && status_ >= 200 && status_ < 300);
  }

 private:
  std::shared_ptr<metrics> stats_;
  std::size_t upstream_;
  int status_ = 0;
  bool whole_ = false;
};

}  // namespace

void send_engine_abort(const gateway_runtime& rt, std::size_t upstream, std::string_view rid) {
  if (upstream >= rt.upstreams.size() || upstream >= rt.cfg.upstreams.size()) return;
  const auto& up = rt.cfg.upstreams[upstream];
  net::upstream_request req;
  req.method = "POST";
  // At the engine's root, as metrics_path is: SGLang serves it beside /metrics, not under /v1.
  req.target = "/abort_request";
  req.headers.push_back({"content-type", "application/json"});
  add_upstream_auth(req.headers, up);
  // tether's rids are [A-Za-z0-9._-] (actors/policy/request/request_id.hpp): quoted as they are.
  std::string body{R"({"rid":")"};
  body.append(rid);
  body += "\"}";
  req.body = std::move(body);
  req.close_at = std::chrono::steady_clock::now() + up.connect_timeout;
  // On a new connection: a pooled one the engine had closed would fail the abort, and it is not
  // retried.
  req.fresh_connection = true;
  auto events = std::make_shared<abort_events>(rt.stats, upstream);
  rt.upstreams[upstream]->start(std::move(req), std::move(events), nullptr);
}

}  // namespace tether
