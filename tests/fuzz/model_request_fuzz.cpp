// Request-body inspection and the model rewrite (actors/policy/wire/model_request.hpp). Beyond "no
// crash": inspect answers as the document-building reference below does, to the letter of its
// error messages; whatever inspect accepts, rewrite_model must change the `model` value and
// nothing else — byte for byte outside that one token — and the result must inspect to the new
// model.
#include <algorithm>
#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "actors/policy/routing/response_affinity.hpp"
#include "actors/policy/wire/model_request.hpp"
#include "actors/policy/wire/usage.hpp"
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

// Every key of the top-level object, decoded, in order, duplicates included.
struct key_lister {
  static constexpr std::size_t max_array_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_object_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_string_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_key_size = static_cast<std::size_t>(-1);
  using ec_t = boost::json::error_code;
  using sv = boost::json::string_view;
  std::vector<std::string> keys;
  std::string part;
  int depth = 0;
  bool on_document_begin(ec_t&) { return true; }
  bool on_document_end(ec_t&) { return true; }
  bool on_object_begin(ec_t&) { return ++depth, true; }
  bool on_object_end(std::size_t, ec_t&) { return --depth, true; }
  bool on_array_begin(ec_t&) { return ++depth, true; }
  bool on_array_end(std::size_t, ec_t&) { return --depth, true; }
  bool on_key_part(sv s, std::size_t, ec_t&) { return part.append(s.data(), s.size()), true; }
  bool on_key(sv s, std::size_t, ec_t&) {
    part.append(s.data(), s.size());
    if (depth == 1) keys.push_back(part);
    part.clear();
    return true;
  }
  bool on_string_part(sv, std::size_t, ec_t&) { return true; }
  bool on_string(sv, std::size_t, ec_t&) { return true; }
  bool on_number_part(sv, ec_t&) { return true; }
  bool on_int64(std::int64_t, sv, ec_t&) { return true; }
  bool on_uint64(std::uint64_t, sv, ec_t&) { return true; }
  bool on_double(double, sv, ec_t&) { return true; }
  bool on_bool(bool, ec_t&) { return true; }
  bool on_null(ec_t&) { return true; }
  bool on_comment_part(sv, ec_t&) { return true; }
  bool on_comment(sv, ec_t&) { return true; }
};

std::vector<std::string> top_level_keys(std::string_view body) {
  boost::json::parse_options opts;
  opts.max_depth = max_depth;
  boost::json::basic_parser<key_lister> p{opts};
  boost::system::error_code ec;
  p.write_some(false, body.data(), body.size(), ec);
  return std::move(p.handler().keys);
}

// What inspect_model_request answered when it built the document with boost::json::parse (before
// it read the facts while the parser validated, with no document): the reference it must agree
// with, error messages included.
std::variant<tether::model_request_info, tether::body_error> reference_inspect(
    std::string_view body) {
  if (body.empty()) return tether::body_error{"request body is empty; a JSON object is required"};
  boost::json::parse_options opts;
  opts.max_depth = max_depth;
  boost::system::error_code ec;
  auto doc = boost::json::parse(body, ec, {}, opts);
  if (ec) {
    if (ec == boost::json::error::too_deep) {
      return tether::body_error{"request JSON is nested deeper than " + std::to_string(max_depth)};
    }
    return tether::body_error{"request body is not valid JSON (" + ec.message() + ")"};
  }
  if (!doc.is_object()) return tether::body_error{"request body must be a JSON object"};
  // The document keeps one member per key: the top-level keys are listed by a parser of their own.
  const auto keys = top_level_keys(body);
  if (std::count(keys.begin(), keys.end(), "model") > 1)
    return tether::body_error{"request body has more than one `model` key"};
  const auto& obj = doc.as_object();
  auto it = obj.find("model");
  if (it == obj.end()) return tether::body_error{"`model` is required"};
  if (!it->value().is_string()) return tether::body_error{"`model` must be a string"};
  tether::model_request_info info;
  info.model = std::string(it->value().as_string());
  if (auto s = obj.find("stream"); s != obj.end()) {
    if (s->value().is_bool()) {
      info.stream = s->value().as_bool();
    } else if (!s->value().is_null()) {
      return tether::body_error{"`stream` must be a boolean"};
    }
  }
  for (const char* name : {"max_tokens", "max_completion_tokens", "max_output_tokens"}) {
    const auto* v = obj.if_contains(name);
    std::optional<std::uint64_t> n;
    if (v != nullptr && v->is_int64() && v->as_int64() >= 0)
      n = static_cast<std::uint64_t>(v->as_int64());
    if (v != nullptr && v->is_uint64()) n = v->as_uint64();
    if (n && (!info.max_output_tokens || *n > *info.max_output_tokens)) info.max_output_tokens = n;
  }
  return info;
}

// A Responses follow-up's previous_response_id: exactly the document's top-level string member
// (when 1–256 bytes), found whatever else the body holds.
void check_previous_response_id(std::string_view body) {
  boost::json::parse_options opts;
  opts.max_depth = max_depth;
  const auto doc = boost::json::parse(body, {}, opts).as_object();
  std::optional<std::string> expected;
  if (const auto* v = doc.if_contains("previous_response_id");
      v != nullptr && v->is_string() && !v->get_string().empty() && v->get_string().size() <= 256)
    expected = std::string(v->get_string());
  TETHER_FUZZ_CHECK(tether::previous_response_id_of(body) == expected);
}

// The usage reader (it reads upstream answers, but any JSON text will do): on a document whose
// only "usage" is its top-level member, it reads what the document holds there.
void check_usage(std::string_view body) {
  const auto found = tether::usage_of(body);
  const auto first = body.find("\"usage\"");
  if (first == std::string_view::npos) {
    TETHER_FUZZ_CHECK(!found);
    return;
  }
  if (body.find("\"usage\"", first + 1) != std::string_view::npos) return;
  boost::json::parse_options opts;
  opts.max_depth = max_depth;
  boost::system::error_code ec;
  const auto doc = boost::json::parse(body, ec, {}, opts);
  if (ec || !doc.is_object()) return;
  const auto* u = doc.as_object().if_contains("usage");
  if (u == nullptr || !u->is_object()) return;
  auto count = [&](std::string_view name) -> std::optional<std::uint64_t> {
    const auto* v = u->as_object().if_contains(name);
    if (v != nullptr && v->is_int64() && v->as_int64() >= 0)
      return static_cast<std::uint64_t>(v->as_int64());
    if (v != nullptr && v->is_uint64()) return v->as_uint64();
    return std::nullopt;
  };
  // Deeper than the reader's own limit it refuses; Anthropic's cache counts add to the input.
  if (!found) return;
  const auto prompt = count("prompt_tokens");
  if (prompt) TETHER_FUZZ_CHECK(found->prompt == prompt);
  const auto completion =
      count("completion_tokens") ? count("completion_tokens") : count("output_tokens");
  TETHER_FUZZ_CHECK(found->completion == completion);
  // The cached part: the first details object's cached_tokens there is, else Anthropic's count.
  auto cached_in = [&](std::string_view details) -> std::optional<std::uint64_t> {
    const auto* d = u->as_object().if_contains(details);
    if (d == nullptr || !d->is_object()) return std::nullopt;
    const auto* v = d->as_object().if_contains("cached_tokens");
    if (v != nullptr && v->is_int64() && v->as_int64() >= 0)
      return static_cast<std::uint64_t>(v->as_int64());
    if (v != nullptr && v->is_uint64()) return v->as_uint64();
    return std::nullopt;
  };
  auto cached = cached_in("prompt_tokens_details");
  if (!cached) cached = cached_in("input_tokens_details");
  if (!cached) cached = count("cache_read_input_tokens");
  TETHER_FUZZ_CHECK(found->cached == cached);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  check_usage(body);
  auto result = tether::inspect_model_request(body, max_depth);
  // The same answer as the document-building reference, to the letter.
  const auto reference = reference_inspect(body);
  TETHER_FUZZ_CHECK(result.index() == reference.index());
  if (const auto* info = std::get_if<tether::model_request_info>(&result)) {
    const auto& ref = std::get<tether::model_request_info>(reference);
    TETHER_FUZZ_CHECK(info->model == ref.model);
    TETHER_FUZZ_CHECK(info->stream == ref.stream);
    TETHER_FUZZ_CHECK(info->max_output_tokens == ref.max_output_tokens);
  } else {
    TETHER_FUZZ_CHECK(std::get<tether::body_error>(result).message ==
                      std::get<tether::body_error>(reference).message);
  }
  if (const auto* info = std::get_if<tether::model_request_info>(&result)) {
    check_rewrite(body, *info);
    check_previous_response_id(body);
  } else {
    TETHER_FUZZ_CHECK(!std::get<tether::body_error>(result).message.empty());
  }
  return 0;
}
