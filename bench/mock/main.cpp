// tether-mock --listen HOST:PORT [--tls-cert cert.pem --tls-key key.pem] [--path-prefix /PREFIX]
#include <sys/resource.h>

#include <charconv>
#include <exception>
#include <iostream>
#include <string>
#include <string_view>

#include "bench/mock/server.hpp"
#include "bench/mock/sglang.hpp"
#include "bench/mock/stream_close.hpp"

namespace {

constexpr const char* usage =
    "usage: tether-mock --listen HOST:PORT [--tls-cert cert.pem --tls-key key.pem] "
    "[--path-prefix /PREFIX] [--close-after-stream MS] [--sglang]\n";

bool parse_listen(std::string_view text, tether::mock::server_options& options) {
  auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return false;
  auto host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  auto port_text = text.substr(colon + 1);
  unsigned port = 0;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (host.empty() || ec != std::errc{} || ptr != port_text.data() + port_text.size() ||
      port > 65535) {
    return false;
  }
  options.host = std::string(host);
  options.port = static_cast<std::uint16_t>(port);
  return true;
}

// Thousands of concurrent test connections need more descriptors than the usual soft limit.
void raise_descriptor_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

int main(int argc, char** argv) {
  tether::mock::server_options options;
  bool have_listen = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << usage;
      return 0;
    }
    if (arg == "--sglang") {
      tether::mock::set_sglang_mode(true);
      continue;
    }
    if (i + 1 >= argc) {
      std::cerr << "tether-mock: " << arg << " needs a value\n" << usage;
      return 2;
    }
    std::string_view value = argv[++i];
    if (arg == "--listen") {
      if (!parse_listen(value, options)) {
        std::cerr << "tether-mock: --listen expects HOST:PORT, got '" << value << "'\n";
        return 2;
      }
      have_listen = true;
    } else if (arg == "--tls-cert") {
      options.tls_cert = std::string(value);
    } else if (arg == "--tls-key") {
      options.tls_key = std::string(value);
    } else if (arg == "--path-prefix") {
      if (value.size() < 2 || value.front() != '/' || value.back() == '/') {
        std::cerr << "tether-mock: --path-prefix expects /PREFIX (no trailing /), got '" << value
                  << "'\n";
        return 2;
      }
      options.path_prefix = std::string(value);
    } else if (arg == "--close-after-stream") {
      unsigned ms = 0;
      auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), ms);
      if (ec != std::errc{} || ptr != value.data() + value.size() || ms > 60000) {
        std::cerr << "tether-mock: --close-after-stream expects 0..60000 ms, got '" << value
                  << "'\n";
        return 2;
      }
      tether::mock::set_close_after_stream(std::chrono::milliseconds(ms));
    } else {
      std::cerr << "tether-mock: unknown option " << arg << "\n" << usage;
      return 2;
    }
  }
  if (!have_listen || options.tls_cert.has_value() != options.tls_key.has_value()) {
    std::cerr << usage;
    return 2;
  }
  raise_descriptor_limit();
  try {
    return tether::mock::run_server(options);
  } catch (const std::exception& e) {
    std::cerr << "tether-mock: " << e.what() << "\n";
    return 1;
  }
}
