// es::Error — the one exception type the library throws at edges that user input or hardware can
// break (files, configs, tokenizers, requests, devices). The message names what was at fault; the
// CLI prints it on one line and exits non-zero, the server turns it into an OpenAI error object.
// ES_ASSERT is for programmer errors (invariants), not for bad input.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace es {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A part of the machine the model runs on is gone for good (an MPI rank of a layer split stopped
// answering): no request can be served any more. The server answers 503 and shuts down.
class UnavailableError : public Error {
 public:
  using Error::Error;
};

// Builds a message from any streamable parts: Fail("tensor ", name, ": expected ", n, " dims").
template <class... Parts>
[[noreturn]] void Fail(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  throw Error(os.str());
}

}  // namespace es

#define ES_CHECK(cond, ...)               \
  do {                                    \
    if (!(cond)) ::es::Fail(__VA_ARGS__); \
  } while (0)

#define ES_ASSERT(cond)                                                                          \
  do {                                                                                           \
    if (!(cond))                                                                                 \
      ::es::Fail("internal error: assertion '", #cond, "' failed at ", __FILE__, ":", __LINE__); \
  } while (0)
