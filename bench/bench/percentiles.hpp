// Latency summaries from every sample, sorted: exact nearest-rank percentiles, no histogram
// buckets (a bench run holds at most a few hundred thousand samples).
#pragma once

#include <cstddef>
#include <vector>

#include <boost/json/object.hpp>

namespace tether::bench {

struct summary {
  std::size_t n = 0;
  double min = 0, mean = 0, p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0;
};

// The nearest-rank percentile q (0..100] of sorted samples; 0 when there are none.
double percentile(const std::vector<double>& sorted, double q);
summary summarize(std::vector<double> samples);
boost::json::object to_json(const summary& s);

}  // namespace tether::bench
