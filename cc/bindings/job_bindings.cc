// Binds job/: the journal, atomic file writes and fingerprints (and base/'s
// Hash64, which jobs use for checksums).
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "jaxbatch/base/hash.h"
#include "jaxbatch/job/fingerprint.h"
#include "jaxbatch/job/journal.h"

namespace jaxbatch::bindings {
namespace {

std::span<const uint8_t> Span(const nb::bytes& data) {
  return {reinterpret_cast<const uint8_t*>(data.c_str()), data.size()};
}

}  // namespace

void BindJob(nb::module_& m) {
  nb::class_<Journal>(m, "Journal")
      .def(nb::init<std::string>(), nb::arg("path"), nb::call_guard<nb::gil_scoped_release>())
      .def("records",
           [](const Journal& j) {
             nb::list out;
             for (const std::string& r : j.records()) out.append(nb::bytes(r.data(), r.size()));
             return out;
           })
      .def_prop_ro("discarded_bytes", &Journal::discarded_bytes)
      .def_prop_ro("discarded_reason", &Journal::discarded_reason)
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
  m.def("sync_directory", &SyncDirectory, nb::arg("path"),
        nb::call_guard<nb::gil_scoped_release>());
  m.def("hash_file", &HashFile, nb::arg("path"), nb::call_guard<nb::gil_scoped_release>());
  m.def(
      "hash64",
      [](const nb::bytes& data, uint64_t seed) {
        const std::span<const uint8_t> bytes = Span(data);
        nb::gil_scoped_release release;
        return Hash64(bytes.data(), bytes.size(), seed);
      },
      nb::arg("data"), nb::arg("seed") = 0);
  m.def("dataset_fingerprint", &DatasetFingerprint, nb::arg("dataset"),
        nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace jaxbatch::bindings
