// Binds load/: the Loader, its options, state and schema, and the chunked
// source a streaming loader reads.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <chrono>

#include "bindings.h"
#include "jaxbatch/load/elastic.h"
#include "jaxbatch/load/loader.h"
#include "jaxbatch/load/state_json.h"

namespace jaxbatch::bindings {
namespace {

// How often a waiting next() lets Python handle signals.
constexpr std::chrono::milliseconds kSignalCheckInterval{50};

}  // namespace

void BindLoad(nb::module_& m) {
  nb::enum_<ShuffleMode>(m, "ShuffleMode")
      .value("none", ShuffleMode::kNone)
      .value("global_", ShuffleMode::kGlobal)
      .value("block", ShuffleMode::kBlock);
  nb::enum_<ErrorPolicy>(m, "ErrorPolicy")
      .value("raise_", ErrorPolicy::kRaise)
      .value("skip", ErrorPolicy::kSkip)
      .value("quarantine", ErrorPolicy::kQuarantine);

  nb::class_<ColumnSchema>(m, "ColumnSchema")
      .def(nb::init<>())
      .def_rw("name", &ColumnSchema::name)
      .def_prop_rw(
          "dtype",
          [](const ColumnSchema& s) -> std::optional<std::string> {
            if (!s.dtype) return std::nullopt;
            return std::string(DTypeName(*s.dtype));
          },
          [](ColumnSchema& s, std::optional<std::string> name) {
            s.dtype =
                name ? std::optional<DType>(ParseDType(*name, "schema for column '" + s.name + "'"))
                     : std::nullopt;
          },
          nb::arg("value").none())
      .def_rw("inner_shape", &ColumnSchema::inner_shape, nb::arg("value").none())
      .def_rw("min_length", &ColumnSchema::min_length)
      .def_rw("max_length", &ColumnSchema::max_length)
      .def_rw("finite", &ColumnSchema::finite);

  m.def("shuffle_mode_name", &ShuffleModeName, nb::arg("mode"));
  m.def("error_policy_name", &ErrorPolicyName, nb::arg("policy"));
  m.def("parse_error_policy", &ParseErrorPolicy, nb::arg("name"));
  m.def("parse_shuffle_mode", &ParseShuffleMode, nb::arg("name"));
  m.attr("LOADER_STATE_VERSION") = kLoaderStateVersion;
  m.attr("DEFAULT_MIXTURE_BLOCK") = kDefaultMixtureBlock;
  m.attr("DEFAULT_MIXTURE_UNIT") = MixtureUnitName(kDefaultMixtureUnit);
  m.attr("DEFAULT_EXHAUSTION") = ExhaustionName(kDefaultExhaustion);

  nb::class_<Mixture>(m, "Mixture")
      .def_prop_ro("names", [](const Mixture& mix) { return mix.names; })
      .def_prop_ro("num_sources", [](const Mixture& mix) { return mix.names.size(); });
  // stages: (start, shares) each, shares in `names`' order. Validated, and
  // the sources' columns checked to agree, here: where Dataset.mix is called.
  m.def(
      "make_mixture",
      [](std::vector<std::string> names, std::vector<std::shared_ptr<const Dataset>> sources,
         std::vector<std::pair<int64_t, std::vector<double>>> stages, std::string_view unit,
         std::string_view exhaustion, int64_t block_size) {
        auto mixture = std::make_shared<Mixture>();
        mixture->names = std::move(names);
        mixture->sources = std::move(sources);
        for (auto& [start, shares] : stages) {
          mixture->options.stages.push_back({start, std::move(shares)});
        }
        mixture->options.unit = ParseMixtureUnit(unit);
        mixture->options.exhaustion = ParseExhaustion(exhaustion);
        mixture->options.block_size = block_size;
        std::shared_ptr<const Mixture> out = std::move(mixture);
        nb::gil_scoped_release release;
        ConcatSources(out);
        return out;
      },
      nb::arg("names"), nb::arg("sources"), nb::arg("stages"), nb::arg("unit"),
      nb::arg("exhaustion"), nb::arg("block_size"));
  // The integer weights the schedule draws by (for showing shares).
  m.def(
      "mixture_weights",
      [](const std::vector<double>& shares, const std::vector<std::string>& names) {
        return WeightsFromShares(shares, names);
      },
      nb::arg("shares"), nb::arg("names"));

  nb::class_<StreamKey>(m, "StreamKey")
      .def(nb::init<>())
      .def_rw("version", &StreamKey::version)
      .def_rw("num_examples", &StreamKey::num_examples)
      .def_rw("fingerprint", &StreamKey::fingerprint, nb::arg("value").none())
      .def_rw("planner", &StreamKey::planner)
      .def_rw("shuffle", &StreamKey::shuffle)
      .def_rw("block_size", &StreamKey::block_size)
      .def_rw("shard_index", &StreamKey::shard_index)
      .def_rw("shard_count", &StreamKey::shard_count);

  nb::class_<LoaderState>(m, "LoaderState")
      .def(nb::init<>())
      .def_rw("key", &LoaderState::key, nb::arg("value").none())
      .def_rw("seed", &LoaderState::seed)
      .def_rw("epoch", &LoaderState::epoch)
      .def_rw("step", &LoaderState::step)
      .def_rw("batches", &LoaderState::batches)
      .def_rw("examples", &LoaderState::examples)
      .def_rw("skipped", &LoaderState::skipped)
      .def_rw("quarantined", &LoaderState::quarantined)
      .def_rw("dropped", &LoaderState::dropped)
      .def_rw("padding_batches", &LoaderState::padding_batches)
      .def_rw("truncated", &LoaderState::truncated)
      .def_rw("real_elements", &LoaderState::real_elements)
      .def_rw("padded_elements", &LoaderState::padded_elements)
      .def_rw("real_edges", &LoaderState::real_edges)
      .def_rw("padded_edges", &LoaderState::padded_edges)
      // A mixture's per source: (name, examples, elements, weight), or None.
      .def_prop_ro("mixture_sources", [](const LoaderState& s) {
        std::optional<std::vector<std::tuple<std::string, int64_t, int64_t, int64_t>>> out;
        if (!s.mixture) return out;
        out.emplace();
        for (const MixtureSourceState& source : s.mixture->sources) {
          out->emplace_back(source.name, source.examples, source.elements, source.weight);
        }
        return out;
      });
  // The state's text form (load/state_json.h): what get_state() returns, parsed.
  m.def("loader_state_to_json", &LoaderStateToJson, nb::arg("state"));
  m.def("loader_state_from_json", &LoaderStateFromJson, nb::arg("text"));
  // load/elastic.h: the start state of a shard on another shard count.
  m.def(
      "elastic_start",
      [](const std::vector<LoaderState>& saved, int64_t shard_index, int64_t shard_count) {
        return ElasticStart(saved, shard_index, shard_count);
      },
      nb::arg("saved"), nb::arg("shard_index"), nb::arg("shard_count"));

  nb::class_<ChunkedSource>(m, "ChunkedSource")
      .def_prop_ro("num_examples", &ChunkedSource::num_examples)
      .def_prop_ro("num_chunks", &ChunkedSource::num_chunks)
      .def_ro("fingerprint", &ChunkedSource::fingerprint)
      .def_prop_ro("length_column", [](const ChunkedSource& s) { return s.length_column; })
      .def_prop_ro("prototype", [](const ChunkedSource& s) { return s.prototype; })
      .def_prop_ro("chunk_begin", [](const ChunkedSource& s) { return ToNumpy(s.chunk_begin); })
      .def_prop_ro("chunk_bytes", [](const ChunkedSource& s) { return ToNumpy(s.chunk_bytes); })
      .def_prop_ro("node_counts", [](const ChunkedSource& s) { return ToNumpy(s.node_counts); })
      .def_prop_ro("edge_counts", [](const ChunkedSource& s) { return ToNumpy(s.edge_counts); })
      .def("lengths", [](const ChunkedSource& s, std::string_view column) {
        return ToNumpy(s.lengths(column));
      });

  nb::class_<ChunkedSourceBuilder>(m, "ChunkedSourceBuilder")
      .def(
          "__init__",
          [](ChunkedSourceBuilder* self, std::string length_column,
             std::vector<ColumnSchema> schema, bool graphs) {
            Schema rules{std::move(schema)};
            new (self) ChunkedSourceBuilder(
                graphs ? ChunkedSourceBuilder::ForGraphs(std::move(rules))
                       : ChunkedSourceBuilder(std::move(length_column), std::move(rules)));
          },
          nb::arg("length_column"), nb::arg("schema"), nb::arg("graphs") = false)
      .def("add", &ChunkedSourceBuilder::Add, nb::arg("chunk"),
           nb::call_guard<nb::gil_scoped_release>())
      .def("finish", [](ChunkedSourceBuilder& b) {
        nb::gil_scoped_release release;
        return std::make_shared<const ChunkedSource>(std::move(b).Finish());
      });

  nb::class_<ScheduleOptions>(m, "ScheduleOptions")
      .def(nb::init<>())
      .def_rw("planner", &ScheduleOptions::planner)
      .def_rw("shuffle", &ScheduleOptions::shuffle)
      .def_rw("block_size", &ScheduleOptions::block_size)
      .def_rw("seed", &ScheduleOptions::seed)
      .def_rw("shard_index", &ScheduleOptions::shard_index)
      .def_rw("shard_count", &ScheduleOptions::shard_count);
  nb::class_<LoaderOptions>(m, "LoaderOptions")
      .def(nb::init<>())
      .def_rw("schedule", &LoaderOptions::schedule)
      .def_rw("length_column", &LoaderOptions::length_column)
      .def_rw("num_threads", &LoaderOptions::num_threads)
      .def_rw("prefetch", &LoaderOptions::prefetch)
      .def_rw("epochs", &LoaderOptions::epochs)
      .def_rw("on_error", &LoaderOptions::on_error)
      .def_rw("max_errors", &LoaderOptions::max_errors)
      .def_rw("max_error_fraction", &LoaderOptions::max_error_fraction)
      .def_prop_rw(
          "schema", [](const LoaderOptions& o) { return o.schema.columns; },
          [](LoaderOptions& o, std::vector<ColumnSchema> columns) {
            o.schema.columns = std::move(columns);
          })
      .def_prop_rw(
          "pad_values", [](const LoaderOptions& o) { return o.collate.pad_values; },
          [](LoaderOptions& o, std::vector<std::pair<std::string, Scalar>> pads) {
            o.collate.pad_values = std::move(pads);
          })
      .def_prop_rw(
          "padded_segments", [](const LoaderOptions& o) { return o.collate.padded_segments; },
          [](LoaderOptions& o, bool on) { o.collate.padded_segments = on; })
      .def_prop_rw(
          "default_pad_value", [](const LoaderOptions& o) { return o.collate.default_pad_value; },
          [](LoaderOptions& o, Scalar pad) { o.collate.default_pad_value = pad; })
      .def_rw("host_memory_limit", &LoaderOptions::host_memory_limit)
      .def_rw("quarantine_path", &LoaderOptions::quarantine_path)
      .def_rw("source", &LoaderOptions::source)
      .def_rw("mapped_files", &LoaderOptions::mapped_files);
  m.def("validate_loader_options", &ValidateLoaderOptions, nb::arg("options"), nb::arg("who"));

  using Source = std::variant<std::shared_ptr<const Dataset>, std::shared_ptr<const ChunkedSource>,
                              std::shared_ptr<const Mixture>>;
  nb::class_<Loader>(m, "Loader")
      .def(
          "__init__",
          [](Loader* self, Source data, LoaderOptions options, std::optional<LoaderState> state) {
            nb::gil_scoped_release release;
            std::visit([&](auto& d) { new (self) Loader(std::move(d), std::move(options), state); },
                       data);
          },
          nb::arg("dataset"), nb::arg("options"), nb::arg("state").none())
      .def("next",
           [](Loader& loader) -> nb::object {
             // Waits in short slices without the GIL, so Ctrl-C (and other
             // signals' handlers) run while the consumer waits for a batch.
             std::optional<LoadedBatch> batch;
             while (true) {
               bool ready;
               {
                 nb::gil_scoped_release release;
                 ready = loader.TryNext(kSignalCheckInterval, &batch);
               }
               if (ready) break;
               if (PyErr_CheckSignals() != 0) throw nb::python_error();
             }
             if (!batch) return nb::none();
             return nb::make_tuple(ArrayList(batch->arrays), batch->epoch, batch->step,
                                   batch->examples, ShapeToPython(batch->shape), batch->packed);
           })
      .def(
          "next_chunk_request",
          [](Loader& loader, int64_t timeout_ms) {
            return loader.NextChunkRequest(std::chrono::milliseconds(timeout_ms));
          },
          nb::arg("timeout_ms"), nb::call_guard<nb::gil_scoped_release>())
      .def("provide_chunk", &Loader::ProvideChunk, nb::arg("chunk"), nb::arg("decoded"),
           nb::call_guard<nb::gil_scoped_release>())
      .def("fail_chunk", &Loader::FailChunk, nb::arg("chunk"), nb::arg("message"),
           nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("chunk_reads", &Loader::chunk_reads)
      .def_prop_ro("chunk_cache_bytes", &Loader::chunk_cache_bytes)
      .def_ro_static("NO_CHUNK_REQUEST", &ChunkCache::kNoRequest)
      .def_ro_static("CHUNKS_CLOSED", &ChunkCache::kClosed)
      .def("state", &Loader::state)
      .def("mixture_changes", &Loader::mixture_changes)
      .def("draw_mixture_pass",
           [](const Loader& loader) {
             Loader::MixturePass pass;
             {
               nb::gil_scoped_release release;
               pass = loader.DrawMixturePass();
             }
             return nb::make_tuple(ToNumpy(std::move(pass.sources)),
                                   ToNumpy(std::move(pass.examples)),
                                   ToNumpy(std::move(pass.tokens)), pass.weights);
           })
      .def("check_state", &Loader::CheckState, nb::arg("state"),
           nb::call_guard<nb::gil_scoped_release>())
      .def("steps", &Loader::Steps, nb::arg("epoch"), nb::call_guard<nb::gil_scoped_release>())
      .def("total_steps", &Loader::TotalSteps, nb::call_guard<nb::gil_scoped_release>())
      .def(
          "planned_shapes",
          [](const Loader& loader, int64_t from_epoch) {
            std::vector<BatchShape> shapes;
            {
              nb::gil_scoped_release release;
              shapes = loader.PlannedShapes(from_epoch);
            }
            std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>> out;
            for (const BatchShape& s : shapes) out.push_back(ShapeToPython(s));
            return out;
          },
          nb::arg("from_epoch"))
      .def("quarantine",
           [](const Loader& loader) {
             std::vector<std::pair<int64_t, std::string>> out;
             for (const BadRecord& r : loader.quarantine()) out.emplace_back(r.example, r.reason);
             return out;
           })
      .def_prop_ro("num_threads", &Loader::num_threads)
      .def_prop_ro("arena_allocations", [](const Loader& l) { return l.arena().allocations(); })
      .def("close", &Loader::Close, nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace jaxbatch::bindings
