// One declaration per configuration setting (the table is config/settings.cpp): its section, key,
// type, bounds, whether a reload applies it, whether a model may override it, and a line of
// documentation. The loader's parse and its messages, the one override merge, `tether check`'s
// render, the reload plan and the reference tables (checked against README.md and
// docs/contract.md by tests/config/settings_test.cpp) all read it. The default is the struct's
// member initializer in config/config.hpp, read through the declaration.
//
// Plain data and function pointers: nothing here is a template, so the headers that include it
// stay cheap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace tether::config {

// Timers are armed as now() + value; a week is longer than any request or connection should
// live and keeps every sum of deadlines far from overflowing steady_clock arithmetic. The
// bound of every duration unless its declaration says less.
inline constexpr std::int64_t max_duration_ms = 7LL * 24 * 60 * 60 * 1000;

// A table of the file; each one's settings live in one struct of config.hpp (server_config, ...,
// upstream_config for one [[upstreams]] entry).
enum class section : std::uint8_t {
  server,
  request,
  budget,
  upstreams,
  models,
  keys,
  cluster,
  telemetry,
  ledger
};
inline constexpr std::size_t section_count = 9;
static_assert(static_cast<std::size_t>(section::ledger) + 1 == section_count);

std::string_view name_of(section s);

enum class setting_type : std::uint8_t {
  integer,   // a whole number within [min, max]
  duration,  // milliseconds within [min, max] (the key ends in _ms)
  number,    // a double within [min, max] (above min where above_min); TOML's integer or float
  boolean,
  choice,  // one of `choices`, exactly as written
  text,    // a string the loader checks by hand (a path, a name, a reference)
  list,    // an array of strings the loader checks by hand
  custom,  // several fields or a secret: read and printed by its own code
};

// What a reload (SIGHUP) does with a changed value.
enum class on_reload : std::uint8_t {
  applies,          // new requests run with it
  new_connections,  // applies, and the upstream's connections are made anew
  restart,          // logged as needing a restart; the running value stays
};

// How a setting's value is reached in its section's struct (the void* is that struct). Made from
// a member pointer by config/settings.cpp, or written by hand where one key is several fields.
struct field_ops {
  std::int64_t (*get_int)(const void*) = nullptr;  // integer, duration, boolean
  void (*set_int)(void*, std::int64_t) = nullptr;
  // number: an optional member reads as nullopt while unset; set_number sets it.
  std::optional<double> (*get_number)(const void*) = nullptr;
  void (*set_number)(void*, double) = nullptr;
  bool (*set_choice)(void*, std::string_view) = nullptr;  // false: not one of the choices
  std::string (*toml)(const void*) = nullptr;             // the value as TOML
  bool (*same)(const void*, const void*) = nullptr;
  void (*copy)(void* to, const void* from) = nullptr;
  // Where only part of the value decides that connections are made anew (base_url: its host
  // and port, not its path prefix); else `same` does.
  bool (*same_endpoint)(const void*, const void*) = nullptr;
};

struct setting {
  section where;
  std::string_view key;
  setting_type type;
  std::int64_t min = 0;
  std::int64_t max = 0;
  // number: min itself is refused (a load factor of 1 would bound nothing).
  bool above_min = false;
  std::span<const std::string_view> choices;  // for choice: in the order a message lists them
  std::string_view unit;                      // the reference's "unit, range" column: "ms", ...
  on_reload reload = on_reload::applies;
  bool model_override = false;  // [request] only: a [[models]] entry may write it too
  bool required = false;
  // Written as anything but 0 or false, it needs the ledger: refused while [ledger] is off.
  bool needs_ledger = false;
  // The reference's columns where they are not generated from the value, type and bounds.
  std::string_view default_doc;
  std::string_view range_doc;
  // `tether check` prints "key = 0  # note" (or = "") when the value is zero or empty, and
  // "# key unset: note" for an optional number that is not set.
  std::string_view unset_note;
  std::string_view doc;  // one line: what it does
  const field_ops* ops = nullptr;
};

// Every setting, section by section, each section's keys in `tether check`'s order.
std::span<const setting> all_settings();
std::span<const setting> settings_of(section s);

// The merge of a model's overrides into [request]: the one place it is done.
request_config apply_overrides(const request_overrides& o, request_config base);
// Marks `s` (a model_override setting) as written in `o`, its value already in o.values.
void mark_written(request_overrides& o, const setting& s);
bool is_written(const request_overrides& o, const setting& s);

// Whether a number or boolean setting is written as anything but 0, false or unset.
bool in_use(const setting& s, const void* owner);

// The value of `s` in a default-constructed section, as TOML ("4194304", "\"json\"").
std::string default_toml(const setting& s);
// The reference's columns: default ("`4194304`", "required", or the declared text) and
// "unit, range" ("bytes, ≥ 1", "count, 0–100", "boolean", "`\"json\"` or `\"text\"`").
std::string default_text(const setting& s);
std::string range_text(const setting& s);
// One reference table row: | `key` | default | unit, range | doc |
std::string reference_row(const setting& s);

}  // namespace tether::config
