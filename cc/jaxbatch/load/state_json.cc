#include "jaxbatch/load/state_json.h"

#include <array>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "jaxbatch/base/error.h"
#include "jaxbatch/base/json.h"
#include "jaxbatch/load/schedule.h"

namespace jaxbatch {
namespace {

// -- the fields ----------------------------------------------------------------

struct Counter {
  const char* name;
  int64_t LoaderState::* field;
  bool optional;  // absent in states saved before it was added: counts from 0
};

// In the order states list them (seed first, then these).
constexpr std::array<Counter, 13> kCounters{{
    {"epoch", &LoaderState::epoch, false},
    {"step", &LoaderState::step, false},
    {"batches", &LoaderState::batches, false},
    {"examples", &LoaderState::examples, false},
    {"skipped", &LoaderState::skipped, false},
    {"quarantined", &LoaderState::quarantined, false},
    {"dropped", &LoaderState::dropped, false},
    {"padding_batches", &LoaderState::padding_batches, false},
    {"truncated", &LoaderState::truncated, true},
    {"real_elements", &LoaderState::real_elements, true},
    {"padded_elements", &LoaderState::padded_elements, true},
    {"real_edges", &LoaderState::real_edges, true},
    {"padded_edges", &LoaderState::padded_edges, true},
}};

// Listed first when missing, as a state's identity is what a reader looks for.
// (Optional counters and the fingerprint are required by version: CheckVersionFields.)
constexpr std::array<const char*, 3> kKeyFirst{"version", "num_examples", "planner"};
constexpr std::array<const char*, 3> kKeyLast{"shuffle", "block_size", "shard"};

// -- writing -------------------------------------------------------------------

void AppendKey(std::string& out, const char* name) {
  out += out.size() == 1 ? "" : ", ";
  AppendJsonString(out, name);
  out += ": ";
}

// -- reading: the fields -------------------------------------------------------

// An integer in [0, 2^bits) (bits 63 or 64); InvalidArgumentError naming `name` otherwise.
uint64_t UnsignedField(const JsonValue& v, const char* name, int bits) {
  if (v.kind != JsonValue::kNumber || !v.integral) {
    throw InvalidArgumentError(
        StrCat("Loader: the state's ", name, " must be an int, found ", DescribeJson(v)));
  }
  const uint64_t max = bits == 64 ? std::numeric_limits<uint64_t>::max()
                                  : static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  bool in_range = v.raw[0] != '-' || v.raw == "-0";
  uint64_t value = 0;
  for (size_t i = v.raw[0] == '-' ? 1 : 0; in_range && i < v.raw.size(); ++i) {
    const auto digit = static_cast<uint64_t>(v.raw[i] - '0');
    in_range = value <= (max - digit) / 10;
    value = value * 10 + digit;
  }
  if (!in_range) {
    throw InvalidArgumentError(StrCat("Loader: the state's ", name, " must be in [0, 2**", bits,
                                      "), found ", DescribeJson(v)));
  }
  return value;
}

int64_t CounterField(const JsonValue& v, const char* name) {
  return static_cast<int64_t>(UnsignedField(v, name, 63));
}

const std::string& StringField(const JsonValue& v, const char* name) {
  if (v.kind != JsonValue::kString) {
    throw InvalidArgumentError(
        StrCat("Loader: the state's ", name, " must be a string, found ", DescribeJson(v)));
  }
  return v.text;
}

std::optional<uint64_t> FingerprintField(const JsonValue& v) {
  if (v.kind == JsonValue::kNull) return std::nullopt;  // as a state saved before it was added
  bool hex = v.kind == JsonValue::kString && !v.text.empty() && v.text.size() <= 16;
  uint64_t value = 0;
  for (size_t i = 0; hex && i < v.text.size(); ++i) {
    const int digit = HexDigit(v.text[i]);
    hex = digit >= 0;
    value = value * 16 + static_cast<uint64_t>(digit);
  }
  if (!hex) {
    throw InvalidArgumentError(
        StrCat("Loader: the state's fingerprint must be 16 hex digits, found ", DescribeJson(v)));
  }
  return value;
}

ShuffleMode ShuffleField(const JsonValue& v) {
  const std::string& name = StringField(v, "shuffle");
  try {
    return ParseShuffleMode(name);
  } catch (const InvalidArgumentError&) {
    throw InvalidArgumentError(StrCat(
        "Loader: the state's shuffle must be 'none', 'global' or 'block', found '", name, "'"));
  }
}

std::pair<int64_t, int64_t> ShardField(const JsonValue& v) {
  if (v.kind != JsonValue::kArray || v.items.size() != 2) {
    throw InvalidArgumentError(
        StrCat("Loader: the state's shard must be [index, count], found ", v.raw.substr(0, 80)));
  }
  return {CounterField(v.items[0], "shard"), CounterField(v.items[1], "shard")};
}

// [[shard_count, steps], ...]: each count >= 1.
std::vector<EarlierDeal> EarlierDeals(const JsonValue& v) {
  if (v.kind != JsonValue::kArray) {
    throw InvalidArgumentError(
        StrCat("Loader: the state's earlier_deals must be a list of [shard_count, steps], found ",
               DescribeJson(v)));
  }
  std::vector<EarlierDeal> deals;
  for (const JsonValue& item : v.items) {
    if (item.kind != JsonValue::kArray || item.items.size() != 2) {
      throw InvalidArgumentError(
          StrCat("Loader: the state's earlier_deals must hold [shard_count, steps] pairs, found ",
                 item.raw.substr(0, 80)));
    }
    const EarlierDeal deal{.shard_count = CounterField(item.items[0], "earlier_deals shard_count"),
                           .steps = CounterField(item.items[1], "earlier_deals steps")};
    if (deal.shard_count < 1) {
      throw InvalidArgumentError(StrCat(
          "Loader: the state's earlier_deals shard_count must be >= 1, found ", deal.shard_count));
    }
    deals.push_back(deal);
  }
  return deals;
}

// The object's members by name; refuses a key given twice (which one would win
// depends on the reader).
class Members {
 public:
  explicit Members(const JsonValue& object) : object_(object) {
    std::set<std::string_view> seen;
    for (const std::string& key : object.keys) {
      if (!seen.insert(key).second) {
        throw InvalidArgumentError(StrCat("Loader: the state has '", key.substr(0, 80), "' twice"));
      }
    }
  }

  const JsonValue* Find(std::string_view name) const {
    for (size_t i = 0; i < object_.keys.size(); ++i) {
      if (object_.keys[i] == name) return &object_.items[i];
    }
    return nullptr;
  }

  const JsonValue& Get(std::string_view name) const { return *Find(name); }

 private:
  const JsonValue& object_;
};

// -- a mixture's part ------------------------------------------------------------

std::string Hex16(uint64_t value) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(value));
  return hex;
}

void AppendMixture(std::string& out, const MixtureState& m) {
  out += "{\"unit\": ";
  AppendJsonString(out, MixtureUnitName(m.unit));
  AppendKey(out, "exhaustion");
  AppendJsonString(out, ExhaustionName(m.exhaustion));
  AppendKey(out, "block_size");
  out += std::to_string(m.block_size);
  AppendKey(out, "position");
  out += std::to_string(m.position);
  AppendKey(out, "ended");
  out += m.ended ? "true" : "false";
  AppendKey(out, "sources");
  out += "[";
  for (size_t s = 0; s < m.sources.size(); ++s) {
    const MixtureSourceState& source = m.sources[s];
    out += s ? ", {\"name\": " : "{\"name\": ";
    AppendJsonString(out, source.name);
    out += StrCat(", \"fingerprint\": \"", Hex16(source.fingerprint), "\", \"size\": ", source.size,
                  ", \"draws\": ", source.cursor.draws, ", \"tokens\": ", source.cursor.tokens,
                  ", \"exhausted\": ", source.cursor.exhausted ? "true" : "false",
                  ", \"weight\": ", source.weight, ", \"examples\": ", source.examples,
                  ", \"elements\": ", source.elements, "}");
  }
  out += "]}";
}

bool BoolField(const JsonValue& v, const char* name) {
  if (v.kind != JsonValue::kBool) {
    throw InvalidArgumentError(
        StrCat("Loader: the state's ", name, " must be true or false, found ", DescribeJson(v)));
  }
  return v.raw == "true";
}

// The mixture's members, every one required.
const JsonValue& Required(const JsonValue& object, std::string_view name, const char* where) {
  if (object.kind != JsonValue::kObject) {
    throw InvalidArgumentError(
        StrCat("Loader: the state's ", where, " must be an object, found ", DescribeJson(object)));
  }
  for (size_t i = 0; i < object.keys.size(); ++i) {
    if (object.keys[i] == name) return object.items[i];
  }
  throw InvalidArgumentError(StrCat("Loader: the state's ", where, " lacks '", name, "'"));
}

MixtureState MixtureField(const JsonValue& v) {
  MixtureState m;
  const char* where = "mixture";
  try {
    m.unit = ParseMixtureUnit(StringField(Required(v, "unit", where), "mixture unit"));
    m.exhaustion =
        ParseExhaustion(StringField(Required(v, "exhaustion", where), "mixture exhaustion"));
  } catch (const InvalidArgumentError& e) {
    throw InvalidArgumentError(StrCat("Loader: the state's mixture: ", e.what()));
  }
  m.block_size = CounterField(Required(v, "block_size", where), "mixture block_size");
  m.position = CounterField(Required(v, "position", where), "mixture position");
  m.ended = BoolField(Required(v, "ended", where), "mixture ended");
  const JsonValue& sources = Required(v, "sources", where);
  if (sources.kind != JsonValue::kArray) {
    throw InvalidArgumentError(StrCat("Loader: the state's mixture sources must be a list, found ",
                                      DescribeJson(sources)));
  }
  for (const JsonValue& item : sources.items) {
    const char* in = "mixture source";
    MixtureSourceState source;
    source.name = StringField(Required(item, "name", in), "mixture source name");
    const std::optional<uint64_t> fingerprint = FingerprintField(Required(item, "fingerprint", in));
    if (!fingerprint) {
      throw InvalidArgumentError(
          StrCat("Loader: the state's mixture source '", source.name, "' has no fingerprint"));
    }
    source.fingerprint = *fingerprint;
    source.size = CounterField(Required(item, "size", in), "mixture source size");
    source.cursor.draws = CounterField(Required(item, "draws", in), "mixture source draws");
    source.cursor.tokens = CounterField(Required(item, "tokens", in), "mixture source tokens");
    source.cursor.exhausted =
        BoolField(Required(item, "exhausted", in), "mixture source exhausted");
    source.weight = CounterField(Required(item, "weight", in), "mixture source weight");
    source.examples = CounterField(Required(item, "examples", in), "mixture source examples");
    source.elements = CounterField(Required(item, "elements", in), "mixture source elements");
    m.sources.push_back(std::move(source));
  }
  return m;
}

void CheckNothingMissing(const Members& members) {
  std::vector<const char*> required(kKeyFirst.begin(), kKeyFirst.end());
  required.push_back("seed");
  for (const Counter& c : kCounters) {
    if (!c.optional) required.push_back(c.name);
  }
  required.insert(required.end(), kKeyLast.begin(), kKeyLast.end());
  std::string missing;
  for (const char* name : required) {
    if (!members.Find(name)) missing += StrCat(missing.empty() ? "" : ", ", "'", name, "'");
  }
  if (!missing.empty()) {
    throw InvalidArgumentError(StrCat("Loader: the state lacks ", missing,
                                      "; expected a state from get_state() (Loader::state())"));
  }
}

// What a state of `version` must hold beyond what every version does: from
// kCompleteStateVersion on, each counter and a fingerprint that is not null
// (a mixture's: each source's, which its mixture part requires).
void CheckVersionFields(const Members& members, int64_t version) {
  if (version < kCompleteStateVersion) return;
  std::string missing;
  for (const Counter& c : kCounters) {
    if (!members.Find(c.name)) missing += StrCat(missing.empty() ? "" : ", ", "'", c.name, "'");
  }
  // A mixture's state holds each source's fingerprint in its mixture instead.
  const JsonValue* fingerprint = members.Find("fingerprint");
  if ((!fingerprint || fingerprint->kind == JsonValue::kNull) && !members.Find("mixture")) {
    missing += StrCat(missing.empty() ? "" : ", ", "'fingerprint'");
  }
  if (!missing.empty()) {
    throw InvalidArgumentError(StrCat("Loader: the state (version ", version, ") lacks ", missing,
                                      ", which every state of its version holds; expected a "
                                      "state from get_state() (Loader::state())"));
  }
}

}  // namespace

std::string LoaderStateToJson(const LoaderState& state) {
  if (!state.key) {
    throw InvalidArgumentError(
        "Loader: a LoaderState without its StreamKey (one made by hand) has no text form; save "
        "what Loader::state() returns");
  }
  const StreamKey& key = *state.key;
  std::string out = "{";
  AppendKey(out, "seed");
  out += std::to_string(state.seed);
  for (const Counter& c : kCounters) {
    AppendKey(out, c.name);
    out += std::to_string(state.*c.field);
  }
  AppendKey(out, "version");
  out += std::to_string(key.version);
  AppendKey(out, "num_examples");
  out += std::to_string(key.num_examples);
  AppendKey(out, "fingerprint");
  if (key.fingerprint) {
    AppendJsonString(out, Hex16(*key.fingerprint));
  } else {
    out += "null";
  }
  AppendKey(out, "planner");
  AppendJsonString(out, key.planner);
  AppendKey(out, "shuffle");
  AppendJsonString(out, ShuffleModeName(key.shuffle));
  AppendKey(out, "block_size");
  out += std::to_string(key.block_size);
  AppendKey(out, "shard");
  out += StrCat("[", key.shard_index, ", ", key.shard_count, "]");
  if (!state.earlier_deals.empty()) {
    AppendKey(out, "earlier_deals");
    out += "[";
    for (size_t d = 0; d < state.earlier_deals.size(); ++d) {
      out += StrCat(d ? ", [" : "[", state.earlier_deals[d].shard_count, ", ",
                    state.earlier_deals[d].steps, "]");
    }
    out += "]";
  }
  if (state.mixture) {
    AppendKey(out, "mixture");
    AppendMixture(out, *state.mixture);
  }
  out += "}";
  return out;
}

LoaderState LoaderStateFromJson(std::string_view text) {
  if (text.size() > kMaxStateJsonBytes) {
    throw InvalidArgumentError(StrCat("Loader: the state text holds ", text.size(),
                                      " bytes, more than kMaxStateJsonBytes = ", kMaxStateJsonBytes,
                                      " (a state is a few hundred)"));
  }
  const JsonValue document = ParseJson(text, "Loader: the state");
  if (document.kind != JsonValue::kObject) {
    throw InvalidArgumentError(StrCat("Loader: the state must be a JSON object from get_state(), ",
                                      "found ", DescribeJson(document)));
  }
  const Members members(document);
  CheckNothingMissing(members);
  LoaderState state;
  state.seed = UnsignedField(members.Get("seed"), "seed", 64);
  for (const Counter& c : kCounters) {
    if (const JsonValue* v = members.Find(c.name)) state.*c.field = CounterField(*v, c.name);
  }
  StreamKey key;
  key.version = CounterField(members.Get("version"), "version");
  CheckVersionFields(members, key.version);
  key.num_examples = CounterField(members.Get("num_examples"), "num_examples");
  if (const JsonValue* v = members.Find("fingerprint")) key.fingerprint = FingerprintField(*v);
  key.planner = StringField(members.Get("planner"), "planner");
  key.shuffle = ShuffleField(members.Get("shuffle"));
  key.block_size = CounterField(members.Get("block_size"), "block_size");
  std::tie(key.shard_index, key.shard_count) = ShardField(members.Get("shard"));
  state.key = std::move(key);
  if (const JsonValue* v = members.Find("earlier_deals")) state.earlier_deals = EarlierDeals(*v);
  if (const JsonValue* v = members.Find("mixture")) state.mixture = MixtureField(*v);
  return state;
}

}  // namespace jaxbatch
