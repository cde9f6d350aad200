// The effective config as TOML for `tether check`. Written by hand rather than through toml++'s
// formatter: the output keeps the file's section order and carries comments (key set/missing,
// a model's effective [request] values), and toml++'s formatter would sort keys and drop both.
// Each section's keys, their order and their notes are the declarations' (config/settings.cpp).
//
// Secrets: an upstream's key is never printed, only the variable that holds it; a [[keys]]
// digest is printed as "<masked>" (the declaration of sha256 says why).
#include <fmt/format.h>

#include <string>
#include <string_view>

#include "config/loader.hpp"
#include "config/settings.hpp"
#include "config/toml_text.hpp"

namespace tether::config {
namespace {

// "key = value", or "key = 0  # note" where the declaration notes what zero or "" means; a
// setting that prints nothing (an unset price, an unset series) is a comment where the
// declaration notes what unset means ("# key unset: note"), else left out.
void print(std::string& o, const setting& s, const void* owner) {
  const auto value = s.ops->toml(owner);
  if (value.empty()) {
    if (!s.unset_note.empty()) o += fmt::format("# {} unset: {}\n", s.key, s.unset_note);
    return;
  }
  // Where the default is unset (a price), the note is about unset: a written 0 is a value.
  const bool zero = value == "0" || value == "\"\"";
  if (!s.unset_note.empty() && zero && !default_toml(s).empty()) {
    o += fmt::format("{} = {}  # {}\n", s.key, value, s.unset_note);
  } else {
    o += fmt::format("{} = {}\n", s.key, value);
  }
}

void print_section(std::string& o, section where, const void* owner) {
  for (const auto& s : settings_of(where)) print(o, s, owner);
}

}  // namespace

std::string render_effective(const gateway_config& cfg) {
  std::string o;
  o += fmt::format(
      "# Effective configuration{}{}; defaults and environment overrides applied, "
      "secrets masked.\n",
      cfg.source_file.empty() ? "" : " of ", cfg.source_file.empty() ? "" : quote(cfg.source_file));

  o += "\n[server]\n";
  print_section(o, section::server, &cfg.server);
  o += "\n[request]\n";
  print_section(o, section::request, &cfg.request);
  o += "\n[budget]\n";
  print_section(o, section::budget, &cfg.budget);
  for (const auto& u : cfg.upstreams) {
    o += "\n[[upstreams]]\n";
    print_section(o, section::upstreams, &u);
  }
  for (const auto& m : cfg.models) {
    o += "\n[[models]]\n";
    print_section(o, section::models, &m);
    // Only the overrides written for this model are keys; the values it runs with are a
    // comment, so the output reloads with the same overrides and no more.
    std::string effective;
    const auto e = cfg.effective_request(m.name);
    for (const auto& s : settings_of(section::request)) {
      if (!s.model_override) continue;
      if (is_written(m.overrides, s)) print(o, s, &m.overrides.values);
      effective += fmt::format("{}{}={}", effective.empty() ? "" : " ", s.key, s.ops->toml(&e));
    }
    o += fmt::format("# effective: {}\n", effective);
  }
  for (const auto& k : cfg.keys) {
    o += "\n[[keys]]\n";
    print_section(o, section::keys, &k);
  }
  o += "\n[telemetry]\n";
  print_section(o, section::telemetry, &cfg.telemetry);
  o += "\n[cluster]\n";
  print_section(o, section::cluster, &cfg.cluster);
  o += "\n[ledger]\n";
  print_section(o, section::ledger, &cfg.ledger);
  if (cfg.ledger.enabled) o += fmt::format("# file: {}\n", cfg.ledger_file());
  return o;
}

}  // namespace tether::config
