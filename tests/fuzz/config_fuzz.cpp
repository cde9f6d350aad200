// Config loading (config/loader.hpp load_string). Invariants: exactly one of config / errors;
// every error names the file; and an accepted config survives `tether check`: its rendering
// loads again (with the masked key digests put back) to a config that renders identically. Every
// input goes in, those with the code points toml++ 3.3.0 mishandles too: config/toml_guard.hpp
// must rewrite or refuse each one that would reach its undefined behaviour (UBSan reports any
// it misses).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "config/loader.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

const std::string source = "fuzz.toml";

// Every upstream key variable is set; the deadline overrides are not (they would hide the
// file's own values from the round trip check).
std::optional<std::string> fuzz_env(const std::string& name) {
  if (name.rfind("PROXY_", 0) == 0) return std::nullopt;
  return "sk-fuzz";
}

// render_effective prints each [[keys]] digest as "<masked>"; put them back, in order.
std::string unmask(std::string text, const tether::config::gateway_config& cfg) {
  const std::string masked = "\"<masked>\"";
  std::size_t at = 0;
  for (const auto& key : cfg.keys) {
    at = text.find(masked, at);
    TETHER_FUZZ_CHECK(at != std::string::npos);
    text.replace(at, masked.size(), "\"" + key.sha256_hex + "\"");
  }
  TETHER_FUZZ_CHECK(text.find(masked, at) == std::string::npos);
  return text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto first = tether::config::load_string(text, source, fuzz_env);
  TETHER_FUZZ_CHECK(first.config.has_value() == first.errors.empty());
  for (const auto& e : first.errors) TETHER_FUZZ_CHECK(e.rfind(source, 0) == 0);
  if (!first.config) return 0;

  const auto rendered = tether::config::render_effective(*first.config);
  auto second = tether::config::load_string(unmask(rendered, *first.config), source, fuzz_env);
  if (!second.config) {
    for (const auto& e : second.errors) std::fprintf(stderr, "reload: %s\n", e.c_str());
  }
  TETHER_FUZZ_CHECK(second.config.has_value());
  TETHER_FUZZ_CHECK(tether::config::render_effective(*second.config) == rendered);
  return 0;
}
