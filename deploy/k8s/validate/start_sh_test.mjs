// Runs the plain manifests' start.sh (from the pstrain-hosts ConfigMap) as a
// pod would, with a pod's hostname, and checks the TF_CONFIG it builds from
// the ordinal and the flags it passes on. The daemon is replaced by a
// script that prints what it was given.
//   node start_sh_test.mjs PATH_TO_PSTRAIN_BIN_DIR
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync, chmodSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";

const binDir = process.argv[2];
const plain = new URL("../plain.yaml", import.meta.url).pathname;
const config = parseAllDocuments(readFileSync(plain, "utf8"))
  .map((d) => d.toJS())
  .find((o) => o?.kind === "ConfigMap");
const dir = mkdtempSync(join(tmpdir(), "pstrain-start-"));
writeFileSync(join(dir, "start.sh"), config.data["start.sh"]);
const fake = join(dir, "fake_daemon");
writeFileSync(fake, '#!/bin/sh\nprintf "%s\\n" "$TF_CONFIG" "$*"\n');
chmodSync(fake, 0o755);

let failures = 0;
for (const [hostname, type, index] of [
  ["pstrain-ps-1", "ps", 1],
  ["pstrain-worker-0", "worker", 0],
  ["pstrain-chief-0", "chief", 0],
]) {
  const env = { ...config.data, PATH: `${binDir}:/usr/bin:/bin`, HOSTNAME: hostname };
  delete env["start.sh"];
  const out = execFileSync("/bin/sh", [join(dir, "start.sh"), type, fake], { env }).toString();
  const [tfConfigLine, argsLine] = out.split("\n");
  const tf = JSON.parse(tfConfigLine);
  const problems = [];
  if (tf.task.type !== type || tf.task.index !== index) {
    problems.push(`task ${JSON.stringify(tf.task)}, want ${type} ${index}`);
  }
  if (tf.cluster.ps.join(",") !== config.data.PS_HOSTS) problems.push(`ps ${tf.cluster.ps}`);
  if (tf.cluster.worker.join(",") !== config.data.WORKER_HOSTS) problems.push(`workers ${tf.cluster.worker}`);
  if (tf.cluster.chief.join(",") !== config.data.CHIEF_HOSTS) problems.push(`chief ${tf.cluster.chief}`);
  if (argsLine !== config.data.JOB_FLAGS.trim()) problems.push(`flags '${argsLine}'`);
  console.log(`${hostname}: ${problems.length === 0 ? "ok" : problems.join("; ")}: ${tfConfigLine}`);
  failures += problems.length;
}
process.exit(failures === 0 ? 0 : 1);
