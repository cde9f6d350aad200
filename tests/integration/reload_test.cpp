// SIGHUP reload (contract, "Operating it"): a valid file applies to requests that arrive after
// it; requests in flight finish on the config they started with; a removed upstream's idle
// connections close; an invalid file is logged with its file, key and problem and changes
// nothing; changes that need a restart are logged as such.
#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <future>

#include "tests/integration/harness.hpp"

namespace tether::test {
namespace {

using namespace std::chrono_literals;

std::string upstream_entry(const mock_server& mock, const std::string& name,
                           const std::string& more = "") {
  return "[[upstreams]]\nname = \"" + name + "\"\nbase_url = \"" + mock.url() + "\"\n" + more +
         "\n";
}

std::string model_on(const std::string& name, const std::string& upstream,
                     const std::string& upstream_model) {
  return "[[models]]\nname = \"" + name + "\"\nupstream = \"" + upstream +
         "\"\nupstream_model = \"" + upstream_model + "\"\n\n";
}

std::string config_of(const std::string& sections, const std::string& request_keys = "",
                      const std::string& server_keys = "") {
  return "[server]\nlisten = \"127.0.0.1:0\"\n" + server_keys + "\n[request]\n" + request_keys +
         "\n\n" + sections + "\n[telemetry]\nlog_format = \"json\"\n";
}

http_response post(gateway_process& gw, const std::string& model, const header_map& headers = {}) {
  return request("POST", gw.port(), "/v1/chat/completions", chat_body(model), headers, 10s);
}

std::string code_of(const http_response& r) {
  return str(r.json().at("error").at("code"));
}

std::int64_t stat(const boost::json::object& stats, const char* field) {
  return stats.at(field).as_int64();
}

TEST(ReloadTest, StreamCrossingAReloadThatRemovesItsModelAndUpstreamCompletesUntouched) {
  mock_server mock;
  // Idle connections would otherwise stay for a minute: a close soon after the stream's end is
  // the reload's doing.
  gateway_process gw{config_of(upstream_entry(mock, "old", "idle_timeout_ms = 60000") +
                               model_on("chat", "old", "mock-stream-10x60"))};

  auto stream = std::async(std::launch::async, [&] {
    stream_options opts;
    opts.timeout = 10s;
    return stream_request("POST", gw.port(), "/v1/chat/completions", chat_body("chat", true),
                          {{"x-request-id", "crossing"}}, opts);
  });
  // The stream has begun at the mock (its first chunk is out) when the reload comes.
  auto begun = mock.wait_for_stats([](const auto& s) {
    return mock_log(s).size() == 1 && mock_log(s)[0].at("chunks_sent").as_int64() >= 1;
  });
  ASSERT_EQ(mock_log(begun).size(), 1u);

  auto line = reload(gw, config_of(upstream_entry(mock, "new") + model_on("other", "new", "mock")));
  ASSERT_TRUE(line) << gw.process().output();
  EXPECT_NE(line->find("config reloaded from " + gw.config_path()), std::string::npos) << *line;
  EXPECT_NE(line->find("upstream old removed"), std::string::npos) << *line;
  EXPECT_NE(line->find("model chat removed"), std::string::npos) << *line;

  // New requests see the new file at once; the stream in flight goes on on the old one.
  auto gone = post(gw, "chat");
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(code_of(gone), "unknown_model");
  EXPECT_EQ(post(gw, "other").status, 200);

  auto r = stream.get();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.end, stream_end::complete);
  auto data = r.sse_data();
  ASSERT_EQ(data.size(), 11u) << r.body;  // ten chunks, then [DONE]
  EXPECT_EQ(data.back(), "[DONE]");
  auto access = access_line(gw, "crossing");
  ASSERT_TRUE(access);
  EXPECT_EQ(str(access->at("outcome")), "ok");
  EXPECT_EQ(str(access->at("attempts").as_array().at(0).at("upstream")), "old");

  // The removed upstream's connection is not kept for later: the mock sees it close once the
  // stream ended. Only the new upstream's (pooled) connection stays.
  auto after =
      mock.wait_for_stats([](const auto& s) { return stat(s, "connections_open") == 1; }, 2s);
  EXPECT_EQ(stat(after, "connections_open"), 1);
  EXPECT_EQ(metric(gw.port(), "tether_config_reloads_total{result=\"ok\"}"), 1);
  EXPECT_EQ(metric(gw.port(), "tether_config_reloads_total{result=\"error\"}"), 0);
}

TEST(ReloadTest, RemovedModelAnswers404ToNewRequestsWhileItsRequestInFlightCompletes) {
  mock_server mock;
  gateway_process gw{config_of(upstream_entry(mock, "mock") +
                               model_on("slow", "mock", "mock-delay-1000") +
                               model_on("fast", "mock", "mock"))};
  auto slow = std::async(std::launch::async, [&] {
    return post(gw, "slow", {{"x-request-id", "in-flight"}});
  });
  auto busy = mock.wait_for_stats([](const auto& s) { return stat(s, "active") == 1; });
  ASSERT_EQ(stat(busy, "active"), 1);

  ASSERT_TRUE(
      reload(gw, config_of(upstream_entry(mock, "mock") + model_on("fast", "mock", "mock"))));
  auto refused = post(gw, "slow");
  EXPECT_EQ(refused.status, 404);
  EXPECT_EQ(code_of(refused), "unknown_model");
  // /v1/models lists what new requests may use.
  auto models = request("GET", gw.port(), "/v1/models").json().at("data").as_array();
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(str(models[0].at("id")), "fast");

  auto r = slow.get();
  EXPECT_EQ(r.status, 200) << r.body;
  // Only the request that was in flight reached the upstream for the removed model.
  auto log = mock_log(mock.stats());
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(str(log[0].at("model")), "mock-delay-1000");
}

TEST(ReloadTest, RemovedUpstreamsIdleConnectionsCloseAtTheReloadAndAKeptOneKeepsItsPool) {
  mock_server kept;
  mock_server removed;
  // Idle connections would otherwise stay for a minute: a close soon after the reload is the
  // reload's.
  const std::string idle = "idle_timeout_ms = 60000";
  // Each io thread keeps idle connections of its own, and the callers' connections take turns
  // between the threads: with one thread, the test follows one pool across the reload.
  const std::string one_thread = "threads = 1\n";
  gateway_process gw{config_of(upstream_entry(kept, "kept", idle) +
                                   upstream_entry(removed, "removed", idle) +
                                   model_on("a", "kept", "mock") + model_on("b", "removed", "mock"),
                               "", one_thread)};
  ASSERT_EQ(post(gw, "a").status, 200);
  ASSERT_EQ(post(gw, "b").status, 200);
  auto pooled =
      removed.wait_for_stats([](const auto& s) { return stat(s, "connections_open") == 1; });
  ASSERT_EQ(stat(pooled, "connections_open"), 1);

  ASSERT_TRUE(
      reload(gw, config_of(upstream_entry(kept, "kept", idle) + model_on("a", "kept", "mock"), "",
                           one_thread)));
  auto drained =
      removed.wait_for_stats([](const auto& s) { return stat(s, "connections_open") == 0; }, 2s);
  EXPECT_EQ(stat(drained, "connections_open"), 0);
  EXPECT_EQ(post(gw, "b").status, 404);

  // The kept upstream's pooled connection carries the next request: no new connection.
  ASSERT_EQ(post(gw, "a").status, 200);
  auto k = kept.stats();
  EXPECT_EQ(stat(k, "connections_opened"), 1);
  EXPECT_EQ(stat(k, "requests"), 2);
}

TEST(ReloadTest, InvalidFileIsLoggedWithFileKeyAndProblemAndTheRunningConfigStays) {
  mock_server mock;
  const auto good = config_of(upstream_entry(mock, "mock") + model_on("chat", "mock", "mock"));
  gateway_process gw{good};

  // A file that parses but is wrong: a cap of 0, and the model renamed (which must not apply).
  auto bad = config_of(upstream_entry(mock, "mock", "max_in_flight = 0") +
                       model_on("renamed", "mock", "mock"));
  const auto from = gw.process().lines().size();
  auto line = reload(gw, bad);
  ASSERT_TRUE(line) << gw.process().output();
  EXPECT_NE(line->find("the running config stays (1 error(s))"), std::string::npos) << *line;
  auto detail =
      gw.process().wait_for_line(std::regex("config reload refused: .*max_in_flight"), 1s, from);
  ASSERT_TRUE(detail) << gw.process().output();
  EXPECT_NE(detail->line.find(gw.config_path()), std::string::npos) << detail->line;
  EXPECT_NE(detail->line.find("upstreams[0].max_in_flight"), std::string::npos) << detail->line;

  // And one that does not parse at all.
  ASSERT_TRUE(reload(gw, "[server\nlisten = "));

  EXPECT_EQ(post(gw, "chat").status, 200);
  EXPECT_EQ(post(gw, "renamed").status, 404);
  EXPECT_EQ(metric(gw.port(), "tether_config_reloads_total{result=\"error\"}"), 2);
  EXPECT_EQ(metric(gw.port(), "tether_config_reloads_total{result=\"ok\"}"), 0);

  // The same file made valid applies.
  auto fixed =
      reload(gw, config_of(upstream_entry(mock, "mock") + model_on("renamed", "mock", "mock")));
  ASSERT_TRUE(fixed);
  EXPECT_NE(fixed->find("config reloaded"), std::string::npos) << *fixed;
  EXPECT_EQ(post(gw, "renamed").status, 200);
}

std::string key_entry(const std::string& name, const std::string& token, int max_in_flight) {
  return "[[keys]]\nname = \"" + name + "\"\nsha256 = \"" + sha256_hex(token) +
         "\"\nmodels = [\"*\"]\nmax_in_flight = " + std::to_string(max_in_flight) + "\n\n";
}

header_map bearer(const std::string& token) {
  return {{"authorization", "Bearer " + token}};
}

TEST(ReloadTest, KeysCapRaisedByAReloadAdmitsItsQueuedRequestAtOnce) {
  mock_server mock;
  const std::string token = "tok-reload-a-0123456789";
  const auto upstream = upstream_entry(mock, "mock") + model_on("slow", "mock", "mock-delay-3000");
  gateway_process gw{config_of(upstream + key_entry("team-a", token, 1))};

  auto first = std::async(std::launch::async, [&] { return post(gw, "slow", bearer(token)); });
  auto busy = mock.wait_for_stats([](const auto& s) { return stat(s, "active") == 1; });
  ASSERT_EQ(stat(busy, "active"), 1);
  auto second = std::async(std::launch::async, [&] { return post(gw, "slow", bearer(token)); });
  ASSERT_TRUE(await_metric(gw.port(), "tether_queue_depth", 1)) << "the second is not queued";

  const auto reloaded_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(reload(gw, config_of(upstream + key_entry("team-a", token, 2))));
  // The waiter is let through by the reload, not by the first request's end (3 s away).
  auto both = mock.wait_for_stats([](const auto& s) { return stat(s, "active") == 2; }, 2s);
  EXPECT_EQ(stat(both, "active"), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - reloaded_at, 2s);
  EXPECT_EQ(metric(gw.port(), "tether_queue_depth"), 0);
  EXPECT_EQ(first.get().status, 200);
  EXPECT_EQ(second.get().status, 200);

  // A key the file no longer has is refused; one it added is served.
  const std::string other = "tok-reload-b-9876543210";
  ASSERT_TRUE(reload(
      gw, config_of(upstream + model_on("fast", "mock", "mock") + key_entry("team-b", other, 0))));
  auto refused = post(gw, "fast", bearer(token));
  EXPECT_EQ(refused.status, 401);
  EXPECT_EQ(code_of(refused), "unauthorized");
  EXPECT_EQ(post(gw, "fast", bearer(other)).status, 200);
}

TEST(ReloadTest, ListenChangeIsLoggedAsNeedingARestartWhileTheRestApplies) {
  mock_server mock;
  const auto models = upstream_entry(mock, "mock") + model_on("hang", "mock", "mock-hang");
  gateway_process gw{config_of(models, "deadline_ms = 20000")};
  const auto from = gw.process().lines().size();
  auto moved = config_of(models, "deadline_ms = 300");
  moved.replace(moved.find("127.0.0.1:0"), std::string("127.0.0.1:0").size(), "127.0.0.1:1");
  auto line = reload(gw, moved);
  ASSERT_TRUE(line);
  EXPECT_NE(line->find("config reloaded"), std::string::npos) << *line;
  EXPECT_NE(line->find("[request] changed"), std::string::npos) << *line;
  auto warned = gw.process().wait_for_line(
      std::regex("server.listen changed in .*; it applies when tether is restarted"), 1s, from);
  EXPECT_TRUE(warned) << gw.process().output();

  // Still on the port it listens on, with the new deadline.
  const auto sent = std::chrono::steady_clock::now();
  auto r = post(gw, "hang");
  const auto took = std::chrono::steady_clock::now() - sent;
  EXPECT_EQ(r.status, 504);
  EXPECT_EQ(code_of(r), "deadline_exceeded");
  EXPECT_LT(took, 5s);
}

}  // namespace
}  // namespace tether::test
