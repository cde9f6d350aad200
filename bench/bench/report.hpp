// Turns the run's JSON into what people read: a Markdown report and an SVG latency chart
// (hand-written SVG: opens in any browser, no plotting package needed).
#pragma once

#include <string>

#include <boost/json/object.hpp>

namespace tether::bench {

// `svg_name` is the chart's file name, linked from the Markdown.
std::string markdown_report(const boost::json::object& run, const std::string& svg_name);
std::string latency_svg(const boost::json::object& run);

}  // namespace tether::bench
