// `--sglang`: the mock behaves as SGLang's server does where tether's engine abort matters
// (engine = "sglang"). A non-streaming request's generation, named by the body's `rid`, does not
// stop when its client's connection closes (SGLang notices only when its own output wait times
// out): it runs to its planned end. `POST /abort_request {"rid": ...}` stops the generation with
// that rid. /_stats tells, under "sglang", each generation (rid, when it started and stopped,
// and why) and each abort (rid, when, whether it found a live generation);
// `POST /_abort_status?status=N` makes /abort_request answer N (a failing abort).
// Not thread-safe: the mock runs one io thread.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include <boost/asio/any_io_executor.hpp>
#include <boost/json/object.hpp>

namespace tether::mock {

void set_sglang_mode(bool on);  // by main, before the server starts
bool sglang_mode();

// A non-streaming generation that runs for `length` whatever its client does, unless aborted.
void sglang_generation_started(const boost::asio::any_io_executor& executor, std::string rid,
                               std::chrono::milliseconds length);
// POST /abort_request's body; the status to answer with.
unsigned sglang_abort(std::string_view body);
void set_sglang_abort_status(unsigned status);

boost::json::object sglang_json();
void sglang_reset();

}  // namespace tether::mock
