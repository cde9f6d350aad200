// Request-body inspection and the model rewrite (actors/policy/model_request.hpp). Beyond "no
// crash": whatever inspect accepts, rewrite_model must change the `model` value and nothing
// else — byte for byte outside that one token — and the result must inspect to the new model.
#include <boost/json.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "actors/policy/model_request.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

// The gateway's default (config server.max_json_depth).
constexpr std::uint32_t max_depth = 128;

std::string quoted(std::string_view s) {
  return boost::json::serialize(boost::json::value(boost::json::string_view(s.data(), s.size())));
}

// The parsed document without its top-level "model" member (duplicate-free: inspect said so).
boost::json::object without_model(std::string_view body) {
  boost::json::parse_options opts;
  opts.max_depth = max_depth;
  auto object = boost::json::parse(body, {}, opts).as_object();
  object.erase("model");
  return object;
}

void check_rewrite(std::string_view body, const tether::model_request_info& info) {
  // Two replacements that differ from their first byte on: their common prefix ends exactly
  // where the model token starts.
  const std::string a = "a";
  const std::string b = "b-\"quoted\\\"\n\xc3\xbc";  // needs escaping; valid UTF-8
  const auto out_a = tether::rewrite_model(body, a);
  const auto out_b = tether::rewrite_model(body, b);
  const auto qa = quoted(a), qb = quoted(b);
  TETHER_FUZZ_CHECK(out_a.size() >= qa.size() && out_b.size() >= qb.size());
  TETHER_FUZZ_CHECK(out_a.size() - qa.size() == out_b.size() - qb.size());
  std::size_t common = 0;
  while (common < out_a.size() && common < out_b.size() && out_a[common] == out_b[common]) {
    ++common;
  }
  TETHER_FUZZ_CHECK(common >= 1);  // both tokens start with '"'
  const std::size_t prefix = common - 1;
  const std::size_t suffix = out_a.size() - prefix - qa.size();
  TETHER_FUZZ_CHECK(out_a.compare(prefix, qa.size(), qa) == 0);
  TETHER_FUZZ_CHECK(out_b.compare(prefix, qb.size(), qb) == 0);
  // Everything but the token is the caller's bytes, untouched.
  TETHER_FUZZ_CHECK(prefix + suffix <= body.size());
  TETHER_FUZZ_CHECK(body.substr(0, prefix) == std::string_view(out_a).substr(0, prefix));
  TETHER_FUZZ_CHECK(body.substr(body.size() - suffix) ==
                    std::string_view(out_a).substr(out_a.size() - suffix));
  TETHER_FUZZ_CHECK(std::string_view(out_b).substr(out_b.size() - suffix) ==
                    body.substr(body.size() - suffix));

  // The rewritten body inspects to the new model, with the same stream flag.
  for (const auto* out : {&out_a, &out_b}) {
    auto again = tether::inspect_model_request(*out, max_depth);
    const auto* info2 = std::get_if<tether::model_request_info>(&again);
    TETHER_FUZZ_CHECK(info2 != nullptr);
    TETHER_FUZZ_CHECK(info2->model == (out == &out_a ? a : b));
    TETHER_FUZZ_CHECK(info2->stream == info.stream);
  }
  // And parses to the same document apart from the model. Compared serialized: Boost.JSON 1.81
  // reads some numbers (e.g. 0E611111) as NaN, which is unequal to itself.
  TETHER_FUZZ_CHECK(boost::json::serialize(without_model(out_b)) ==
                    boost::json::serialize(without_model(body)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  auto result = tether::inspect_model_request(body, max_depth);
  if (const auto* info = std::get_if<tether::model_request_info>(&result)) {
    check_rewrite(body, *info);
  } else {
    TETHER_FUZZ_CHECK(!std::get<tether::body_error>(result).message.empty());
  }
  return 0;
}
