// Offline schema checks of pstrain's Kubernetes manifests.
//
// Core objects (Service, ConfigMap, PVC, StatefulSet, Job) are validated
// against the Kubernetes OpenAPI schemas that the kubernetes-models package
// carries. Kubeflow's TFJob has no such package: its fields are checked here
// against the training operator's API (kubeflow.org/v1), and every replica's
// pod template against the Pod schema.
//
//   node validate.mjs FILE...     validate; exit 1 on the first bad object
//   node validate.mjs --self-test  the same checks must reject broken copies
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import { ConfigMap, PersistentVolumeClaim, Pod, Service } from "kubernetes-models/v1";
import { StatefulSet } from "kubernetes-models/apps/v1";
import { Job } from "kubernetes-models/batch/v1";

const CORE = {
  "v1/ConfigMap": ConfigMap,
  "v1/PersistentVolumeClaim": PersistentVolumeClaim,
  "v1/Service": Service,
  "apps/v1/StatefulSet": StatefulSet,
  "batch/v1/Job": Job,
};

const REPLICA_TYPES = ["Chief", "Master", "PS", "Worker", "Evaluator"];
const RESTART_POLICIES = ["Always", "OnFailure", "Never", "ExitCode"];
const CLEAN_POD_POLICIES = ["All", "Running", "None"];
const DNS_1123 = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

function fail(what, message) {
  throw new Error(`${what}: ${message}`);
}

function checkTFJob(obj, what) {
  if (obj.apiVersion !== "kubeflow.org/v1") fail(what, `apiVersion ${obj.apiVersion}`);
  const name = obj.metadata?.name;
  if (typeof name !== "string" || !DNS_1123.test(name)) fail(what, `bad metadata.name ${name}`);
  const spec = obj.spec ?? fail(what, "no spec");
  if (spec.successPolicy !== undefined && !["", "AllWorkers"].includes(spec.successPolicy)) {
    fail(what, `successPolicy ${spec.successPolicy}`);
  }
  const run = spec.runPolicy ?? {};
  if (run.cleanPodPolicy !== undefined && !CLEAN_POD_POLICIES.includes(run.cleanPodPolicy)) {
    fail(what, `runPolicy.cleanPodPolicy ${run.cleanPodPolicy}`);
  }
  if (run.backoffLimit !== undefined && !(Number.isInteger(run.backoffLimit) && run.backoffLimit >= 0)) {
    fail(what, `runPolicy.backoffLimit ${run.backoffLimit}`);
  }
  const replicas = spec.tfReplicaSpecs ?? fail(what, "no spec.tfReplicaSpecs");
  const types = Object.keys(replicas);
  for (const type of types) {
    if (!REPLICA_TYPES.includes(type)) fail(what, `unknown replica type ${type} (not ${REPLICA_TYPES})`);
  }
  if (types.includes("Chief") && types.includes("Master")) fail(what, "both Chief and Master");
  for (const [type, r] of Object.entries(replicas)) {
    const at = `${what} ${type}`;
    if (!(Number.isInteger(r.replicas) && r.replicas >= 0)) fail(at, `replicas ${r.replicas}`);
    if (["Chief", "Master", "Evaluator"].includes(type) && r.replicas > 1) {
      fail(at, `at most one ${type}, got ${r.replicas}`);
    }
    if (r.restartPolicy !== undefined && !RESTART_POLICIES.includes(r.restartPolicy)) {
      fail(at, `restartPolicy ${r.restartPolicy}`);
    }
    const template = r.template ?? fail(at, "no template");
    new Pod({ metadata: template.metadata ?? {}, spec: template.spec }).validate();
    const containers = template.spec.containers;
    if (!containers.some((c) => c.name === "tensorflow")) {
      fail(at, 'no container named "tensorflow" (the operator sets TF_CONFIG and the port on it)');
    }
  }
}

function validateObject(obj, what) {
  if (obj === null || typeof obj !== "object") fail(what, "not a mapping");
  if (obj.kind === "TFJob") return checkTFJob(obj, what);
  const Model = CORE[`${obj.apiVersion}/${obj.kind}`];
  if (Model === undefined) fail(what, `no schema for ${obj.apiVersion} ${obj.kind}`);
  new Model(obj).validate();
}

function objectsOf(file) {
  const docs = parseAllDocuments(readFileSync(file, "utf8"));
  return docs.map((doc, i) => {
    if (doc.errors.length > 0) fail(`${file} document ${i}`, doc.errors[0].message);
    return doc.toJS({ maxAliasCount: 1000 });
  }).filter((obj) => obj !== null);
}

function validateFile(file) {
  const objects = objectsOf(file);
  objects.forEach((obj, i) => validateObject(obj, `${file} #${i} ${obj.kind} ${obj.metadata?.name}`));
  return objects;
}

function selfTest() {
  // Each broken copy of a real manifest object must be rejected.
  const [tfjob] = objectsOf(new URL("../tfjob.yaml", import.meta.url).pathname);
  const plain = objectsOf(new URL("../plain.yaml", import.meta.url).pathname);
  const statefulSet = plain.find((o) => o.kind === "StatefulSet");
  const job = plain.find((o) => o.kind === "Job");
  const python = objectsOf(new URL("../python.yaml", import.meta.url).pathname);
  const indexedJob = python.find((o) => o.kind === "Job" && o.spec.completionMode === "Indexed");
  const copy = (o) => JSON.parse(JSON.stringify(o));
  const broken = {
    "StatefulSet replicas as a string": (() => { const o = copy(statefulSet); o.spec.replicas = "two"; return o; })(),
    "StatefulSet without a selector": (() => { const o = copy(statefulSet); delete o.spec.selector; return o; })(),
    "Job container without an image name type": (() => { const o = copy(job); o.spec.template.spec.containers[0].image = 7; return o; })(),
    "Indexed Job completionMode misspelt": (() => { const o = copy(indexedJob); o.spec.completionMode = "Indexd"; return o; })(),
    "TFJob restartPolicy Sometimes": (() => { const o = copy(tfjob); o.spec.tfReplicaSpecs.PS.restartPolicy = "Sometimes"; return o; })(),
    "TFJob replica type Server": (() => { const o = copy(tfjob); o.spec.tfReplicaSpecs.Server = o.spec.tfReplicaSpecs.PS; return o; })(),
    "TFJob two chiefs": (() => { const o = copy(tfjob); o.spec.tfReplicaSpecs.Chief.replicas = 2; return o; })(),
    "TFJob container renamed": (() => { const o = copy(tfjob); o.spec.tfReplicaSpecs.Worker.template.spec.containers[0].name = "main"; return o; })(),
    "TFJob port as a string": (() => { const o = copy(tfjob); o.spec.tfReplicaSpecs.Worker.template.spec.containers[0].ports[0].containerPort = "2222"; return o; })(),
  };
  let missed = 0;
  for (const [name, obj] of Object.entries(broken)) {
    try {
      validateObject(obj, name);
      console.log(`MISSED: ${name} passed validation`);
      missed++;
    } catch (e) {
      console.log(`rejected as expected: ${name}: ${String(e.message).split("\n")[0].slice(0, 160)}`);
    }
  }
  return missed === 0;
}

const args = process.argv.slice(2);
if (args[0] === "--self-test") {
  process.exit(selfTest() ? 0 : 1);
}
let ok = true;
for (const file of args) {
  try {
    const objects = validateFile(file);
    console.log(`${file}: ${objects.map((o) => `${o.kind}/${o.metadata.name}`).join(", ")}: valid`);
  } catch (e) {
    console.log(`INVALID ${String(e.message).slice(0, 2000)}`);
    ok = false;
  }
}
process.exit(ok ? 0 : 1);
