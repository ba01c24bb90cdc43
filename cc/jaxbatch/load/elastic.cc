#include "jaxbatch/load/elastic.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "jaxbatch/base/error.h"

namespace jaxbatch {
namespace {

// Where a state is, as messages name it.
std::string PositionText(const LoaderState& s) {
  std::string text = StrCat("step ", s.step, " of epoch ", s.epoch);
  if (!s.earlier_deals.empty()) {
    text += " after";
    for (size_t d = 0; d < s.earlier_deals.size(); ++d) {
      text += StrCat(d ? ", " : " ", s.earlier_deals[d].steps, " steps on ",
                     s.earlier_deals[d].shard_count, " shards");
    }
  }
  return text;
}

// "shard 1", "shards 0, 2".
std::string ShardsText(const std::vector<int64_t>& shards) {
  std::string text = shards.size() == 1 ? "shard" : "shards";
  for (size_t k = 0; k < shards.size(); ++k) text += StrCat(k ? ", " : " ", shards[k]);
  return text;
}

// The first part of the stream `a` and `b` disagree on, or "" when none
// does (their shard index and counters aside).
std::string StreamDifference(const LoaderState& a, const LoaderState& b) {
  const StreamKey& x = *a.key;
  const StreamKey& y = *b.key;
  if (a.seed != b.seed) return "seed";
  if (x.version != y.version) return "version";
  if (x.num_examples != y.num_examples || x.fingerprint != y.fingerprint) return "data";
  if (x.planner != y.planner) return "planner";
  if (x.shuffle != y.shuffle) return "shuffle";
  if (x.block_size != y.block_size) return "block_size";
  if (x.shard_count != y.shard_count) return "shard count";
  if (a.mixture.has_value() != b.mixture.has_value()) return "mixture";
  if (a.mixture) {
    // Every shard holds the cursor where the block starts; yields are its own.
    MixtureState p = *a.mixture;
    MixtureState q = *b.mixture;
    for (MixtureState* m : {&p, &q}) {
      for (MixtureSourceState& source : m->sources) source.examples = source.elements = 0;
    }
    if (!(p == q)) return "mixture";
  }
  return "";
}

}  // namespace

LoaderState ElasticStart(std::span<const LoaderState> saved, int64_t shard_index,
                         int64_t shard_count) {
  const char* who = "Loader.set_state(elastic=True)";
  if (shard_count < 1 || shard_index < 0 || shard_index >= shard_count) {
    throw InvalidArgumentError(StrCat(who, ": shard must satisfy 0 <= index < count, found (",
                                      shard_index, ", ", shard_count, ")"));
  }
  if (saved.empty()) {
    throw InvalidArgumentError(StrCat(who,
                                      ": expected the saved state of one shard or more, "
                                      "found none"));
  }
  for (const LoaderState& s : saved) {
    if (!s.key) {
      throw InvalidArgumentError(
          StrCat(who, ": a state without its stream key (one made by hand) does not say which ",
                 "shards saved it; restore a state from get_state() (Loader::state())"));
    }
  }
  const LoaderState& first = saved.front();
  std::set<int64_t> shards;
  for (const LoaderState& s : saved) {
    const std::string differs = StreamDifference(first, s);
    if (!differs.empty()) {
      throw InvalidArgumentError(StrCat(who, ": the states of shard ", first.key->shard_index,
                                        " and shard ", s.key->shard_index, " are of different ",
                                        "streams (their ", differs, " differs); restore the ",
                                        "states one job saved at one step"));
    }
    if (!shards.insert(s.key->shard_index).second) {
      throw InvalidArgumentError(StrCat(who, ": the state of shard ", s.key->shard_index, " of ",
                                        s.key->shard_count, " was given twice"));
    }
  }
  // Every shard must be at one position: the global stream's.
  std::map<std::string, std::vector<int64_t>> at;
  std::vector<std::string> order;
  for (const LoaderState& s : saved) {
    const std::string position = PositionText(s);
    if (!at.contains(position)) order.push_back(position);
    at[position].push_back(s.key->shard_index);
  }
  if (at.size() > 1) {
    std::string text;
    for (const std::string& position : order) {
      text += StrCat(text.empty() ? "" : "; ", ShardsText(at[position]), " at ", position);
    }
    throw InvalidArgumentError(
        StrCat(who, ": the states were saved at different steps (", text,
               "); every shard's state must be from one step of the stream (save them all "
               "after the same batch)"));
  }
  // The same shards: the state of this very shard continues as it is.
  for (const LoaderState& s : saved) {
    if (s.key->shard_count == shard_count && s.key->shard_index == shard_index) return s;
  }
  // The position and stream, every counter from zero.
  LoaderState start{.seed = first.seed,
                    .epoch = first.epoch,
                    .step = first.step,
                    .key = first.key,
                    .mixture = first.mixture,
                    .earlier_deals = first.earlier_deals};
  start.key->shard_index = shard_index;
  start.key->shard_count = shard_count;
  if (start.mixture) {
    for (MixtureSourceState& source : start.mixture->sources) source.examples = source.elements = 0;
  }
  // Another shard of as many: the deal is this shard's from the epoch's
  // start. Other shards: the steps taken are an earlier deal.
  if (first.key->shard_count != shard_count && start.step > 0) {
    start.earlier_deals.push_back(
        EarlierDeal{.shard_count = first.key->shard_count, .steps = start.step});
    start.step = 0;
  }
  return start;
}

}  // namespace jaxbatch
