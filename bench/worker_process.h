// One of ps_bench's worker processes (--workers_as=processes): a child
// ps_bench started with --worker_channel_fd, a worker with a transport and
// connections of its own, driven by its parent over a MessageChannel.
//
// The messages, one JSON object a line, each answered once:
//   setup    {"cmd": "setup", "plan": base64 PlacementPlan, "addresses",
//            "index", "incarnation", "bdp_probe", "rpc_timeout_s"}: makes
//            the transport; answers {}.
//   prepare  {"cmd": "prepare", "op", "size", "wire"}: makes (or reuses) the
//            dense case's client and runs one operation, untimed (buffers,
//            connections); answers {}.
//   run      {"cmd": "run", "budget_s", "min_iters"}: runs the prepared
//            operation until `budget_s` from now is spent and `min_iters`
//            are done; answers {"latencies_ms": [...], "bytes", "cpu_s"},
//            cpu_s being this process's CPU over the run.
//   quit     ends the process (as does the channel's end).
// Any failure answers {"error": "..."}; the process goes on serving.
#ifndef PST_BENCH_WORKER_PROCESS_H_
#define PST_BENCH_WORKER_PROCESS_H_

namespace pst::bench {

// Serves the messages of the parent at the other end of `fd` until it says
// quit or closes the channel. Returns the process's exit status: 0, or 1
// when the channel fails.
int RunWorkerProcess(int fd);

}  // namespace pst::bench

#endif  // PST_BENCH_WORKER_PROCESS_H_
