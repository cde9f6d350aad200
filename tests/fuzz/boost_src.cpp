// Boost.JSON and Boost.URL compiled into the fuzz build itself (their header-only mode) rather
// than linked from Debian's shared libraries: then their parsers are instrumented too, and
// libFuzzer's coverage sees inside the JSON and URL parsing that the gateway's checks rest on.
#include <boost/json/src.hpp>
#include <boost/url/src.hpp>
