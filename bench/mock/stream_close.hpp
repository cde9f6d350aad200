// llama.cpp's llama-server (its HTTP library) closes the connection after every streamed answer,
// although the answer advertised keep-alive: a client that put its next request on the
// connection meanwhile loses it. `--close-after-stream MS` makes the mock do the same, process
// wide: after a chunked answer it reads nothing more on that connection and, MS later, shuts it
// down and closes it as that library does (a FIN, then a reset for any request left unread).
// MS = 0 is llama-server's own timing; a longer MS makes the race certain for a test: the next
// request is on the connection, unread, when the close comes.
#pragma once

#include <chrono>
#include <optional>

namespace tether::mock {

// Set once by main before the server starts; nullopt (the default): connections are kept alive.
void set_close_after_stream(std::optional<std::chrono::milliseconds> after);
std::optional<std::chrono::milliseconds> close_after_stream();

}  // namespace tether::mock
