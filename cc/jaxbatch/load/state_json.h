// A LoaderState's text form: one flat JSON object, written and read here
// only, so a C++ program can keep a resumable position in a file and Python's
// Loader.get_state() / set_state() (and the Orbax and Grain integrations
// over them) store the very same text.
//
//   {"seed": 42, "epoch": 0, "step": 7, "batches": 7, "examples": 412,
//    "skipped": 0, "quarantined": 0, "dropped": 0, "padding_batches": 0,
//    "truncated": 0, "real_elements": 40210, "padded_elements": 45056,
//    "real_edges": 0, "padded_edges": 0, "version": 4, "num_examples": 3000,
//    "fingerprint": "de3c5abd8f45f319", "planner": "AutoBuckets(...)",
//    "shuffle": "global", "block_size": 1024, "shard": [0, 2]}
//
// A state restored elastically (load/elastic.h), until its epoch ends, adds
// "earlier_deals": [[shard_count, steps], ...].
//
// A mixture's state adds "mixture": {"unit", "exhaustion", "block_size",
// "position", "ended", "sources": [{"name", "fingerprint", "size", "draws",
// "tokens", "exhausted", "weight", "examples", "elements"}, ...]}, every
// member required (load/mixture.h says what each holds).
//
// "version" is the StreamKey's (kLoaderStateVersion when saved by this
// jaxbatch); the Loader decides whether it can continue that version's
// stream. States of versions 1 and 2 (earlier releases) read back:
// "truncated" and the element/edge counters may be absent (they count from
// 0) and "fingerprint" may be absent or null (the data is then checked by
// its size only); a version-3 state always holds them, so one without is
// refused naming the field (kCompleteStateVersion). Keys this release does
// not know are ignored.
//
// Reading checks the text only: syntax, types and ranges (every counter in
// [0, 2^63), the seed in [0, 2^64), the fingerprint 1 to 16 hex digits, the
// shard two ints). Whether the state belongs to a loader (same data,
// planner, shuffle, shard, seed; a position inside the stream) is the
// Loader's check when it is given the state. Anything else, a truncated,
// nested or oversized text included, is an InvalidArgumentError that names
// the key and what was found; nothing else is thrown.
//
// Example:
//   WriteFileAtomic(path, LoaderStateToJson(loader.state()));
//   ...  // in a new process
//   Loader resumed(dataset, options, LoaderStateFromJson(ReadFile(path)));
#ifndef JAXBATCH_LOAD_STATE_JSON_H_
#define JAXBATCH_LOAD_STATE_JSON_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "jaxbatch/load/loader.h"

namespace jaxbatch {

// The most bytes a state text may hold: a state is a few hundred (its
// planner key the most), so a larger text is not one.
inline constexpr size_t kMaxStateJsonBytes = size_t{1} << 20;

// The JSON text of `state`, one line. Throws InvalidArgumentError for a state
// without its StreamKey (one made by hand; Loader::state() always sets it).
std::string LoaderStateToJson(const LoaderState& state);

// The state `text` holds (with its StreamKey). Throws InvalidArgumentError
// naming what is wrong for anything that is not such a text.
LoaderState LoaderStateFromJson(std::string_view text);

}  // namespace jaxbatch

#endif  // JAXBATCH_LOAD_STATE_JSON_H_
