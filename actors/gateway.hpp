// The HTTP-facing front of the actor tree: answers the small endpoints itself, refuses what the
// taxonomy says to refuse before any actor exists, and spawns one request actor per model request.
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <memory>
#include <vector>

#include "actors/runtime.hpp"
#include "net/downstream.hpp"

namespace tether {

struct request_spec;  // actors/request_actor.hpp

class gateway {
 public:
  // Requests arrive on every member of `io`; each member reads the generation it last adopted.
  gateway(caf::actor_system& system, runtime_ptr rt, const net::io_group& io);

  std::shared_ptr<net::exchange_observer> handle(net::incoming_request request,
                                                 std::shared_ptr<net::response_channel> channel);

  // A reload: requests that arrive on the calling io thread from now on run on `next`; those in
  // flight keep theirs. Called on each member of the group in turn (reloader).
  void adopt(runtime_ptr next);

  // After this, /readyz answers 503 and new model requests get 503 shutting_down.
  void start_draining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }

 private:
  void answer_protocol_error(const net::incoming_request& req, const std::string& request_id,
                             const std::string& path, net::response_channel& channel);
  void answer_usage_request(const net::incoming_request& req, const std::string& request_id,
                            std::shared_ptr<net::response_channel> channel);
  bool answer_small_endpoint(const net::incoming_request& req, const std::string& request_id,
                             const std::string& path, net::response_channel& channel);
  std::shared_ptr<net::exchange_observer> start_model_request(
      net::incoming_request req, std::string request_id, std::string path,
      std::shared_ptr<net::response_channel> channel);
  // start_model_request's steps (gateway.cpp). Each check answers a refusal itself and returns
  // false; what they establish goes into `admitted`, from which the request's spec is made.
  struct model_admission;
  bool admit_caller(const net::incoming_request& req, const std::string& request_id,
                    const gateway_runtime& here, net::response_channel& channel,
                    model_admission& admitted);
  bool read_model(const net::incoming_request& req, const std::string& request_id,
                  const std::string& path, const gateway_runtime& here,
                  net::response_channel& channel, model_admission& admitted);
  bool check_model_limits(const net::incoming_request& req, const std::string& request_id,
                          const gateway_runtime& here, net::response_channel& channel,
                          model_admission& admitted);
  bool read_caller_headers(const net::incoming_request& req, const std::string& request_id,
                           const gateway_runtime& here, net::response_channel& channel,
                           model_admission& admitted);
  static request_spec make_request_spec(net::incoming_request&& req, std::string&& request_id,
                                        std::string&& path, const gateway_runtime& here,
                                        std::size_t member, model_admission&& admitted,
                                        const net::response_channel& channel);
  static void recall_call(request_spec& spec, const gateway_runtime& here,
                          const model_admission& admitted, const config::request_config& settings,
                          const net::response_channel& channel);
  void answer_model_refusal(const net::incoming_request& req, const std::string& request_id,
                            const std::string& model, outcome o, const std::string& message,
                            net::response_channel& channel);
  // Index of the gateway key the bearer token matches, -1 for none.
  std::int64_t match_key(const net::incoming_request& req) const;

  // The calling io thread's generation (no lock: each member reads and writes its own slot).
  const runtime_ptr& rt() const { return runtimes_[io_.here()]; }

  caf::actor_system& system_;
  net::io_group io_;
  std::vector<runtime_ptr> runtimes_;  // by member of io_
  std::atomic<bool> draining_{false};
};

// Lower-case hex SHA-256 of a token (for [[keys]] and `tether check`).
std::string sha256_hex(std::string_view data);

}  // namespace tether
