// Validates Prometheus Operator objects (monitoring.coreos.com/v1 ServiceMonitor, PodMonitor,
// PrometheusRule) against the operator's CRD schemas, as npm's
// @kubernetes-models/prometheus-operator carries them (tests/tools/fetch monitoring-models):
// types, enums, required fields. Its validators do not refuse unknown fields.
//
//   node tests/tools/validate-monitoring.mjs MODELS_DIR OBJECTS.json
//
// OBJECTS.json: a JSON array of objects. Prints "ok KIND/NAME" or "invalid KIND/NAME: why" per
// object; exits 1 when one is invalid, of another kind, or when there is none.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modelsDir, objectsFile] = process.argv.slice(2);
if (!modelsDir || !objectsFile) {
  console.error("usage: validate-monitoring.mjs MODELS_DIR OBJECTS.json");
  process.exit(2);
}
const kinds = ["ServiceMonitor", "PodMonitor", "PrometheusRule"];
const models = {};
for (const kind of kinds) {
  const file = join(modelsDir, "node_modules/@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1", `${kind}.js`);
  models[kind] = (await import(pathToFileURL(file).href))[kind];
}
const objects = JSON.parse(readFileSync(objectsFile, "utf8"));
let bad = 0;
for (const o of objects) {
  const id = `${o.kind}/${o.metadata?.name ?? "<unnamed>"}`;
  const Model = o.apiVersion === "monitoring.coreos.com/v1" ? models[o.kind] : undefined;
  if (!Model) {
    console.log(`invalid ${id}: ${o.apiVersion} ${o.kind} is none of monitoring.coreos.com/v1 ${kinds.join(", ")}`);
    bad++;
    continue;
  }
  try {
    new Model(o).validate();
    console.log(`ok ${id}`);
  } catch (e) {
    console.log(`invalid ${id}: ${e.message}`);
    bad++;
  }
}
if (objects.length === 0) {
  console.log("no object");
  bad++;
}
process.exit(bad === 0 ? 0 : 1);
