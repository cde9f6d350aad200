// The prefix-routing key (actors/policy/wire/affinity_key.hpp) and the body walk under it
// (json_scanner.hpp). Beyond "no crash, no read past the body" (the input is a heap block of
// exactly the fuzzer's bytes, so ASan sees any read beyond it): on every body boost::json::parse
// accepts as an object, for every surface and several prefix lengths, the canonical prefix is
// exactly the one built below from the parsed document by the header's definition, and the key
// is the caller's (prompt_cache_key, then the header) or that prefix's hash, or none when the
// prefix is empty. On any bytes at all, every answer is the same twice, no prefix is longer than
// asked, and no more bytes are counted as parsed than the body has.
#include <array>
#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "actors/policy/routing/prefix_ring.hpp"
#include "actors/policy/wire/affinity_key.hpp"
#include "config/surface.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

// The gateway's default (config server.max_json_depth): deeper bodies never reach the key.
constexpr std::uint32_t max_depth = 128;

// The seed of a prompt's hash: "prefix" in ASCII, as affinity_key.cpp has it.
constexpr std::uint64_t prefix_seed = 0x707265666978ULL;

constexpr std::array surfaces{tether::surface::chat,       tether::surface::completions,
                              tether::surface::embeddings, tether::surface::responses,
                              tether::surface::messages,   tether::surface::count_tokens};
// Empty, cut inside the first role, inside the first record, the default, and unbounded.
constexpr std::array<std::uint32_t, 8> prefix_lengths{0, 1, 5, 9, 64, 300, 2048, 0xffffffffU};

std::string record(std::string_view role, std::string_view text) {
  std::string out(role);
  out += '\x1f';
  out += text;
  out += '\x1e';
  return out;
}

std::string_view view(const boost::json::string& s) {
  return {s.data(), s.size()};
}

// A system prompt: a string, or a list of strings and {"text": "..."} blocks, joined; one
// "system" record when there is any text at all.
std::string system_records(const boost::json::value& v) {
  if (v.is_string()) return record("system", view(v.get_string()));
  if (!v.is_array()) return {};
  std::string text;
  bool any = false;
  for (const auto& e : v.get_array()) {
    if (e.is_string()) {
      text += view(e.get_string());
      any = true;
    } else if (const auto* t = e.is_object() ? e.get_object().if_contains("text") : nullptr;
               t != nullptr && t->is_string()) {
      text += view(t->get_string());
      any = true;
    }
  }
  return any ? record("system", text) : std::string{};
}

// A message's text: a string content, or the strings and the `text` members of the parts of a
// content list, joined.
std::string content_text(const boost::json::value* content) {
  if (content == nullptr) return {};
  if (content->is_string()) return std::string(view(content->get_string()));
  std::string text;
  if (!content->is_array()) return text;
  for (const auto& part : content->get_array()) {
    if (part.is_string()) {
      text += view(part.get_string());
    } else if (const auto* t = part.is_object() ? part.get_object().if_contains("text") : nullptr;
               t != nullptr && t->is_string()) {
      text += view(t->get_string());
    }
  }
  return text;
}

// A list of {role, content} (a record each that has a non-empty string role); a bare string is
// one "user" record.
std::string message_records(const boost::json::value& v) {
  if (v.is_string()) return record("user", view(v.get_string()));
  std::string out;
  if (!v.is_array()) return out;
  for (const auto& m : v.get_array()) {
    if (!m.is_object()) continue;
    const auto* role = m.get_object().if_contains("role");
    if (role == nullptr || !role->is_string() || role->get_string().empty()) continue;
    out += record(view(role->get_string()), content_text(m.get_object().if_contains("content")));
  }
  return out;
}

// A prompt (completions, embeddings): a string, or a list whose strings are a "user" record
// each (token ids have no text).
std::string prompt_records(const boost::json::value& v) {
  if (v.is_string()) return record("user", view(v.get_string()));
  std::string out;
  if (!v.is_array()) return out;
  for (const auto& e : v.get_array())
    if (e.is_string()) out += record("user", view(e.get_string()));
  return out;
}

// The whole canonical prompt of `doc` on surface `where`: the system part first.
std::string reference_canonical(tether::surface where, const boost::json::object& doc) {
  auto member = [&](std::string_view name) { return doc.if_contains(name); };
  std::string out;
  switch (where) {
    case tether::surface::chat:
      if (const auto* m = member("messages")) out += message_records(*m);
      break;
    case tether::surface::completions:
      if (const auto* p = member("prompt")) out += prompt_records(*p);
      break;
    case tether::surface::embeddings:
      if (const auto* p = member("input")) out += prompt_records(*p);
      break;
    case tether::surface::responses:
      if (const auto* s = member("instructions")) out += system_records(*s);
      if (const auto* m = member("input")) out += message_records(*m);
      break;
    case tether::surface::messages:
    case tether::surface::count_tokens:
      if (const auto* s = member("system")) out += system_records(*s);
      if (const auto* m = member("messages")) out += message_records(*m);
      break;
  }
  return out;
}

// Whether some object below the top level repeats a key. The document keeps one value per key
// (the last); the streaming reader reads a message's members as they come and may have used an
// earlier value before the repeat arrives (it stops once the prefix is full), so such bodies
// have no single "document" answer to compare with. The top level's repeats are compared: the
// scanner keeps the last value, as the document does.
struct nested_repeat_finder {
  static constexpr std::size_t max_array_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_object_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_string_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_key_size = static_cast<std::size_t>(-1);
  using ec_t = boost::json::error_code;
  using sv = boost::json::string_view;
  std::vector<std::set<std::string>> objects;  // the keys of each open object; arrays: none
  std::vector<bool> is_object;
  std::string part;
  bool repeat = false;
  bool on_document_begin(ec_t&) { return true; }
  bool on_document_end(ec_t&) { return true; }
  bool on_object_begin(ec_t&) {
    objects.emplace_back();
    is_object.push_back(true);
    return true;
  }
  bool on_object_end(std::size_t, ec_t&) {
    objects.pop_back();
    is_object.pop_back();
    return true;
  }
  bool on_array_begin(ec_t&) {
    is_object.push_back(false);
    return true;
  }
  bool on_array_end(std::size_t, ec_t&) {
    is_object.pop_back();
    return true;
  }
  bool on_key_part(sv s, std::size_t, ec_t&) { return part.append(s.data(), s.size()), true; }
  bool on_key(sv s, std::size_t, ec_t&) {
    part.append(s.data(), s.size());
    if (is_object.size() > 1 && !objects.back().insert(part).second) repeat = true;
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

bool repeats_a_nested_key(std::string_view body) {
  boost::json::parse_options opts;
  opts.max_depth = max_depth;
  boost::json::basic_parser<nested_repeat_finder> p{opts};
  boost::system::error_code ec;
  p.write_some(false, body.data(), body.size(), ec);
  return p.handler().repeat;
}

// Any body, valid or not: every call answers, twice the same, and counts no more bytes parsed
// than the body has.
void check_any(std::string_view body) {
  const std::string header = "session-1";
  const std::string empty;
  for (const auto where : surfaces) {
    for (const auto n : {std::uint32_t{0}, std::uint32_t{9}, std::uint32_t{2048}}) {
      std::size_t parsed = 0;
      const auto prefix = tether::canonical_prefix(where, body, n, &parsed);
      TETHER_FUZZ_CHECK(prefix.size() <= n);
      TETHER_FUZZ_CHECK(parsed <= body.size());
      TETHER_FUZZ_CHECK(tether::canonical_prefix(where, body, n) == prefix);
      const auto key = tether::affinity_key(where, body, nullptr, n);
      TETHER_FUZZ_CHECK(tether::affinity_key(where, body, nullptr, n) == key);
      TETHER_FUZZ_CHECK(tether::affinity_key(where, body, &empty, n) == key);
      TETHER_FUZZ_CHECK(tether::affinity_key(where, body, &header, n).has_value());
    }
  }
}

// A body the gateway accepts (valid JSON, an object): the scanner's answers are the document's.
void check_document(std::string_view body, const boost::json::object& doc) {
  const bool comparable = !repeats_a_nested_key(body);
  const std::string header = "session-1";
  // The caller's own key: a non-empty string prompt_cache_key, else the header. It names the
  // same key as the header of that value (and what an empty object with that header gets).
  std::optional<std::string> caller;
  if (const auto* k = doc.if_contains("prompt_cache_key");
      k != nullptr && k->is_string() && !k->get_string().empty())
    caller = std::string(view(k->get_string()));
  for (const auto where : surfaces) {
    const auto canonical = reference_canonical(where, doc);
    for (const auto n : prefix_lengths) {
      const auto prefix = tether::canonical_prefix(where, body, n);
      if (comparable) {
        TETHER_FUZZ_CHECK(prefix == std::string_view(canonical).substr(0, n));
      }
      const auto key = tether::affinity_key(where, body, nullptr, n);
      const auto with_header = tether::affinity_key(where, body, &header, n);
      if (caller) {
        const auto expected = tether::affinity_key(where, "{}", &*caller, n);
        TETHER_FUZZ_CHECK(expected.has_value());
        TETHER_FUZZ_CHECK(key == expected);
        TETHER_FUZZ_CHECK(with_header == expected);
      } else {
        TETHER_FUZZ_CHECK(with_header == tether::affinity_key(where, "{}", &header, n));
        // No caller key: the prompt's, none when the prompt has no record.
        TETHER_FUZZ_CHECK(key.has_value() == !prefix.empty());
        if (key) TETHER_FUZZ_CHECK(*key == tether::hash_bytes(prefix, prefix_seed));
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Exactly the input's bytes in a block of their own: a read one past the end is ASan's to see.
  const auto copy = std::make_unique<char[]>(size);
  if (size != 0) std::memcpy(copy.get(), data, size);
  const std::string_view body(copy.get(), size);

  check_any(body);
  boost::json::parse_options opts;
  opts.max_depth = max_depth;
  boost::system::error_code ec;
  const auto doc = boost::json::parse(body, ec, {}, opts);
  if (!ec && doc.is_object()) check_document(body, doc.get_object());
  return 0;
}
