// pstrain._pstrain.EvaluatorSession: the evaluator session
// (evaluator/evaluator_session.h) for Python, and export_checkpoint (the
// whole model of a checkpoint as one safetensors file). pstrain.Evaluator
// (pstrain/evaluator.py) drives it: look, evaluate in Python, report.
// Calls that touch the network or the files release the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_export.h"
#include "common/tf_config.h"
#include "evaluator/chief_link.h"
#include "evaluator/evaluator_session.h"
#include "python/py_status.h"
#include "python/rpc_settings.h"

namespace py = pybind11;

namespace pst::python {
namespace {

class EvaluatorSession {
 public:
  EvaluatorSession(const std::string& tf_config, const std::string& checkpoint_dir,
                   const std::string& summary_dir, const std::string& best_metric,
                   const std::string& best_mode, double poll_s, double chief_timeout_s,
                   double rpc_s) {
    common::TfConfig tf = ValueOrRaise(common::ParseTfConfig(tf_config));
    if (tf.task.type != common::TaskType::kEvaluator) {
      throw py::value_error(absl::StrCat("TF_CONFIG: task.type is '",
                                         std::string(common::TaskTypeName(tf.task.type)),
                                         "'; a pstrain.Evaluator runs an 'evaluator' task"));
    }
    evaluator::EvaluatorOptions options;
    options.index = tf.task.index;
    options.checkpoint_dir = checkpoint_dir;
    options.summary_dir = summary_dir;
    options.best_metric = best_metric;
    options.best_mode = ValueOrRaise(evaluator::ParseBestMode(best_mode));
    options.poll_interval = absl::Seconds(poll_s);
    options.chief_timeout = absl::Seconds(chief_timeout_s);
    options.rpc_timeout = absl::Seconds(rpc_s);
    session_ = ValueOrRaise(evaluator::EvaluatorSession::Create(
        options, evaluator::MakeGrpcChiefLink(tf.cluster.CoordinatorAddress(),
                                              SessionRpcSettings())));
  }

  // ("checkpoint", info) | ("wait", None) | ("end", None).
  py::tuple Look() {
    bool over = false;
    absl::StatusOr<std::optional<evaluator::FoundCheckpoint>> found;
    {
      py::gil_scoped_release release;
      found = session_->Look(&over);
    }
    if (!found.ok()) Raise(found.status());
    if (!found->has_value()) return py::make_tuple(over ? "end" : "wait", py::none());
    const evaluator::FoundCheckpoint& c = **found;
    pending_[c.name] = c;
    py::dict info;
    info["path"] = c.path;
    info["name"] = c.name;
    info["step"] = c.step;
    info["epochs_completed"] = c.manifest.epochs_completed();
    return py::make_tuple("checkpoint", info);
  }

  bool Report(const std::string& name, const std::map<std::string, double>& metrics) {
    const evaluator::FoundCheckpoint checkpoint = Take(name);
    absl::StatusOr<bool> best;
    {
      py::gil_scoped_release release;
      best = session_->Report(checkpoint, metrics);
    }
    return ValueOrRaise(std::move(best));
  }

  void ReportFailure(const std::string& name, const std::string& error) {
    const evaluator::FoundCheckpoint checkpoint = Take(name);
    py::gil_scoped_release release;
    session_->ReportFailure(checkpoint, absl::UnknownError(error));
  }

  void GiveUp(const std::string& why) {
    py::gil_scoped_release release;
    session_->GiveUp(absl::UnknownError(why));
  }

 private:
  evaluator::FoundCheckpoint Take(const std::string& name) {
    auto it = pending_.find(name);
    if (it == pending_.end()) {
      throw py::value_error(absl::StrCat("checkpoint '", name,
                                         "' was not handed out by this evaluator, or was "
                                         "reported already"));
    }
    evaluator::FoundCheckpoint checkpoint = std::move(it->second);
    pending_.erase(it);
    return checkpoint;
  }

  std::unique_ptr<evaluator::EvaluatorSession> session_;
  std::map<std::string, evaluator::FoundCheckpoint> pending_;
};

}  // namespace

void RegisterEvaluator(py::module_& m) {
  py::class_<EvaluatorSession>(m, "EvaluatorSession")
      .def(py::init<const std::string&, const std::string&, const std::string&, const std::string&,
                    const std::string&, double, double, double>(),
           py::arg("tf_config"), py::arg("checkpoint_dir"), py::arg("summary_dir"),
           py::arg("best_metric"), py::arg("best_mode"), py::arg("poll_s"),
           py::arg("chief_timeout_s"), py::arg("rpc_s"))
      .def("look", &EvaluatorSession::Look)
      .def("report", &EvaluatorSession::Report, py::arg("name"), py::arg("metrics"))
      .def("report_failure", &EvaluatorSession::ReportFailure, py::arg("name"), py::arg("error"))
      .def("give_up", &EvaluatorSession::GiveUp, py::arg("why"));
  m.def(
      "export_checkpoint",
      [](const std::string& dir, const std::string& out, bool include_slots) {
        absl::StatusOr<common::ExportResult> result;
        {
          py::gil_scoped_release release;
          result = common::ExportSafetensors(dir, out, {.include_slots = include_slots});
        }
        const common::ExportResult done = ValueOrRaise(std::move(result));
        py::dict info;
        info["checkpoint"] = done.checkpoint;
        info["global_step"] = done.global_step;
        info["tensors"] = done.tensors;
        info["bytes"] = done.bytes;
        return info;
      },
      py::arg("dir"), py::arg("out"), py::arg("include_slots") = false,
      "Exports checkpoint `dir` (or the newest valid one under a root) to the safetensors file "
      "`out`, as `pstrain checkpoint export` does.");
}

}  // namespace pst::python
