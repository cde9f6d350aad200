// tether-bench: runs the scenarios (bench/bench/*_scenario.cpp) against direct / nginx / tether and
// writes <out-dir>/<stamp>.json, .md and .svg. bench/run.sh starts the processes and calls it:
//
//   tether-bench --mock HOST:PORT[@PID] --target direct=HOST:PORT --target nginx=HOST:PORT@PID
//                --target tether=HOST:PORT@PID --out-dir DIR --stamp NAME
//                [--quick] [--scenarios 1,2,...] [--time-limit-s S] [--cap N] [--placement TEXT]
//                [--cluster-member HOST:PORT@PID]   (scenario 7: a node of a shared budget)
//                [--cluster-member-cold HOST:PORT@PID]   (a member that keeps no leases)
//                [--replicas-healthy HOST:PORT@PID --replicas-dead HOST:PORT@PID
//                 --replicas-ejecting HOST:PORT@PID]   (scenario 8: a dead replica among three)
//                [--tokens-node HOST:PORT@PID --slots-node HOST:PORT@PID]   (scenario 9: token
//                 weighting against a KV budget)
//                [--every-cpu-nginx HOST:PORT@PID --every-cpu-tether HOST:PORT@PID]   (scenario
//                 11: the proxies free to use every CPU)
//   tether-bench --print-tether-config --listen HOST:PORT --mock HOST:PORT [--cap N]
//                [--budget-listen HOST:PORT | --budget-host HOST:PORT [--lease-idle-ms N]]
//                [--replicas healthy|dead|ejecting [--dead-upstream HOST:PORT]]
//                [--token-node tokens|slots]
//   tether-bench --scenarios 12 --engine-log FILE --target direct=ENGINE --target nginx=…
//                --target tether=… --out-dir DIR --stamp NAME   (scenario 12, abandon: a real
//                 engine; bench/abandon.sh starts it; --mock is not needed)
//   tether-bench --scenarios 13 --engine-replica HOST:PORT... [--prefix-load-factor F]
//                --target least_work=… --target prefix=… --target nginx=… --out-dir DIR
//                --stamp NAME   (scenario 13, prefix: llama-server replicas; bench/prefix.sh
//                 starts them; --mock is not needed)
//   tether-bench --render DIR/NAME.json      (rewrites NAME.md and NAME.svg from the JSON)
#include <sys/resource.h>
#include <sys/utsname.h>

#include <charconv>
#include <csignal>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include <boost/asio/ip/address.hpp>
#include <boost/json.hpp>

#include "bench/bench/bench_context.hpp"
#include "bench/bench/report.hpp"
#include "bench/bench/scenarios.hpp"
#include "bench/bench/token_mix.hpp"

namespace {

namespace json = boost::json;
using namespace tether::bench;

constexpr const char* usage =
    "usage: tether-bench --mock HOST:PORT[@PID] --target NAME=HOST:PORT[@PID]... --out-dir DIR\n"
    "                    --stamp NAME [--quick] [--scenarios 1,2,3,4,5,6,7,8,9,10,11]\n"
    "                    [--time-limit-s S] [--cap N] [--placement TEXT]\n"
    "                    [--cluster-member HOST:PORT[@PID]]\n"
    "                    [--cluster-member-cold HOST:PORT[@PID]]\n"
    "                    [--replicas-healthy HOST:PORT[@PID] --replicas-dead HOST:PORT[@PID]\n"
    "                     --replicas-ejecting HOST:PORT[@PID]]\n"
    "                    [--tokens-node HOST:PORT[@PID] --slots-node HOST:PORT[@PID]]\n"
    "                    [--every-cpu-nginx HOST:PORT@PID --every-cpu-tether HOST:PORT@PID]\n"
    "                    [--engine-log FILE]   (scenario 12; then --mock is optional)\n"
    "                    [--engine-replica HOST:PORT]... [--prefix-load-factor F]   (scenario "
    "13)\n"
    "       tether-bench --print-tether-config --listen HOST:PORT --mock HOST:PORT [--cap N]\n"
    "                    [--budget-listen HOST:PORT | --budget-host HOST:PORT "
    "[--lease-idle-ms N]]\n"
    "                    [--replicas healthy|dead|ejecting [--dead-upstream HOST:PORT]]\n"
    "                    [--token-node tokens|slots]\n";

std::optional<tcp::endpoint> parse_endpoint(std::string_view text) {
  auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  boost::system::error_code ec;
  auto addr = boost::asio::ip::make_address(std::string(text.substr(0, colon)), ec);
  unsigned port = 0;
  auto p = text.substr(colon + 1);
  auto [ptr, perr] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec || perr != std::errc{} || ptr != p.data() + p.size() || port == 0 || port > 65535) {
    return std::nullopt;
  }
  return tcp::endpoint(addr, static_cast<std::uint16_t>(port));
}

std::string read_first_line(const std::string& path, const std::string& prefix = "") {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (prefix.empty()) return line;
    if (line.rfind(prefix, 0) == 0) {
      auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown";
}

std::string loadavg() {
  auto l = read_first_line("/proc/loadavg");
  std::istringstream in(l);
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// Indented JSON, for a results file people diff and read.
void pretty(std::ostream& os, const json::value& v, int indent = 0) {
  const std::string pad(indent, ' ');
  if (v.is_object()) {
    const auto& o = v.as_object();
    if (o.empty()) {
      os << "{}";
      return;
    }
    os << "{\n";
    std::size_t i = 0;
    for (const auto& [k, val] : o) {
      os << pad << "  " << json::serialize(json::value(k)) << ": ";
      pretty(os, val, indent + 2);
      os << (++i < o.size() ? ",\n" : "\n");
    }
    os << pad << "}";
  } else if (v.is_array() && !v.as_array().empty() && !v.as_array().front().is_number()) {
    const auto& a = v.as_array();
    os << "[\n";
    for (std::size_t i = 0; i < a.size(); ++i) {
      os << pad << "  ";
      pretty(os, a[i], indent + 2);
      os << (i + 1 < a.size() ? ",\n" : "\n");
    }
    os << pad << "]";
  } else {
    os << json::serialize(v);
  }
}

void raise_descriptor_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// The nodes some scenarios use beside the three main targets (HOST:PORT[@PID] each): the flag,
// the option it fills and the name the node's figures are reported under.
struct node_flag {
  std::string_view flag;
  std::optional<target> bench_options::*slot;
  std::string_view name;
};
const node_flag node_flags[] = {
    {"--cluster-member", &bench_options::cluster_member, "tether-member"},
    {"--cluster-member-cold", &bench_options::cluster_member_cold, "tether-member-cold"},
    {"--replicas-healthy", &bench_options::replicas_healthy, "replicas-healthy"},
    {"--replicas-dead", &bench_options::replicas_dead, "replicas-dead"},
    {"--replicas-ejecting", &bench_options::replicas_ejecting, "replicas-ejecting"},
    {"--tokens-node", &bench_options::tokens_node, "tether-tokens"},
    {"--slots-node", &bench_options::slots_node, "tether-slots"},
    {"--every-cpu-nginx", &bench_options::every_cpu_nginx, "nginx-every-cpu"},
    {"--every-cpu-tether", &bench_options::every_cpu_tether, "tether-every-cpu"},
};

const node_flag* node_flag_of(std::string_view arg) {
  for (const auto& n : node_flags) {
    if (n.flag == arg) return &n;
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  std::optional<tcp::endpoint> mock;
  std::vector<target> targets;
  bench_options options;
  std::string out_dir, stamp, listen, placement = "Placement not given.";
  bool print_config = false;
  std::string cluster;
  std::string lease_idle;
  std::optional<replica_mode> replicas;
  std::optional<token_node> token_node_config;
  std::string dead_upstream;
  double time_limit_s = 540;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << usage;
      return 0;
    }
    if (arg == "--quick") {
      options.quick = true;
      continue;
    }
    if (arg == "--render") {
      // Re-renders the .md and .svg of an earlier run from its .json.
      if (i + 1 >= argc) return 2;
      std::string path = argv[++i];
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      auto run = json::parse(text.str()).as_object();
      auto base = path.substr(0, path.size() - std::string(".json").size());
      auto name = base.substr(base.rfind('/') + 1);
      std::ofstream(base + ".svg") << latency_svg(run);
      std::ofstream(base + ".md") << markdown_report(run, name + ".svg");
      return 0;
    }
    if (arg == "--print-tether-config") {
      print_config = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::cerr << "tether-bench: " << arg << " needs a value\n" << usage;
      return 2;
    }
    std::string value = argv[++i];
    if (const auto* node = node_flag_of(arg)) {
      auto at = value.find('@');
      auto ep = parse_endpoint(std::string_view(value).substr(0, at));
      if (!ep) {
        std::cerr << "tether-bench: bad " << arg << " " << value << "\n";
        return 2;
      }
      auto& slot = options.*(node->slot);
      slot = target{std::string(node->name), *ep, std::nullopt};
      if (at != std::string::npos) slot->pid = std::stoi(value.substr(at + 1));
    } else if (arg == "--mock") {
      // The mock's pid is optional: only its CPU is read (scenario 10).
      const auto at = value.find('@');
      if (at != std::string::npos) options.mock_pid = std::stoi(value.substr(at + 1));
      mock = parse_endpoint(std::string_view(value).substr(0, at));
      if (!mock) {
        std::cerr << "tether-bench: bad --mock " << value << "\n";
        return 2;
      }
    } else if (arg == "--listen") {
      listen = value;
    } else if (arg == "--target") {
      auto eq = value.find('=');
      auto at = value.find('@');
      auto ep = eq == std::string::npos
                    ? std::nullopt
                    : parse_endpoint(std::string_view(value).substr(eq + 1, at - eq - 1));
      if (!ep) {
        std::cerr << "tether-bench: bad --target " << value << "\n";
        return 2;
      }
      target t{value.substr(0, eq), *ep, std::nullopt};
      if (at != std::string::npos) t.pid = std::stoi(value.substr(at + 1));
      targets.push_back(t);
    } else if (arg == "--engine-replica") {
      auto ep = parse_endpoint(value);
      if (!ep) {
        std::cerr << "tether-bench: bad --engine-replica " << value << "\n";
        return 2;
      }
      options.engine_replicas.push_back(*ep);
    } else if (arg == "--prefix-load-factor") {
      options.prefix_load_factor = std::stod(value);
    } else if (arg == "--out-dir") {
      out_dir = value;
    } else if (arg == "--stamp") {
      stamp = value;
    } else if (arg == "--scenarios") {
      options.scenarios.clear();
      std::istringstream in(value);
      std::string n;
      while (std::getline(in, n, ',')) options.scenarios.push_back(std::stoi(n));
    } else if (arg == "--time-limit-s") {
      time_limit_s = std::stod(value);
    } else if (arg == "--cap") {
      options.budget_cap = static_cast<unsigned>(std::stoul(value));
    } else if (arg == "--budget-listen") {
      cluster = "budget_listen = \"" + value + "\"";
    } else if (arg == "--budget-host") {
      cluster = "budget_host = \"" + value + "\"";
    } else if (arg == "--lease-idle-ms") {
      lease_idle = "\nlease_idle_ms = " + std::to_string(std::stoul(value));
    } else if (arg == "--token-node") {
      if (value == "tokens") {
        token_node_config = token_node::tokens;
      } else if (value == "slots") {
        token_node_config = token_node::slots;
      } else {
        std::cerr << "tether-bench: bad --token-node " << value << "\n";
        return 2;
      }
    } else if (arg == "--replicas") {
      if (value == "healthy") {
        replicas = replica_mode::healthy;
      } else if (value == "dead") {
        replicas = replica_mode::dead;
      } else if (value == "ejecting") {
        replicas = replica_mode::ejecting;
      } else {
        std::cerr << "tether-bench: bad --replicas " << value << "\n";
        return 2;
      }
    } else if (arg == "--dead-upstream") {
      if (!parse_endpoint(value)) {
        std::cerr << "tether-bench: bad --dead-upstream " << value << "\n";
        return 2;
      }
      dead_upstream = value;
    } else if (arg == "--engine-log") {
      options.engine_log = value;
    } else if (arg == "--placement") {
      placement = value;
    } else {
      std::cerr << "tether-bench: unknown option " << arg << "\n" << usage;
      return 2;
    }
  }
  if (print_config) {
    if (listen.empty() || !mock) {
      std::cerr << usage;
      return 2;
    }
    const auto mock_text = mock->address().to_string() + ":" + std::to_string(mock->port());
    if (token_node_config) {
      std::cout << token_budget_config(listen, mock_text, *token_node_config);
      return 0;
    }
    if (replicas) {
      if (*replicas != replica_mode::healthy && dead_upstream.empty()) {
        std::cerr << "tether-bench: --replicas dead|ejecting needs --dead-upstream\n";
        return 2;
      }
      std::cout << replica_config(listen, mock_text, *replicas, dead_upstream);
      return 0;
    }
    std::cout << tether_config(listen, mock_text, options.budget_cap,
                               cluster.empty() ? cluster : cluster + lease_idle);
    return 0;
  }
  // Scenarios 12 and 13 talk to engines, not to the mock.
  const bool engine_only =
      options.scenarios == std::vector<int>{12} || options.scenarios == std::vector<int>{13};
  if ((!mock && !engine_only) || targets.empty() || out_dir.empty() || stamp.empty()) {
    std::cerr << usage;
    return 2;
  }
  raise_descriptor_limit();
  const auto started = steady::now();
  options.hard_deadline =
      started + std::chrono::milliseconds(static_cast<long>(time_limit_s * 1000));
  bench_context ctx(targets, mock.value_or(tcp::endpoint{}), options);

  json::object machine;
  utsname uts{};
  uname(&uts);
  machine["cpu"] = read_first_line("/proc/cpuinfo", "model name");
  machine["cores"] = std::thread::hardware_concurrency();
  machine["kernel"] = std::string(uts.release);
  machine["loadavg_start"] = loadavg();
  machine["placement"] = placement;

  // Idle resident sets, before any request: the baseline of the memory scenario.
  std::map<std::string, double> idle_kib;
  for (const auto& t : ctx.targets()) {
    if (auto rss = ctx.rss_kib(t)) idle_kib[t.name] = *rss;
  }

  json::object scenarios;
  auto wanted = [&](int n) {
    return std::find(options.scenarios.begin(), options.scenarios.end(), n) !=
           options.scenarios.end();
  };
  auto run = [&](int n, const char* name, auto&& fn) {
    if (!wanted(n)) return;
    if (ctx.out_of_time()) {
      std::cerr << "tether-bench: time limit reached, skipping " << name << "\n";
      scenarios[name] = json::object{{"name", name}, {"skipped", "time limit"}};
      return;
    }
    auto t0 = steady::now();
    std::cerr << "tether-bench: scenario " << n << " (" << name << ")...\n";
    try {
      scenarios[name] = fn();
    } catch (const std::exception& e) {
      std::cerr << "tether-bench: scenario " << name << " failed: " << e.what() << "\n";
      scenarios[name] = json::object{{"name", name}, {"error", e.what()}};
    }
    std::cerr << "tether-bench:   " << name << " took "
              << std::chrono::duration<double>(steady::now() - t0).count() << " s\n";
  };
  run(1, "overhead", [&] { return run_overhead(ctx); });
  run(2, "streaming", [&] { return run_streaming(ctx); });
  run(3, "cancellation", [&] { return run_cancellation(ctx); });
  run(4, "deadline_storm", [&] { return run_deadline_storm(ctx); });
  run(5, "budget", [&] { return run_budget(ctx); });
  run(7, "shared_budget", [&] { return run_shared_budget(ctx); });
  run(8, "dead_replica", [&] { return run_dead_replica(ctx); });
  run(9, "token_budget", [&] { return run_token_budget(ctx); });
  run(10, "streaming_throughput", [&] { return run_streaming_throughput(ctx); });
  run(11, "every_cpu", [&] { return run_every_cpu(ctx); });
  run(12, "abandon", [&] { return run_abandon(ctx); });
  run(13, "prefix", [&] { return run_prefix(ctx); });
  // Last: it grows every proxy's memory for good.
  run(6, "memory", [&] { return run_memory(ctx, idle_kib); });

  machine["loadavg_end"] = loadavg();
  json::object result{{"date", stamp},
                      {"mode", options.quick ? "quick" : "full"},
                      {"elapsed_s", std::chrono::duration<double>(steady::now() - started).count()},
                      {"machine", std::move(machine)},
                      {"scenarios", std::move(scenarios)}};

  bool all_met = true;
  for (const auto& [name, s] : result.at("scenarios").as_object()) {
    if (const auto* checks = s.as_object().if_contains("checks")) {
      for (const auto& c : checks->as_array()) {
        const auto& o = c.as_object();
        bool met = o.at("met").as_bool();
        all_met = all_met && met;
        std::cerr << (met ? "  met    " : "  MISSED ") << name << ": "
                  << json::value_to<std::string>(o.at("target")) << " "
                  << json::value_to<std::string>(o.at("what")) << " = "
                  << o.at("value").to_number<double>() << " ("
                  << json::value_to<std::string>(o.at("limit")) << ")\n";
      }
    }
  }
  const std::string base = out_dir + "/" + stamp;
  {
    std::ofstream out(base + ".json");
    pretty(out, result);
    out << "\n";
  }
  std::ofstream(base + ".svg") << latency_svg(result);
  std::ofstream(base + ".md") << markdown_report(result, stamp + ".svg");
  std::cerr << "tether-bench: wrote " << base << ".{json,md,svg}\n";
  return all_met ? 0 : 3;
}
