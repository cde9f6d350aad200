// Values written as TOML text by hand (`tether check`'s output): strings quoted and escaped,
// lists of strings, host:port with IPv6 hosts bracketed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tether::config {

// A TOML basic string: quotes, backslashes and control characters escaped.
std::string quote(std::string_view s);
std::string quote_list(const std::vector<std::string>& items);
std::string host_port(const std::string& host, std::uint16_t port);
// A finite double, as few digits as read back to the same value ("1.25", "0", "2e-07"): a
// TOML float, or an integer where the value is whole (read back as a number all the same).
std::string number_text(double v);

}  // namespace tether::config
