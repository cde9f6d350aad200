// tether-ledger-load: whether one ledger actor keeps up with a request rate. It is given what
// request actors give it — one record per request, from two threads — at RATE per second for
// SECONDS, over KEYS keys × 4 models × 2 upstreams: in its tally (MODE tally: requests whose key
// has no budgets) or as a message each (MODE messages: every key with budgets, the worst case),
// writing a real SQLite file every flush interval (1 s, the default). Every 50 ms a probe asks the
// actor how many rows wait for the file; the answer comes after every record sent before it, so its
// round trip is the queue's length in time. The actor keeps up when that stays short and does not
// grow over the run.
//
// Usage: tether-ledger-load RATE SECONDS KEYS [tally|messages] — prints one JSON line and
// "met"/"MISSED".
#include <caf/all.hpp>

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "actors/ledger_actor.hpp"
#include "net/io_group.hpp"
#include "net/io_runtime.hpp"
#include "net/timer_service.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: tether-ledger-load RATE SECONDS KEYS [tally|messages]\n");
    return 2;
  }
  const bool messages = argc == 5 && std::string_view{argv[4]} == "messages";
  const double rate = std::atof(argv[1]);
  const double seconds = std::atof(argv[2]);
  const int keys = std::max(1, std::atoi(argv[3]));
  const auto dir =
      std::filesystem::temp_directory_path() / ("tether-ledger-load-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  int code = 0;
  {
    caf::actor_system_config cfg;
    cfg.set("scheduler.max-threads", 2);
    caf::actor_system system{cfg};
    tether::net::io_runtime io;  // the flush timer's thread
    const tether::net::io_group group{std::vector<tether::net::io_runtime*>{&io}};
    auto timers = tether::net::make_io_timer_service(group);
    auto store = std::make_shared<tether::ledger::ledger_store>(dir / "ledger.db");
    auto tally = std::make_shared<tether::ledger::ledger_tally>();
    auto ledger = system.spawn<caf::detached>(
        tether::ledger_actor,
        tether::ledger_setup{
            store, std::chrono::milliseconds(1000), nullptr, timers.get(), {}, tally});

    std::vector<std::string> key_names;
    for (int k = 0; k < keys; ++k) key_names.push_back("key-" + std::to_string(k));
    const std::vector<std::string> models{"gpt-a", "gpt-b", "llama-c", "qwen-d"};
    const std::vector<std::string> upstreams{"east", "west"};

    // Two senders, as two io threads' request actors would be, each pacing half the rate in
    // steps of 1 ms.
    std::atomic<std::uint64_t> sent{0};
    const auto start = clock_type::now();
    const auto until = start + std::chrono::duration_cast<clock_type::duration>(
                                   std::chrono::duration<double>(seconds));
    auto sender = [&](int which) {
      std::uint64_t mine = 0;
      std::uint64_t i = static_cast<std::uint64_t>(which);
      for (auto now = clock_type::now(); now < until; now = clock_type::now()) {
        const double due = rate / 2 * std::chrono::duration<double>(now - start).count();
        while (static_cast<double>(mine) < due) {
          tether::ledger::ledger_entry e;
          e.key = key_names[i % key_names.size()];
          e.model = models[(i / 7) % models.size()];
          e.upstream = upstreams[(i / 3) % upstreams.size()];
          e.usage.prompt = 100 + i % 50;
          e.usage.completion = 20 + i % 30;
          e.usage.cached = i % 64;
          if (messages) {
            caf::anon_send(ledger, tether::ledger_record_atom::value, std::move(e));
          } else {
            tally->add(e.key, e.model, e.upstream, e.usage);
          }
          ++mine;
          i += 2;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      sent += mine;
    };
    std::thread a{sender, 0};
    std::thread b{sender, 1};

    std::vector<double> probe_ms;
    caf::scoped_actor self{system};
    while (clock_type::now() < until) {
      const auto asked = clock_type::now();
      self->request(ledger, std::chrono::seconds(30), tether::ledger_pending_atom::value)
          .receive([](std::uint64_t) {}, [](caf::error&) {});
      probe_ms.push_back(
          std::chrono::duration<double, std::milli>(clock_type::now() - asked).count());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    a.join();
    b.join();
    // Everything sent, then a flush: the time it takes is what was left in the queue.
    const auto drained_from = clock_type::now();
    self->request(ledger, std::chrono::seconds(60), tether::ledger_flush_atom::value)
        .receive([](std::uint64_t) {}, [](caf::error&) {});
    const double drain_ms =
        std::chrono::duration<double, std::milli>(clock_type::now() - drained_from).count();
    self->send_exit(ledger, caf::exit_reason::user_shutdown);
    self->wait_for(ledger);

    std::uint64_t stored = 0;
    for (const auto& [key, t] : store->totals_per_key(std::numeric_limits<std::int64_t>::min(),
                                                      std::numeric_limits<std::int64_t>::max()))
      stored += t.requests;
    std::sort(probe_ms.begin(), probe_ms.end());
    const double p50 = probe_ms.empty() ? 0 : probe_ms[probe_ms.size() / 2];
    const double max = probe_ms.empty() ? 0 : probe_ms.back();
    // The second half's probes against the first's: a queue that grows shows there.
    const double achieved = static_cast<double>(sent.load()) / seconds;
    std::printf(
        "{\"mode\":\"%s\",\"rate\":%.0f,\"achieved\":%.0f,\"sent\":%llu,\"stored\":%llu,\"probes\":"
        "%zu,"
        "\"probe_p50_ms\":%.2f,\"probe_max_ms\":%.2f,\"final_drain_ms\":%.2f}\n",
        messages ? "messages" : "tally", rate, achieved,
        static_cast<unsigned long long>(sent.load()), static_cast<unsigned long long>(stored),
        probe_ms.size(), p50, max, drain_ms);
    // Kept up: every record stored, and no probe waited as long as a flush interval.
    const bool kept_up = stored == sent.load() && max < 1000.0 && drain_ms < 1000.0;
    std::fprintf(stderr, "  %s ledger (%s): %.0f records/s, queue at most %.1f ms, %llu stored\n",
                 kept_up ? "met" : "MISSED", messages ? "messages" : "tally", achieved, max,
                 static_cast<unsigned long long>(stored));
    code = kept_up ? 0 : 3;
  }
  std::filesystem::remove_all(dir);
  return code;
}
