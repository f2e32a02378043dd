// Runs the start.sh of the plain manifests' ConfigMaps (plain.yaml's
// pstrain-hosts, python.yaml's pstrain-python-hosts) as a pod would, with a
// pod's hostname, and checks the TF_CONFIG it builds from the ordinal and
// the arguments it passes on: the job's flags to a daemon, none to a Python
// worker. The command is replaced by a script that prints what it was
// given.
//   node start_sh_test.mjs PATH_TO_PSTRAIN_BIN_DIR
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync, chmodSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";

const binDir = process.argv[2];
const dir = mkdtempSync(join(tmpdir(), "pstrain-start-"));
const fake = join(dir, "fake_command");
writeFileSync(fake, '#!/bin/sh\nprintf "%s\\n" "$TF_CONFIG" "$*"\n');
chmodSync(fake, 0o755);

function configMapOf(manifest) {
  const path = new URL(`../${manifest}`, import.meta.url).pathname;
  return parseAllDocuments(readFileSync(path, "utf8"))
    .map((d) => d.toJS())
    .find((o) => o?.kind === "ConfigMap");
}

// [manifest, pod hostname, task type, its index, arguments after the
// command, what the command must be given (JOB_FLAGS: the job's flags)].
const JOB_FLAGS = Symbol("JOB_FLAGS");
const CASES = [
  ["plain.yaml", "pstrain-ps-1", "ps", 1, [], JOB_FLAGS],
  ["plain.yaml", "pstrain-worker-0", "worker", 0, [], JOB_FLAGS],
  ["plain.yaml", "pstrain-chief-0", "chief", 0, [], JOB_FLAGS],
  ["python.yaml", "pstrain-python-ps-1", "ps", 1, [], JOB_FLAGS],
  ["python.yaml", "pstrain-python-chief-0", "chief", 0, [], JOB_FLAGS],
  ["python.yaml", "pstrain-python-worker-1", "worker", 1, ["/opt/example.py", "--result=r.json"],
   "/opt/example.py --result=r.json"],
];

let failures = 0;
for (const [manifest, hostname, type, index, args, want] of CASES) {
  const config = configMapOf(manifest);
  const script = join(dir, `${manifest}.start.sh`);
  writeFileSync(script, config.data["start.sh"]);
  const env = { ...config.data, PATH: `${binDir}:/usr/bin:/bin`, HOSTNAME: hostname };
  delete env["start.sh"];
  const out = execFileSync("/bin/sh", [script, type, fake, ...args], { env }).toString();
  const [tfConfigLine, argsLine] = out.split("\n");
  const tf = JSON.parse(tfConfigLine);
  const problems = [];
  if (tf.task.type !== type || tf.task.index !== index) {
    problems.push(`task ${JSON.stringify(tf.task)}, want ${type} ${index}`);
  }
  if (tf.cluster.ps.join(",") !== config.data.PS_HOSTS) problems.push(`ps ${tf.cluster.ps}`);
  if (tf.cluster.worker.join(",") !== config.data.WORKER_HOSTS) problems.push(`workers ${tf.cluster.worker}`);
  if (tf.cluster.chief.join(",") !== config.data.CHIEF_HOSTS) problems.push(`chief ${tf.cluster.chief}`);
  const wantArgs = want === JOB_FLAGS ? config.data.JOB_FLAGS.trim() : want;
  if (argsLine !== wantArgs) problems.push(`arguments '${argsLine}', want '${wantArgs}'`);
  console.log(`${manifest} ${hostname}: ${problems.length === 0 ? "ok" : problems.join("; ")}: ${tfConfigLine}`);
  failures += problems.length;
}
process.exit(failures === 0 ? 0 : 1);
