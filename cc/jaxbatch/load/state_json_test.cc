#include "jaxbatch/load/state_json.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/testing.h"
#include "jaxbatch/load/test_util.h"

namespace jaxbatch {
namespace {

using testing::Contains;
using testing::Drain;
using testing::ThrownMessage;

// A state with every field distinct, so a field read into another shows.
LoaderState EveryField() {
  LoaderState s;
  s.seed = std::numeric_limits<uint64_t>::max();
  s.epoch = 1;
  s.step = 2;
  s.batches = 3;
  s.examples = 4;
  s.skipped = 5;
  s.quarantined = 6;
  s.dropped = 7;
  s.padding_batches = 8;
  s.truncated = 9;
  s.real_elements = 10;
  s.padded_elements = 11;
  s.real_edges = 12;
  s.padded_edges = std::numeric_limits<int64_t>::max();
  s.key = StreamKey{.version = 2,
                    .num_examples = 13,
                    .fingerprint = 0x0123456789abcdefULL,
                    .planner = "Pack(row_length=8, name=\"a\\b\"\n\t\x01 \xc3\xa9)",
                    .shuffle = ShuffleMode::kBlock,
                    .block_size = 14,
                    .shard_index = 15,
                    .shard_count = 16};
  return s;
}

void ExpectSame(const LoaderState& a, const LoaderState& b) {
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.batches, b.batches);
  EXPECT_EQ(a.examples, b.examples);
  EXPECT_EQ(a.skipped, b.skipped);
  EXPECT_EQ(a.quarantined, b.quarantined);
  EXPECT_EQ(a.dropped, b.dropped);
  EXPECT_EQ(a.padding_batches, b.padding_batches);
  EXPECT_EQ(a.truncated, b.truncated);
  EXPECT_EQ(a.real_elements, b.real_elements);
  EXPECT_EQ(a.padded_elements, b.padded_elements);
  EXPECT_EQ(a.real_edges, b.real_edges);
  EXPECT_EQ(a.padded_edges, b.padded_edges);
  ASSERT_TRUE(a.key && b.key);
  EXPECT_EQ(a.key->version, b.key->version);
  EXPECT_EQ(a.key->num_examples, b.key->num_examples);
  EXPECT_EQ(a.key->fingerprint, b.key->fingerprint);
  EXPECT_EQ(a.key->planner, b.key->planner);
  EXPECT_EQ(a.key->shuffle, b.key->shuffle);
  EXPECT_EQ(a.key->block_size, b.key->block_size);
  EXPECT_EQ(a.key->shard_index, b.key->shard_index);
  EXPECT_EQ(a.key->shard_count, b.key->shard_count);
}

TEST(StateJsonTest, EveryFieldRoundTrips) {
  const LoaderState s = EveryField();
  const std::string text = LoaderStateToJson(s);
  ExpectSame(LoaderStateFromJson(text), s);
  EXPECT_EQ(LoaderStateToJson(LoaderStateFromJson(text)), text);
  EXPECT_TRUE(Contains(text, "\"seed\": 18446744073709551615")) << text;
  EXPECT_TRUE(Contains(text, "\"fingerprint\": \"0123456789abcdef\"")) << text;
  EXPECT_TRUE(Contains(text, "\"shard\": [15, 16]")) << text;
  EXPECT_TRUE(Contains(text, R"(name=\"a\\b\"\u000a\u0009\u0001 )")) << text;  // escaped
  EXPECT_EQ(text.find('\n'), std::string::npos);                               // one line
}

TEST(StateJsonTest, WhatPythonsJsonDumpsWritesReadsBack) {
  // json.dumps(state, indent=1, sort_keys=True) of an older state: other
  // order, whitespace, \u escapes (ensure_ascii), no counters added since
  // version 2, a key this release does not know.
  const std::string text = R"j({
 "batches": 3, "block_size": 16, "dropped": 0, "epoch": 0, "examples": 8,
 "fingerprint": "DE3C5ABD8F45F319", "num_examples": 50, "padding_batches": 0,
 "planner": "PadToMax(batch_size=4, name='\u00e9\ud83d\ude00')", "quarantined": 0,
 "seed": 0, "shard": [0, 1], "shuffle": "block", "skipped": 0, "step": 3,
 "version": 2, "added_later": {"x": [1, 2.5, null, true]}
})j";
  const LoaderState s = LoaderStateFromJson(text);
  EXPECT_EQ(s.step, 3);
  EXPECT_EQ(s.truncated, 0);
  EXPECT_EQ(s.real_edges, 0);
  EXPECT_EQ(s.key->version, 2);
  EXPECT_EQ(s.key->fingerprint, 0xde3c5abd8f45f319ULL);
  EXPECT_EQ(s.key->planner, "PadToMax(batch_size=4, name='\xc3\xa9\xf0\x9f\x98\x80')");
  EXPECT_EQ(s.key->shuffle, ShuffleMode::kBlock);
  // Without a fingerprint (saved before it was added), or with null.
  for (const std::string& fingerprint : {std::string(""), std::string(R"("fingerprint": null,)")}) {
    const LoaderState old = LoaderStateFromJson(
        R"j({"seed": 1, "epoch": 0, "step": 0, "batches": 0, "examples": 0, "skipped": 0,
            "quarantined": 0, "dropped": 0, "padding_batches": 0, "version": 1, )j" +
        fingerprint +
        R"j("num_examples": 5, "planner": "PadToMax(batch_size=2)", "shuffle": "none",
            "block_size": 1024, "shard": [0, 1]})j");
    EXPECT_FALSE(old.key->fingerprint);
  }
}

// A version-3 state holds every counter and its fingerprint: one without
// was edited or made by hand. On main a version-3 state without its
// fingerprint restored onto other data of the same size.
TEST(StateJsonTest, AVersion3StateMissingAFieldIsRefusedNamingIt) {
  LoaderState state = EveryField();
  state.padded_edges = 13;
  state.key->version = 3;
  const std::string good = LoaderStateToJson(state);
  EXPECT_EQ(LoaderStateFromJson(good).key->fingerprint, 0x0123456789abcdefULL);
  const auto without = [&](const std::string& part, const std::string& instead = "") {
    std::string text = good;
    const size_t at = text.find(part);
    EXPECT_NE(at, std::string::npos) << part;
    text.replace(at, part.size(), instead);
    return ThrownMessage<InvalidArgumentError>([&] { LoaderStateFromJson(text); });
  };
  EXPECT_EQ(without(R"("fingerprint": "0123456789abcdef", )"),
            "Loader: the state (version 3) lacks 'fingerprint', which every state of its "
            "version holds; expected a state from get_state() (Loader::state())");
  EXPECT_TRUE(Contains(without(R"("fingerprint": "0123456789abcdef")", R"("fingerprint": null)"),
                       "the state (version 3) lacks 'fingerprint'"));
  EXPECT_TRUE(Contains(without(R"("truncated": 9, )"), "the state (version 3) lacks 'truncated',"));
  EXPECT_TRUE(Contains(without(R"("real_edges": 12, "padded_edges": 13, )"),
                       "lacks 'real_edges', 'padded_edges',"));
}

TEST(StateJsonTest, AStateWithoutItsKeyHasNoText) {
  EXPECT_TRUE(Contains(ThrownMessage<InvalidArgumentError>([] { LoaderStateToJson({}); }),
                       "without its StreamKey"));
}

// Every hostile text is one InvalidArgumentError naming what is wrong.
TEST(StateJsonTest, HostileTextIsAClearError) {
  const std::string good = LoaderStateToJson(EveryField());
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  const auto message = [](const std::string& text) {
    return ThrownMessage<InvalidArgumentError>([&] { LoaderStateFromJson(text); });
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "not valid JSON: expected a value, found the end of the text at byte 0"},
      {"[1, 2]", "the state must be a JSON object from get_state(), found array [1, 2]"},
      {R"({"version": 1})", "the state lacks 'num_examples', 'planner', 'seed', 'epoch'"},
      {replaced("\"step\": 2", "\"step\": -1"), "the state's step must be in [0, 2**63), found -1"},
      {replaced("\"epoch\": 1", "\"epoch\": 9223372036854775808"),
       "the state's epoch must be in [0, 2**63), found 9223372036854775808"},
      {replaced("\"epoch\": 1", "\"epoch\": 1" + std::string(400, '0')),
       "the state's epoch must be in [0, 2**63), found 1000"},
      {replaced("\"seed\": 18446744073709551615", "\"seed\": 18446744073709551616"),
       "the state's seed must be in [0, 2**64)"},
      {replaced("\"batches\": 3", "\"batches\": 1.5"),
       "the state's batches must be an int, found float 1.5"},
      {replaced("\"batches\": 3", "\"batches\": 3e0"), "must be an int, found float 3e0"},
      {replaced("\"examples\": 4", "\"examples\": true"),
       "the state's examples must be an int, found bool true"},
      {replaced("\"seed\": 18446744073709551615", "\"seed\": null"),
       "the state's seed must be an int, found null"},
      {replaced("\"seed\": 18446744073709551615", "\"seed\": \"1\""),
       "the state's seed must be an int, found string \"1\""},
      {replaced("\"fingerprint\": \"0123456789abcdef\"", "\"fingerprint\": \"not hex\""),
       "the state's fingerprint must be 16 hex digits, found string \"not hex\""},
      {replaced("\"fingerprint\": \"0123456789abcdef\"", "\"fingerprint\": \"0123456789abcdef0\""),
       "fingerprint must be 16 hex digits"},
      {replaced("\"shuffle\": \"block\"", "\"shuffle\": \"sorted\""),
       "the state's shuffle must be 'none', 'global' or 'block', found 'sorted'"},
      {replaced("\"shard\": [15, 16]", "\"shard\": [0]"),
       "the state's shard must be [index, count], found [0]"},
      {replaced("\"shard\": [15, 16]", "\"shard\": [0, -2]"),
       "the state's shard must be in [0, 2**63), found -2"},
      {replaced("\"planner\": ", "\"planner\": 7, \"x\": "), "planner must be a string, found 7"},
      {replaced("\"step\": 2", "\"step\": 2, \"step\": 3"), "the state has 'step' twice"},
      {good.substr(0, good.size() / 2), "not valid JSON"},
      {good + "x", "not valid JSON: text after the JSON value"},
      {replaced("\"step\": 2", "\"step\": 02"), "a number with a leading zero"},
      {replaced("\"step\": 2", "\"step\": -"), "expected digits"},
      {replaced("\"planner\": \"", "\"planner\": \"\\q"), "an unknown escape '\\q'"},
      {replaced("\"planner\": \"", "\"planner\": \"\\ud800x"), "a lone \\u surrogate"},
      {replaced("\"planner\": \"", "\"planner\": \"\\u12"), "a \\u escape"},
      {replaced("\"planner\": \"", "\"planner\": \"\x01"), "a control character in a string"},
      {replaced("\"step\": 2", "\"step\": NaN"), "unexpected 'N'"},
      {std::string(100000, '['), "nested deeper than 16 levels"},
      {std::string(kMaxStateJsonBytes + 1, ' '), "more than kMaxStateJsonBytes"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string found = message(text);
    EXPECT_TRUE(Contains(found, expected))
        << "text: " << text.substr(0, 120) << "\nexpected: " << expected << "\nfound: " << found;
    EXPECT_TRUE(found.empty() || Contains(found, "Loader: ")) << found;
  }
}

// Saved as text and read back, a loader's state restores the rest of its
// stream exactly, and one of another stream is still refused naming what
// differs (the Loader's check, which the text keeps whole).
TEST(StateJsonTest, ALoaderResumesFromItsTextAndRefusesAnotherStreams) {
  const auto ds = testing::TokensDataset(testing::RandomLengths(60, 30, 8));
  LoaderOptions o;
  o.schedule.planner = AutoBucketsOptions{.max_shapes = 3, .token_budget = 128};
  o.schedule.seed = 11;
  o.schedule.shard_count = 2;
  o.num_threads = 2;
  o.epochs = 2;
  Loader full(ds, o);
  const std::vector<std::string> reference = Drain(full);
  ASSERT_GT(reference.size(), 4u);
  std::string text;
  {
    Loader first(ds, o);
    Drain(first, 3);
    text = LoaderStateToJson(first.state());
  }
  Loader resumed(ds, o, LoaderStateFromJson(text));
  EXPECT_EQ(Drain(resumed), std::vector<std::string>(reference.begin() + 3, reference.end()));
  ExpectSame(resumed.state(), full.state());

  const auto refused = [&](const std::shared_ptr<const Dataset>& data, const LoaderOptions& other) {
    return ThrownMessage<InvalidArgumentError>(
        [&] { Loader(data, other, LoaderStateFromJson(text)); });
  };
  LoaderOptions other = o;
  other.schedule.seed = 12;
  EXPECT_TRUE(Contains(refused(ds, other), "saved with seed 11 but this loader has seed 12"));
  other = o;
  other.schedule.planner = AutoBucketsOptions{.max_shapes = 4, .token_budget = 128};
  EXPECT_TRUE(Contains(refused(ds, other), "saved with planner AutoBuckets(max_shapes=3"));
  other = o;
  other.schedule.shard_index = 1;
  EXPECT_TRUE(Contains(refused(ds, other), "shard=[0, 2] but this loader has shard=[1, 2]"));
  EXPECT_TRUE(Contains(refused(testing::TokensDataset(testing::RandomLengths(60, 30, 9)), o),
                       "saved for other data (fingerprint"));
}

}  // namespace
}  // namespace jaxbatch
