// X-Request-Id: the caller's kept when sane (≤128 chars of [A-Za-z0-9._-]), else a fresh one.
#pragma once

#include <string>

namespace tether {

bool is_sane_request_id(const std::string& id);
std::string generate_request_id();
std::string accept_or_generate_request_id(const std::string* header_value);

}  // namespace tether
