// pstrain._pstrain: the worker session (worker/session.h) for Python.
// Arrays cross as buffers (numpy arrays; pstrain/__init__.py turns CPU
// torch tensors into numpy views of the same memory): float32 values and
// gradients, int64 ids, C-contiguous, read and written in place. Every
// call that waits on the network or the coordinator releases the GIL.
// Errors become Python exceptions that carry the message:
// InvalidArgument/OutOfRange -> ValueError, NotFound -> LookupError,
// Unavailable/DeadlineExceeded -> ConnectionError, anything else ->
// RuntimeError. A wrong dtype or layout is a TypeError naming the tensor.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/process.h"
#include "common/tf_config.h"
#include "common/transport_security.h"
#include "python/py_status.h"
#include "python/rpc_settings.h"
#include "worker/session.h"

namespace py = pybind11;

namespace pst::python {
namespace {

// Whether `info` holds items of `T`, in native byte order. An integer type
// has two format codes where long and long long are the same size: numpy's
// int64 is 'l' on LP64 hosts, pybind11's int64_t 'q'.
template <typename T>
bool HoldsItemsOf(const py::buffer_info& info) {
  if (info.itemsize != static_cast<py::ssize_t>(sizeof(T))) return false;
  if (info.format == py::format_descriptor<T>::format()) return true;
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    return (sizeof(T) == sizeof(long) && info.format == "l") ||
           (sizeof(T) == sizeof(long long) && info.format == "q");
  }
  return false;
}

// A buffer of `T`, C-contiguous, of exactly `want` elements (-1: any), as
// `what` names it in errors.
template <typename T>
py::buffer_info Checked(const py::buffer& buffer, bool writable, const std::string& what,
                        int64_t want) {
  py::buffer_info info = buffer.request(writable);
  if (!HoldsItemsOf<T>(info)) {
    throw py::type_error(absl::StrCat(what, ": expected ",
                                      sizeof(T) == 4 ? "float32" : "int64", " values, got '",
                                      info.format, "' items of ", info.itemsize, " bytes"));
  }
  py::ssize_t stride = info.itemsize;
  for (int d = static_cast<int>(info.ndim) - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != stride) {
      throw py::type_error(absl::StrCat(what, ": not C-contiguous (make it contiguous first)"));
    }
    stride *= info.shape[d];
  }
  if (want >= 0 && info.size != want) {
    throw py::value_error(
        absl::StrCat(what, ": holds ", info.size, " values, expected ", want));
  }
  return info;
}

template <typename T>
std::span<T> SpanOf(const py::buffer_info& info) {
  return std::span<T>(static_cast<T*>(info.ptr), static_cast<size_t>(info.size));
}

// A Python worker's session: the C++ session, and what Python asks of it.
class Session {
 public:
  Session(const std::string& tf_config, double heartbeat_s, double startup_s, double rpc_s,
          double recovery_s) {
    common::TfConfig tf = ValueOrRaise(common::ParseTfConfig(tf_config));
    if (tf.task.type != common::TaskType::kWorker) {
      throw py::value_error(absl::StrCat("TF_CONFIG: task.type is '",
                                         std::string(common::TaskTypeName(tf.task.type)),
                                         "'; a pstrain.Worker runs a 'worker' task"));
    }
    if (tf.cluster.chief.empty()) {
      throw py::value_error(
          "TF_CONFIG: the cluster has no chief; Python workers need one (a C++ worker 0 can act "
          "as chief, a Python one cannot)");
    }
    worker::TrainerOptions options;
    options.worker_index = tf.task.index;
    options.incarnation = common::NewIncarnation();
    options.coordinator_address = tf.cluster.CoordinatorAddress();
    options.heartbeat_interval = absl::Seconds(heartbeat_s);
    options.startup_timeout = absl::Seconds(startup_s);
    options.rpc_timeout = absl::Seconds(rpc_s);
    options.recovery_timeout = absl::Seconds(recovery_s);
    options.rpc = SessionRpcSettings();
    absl::StatusOr<std::unique_ptr<worker::WorkerSession>> session;
    {
      py::gil_scoped_release release;
      session = worker::WorkerSession::Start(options);
    }
    session_ = ValueOrRaise(std::move(session));
    for (const client::PsClient::DenseInfo& info : session_->ps().DenseVariables()) {
      int64_t size = 1;
      for (int64_t d : info.shape) size *= d;
      dense_.push_back({info.name, info.shape, size});
    }
  }

  worker::WorkerSession& get() {
    if (session_ == nullptr) throw std::runtime_error("the worker is closed");
    return *session_;
  }

  void Close() {
    std::unique_ptr<worker::WorkerSession> session = std::move(session_);
    py::gil_scoped_release release;
    session.reset();
  }

  py::list DenseVariables() const {
    py::list out;
    for (const Dense& d : dense_) out.append(py::make_tuple(d.name, py::tuple(py::cast(d.shape))));
    return out;
  }

  py::dict Tables() {
    py::dict out;
    for (const std::string& name : get().ps().TableNames()) {
      out[py::str(name)] = ValueOrRaise(get().ps().TableDim(name));
    }
    return out;
  }

  py::dict Training() {
    const proto::TrainingConfig& t = get().training();
    py::dict out;
    out["model"] = t.model();
    out["batch_size"] = t.batch_size();
    out["epochs"] = t.epochs();
    out["max_steps"] = t.max_steps();
    out["seed"] = t.seed();
    out["mode"] = proto::SyncMode_Name(t.sync().mode());
    out["optimizer"] = t.optimizer().name();
    out["learning_rate"] = t.optimizer().learning_rate();
    out["clip_norm"] = t.clip_norm();
    out["data"] = t.data();
    out["stream_data"] = t.stream_data();
    out["shuffle_buffer"] = t.shuffle_buffer();
    out["eval_data"] = t.eval_data();
    out["num_workers"] = get().state().num_workers();
    out["num_ps"] = get().state().ps_addresses_size();
    return out;
  }

  // (position, epoch, refresh, examples), or None at the end.
  py::object Next(int64_t num_examples, bool own_share) {
    absl::StatusOr<worker::WorkerSession::Batch> batch;
    {
      py::gil_scoped_release release;
      batch = get().Next(num_examples, own_share);
    }
    worker::WorkerSession::Batch b = ValueOrRaise(std::move(batch));
    if (b.done) return py::none();
    py::array_t<int64_t> examples(static_cast<py::ssize_t>(b.examples.size()));
    std::copy(b.examples.begin(), b.examples.end(), examples.mutable_data());
    return py::make_tuple(b.position, b.epoch, b.refresh, examples);
  }

  bool Pull(const py::list& values) {
    std::vector<py::buffer_info> held;
    const client::ValueSpans spans = ValueSpans(values, &held);
    absl::StatusOr<bool> ok;
    {
      py::gil_scoped_release release;
      ok = get().Pull(spans);
    }
    return ValueOrRaise(std::move(ok));
  }

  bool PushPull(const py::list& grads, const py::list& values, int64_t examples, float loss) {
    std::vector<py::buffer_info> held;
    if (static_cast<size_t>(py::len(grads)) != dense_.size()) {
      throw py::value_error(absl::StrCat("push of ", py::len(grads), " gradients for ",
                                         dense_.size(), " dense variables"));
    }
    client::GradientSpans grad_spans;
    for (size_t k = 0; k < dense_.size(); ++k) {
      held.push_back(Checked<float>(grads[k], false, absl::StrCat("gradient of '", dense_[k].name, "'"),
                                    dense_[k].size));
      grad_spans.push_back(SpanOf<const float>(held.back()));
    }
    const client::ValueSpans value_spans = ValueSpans(values, &held);
    absl::StatusOr<bool> ok;
    {
      py::gil_scoped_release release;
      ok = get().PushPull(grad_spans, value_spans, examples, loss);
    }
    return ValueOrRaise(std::move(ok));
  }

  bool PullRows(const std::string& table, const py::buffer& ids, const py::buffer& out) {
    const py::buffer_info id_info = Checked<int64_t>(ids, false, absl::StrCat("ids for '", table, "'"), -1);
    const int dim = ValueOrRaise(get().ps().TableDim(table));
    const py::buffer_info out_info =
        Checked<float>(out, true, absl::StrCat("rows of '", table, "'"), id_info.size * dim);
    absl::StatusOr<bool> ok;
    {
      py::gil_scoped_release release;
      ok = get().PullRows(table, SpanOf<const int64_t>(id_info), SpanOf<float>(out_info));
    }
    return ValueOrRaise(std::move(ok));
  }

  // One push of the rows of every table in `entries`, (table, ids, grads)
  // tuples: the session takes one row push per batch.
  bool PushRows(const py::list& entries) {
    std::vector<py::buffer_info> held;
    held.reserve(2 * py::len(entries));  // the spans point into its elements
    std::vector<client::PsClient::TableIds> tables;
    client::GradientSpans grads;
    for (const py::handle entry : entries) {
      if (!py::isinstance<py::tuple>(entry) || py::len(entry) != 3) {
        throw py::type_error("push_rows: entries are (table, ids, grads) tuples");
      }
      const py::tuple t = py::reinterpret_borrow<py::tuple>(entry);
      const std::string table = t[0].cast<std::string>();
      held.push_back(Checked<int64_t>(t[1], false, absl::StrCat("ids for '", table, "'"), -1));
      const py::buffer_info& id_info = held.back();
      const int dim = ValueOrRaise(get().ps().TableDim(table));
      tables.push_back({table, SpanOf<const int64_t>(id_info)});
      held.push_back(Checked<float>(t[2], false, absl::StrCat("row gradients of '", table, "'"),
                                    id_info.size * dim));
      grads.push_back(SpanOf<const float>(held.back()));
    }
    absl::StatusOr<bool> ok;
    {
      py::gil_scoped_release release;
      ok = get().PushRows(tables, grads);
    }
    return ValueOrRaise(std::move(ok));
  }

  // The benchmark's reference (bench/python_workers.py): `steps` batches
  // of zero gradients pushed by a C++ loop over the same session, with
  // buffers of its own, and no Python between the calls. Returns the
  // seconds each PushPull took.
  std::vector<double> CppPushPullSeconds(int64_t steps, int64_t num_examples) {
    std::vector<std::vector<float>> grads, values;
    for (const Dense& d : dense_) {
      grads.emplace_back(d.size, 0.0f);
      values.emplace_back(d.size, 0.0f);
    }
    client::GradientSpans grad_spans(grads.begin(), grads.end());
    client::ValueSpans value_spans(values.begin(), values.end());
    std::vector<double> seconds;
    py::gil_scoped_release release;
    for (int64_t i = 0; i < steps; ++i) {
      absl::StatusOr<worker::WorkerSession::Batch> batch = get().Next(num_examples);
      if (!batch.ok() || batch->done) break;
      const absl::Time start = absl::Now();
      absl::StatusOr<bool> ok = get().PushPull(grad_spans, value_spans, batch->examples.size(), 0);
      if (!ok.ok() || !*ok) break;
      seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    }
    return seconds;
  }

 private:
  struct Dense {
    std::string name;
    std::vector<int64_t> shape;
    int64_t size;
  };

  client::ValueSpans ValueSpans(const py::list& values, std::vector<py::buffer_info>* held) {
    if (static_cast<size_t>(py::len(values)) != dense_.size()) {
      throw py::value_error(absl::StrCat("pull into ", py::len(values), " arrays for ",
                                         dense_.size(), " dense variables"));
    }
    held->reserve(held->size() + dense_.size());
    client::ValueSpans spans;
    for (size_t k = 0; k < dense_.size(); ++k) {
      held->push_back(Checked<float>(values[k], true, absl::StrCat("values of '", dense_[k].name, "'"),
                                     dense_[k].size));
      spans.push_back(SpanOf<float>(held->back()));
    }
    return spans;
  }

  std::unique_ptr<worker::WorkerSession> session_;
  std::vector<Dense> dense_;
};

}  // namespace
}  // namespace pst::python

PYBIND11_MODULE(_pstrain, m) {
  using pst::python::Session;
  m.doc() = "pstrain's worker and evaluator sessions (see pstrain.Worker, pstrain.Evaluator)";
  pst::python::RegisterEvaluator(m);
  pst::python::RegisterStream(m);
  m.def(
      "set_security",
      [](const std::string& tls_cert, const std::string& tls_key, const std::string& tls_ca,
         const std::string& auth_token_file, const std::string& tls_server_name) {
        pst::common::SecurityFiles files;
        files.tls_cert = tls_cert;
        files.tls_key = tls_key;
        files.tls_ca = tls_ca;
        files.auth_token_file = auth_token_file;
        files.tls_server_name = tls_server_name;
        pst::rpc::RpcSettings& settings = pst::python::SessionRpcSettings();
        settings.security = pst::python::ValueOrRaise(pst::common::LoadTransportSecurity(files));
        return pst::common::DescribeTransportSecurity(settings.security);
      },
      py::arg("tls_cert"), py::arg("tls_key"), py::arg("tls_ca"), py::arg("auth_token_file"),
      py::arg("tls_server_name"),
      "Sets the TLS files and token every later connection uses (the daemons' --tls_* and "
      "--auth_token_file flags); returns a description.");
  py::class_<Session>(m, "Session")
      .def(py::init<const std::string&, double, double, double, double>(), py::arg("tf_config"),
           py::arg("heartbeat_s"), py::arg("startup_s"), py::arg("rpc_s"), py::arg("recovery_s"))
      .def("close", &Session::Close)
      .def_property_readonly("worker_index", [](Session& s) { return s.get().worker_index(); })
      .def_property_readonly("global_step", [](Session& s) { return s.get().global_step(); })
      .def_property_readonly("generation", [](Session& s) { return s.get().generation(); })
      .def_property_readonly("dense_variables", &Session::DenseVariables)
      .def_property_readonly("tables", &Session::Tables)
      .def_property_readonly("training", &Session::Training)
      .def("next", &Session::Next, py::arg("num_examples"), py::arg("own_share") = false)
      .def("pull", &Session::Pull, py::arg("values"))
      .def("push_pull", &Session::PushPull, py::arg("grads"), py::arg("values"),
           py::arg("examples"), py::arg("loss"))
      .def("pull_rows", &Session::PullRows, py::arg("table"), py::arg("ids"), py::arg("out"))
      .def("push_rows", &Session::PushRows, py::arg("entries"))
      .def("stop", [](Session& s, const std::string& reason) { s.get().Stop(reason); })
      .def("_cpp_push_pull_seconds", &Session::CppPushPullSeconds, py::arg("steps"),
           py::arg("num_examples"));
}
