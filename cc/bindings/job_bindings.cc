// Binds job/: the journal, atomic file writes, work units and fingerprints (data/'s,
// which jobs key their input on, and base/'s Hash64, which they use for checksums).
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "jaxbatch/base/hash.h"
#include "jaxbatch/data/fingerprint.h"
#include "jaxbatch/data/text_fingerprint.h"
#include "jaxbatch/job/journal.h"
#include "jaxbatch/job/work_units.h"

namespace jaxbatch::bindings {
namespace {

std::span<const uint8_t> Span(const nb::bytes& data) {
  return {reinterpret_cast<const uint8_t*>(data.c_str()), data.size()};
}

nb::list BytesList(const std::vector<std::string>& payloads) {
  nb::list out;
  for (const std::string& p : payloads) out.append(nb::bytes(p.data(), p.size()));
  return out;
}

}  // namespace

void BindJob(nb::module_& m) {
  nb::enum_<JournalAccess>(m, "JournalAccess")
      .value("write", JournalAccess::kWrite)
      .value("read", JournalAccess::kRead);
  nb::class_<JournalDamage>(m, "JournalDamage")
      .def_ro("offset", &JournalDamage::offset)
      .def_ro("record", &JournalDamage::record)
      .def_ro("bytes", &JournalDamage::bytes)
      .def_ro("intact_after", &JournalDamage::intact_after)
      .def_ro("reason", &JournalDamage::reason)
      .def_prop_ro("damaged", &JournalDamage::damaged)
      .def_prop_ro("torn_tail", &JournalDamage::torn_tail);
  nb::class_<Journal>(m, "Journal")
      .def(nb::init<std::string, JournalAccess>(), nb::arg("path"),
           nb::arg("access") = JournalAccess::kWrite, nb::call_guard<nb::gil_scoped_release>())
      .def("records", [](const Journal& j) { return BytesList(j.records()); })
      .def_prop_ro("damage", &Journal::damage)
      .def("salvaged", [](const Journal& j) { return BytesList(j.salvaged()); })
      .def_prop_ro("needs_repair", &Journal::needs_repair)
      .def_prop_ro("foreign", &Journal::foreign)
      .def_prop_ro("path", &Journal::path)
      .def(
          "append",
          [](Journal& j, const nb::bytes& payload) {
            const std::string_view view(payload.c_str(), payload.size());
            nb::gil_scoped_release release;
            j.Append(view);
          },
          nb::arg("payload"))
      .def("truncate", &Journal::Truncate, nb::arg("count"),
           nb::call_guard<nb::gil_scoped_release>())
      .def("close", &Journal::Close, nb::call_guard<nb::gil_scoped_release>());

  m.def(
      "write_file_atomic",
      [](const std::string& path, const nb::bytes& data) {
        const std::span<const uint8_t> bytes = Span(data);
        nb::gil_scoped_release release;
        WriteFileAtomic(path, bytes);
      },
      nb::arg("path"), nb::arg("data"));
  m.def(
      "publish_file_once",
      [](const std::string& path, const nb::bytes& data) {
        const std::span<const uint8_t> bytes = Span(data);
        nb::gil_scoped_release release;
        return PublishFileOnce(path, bytes);
      },
      nb::arg("path"), nb::arg("data"));
  m.def(
      "cut_into_units",
      [](const BatchPlan& plan, int64_t examples_per_unit) {
        return ToNumpy(CutIntoUnits(plan, examples_per_unit));
      },
      nb::arg("plan"), nb::arg("examples_per_unit"));
  m.def("slice_batches", &SliceBatches, nb::arg("plan"), nb::arg("begin"), nb::arg("end"),
        nb::call_guard<nb::gil_scoped_release>());
  m.def("sync_directory", &SyncDirectory, nb::arg("path"),
        nb::call_guard<nb::gil_scoped_release>());
  m.def("atomic_temp_prefix", &AtomicTempPrefix, nb::arg("name"));
  m.def(
      "read_owned_file",
      [](const std::string& path) {
        std::string bytes;
        {
          nb::gil_scoped_release release;
          bytes = ReadOwnedFile(path);
        }
        return nb::bytes(bytes.data(), bytes.size());
      },
      nb::arg("path"));
  m.def("hash_file", &HashFile, nb::arg("path"), nb::call_guard<nb::gil_scoped_release>());
  m.def(
      "hash_file_contents",
      [](const nb::bytes& data) {
        const std::span<const uint8_t> bytes = Span(data);
        nb::gil_scoped_release release;
        return HashFileContents(bytes.data(), bytes.size());
      },
      nb::arg("data"));
  m.def(
      "hash64",
      [](const nb::bytes& data, uint64_t seed) {
        const std::span<const uint8_t> bytes = Span(data);
        nb::gil_scoped_release release;
        return Hash64(bytes.data(), bytes.size(), seed);
      },
      nb::arg("data"), nb::arg("seed") = 0);
  nb::class_<TextFingerprint>(m, "TextFingerprint")
      .def(nb::init<>())
      .def(
          "add",
          [](TextFingerprint& f, Int64Input offsets, ByteInput data, ByteInput valid) {
            nb::gil_scoped_release release;
            f.Add({offsets.data(), offsets.shape(0)}, {data.data(), data.shape(0)},
                  {valid.data(), valid.shape(0)});
          },
          nb::arg("offsets"), nb::arg("data"), nb::arg("valid"))
      .def("digest", &TextFingerprint::Digest)
      .def_prop_ro("documents", &TextFingerprint::documents);
  m.def("dataset_fingerprint", &DatasetFingerprint, nb::arg("dataset"),
        nb::call_guard<nb::gil_scoped_release>());
  m.def(
      "layout_fingerprint", [](const Dataset& dataset) { return LayoutFingerprint(dataset); },
      nb::arg("dataset"), nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace jaxbatch::bindings
