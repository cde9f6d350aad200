#include "actors/gateway.hpp"

#include <openssl/crypto.h>

#include <openssl/evp.h>
#include <cctype>

#include <boost/json.hpp>

#include "actors/access_log.hpp"
#include "actors/messages.hpp"
#include "actors/policy/admission/queue_priority.hpp"
#include "actors/policy/admission/token_weight.hpp"
#include "actors/policy/ledger/budget_check.hpp"
#include "actors/policy/ledger/model_price.hpp"
#include "actors/policy/request/call_identity.hpp"
#include "actors/policy/request/deadline.hpp"
#include "actors/policy/request/request_id.hpp"
#include "actors/policy/routing/response_affinity.hpp"
#include "actors/policy/wire/affinity_key.hpp"
#include "actors/policy/wire/model_request.hpp"
#include "actors/policy/wire/surface.hpp"
#include "actors/request_actor.hpp"
#include "actors/response_headers.hpp"
#include "actors/supervisor_actor.hpp"
#include "actors/usage_endpoint.hpp"

namespace tether {
namespace {

// The caller's connection tells the request actor that the caller left; the actor decides.
class request_observer final : public net::exchange_observer {
 public:
  explicit request_observer(caf::actor req) : req_(std::move(req)) {}
  void on_client_gone() override { caf::anon_send(req_, client_gone_atom::value, now_ns()); }

 private:
  caf::actor req_;
};

bool is_model_path(const std::string& path) {
  return surface_of(path).has_value();
}

std::string path_of(const std::string& target) {
  auto q = target.find('?');
  return q == std::string::npos ? target : target.substr(0, q);
}

// The gateway's own error body, in the shape of the surface at `path` (OpenAI's elsewhere).
std::string error_body_at(const std::string& path, int status, outcome o, std::string_view message,
                          std::string_view request_id) {
  return error_body_on(surface_of(path).value_or(surface::chat), status, o, message, request_id);
}

net::header_list json_headers(const std::string& request_id) {
  return {{"content-type", "application/json"}, {"x-request-id", request_id}};
}

// x-stainless-retry-count, the retry counter the openai and Anthropic SDKs send: a small
// non-negative integer, or nothing (a value that is not one is not logged).
std::optional<std::int64_t> client_retry_of(const net::incoming_request& req) {
  const auto* v = net::find_header(req.headers, "x-stainless-retry-count");
  if (v == nullptr || v->empty() || v->size() > 6) return std::nullopt;
  std::int64_t n = 0;
  for (char c : *v) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

bool token_equal(const std::string& a_hex, const std::string& b_hex) {
  // Digests of equal length; CRYPTO_memcmp does not stop at the first difference.
  return a_hex.size() == b_hex.size() &&
         CRYPTO_memcmp(a_hex.data(), b_hex.data(), a_hex.size()) == 0;
}

}  // namespace

std::string sha256_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(hex[digest[i] >> 4]);
    out.push_back(hex[digest[i] & 0xf]);
  }
  return out;
}

gateway::gateway(caf::actor_system& system, runtime_ptr rt, const net::io_group& io)
    : system_(system), io_(io), runtimes_(io.size(), rt) {}

void gateway::adopt(runtime_ptr next) {
  runtimes_[io_.here()] = std::move(next);
}

// The token of `Authorization: Bearer K`, or else of `x-api-key: K` (how the Anthropic SDK
// sends it); empty: neither.
std::string_view presented_key(const net::incoming_request& req) {
  if (const auto* auth = net::find_header(req.headers, "authorization")) {
    std::string_view v = *auth;
    // The scheme is case-insensitive (RFC 7235 §2.1); the token is what follows the spaces.
    constexpr std::string_view bearer = "bearer";
    if (v.size() <= bearer.size() || v[bearer.size()] != ' ') return {};
    for (std::size_t i = 0; i < bearer.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(v[i])) != bearer[i]) return {};
    }
    v.remove_prefix(bearer.size());
    while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
    return v;
  }
  if (const auto* key = net::find_header(req.headers, "x-api-key")) return *key;
  return {};
}

std::int64_t gateway::match_key(const net::incoming_request& req) const {
  const auto v = presented_key(req);
  if (v.empty()) return -1;
  auto digest = sha256_hex(v);
  std::int64_t found = -1;
  // Every key is compared, so the time taken does not depend on which one matched.
  for (std::size_t i = 0; i < rt()->cfg.keys.size(); ++i) {
    const auto& k = rt()->cfg.keys[i];
    if (!k.retired && token_equal(digest, k.sha256_hex)) found = static_cast<std::int64_t>(i);
  }
  return found;
}

void gateway::answer_model_refusal(const net::incoming_request& req, const std::string& request_id,
                                   const std::string& model, outcome o, const std::string& message,
                                   net::response_channel& channel) {
  int status = status_of(o);
  const auto path = path_of(req.target);
  channel.send_full(status, error_headers(request_id, status, o),
                    error_body_at(path, status, o, message, request_id));
  auto elapsed =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - req.arrival)
          .count();
  access_record r;
  r.request_id = request_id;
  r.model = model;
  r.path = req.target;  // with its query string, as received
  r.result = o;
  r.status = status;
  r.duration_ms = elapsed;
  r.ttfb_ms = elapsed;
  r.client_retry = client_retry_of(req);
  if (const auto* session = read_call_headers(req.headers).session) r.client_session = *session;
  write_access_log(r);
  rt()->stats->request_done(model, o, elapsed / 1000.0);
}

// Which kind of request it is decides who answers: net/'s refusals, the small endpoints, or a
// model request (refused here, or given a request actor).
std::shared_ptr<net::exchange_observer> gateway::handle(
    net::incoming_request req, std::shared_ptr<net::response_channel> channel) {
  auto request_id = accept_or_generate_request_id(net::find_header(req.headers, "x-request-id"));
  auto path = path_of(req.target);
  if (req.error != net::protocol_error::none) {
    answer_protocol_error(req, request_id, path, *channel);
    return nullptr;
  }
  if (req.method == "GET" && path == "/v1/usage") {
    answer_usage_request(req, request_id, std::move(channel));
    return nullptr;
  }
  if ((req.method == "GET" || req.method == "HEAD") &&
      answer_small_endpoint(req, request_id, path, *channel))
    return nullptr;
  if (!is_model_path(path)) {
    channel->send_full(404, error_headers(request_id, 404, outcome::bad_request),
                       error_body(outcome::bad_request, "no such endpoint: " + path, request_id));
    return nullptr;
  }
  if (req.method != "POST") {
    auto headers = error_headers(request_id, 405, outcome::bad_request);
    headers.push_back({"allow", "POST"});
    channel->send_full(
        405, std::move(headers),
        error_body_at(path, 405, outcome::bad_request, path + " accepts POST only", request_id));
    return nullptr;
  }
  return start_model_request(std::move(req), std::move(request_id), std::move(path),
                             std::move(channel));
}

// net/ refused the request before any handler saw its body.
void gateway::answer_protocol_error(const net::incoming_request& req, const std::string& request_id,
                                    const std::string& path, net::response_channel& channel) {
  // Counted as a model request only when it was one; others are just answered.
  outcome o = req.error == net::protocol_error::body_too_large      ? outcome::payload_too_large
              : req.error == net::protocol_error::headers_too_large ? outcome::headers_too_large
                                                                    : outcome::bad_request;
  std::string message =
      o == outcome::payload_too_large   ? "request body is larger than server.max_request_bytes"
      : o == outcome::headers_too_large ? "request headers exceed the gateway's limits"
                                        : "malformed HTTP request: " + req.error_detail;
  if (req.method == "POST" && is_model_path(path)) {
    answer_model_refusal(req, request_id, "", o, message, channel);
  } else {
    channel.send_full(status_of(o), error_headers(request_id, status_of(o), o),
                      error_body(o, message, request_id));
  }
}

// Every key's usage is an admin's to read: a key of its own is not enough.
void gateway::answer_usage_request(const net::incoming_request& req, const std::string& request_id,
                                   std::shared_ptr<net::response_channel> channel) {
  const auto key = match_key(req);
  if (key < 0) {
    channel->send_full(
        401, error_headers(request_id, 401, outcome::unauthorized),
        error_body(outcome::unauthorized, "missing or invalid gateway key", request_id));
    return;
  }
  if (!rt()->cfg.keys[static_cast<std::size_t>(key)].admin) {
    channel->send_full(
        403, error_headers(request_id, 403, outcome::forbidden),
        error_body(outcome::forbidden, "GET /v1/usage needs an admin key ([[keys]] admin = true)",
                   request_id));
    return;
  }
  const auto q = req.target.find('?');
  answer_usage(system_, rt()->ledger, q == std::string::npos ? "" : req.target.substr(q + 1),
               request_id, std::move(channel));
}

// /healthz, /readyz, /metrics, /v1/models; false: not one of them.
bool gateway::answer_small_endpoint(const net::incoming_request& req, const std::string& request_id,
                                    const std::string& path, net::response_channel& channel) {
  if (path == "/healthz") {
    channel.send_full(200, {{"content-type", "text/plain"}}, "ok\n");
    return true;
  }
  if (path == "/readyz") {
    bool ready = !draining();
    channel.send_full(ready ? 200 : 503, {{"content-type", "text/plain"}},
                      ready ? "ready\n" : "draining\n");
    return true;
  }
  if (path == "/metrics") {
    auto text = rt()->stats->render();
    if (rt()->tracer) {
      // The exporter drops rather than blocks or grows: what it dropped must be visible.
      auto t = rt()->tracer->stats();
      text +=
          "# HELP tether_trace_spans_exported_total Spans the collector accepted.\n"
          "# TYPE tether_trace_spans_exported_total counter\n"
          "tether_trace_spans_exported_total " +
          std::to_string(t.exported) +
          "\n# HELP tether_trace_spans_dropped_total Spans dropped: queue full, collector "
          "failing or slow.\n# TYPE tether_trace_spans_dropped_total counter\n"
          "tether_trace_spans_dropped_total " +
          std::to_string(t.dropped) + "\n";
    }
    channel.send_full(200, {{"content-type", "text/plain; version=0.0.4; charset=utf-8"}},
                      std::move(text));
    return true;
  }
  if (path == "/v1/models") {
    if (rt()->cfg.requires_keys() && match_key(req) < 0) {
      channel.send_full(
          401, error_headers(request_id, 401, outcome::unauthorized),
          error_body(outcome::unauthorized, "missing or invalid gateway key", request_id));
      return true;
    }
    boost::json::array data;
    for (const auto& name : rt()->routes->public_models()) {
      data.push_back(boost::json::object{
          {"id", name}, {"object", "model"}, {"created", 0}, {"owned_by", "tether"}});
    }
    boost::json::object body{{"object", "list"}, {"data", std::move(data)}};
    channel.send_full(200, json_headers(request_id), boost::json::serialize(body));
    return true;
  }
  return false;
}

// What a model request's checks established, for its request actor's spec.
struct gateway::model_admission {
  std::int64_t key = -1;  // the gateway key's index, -1 = none
  surface where = surface::chat;
  model_request_info info;
  std::uint64_t prompt_tokens = 0;  // estimated from the body's size
  caller_budget caller;             // the caller's own deadline header
  priority queue_class = priority::normal;
  call_headers calls;  // the client's session and Idempotency-Key: which call it is a try of
};

// A model request: refused by the checks in order (draining, key, body, model, token weight,
// key's models, deadline and priority headers), or handed to a new request actor.
std::shared_ptr<net::exchange_observer> gateway::start_model_request(
    net::incoming_request req, std::string request_id, std::string path,
    std::shared_ptr<net::response_channel> channel) {
  // The caller's io thread, found once: the config it runs with, its budget shard and supervisor.
  const auto member = io_.here();
  const auto& here = runtimes_[member];
  model_admission admitted;
  admitted.calls = read_call_headers(req.headers);
  if (!admit_caller(req, request_id, *here, *channel, admitted) ||
      !read_model(req, request_id, path, *here, *channel, admitted) ||
      !check_model_limits(req, request_id, *here, *channel, admitted) ||
      !read_caller_headers(req, request_id, *here, *channel, admitted))
    return nullptr;
  auto spec = make_request_spec(std::move(req), std::move(request_id), std::move(path), *here,
                                member, std::move(admitted), *channel);
  auto actor = spawn_request(system_, here, std::move(channel), std::move(spec));
  if (member < here->supervisors.size()) adopt_request(here->supervisors[member], actor);
  return std::make_shared<request_observer>(std::move(actor));
}

// Whether the gateway takes model requests, and from this caller: its key, when keys are needed.
bool gateway::admit_caller(const net::incoming_request& req, const std::string& request_id,
                           const gateway_runtime& here, net::response_channel& channel,
                           model_admission& admitted) {
  if (draining()) {
    answer_model_refusal(req, request_id, "", outcome::shutting_down,
                         "the gateway is shutting down", channel);
    return false;
  }
  if (here.cfg.requires_keys()) {
    admitted.key = match_key(req);
    if (admitted.key < 0) {
      answer_model_refusal(req, request_id, "", outcome::unauthorized,
                           "missing or invalid gateway key", channel);
      return false;
    }
  }
  return true;
}

// The body's facts (a valid request naming one model), and whether this gateway serves that
// model on the surface at `path`.
bool gateway::read_model(const net::incoming_request& req, const std::string& request_id,
                         const std::string& path, const gateway_runtime& here,
                         net::response_channel& channel, model_admission& admitted) {
  // The body's fingerprint is taken in the same pass, and only when a call id may need it.
  auto inspected = inspect_model_request(
      req.body, here.cfg.server.max_json_depth,
      needs_body_fingerprint(admitted.calls, here.calls_by_session, here.calls_by_body));
  if (auto* err = std::get_if<body_error>(&inspected)) {
    answer_model_refusal(req, request_id, "", outcome::bad_request, err->message, channel);
    return false;
  }
  admitted.info = std::get<model_request_info>(std::move(inspected));
  const auto& model = admitted.info.model;
  admitted.where = *surface_of(path);  // handle() let only model surfaces through
  if (!here.routes->knows(model)) {
    // The label stays bounded: an unknown name is never a label value.
    answer_model_refusal(req, request_id, "", outcome::unknown_model,
                         "the model does not exist on this gateway", channel);
    return false;
  }
  if (!here.routes->serves(model, admitted.where)) {
    answer_model_refusal(req, request_id, "", outcome::unknown_model,
                         "the model is not served on " + std::string(path_of(admitted.where)) +
                             " by this gateway (no deployment of it serves the " +
                             std::string(name_of(admitted.where)) + " surface)",
                         channel);
    return false;
  }
  return true;
}

// Whether the request could ever be admitted (its token weight), and whether its key may use
// the model.
bool gateway::check_model_limits(const net::incoming_request& req, const std::string& request_id,
                                 const gateway_runtime& here, net::response_channel& channel,
                                 model_admission& admitted) {
  const auto& info = admitted.info;
  admitted.prompt_tokens = estimate_prompt_tokens(req.body.size());
  if (auto heavy = here.routes->too_heavy(info.model, admitted.where, admitted.prompt_tokens,
                                          info.max_output_tokens)) {
    // It could never be admitted: refused now rather than queued until its wait limit.
    answer_model_refusal(
        req, request_id, info.model, outcome::bad_request,
        "the request's token weight (" + std::to_string(heavy->weight) +
            ": its estimated prompt tokens and the output it may make) is more than the "
            "upstream's whole max_tokens_in_flight (" +
            std::to_string(heavy->cap) + "); ask for fewer output tokens or send less",
        channel);
    return false;
  }
  if (admitted.key >= 0) {
    const auto& allowed = here.cfg.keys[admitted.key].models;
    bool ok = std::find(allowed.begin(), allowed.end(), "*") != allowed.end() ||
              std::find(allowed.begin(), allowed.end(), info.model) != allowed.end();
    if (!ok) {
      answer_model_refusal(req, request_id, info.model, outcome::forbidden,
                           "this key may not use that model", channel);
      return false;
    }
  }
  return true;
}

// The caller's own deadline (X-Request-Deadline-Ms, else X-Request-Timeout-Ms) and priority.
bool gateway::read_caller_headers(const net::incoming_request& req, const std::string& request_id,
                                  const gateway_runtime& here, net::response_channel& channel,
                                  model_admission& admitted) {
  const auto& model = admitted.info.model;
  const std::string* caller_header = net::find_header(req.headers, "x-request-deadline-ms");
  if (caller_header == nullptr)
    caller_header = net::find_header(req.headers, "x-request-timeout-ms");
  admitted.caller = parse_caller_budget(caller_header);
  if (admitted.caller.what == caller_budget::kind::invalid) {
    answer_model_refusal(req, request_id, model, outcome::bad_request,
                         "X-Request-Deadline-Ms must be a non-negative integer", channel);
    return false;
  }
  // Without a key the cap is a key's default: a caller must be given "high", it cannot take it.
  const auto asked =
      priority_of(net::find_header(req.headers, "x-priority"),
                  admitted.key >= 0 ? here.cfg.keys[admitted.key].max_priority : priority::normal);
  if (!asked.valid) {
    answer_model_refusal(req, request_id, model, outcome::bad_request,
                         "X-Priority must be high, normal or low", channel);
    return false;
  }
  admitted.queue_class = asked.value;
  return true;
}

// The request actor's spec. The request's strings are moved, not copied: this is the last use
// of each.
request_spec gateway::make_request_spec(net::incoming_request&& req, std::string&& request_id,
                                        std::string&& path, const gateway_runtime& here,
                                        std::size_t member, model_admission&& admitted,
                                        const net::response_channel& channel) {
  const auto where = admitted.where;
  const auto key = admitted.key;
  const auto settings = here.cfg.effective_request(admitted.info.model);
  request_spec spec;
  spec.where = where;
  spec.stream = admitted.info.stream && can_stream(spec.where);
  spec.deadline = effective_deadline(settings.deadline, admitted.caller);
  if (admitted.caller.what == caller_budget::kind::valid)
    spec.caller_deadline = admitted.caller.value;
  spec.client_retry = client_retry_of(req);
  spec.request_id = std::move(request_id);
  spec.path = std::move(path);
  if (const auto q = req.target.find('?'); q != std::string::npos)
    spec.query = req.target.substr(q);
  spec.model = std::move(admitted.info.model);
  spec.body = std::move(req.body);
  spec.key = key;
  spec.queue_class = admitted.queue_class;
  spec.arrival = req.arrival;
  spec.prompt_tokens = admitted.prompt_tokens;
  spec.max_output_tokens = admitted.info.max_output_tokens;
  if (key >= 0 && (here.cfg.keys[key].rpm > 0 || here.cfg.keys[key].tpm > 0)) {
    spec.check_rate = true;
    spec.rate_tokens = token_weight(spec.prompt_tokens, spec.max_output_tokens,
                                    here.routes->default_max_tokens(spec.model, where));
  }
  // A caller that names include_usage decides for itself; a false positive (the words in a
  // prompt) only leaves the usage to the upstream's default.
  if (here.ledger && spec.stream && (where == surface::chat || where == surface::completions) &&
      std::string_view(spec.body).find("\"include_usage\"") == std::string_view::npos)
    spec.ask_usage = true;
  if (key >= 0 && here.ledger) {
    const auto& k = here.cfg.keys[static_cast<std::size_t>(key)];
    if (ledger::limits_of(k).any()) {
      // Estimated as the rates are: the token weight on the model's first deployment, and what
      // it would cost there.
      const auto output =
          spec.max_output_tokens.value_or(here.routes->default_max_tokens(spec.model, where));
      spec.check_budget = true;
      // Saturating, as the rates' weight: an absurd max_tokens must not wrap to a light estimate.
      spec.budget_estimate.tokens = token_weight(spec.prompt_tokens, output, output);
      for (const auto& m : here.cfg.models) {
        if (m.name != spec.model) continue;
        if (const auto price = ledger::price_of(here.cfg, m.name, m.upstream)) {
          ledger::usage_record r;
          r.prompt = spec.prompt_tokens;
          r.completion = output;
          spec.budget_estimate.spend_nanousd = ledger::spend_of(r, *price);
        }
        break;
      }
    }
  }
  if (const auto* tp = net::find_header(req.headers, "traceparent")) spec.traceparent = *tp;
  if (where == surface::responses) {
    if (auto previous = previous_response_id_of(spec.body))
      spec.prefer_upstream = here.affinity->find(*previous);
  }
  if (auto bytes = here.routes->affinity_bytes(spec.model)) {
    spec.affinity =
        affinity_key(where, spec.body, net::find_header(req.headers, "x-session-affinity"), *bytes);
  }
  if (is_anthropic(where)) {
    if (const auto* v = net::find_header(req.headers, "anthropic-version"))
      spec.anthropic_version = *v;
    if (const auto* v = net::find_header(req.headers, "anthropic-beta")) spec.anthropic_beta = *v;
  }
  if (member < here.budget_shards.size()) spec.budget = here.budget_shards[member];
  if (admitted.calls.session != nullptr) spec.client_session = *admitted.calls.session;
  recall_call(spec, here, admitted, settings, channel);
  return spec;
}

// A client's retry of a call that did not end ok keeps the call's deadline (call_table.hpp): it
// is left what remains of it, or nothing, and the lifecycle then answers 504 at once with no
// attempt. Before any attempt, so that the window only ever shortens a deadline.
void gateway::recall_call(request_spec& spec, const gateway_runtime& here,
                          const model_admission& admitted, const config::request_config& settings,
                          const net::response_channel& channel) {
  const auto& h = admitted.calls;
  if (settings.call_window.count() <= 0 || !here.calls) return;
  if (h.idempotency_key == nullptr && h.session == nullptr &&
      settings.call_identity != config::call_identity_mode::body)
    return;
  // On an open gateway the caller is its address (a retry comes on a connection of its own).
  const std::string peer = spec.key < 0 ? channel.peer_address() : std::string{};
  const auto id = call_id_of(settings.call_identity, {spec.key, peer}, spec.where, spec.model, h,
                             admitted.info.body_fingerprint);
  if (!id) return;
  const auto verdict = here.calls->admit(*id, spec.arrival);
  spec.call = id;
  spec.call_try = verdict.try_number;
  std::optional<steady_time> due;
  if (spec.deadline) due = spec.arrival + *spec.deadline;
  if (verdict.due && (!due || *verdict.due < *due)) {
    due = verdict.due;
    spec.deadline = std::max(millis{0}, std::chrono::floor<millis>(*due - spec.arrival));
  }
  spec.call_due = due;
  if (!verdict.retry()) return;
  // The call has max_retries + 1 attempts in all: another budget for the same call would be the
  // client's retry ladder rebuilt on the upstream.
  spec.call_attempts = verdict.attempts;
  spec.call_spent = verdict.spent(settings.max_retries);
  using result = metrics::call_result;
  here.stats->call_retry(spec.deadline && spec.deadline->count() <= 0 ? result::out_of_budget
                         : spec.call_spent                            ? result::out_of_attempts
                                                                      : result::served);
}

}  // namespace tether
