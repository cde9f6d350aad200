#include "bench/bench/percentiles.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tether::bench {

double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  auto rank = static_cast<std::size_t>(std::ceil(q / 100.0 * static_cast<double>(sorted.size())));
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

summary summarize(std::vector<double> samples) {
  summary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.n = samples.size();
  s.min = samples.front();
  s.max = samples.back();
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(s.n);
  s.p50 = percentile(samples, 50);
  s.p90 = percentile(samples, 90);
  s.p99 = percentile(samples, 99);
  s.p999 = percentile(samples, 99.9);
  return s;
}

boost::json::object to_json(const summary& s) {
  auto r3 = [](double v) { return std::round(v * 1000.0) / 1000.0; };
  return {{"n", s.n},         {"min", r3(s.min)}, {"mean", r3(s.mean)}, {"p50", r3(s.p50)},
          {"p90", r3(s.p90)}, {"p99", r3(s.p99)}, {"p999", r3(s.p999)}, {"max", r3(s.max)}};
}

}  // namespace tether::bench
