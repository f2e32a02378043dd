// The training loop of a model with tables (wide_deep, logreg): each step
// gathers a batch, pulls its rows, computes its gradients, pushes its rows
// and then its dense gradients fused with the pull of the next values.
// The model gives the gather and the math (RowStepFns); this loop makes the
// ps calls, tags them, keeps the step times and reports each step.
//
// With --overlap (ASYNC and SSP; RowStepsOverlap), step b computes while
// the pushes of step b-1 are in flight on a thread of their own. A
// worker's client takes one call at a time, so b's rows are pulled before
// b-1's pushes go: b computes from rows and values one step older, as the
// MLP's overlap does, and every batch is still pushed once, tagged with its
// position. A stop (should_stop, max_steps) lets the step in flight, and
// the one computed, be pushed first.
#ifndef PST_MODELS_ROW_STEPS_H_
#define PST_MODELS_ROW_STEPS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "common/status_macros.h"
#include "models/background.h"
#include "models/streamed_data.h"
#include "models/train_loop.h"
#include "proto/pstrain.pb.h"

namespace pst::models {

// A model's part of a step, over two slots (0 and 1) of batch memory: the
// overlapped loop gathers and computes one batch while the other's
// gradients are being pushed.
template <typename Source>
struct RowStepFns {
  using Tables = std::vector<client::PsClient::TableIds>;
  // Gathers examples[0..n) of `source` into slot `s`; the tables and ids
  // to pull and push (spans into the slot, valid until its next gather).
  std::function<Tables(int s, const Source& source, const int64_t* examples, int64_t n)> gather;
  // Where slot s's rows are pulled to.
  std::function<client::Values*(int s)> rows;
  // Slot s's gradients from `params` and its rows (clipped as the job
  // says), into *grads(s) and *row_grads(s); the batch's loss.
  std::function<absl::StatusOr<float>(int s, const client::Values& params)> compute;
  std::function<client::Values*(int s)> grads;
  std::function<client::Values*(int s)> row_grads;
};

// Whether the loop overlaps under `training`: --overlap outside SYNC, whose
// step must be computed from the version it is tagged with.
inline bool RowStepsOverlap(const proto::TrainingConfig& training) {
  return training.overlap() && training.sync().mode() != proto::SYNC;
}

// Trains through `ps` over `data` (Model::Train's contract); the global step
// at the end.
template <typename Loaded, typename Source, typename OpenAt>
absl::StatusOr<int64_t> TrainRowSteps(const proto::TrainingConfig& training,
                                      const LoadedOrStreamedData<Loaded>& data,
                                      uint64_t shuffle_seed, client::PsClient* ps,
                                      const LoopControl& control, OpenAt open_at,
                                      const RowStepFns<Source>& fns) {
  StepTimes unused_times;
  StepTimes& times = control.times != nullptr ? *control.times : unused_times;
  client::Values params, incoming;
  PST_ASSIGN_OR_RETURN(int64_t global_step, ps->Pull(&params));
  const bool sync = training.sync().mode() == proto::SYNC;
  std::array<typename RowStepFns<Source>::Tables, 2> tables;
  // Gathers slot s and pulls its rows: the gather is compute, the pull
  // communication (all of it waited for).
  auto gather_and_pull = [&](int s, const Source& source, const int64_t* examples,
                             int64_t n) -> absl::Status {
    const absl::Time start = absl::Now();
    tables[s] = fns.gather(s, source, examples, n);
    const absl::Time gathered = absl::Now();
    times.compute += gathered - start;
    absl::Status pulled = ps->PullRows(tables[s], fns.rows(s));
    times.communication += absl::Now() - gathered;
    times.waited += absl::Now() - gathered;
    return pulled;
  };
  auto compute = [&](int s) -> absl::StatusOr<float> {
    const absl::Time start = absl::Now();
    absl::StatusOr<float> loss = fns.compute(s, params);
    if (control.step_delay > absl::ZeroDuration()) absl::SleepFor(control.step_delay);
    times.compute += absl::Now() - start;
    return loss;
  };
  // Slot s's pushes: rows first (once the dense step is applied, so are its
  // rows), tagged as the modes tag them (SYNC: the version computed from;
  // the others: the data position); the values after it into `into`.
  auto push = [&](int s, int64_t base, int64_t position,
                  client::Values* into) -> absl::StatusOr<int64_t> {
    const int64_t tag = sync ? base : position;
    PST_RETURN_IF_ERROR(ps->PushRows(tag, tables[s], *fns.row_grads(s)));
    return ps->PushPull(tag, base, *fns.grads(s), into, position);
  };

  if (!RowStepsOverlap(training)) {
    auto step = [&](const Source& source, const int64_t* examples, int64_t n, int epoch,
                    int64_t position) -> absl::StatusOr<bool> {
      if (control.should_stop(position) || ReachedMaxSteps(training, global_step)) return false;
      PST_RETURN_IF_ERROR(gather_and_pull(0, source, examples, n));
      PST_ASSIGN_OR_RETURN(const float loss, compute(0));
      const absl::Time start = absl::Now();
      PST_ASSIGN_OR_RETURN(global_step, push(0, global_step, position, &params));
      times.communication += absl::Now() - start;
      times.waited += absl::Now() - start;
      ++times.steps;
      control.on_step(n, loss, epoch, global_step, position + 1);
      return true;
    };
    PST_RETURN_IF_ERROR(ForEachTrainingBatch(training, data, shuffle_seed, control.start_position,
                                             open_at, step));
    return global_step;
  }

  // Overlapped: `computed` is the step whose gradients wait in its slot for
  // their pushes; `flight` the one whose pushes run on `comm`.
  struct Computed {
    int slot = 0;
    int64_t examples = 0, position = 0;
    float loss = 0;
    int epoch = 0;
  };
  struct InFlight {
    Computed step;
    absl::StatusOr<int64_t> version;
    absl::Duration took;
  };
  std::optional<Computed> computed;
  std::optional<InFlight> flight;
  Background comm;
  auto start_pushes = [&] {
    flight.emplace();
    flight->step = *computed;
    computed.reset();
    const int64_t base = global_step;
    comm.Start([&, base] {
      const absl::Time start = absl::Now();
      flight->version = push(flight->step.slot, base, flight->step.position, &incoming);
      flight->took = absl::Now() - start;
    });
  };
  // Waits for the pushes in flight and takes their answer.
  auto land = [&]() -> absl::Status {
    const absl::Time start = absl::Now();
    comm.Wait();
    times.waited += absl::Now() - start;
    times.communication += flight->took;
    InFlight done = *std::move(flight);
    flight.reset();
    PST_RETURN_IF_ERROR(done.version.status());
    global_step = *done.version;
    params.swap(incoming);
    ++times.steps;
    control.on_step(done.step.examples, done.step.loss, done.step.epoch, global_step,
                    done.step.position + 1);
    return absl::OkStatus();
  };
  auto step = [&](const Source& source, const int64_t* examples, int64_t n, int epoch,
                  int64_t position) -> absl::StatusOr<bool> {
    // The computed step counts: its push is sure to come.
    const int64_t steps_to_come = global_step + (computed.has_value() ? 1 : 0);
    if (control.should_stop(position) || ReachedMaxSteps(training, steps_to_come)) return false;
    // The slot the computed step does not hold; nothing is in flight, so
    // the client is free for the pull.
    const int s = computed.has_value() ? 1 - computed->slot : 0;
    PST_RETURN_IF_ERROR(gather_and_pull(s, source, examples, n));
    if (computed.has_value()) start_pushes();
    absl::StatusOr<float> loss = compute(s);
    if (flight.has_value()) {
      const absl::Status landed = land();
      PST_RETURN_IF_ERROR(loss.status());
      PST_RETURN_IF_ERROR(landed);
    }
    PST_RETURN_IF_ERROR(loss.status());
    computed = Computed{s, n, position, *loss, epoch};
    return true;
  };
  absl::Status looped = ForEachTrainingBatch(training, data, shuffle_seed,
                                             control.start_position, open_at, step);
  // The last step computed is pushed too: its batch came before the stop.
  if (flight.has_value()) {
    const absl::Status landed = land();
    if (looped.ok()) looped = landed;
  }
  if (looped.ok() && computed.has_value()) {
    start_pushes();
    looped = land();
  }
  PST_RETURN_IF_ERROR(looped);
  return global_step;
}

}  // namespace pst::models

#endif  // PST_MODELS_ROW_STEPS_H_
