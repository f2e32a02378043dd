// pstrain._pstrain.Stream: one worker's share of a Criteo or libsvm input
// read as a stream (data/stream_input.h), batch by batch at data positions:
// batch b of epoch e is the examples [b * batch_size, ...) of the epoch's
// block-shuffled order, as a C++ worker's --stream_data reads them, so a
// position names the same examples in every run and a restarted worker
// resumes at the exact example. pstrain.Stream (pstrain/__init__.py) wraps
// it. Counting the share's examples (at construction) and reading release
// the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/stream_input.h"
#include "python/py_status.h"

namespace py = pybind11;

namespace pst::python {
namespace {

template <typename T>
py::array_t<T> ArrayOf(const std::vector<T>& values, std::vector<py::ssize_t> shape) {
  py::array_t<T> out(shape);
  if (!values.empty()) std::memcpy(out.mutable_data(), values.data(), values.size() * sizeof(T));
  return out;
}

class Stream {
 public:
  Stream(const std::string& spec, const std::string& format, int shard, int num_shards,
         int64_t shuffle_buffer, uint64_t seed, int64_t epochs, int64_t batch_size,
         int64_t buckets) {
    if (format != "criteo" && format != "libsvm") {
      throw py::value_error(
          absl::StrCat("format must be 'criteo' or 'libsvm', got '", format, "'"));
    }
    if (batch_size < 1 || epochs < 1 || shuffle_buffer < 1 || buckets < 0) {
      throw py::value_error(
          absl::StrCat("batch_size, epochs and shuffle_buffer must be >= 1 and buckets >= 0, got ",
                       batch_size, ", ", epochs, ", ", shuffle_buffer, " and ", buckets));
    }
    criteo_ = format == "criteo";
    batch_size_ = batch_size;
    epochs_ = epochs;
    data::StreamOptions options;
    options.buffer_size = shuffle_buffer;
    options.shuffle = shuffle_buffer > 1;
    options.seed = seed;
    options.num_epochs = epochs;
    absl::StatusOr<data::StreamInput> input;
    {
      py::gil_scoped_release release;
      input = data::PrepareStreamInput(
          spec, shard, num_shards,
          criteo_ ? data::ExampleFormat::kCriteo : data::ExampleFormat::kLibsvm, buckets, options);
    }
    input_ = ValueOrRaise(std::move(input));
  }

  int64_t examples() const { return input_.examples; }
  int64_t batches_per_epoch() const { return (input_.examples + batch_size_ - 1) / batch_size_; }

  // The batch at data position `position`: (dense [n, 13], ids [n, 26],
  // labels [n]) for Criteo, (offsets [n + 1], ids, values, labels [n]) for
  // libsvm. Reading on from the last batch read costs only its examples;
  // any other position reopens the stream at its epoch and reads past the
  // batches before it.
  py::tuple Read(int64_t position) {
    const int64_t per_epoch = batches_per_epoch();
    if (position < 0 || per_epoch == 0 || position >= epochs_ * per_epoch) {
      throw py::index_error(absl::StrCat("no data position ", position, " in ", epochs_,
                                         " epoch(s) of ", per_epoch, " batch(es)"));
    }
    const int64_t epoch = position / per_epoch;
    const int64_t first = (position - epoch * per_epoch) * batch_size_;
    const int64_t count = std::min(batch_size_, input_.examples - first);
    data::CtrDataset ctr;
    data::LibsvmDataset svm;
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = ReadBatch(position, epoch, first, count, &ctr, &svm);
    }
    if (!status.ok()) Raise(status);
    const auto n = static_cast<py::ssize_t>(count);
    if (criteo_) {
      return py::make_tuple(ArrayOf(ctr.dense, {n, data::kCriteoDense}),
                            ArrayOf(ctr.ids, {n, data::kCriteoFields}), ArrayOf(ctr.labels, {n}));
    }
    return py::make_tuple(ArrayOf(svm.offsets, {n + 1}),
                          ArrayOf(svm.ids, {static_cast<py::ssize_t>(svm.ids.size())}),
                          ArrayOf(svm.values, {static_cast<py::ssize_t>(svm.values.size())}),
                          ArrayOf(svm.labels, {n}));
  }

 private:
  absl::Status ReadBatch(int64_t position, int64_t epoch, int64_t first, int64_t count,
                         data::CtrDataset* ctr, data::LibsvmDataset* svm) {
    if (position != next_position_) {
      ctr_stream_.reset();
      svm_stream_.reset();
      if (criteo_) {
        PST_ASSIGN_OR_RETURN(ctr_stream_, data::OpenCtrAt(input_, epoch, first));
      } else {
        PST_ASSIGN_OR_RETURN(svm_stream_, data::OpenLibsvmAt(input_, epoch, first));
      }
    }
    next_position_ = -1;  // unless this read succeeds
    int64_t got = 0;
    if (criteo_) {
      PST_ASSIGN_OR_RETURN(got, ctr_stream_->NextBatch(count, ctr));
    } else {
      PST_ASSIGN_OR_RETURN(got, svm_stream_->NextBatch(count, svm));
    }
    if (got != count) {
      return absl::DataLossError(absl::StrCat("the input changed: epoch ", epoch, " ended ",
                                              count - got, " example(s) short of the ",
                                              input_.examples, " counted at the start"));
    }
    if (!criteo_ && svm->offsets.empty()) svm->offsets.push_back(0);
    next_position_ = position + 1;
    return absl::OkStatus();
  }

  data::StreamInput input_;
  bool criteo_ = true;
  int64_t batch_size_ = 1;
  int64_t epochs_ = 1;
  std::unique_ptr<data::CtrExampleStream> ctr_stream_;
  std::unique_ptr<data::LibsvmExampleStream> svm_stream_;
  int64_t next_position_ = -1;  // the position the open stream reads next
};

}  // namespace

void RegisterStream(py::module_& m) {
  py::class_<Stream>(m, "Stream")
      .def(py::init<const std::string&, const std::string&, int, int, int64_t, uint64_t, int64_t,
                    int64_t, int64_t>(),
           py::arg("spec"), py::arg("format"), py::arg("shard"), py::arg("num_shards"),
           py::arg("shuffle_buffer"), py::arg("seed"), py::arg("epochs"), py::arg("batch_size"),
           py::arg("buckets"))
      .def_property_readonly("examples", &Stream::examples)
      .def_property_readonly("batches_per_epoch", &Stream::batches_per_epoch)
      .def("read", &Stream::Read, py::arg("position"));
}

}  // namespace pst::python
