// libFuzzer target: a loader state's text form (load/state_json.h). Whatever
// the bytes (truncated, nested, oversized, wrong types, huge numbers, bad
// escapes), reading them either gives a state or throws InvalidArgumentError,
// nothing else; and a state read back writes a text that reads back to the
// same text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "jaxbatch/base/error.h"
#include "jaxbatch/load/state_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace jaxbatch;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  LoaderState state;
  try {
    state = LoaderStateFromJson(text);
  } catch (const InvalidArgumentError&) {
    return 0;
  }
  const std::string written = LoaderStateToJson(state);
  const std::string again = LoaderStateToJson(LoaderStateFromJson(written));
  FUZZ_CHECK(again == written, "the text of a state read back differs:\n%s\n%s", written.c_str(),
             again.c_str());
  return 0;
}
