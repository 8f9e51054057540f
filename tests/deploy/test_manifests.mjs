// deploy/k8s against Kubernetes' OpenAPI schemas (kubernetes-models' validators,
// with unknown fields refused as the API server's strict field validation
// does), the manifests' requirements checked one by one, the Containerfile's
// defaults against the manifests, and yamllint on deploy/.
//
// Run: node --test --test-force-exit tests/deploy/test_manifests.mjs
// (after `npm ci --prefix tests/deploy`, which scripts/setup.sh does).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const DEPLOY = path.join(ROOT, "deploy");
const K8S = path.join(DEPLOY, "k8s");

// ---- loading -----------------------------------------------------------------

function manifestFiles() {
  return readdirSync(K8S).filter((f) => /\.ya?ml$/.test(f)).sort();
}

// Every YAML document of deploy/k8s, as {file, doc}; a parse error or a
// warning fails here, naming the file.
function loadAll() {
  const out = [];
  for (const file of manifestFiles()) {
    const text = readFileSync(path.join(K8S, file), "utf8");
    for (const document of parseAllDocuments(text, { uniqueKeys: true })) {
      assert.deepEqual(document.errors, [], `${file}: ${document.errors.join("; ")}`);
      assert.deepEqual(document.warnings, [], `${file}: ${document.warnings.join("; ")}`);
      const doc = document.toJS();
      if (doc !== null) out.push({ file, doc });
    }
  }
  return out;
}

const ALL = loadAll();
const objects = ALL.filter(({ doc }) => doc.kind !== "Kustomization");
function only(kind) {
  const found = objects.filter(({ doc }) => doc.kind === kind);
  assert.equal(found.length, 1, `exactly one ${kind} in deploy/k8s, found ${found.length}`);
  return found[0].doc;
}

// kubernetes-models' class for an apiVersion and kind: "v1" is the core
// group (kubernetes-models/v1/Service), others are group/version.
async function modelClass(apiVersion, kind) {
  const module = await import(`kubernetes-models/${apiVersion}/${kind}`);
  assert.ok(module[kind], `kubernetes-models has no ${apiVersion} ${kind}`);
  return module[kind];
}

function validate(Model, doc) {
  try {
    new Model(doc).validate();
    return [];
  } catch (err) {
    assert.ok(Array.isArray(err.errors), `not a validation error: ${err}`);
    return err.errors;
  }
}

// ---- unknown fields ------------------------------------------------------------
// The generated validators ignore properties the schema does not name (the
// API server refuses them: strict field validation). A key is known when
// the validator objects to a value of the wrong type put there: an object
// or array becomes a number, a scalar becomes an object. Map entries
// (labels, resources) count as known: their values are typed too.

const pointer = (keys) => keys.map((k) => "/" + String(k).replace(/~/g, "~0").replace(/\//g, "~1")).join("");

function* keyPaths(value, prefix = []) {
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) yield* keyPaths(value[i], [...prefix, i]);
  } else if (value && typeof value === "object") {
    for (const [key, child] of Object.entries(value)) {
      yield [...prefix, key];
      yield* keyPaths(child, [...prefix, key]);
    }
  }
}

function withValueAt(doc, keys, value) {
  const copy = structuredClone(doc);
  let node = copy;
  for (const key of keys.slice(0, -1)) node = node[key];
  node[keys.at(-1)] = value;
  return copy;
}

function unknownFields(Model, doc) {
  const unknown = [];
  for (const keys of keyPaths(doc)) {
    if (keys.length === 1 && (keys[0] === "apiVersion" || keys[0] === "kind")) continue;
    let original = doc;
    for (const key of keys) original = original[key];
    const wrong = original !== null && typeof original === "object" ? 0.5 : { "kb-wrong-type": [] };
    const at = pointer(keys);
    const errors = validate(Model, withValueAt(doc, keys, wrong));
    if (!errors.some((e) => e.instancePath === at || e.instancePath.startsWith(at + "/"))) {
      unknown.push(at);
    }
  }
  return unknown;
}

// ---- the pod ---------------------------------------------------------------------

const sts = only("StatefulSet");
const service = only("Service");
const pod = sts.spec.template.spec;
const container = pod.containers.find((c) => c.name === "kernelbridge");
const args = container.args ?? [];
const env = Object.fromEntries((container.env ?? []).map((e) => [e.name, e]));

// The value of a `serve` flag, given as `--flag value` or `--flag=value`.
function flag(name) {
  for (let i = 0; i < args.length; i++) {
    if (args[i] === name) return args[i + 1];
    if (args[i].startsWith(name + "=")) return args[i].slice(name.length + 1);
  }
  return undefined;
}

function matches(selector, labels) {
  return Object.entries(selector ?? {}).every(([k, v]) => labels[k] === v);
}

// Quantities as numbers, enough to compare a request with its limit.
function quantity(value) {
  const m = /^([0-9.]+)([a-zA-Z]*)$/.exec(String(value));
  assert.ok(m, `not a quantity: ${value}`);
  const scale = { "": 1, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40 };
  assert.ok(m[2] in scale, `unknown suffix in ${value}`);
  return Number(m[1]) * scale[m[2]];
}

function source(file) {
  return readFileSync(path.join(ROOT, file), "utf8");
}

// The longest a SIGTERM'd daemon takes to exit, from the constants in the
// source: the service's stop deadline, then for each listener (native,
// E2B, metrics) the drain grace for responses in flight and the close
// timeout of websockets.
function shutdownBoundSeconds() {
  const drain = /#define KB_DRAIN_GRACE_S ([0-9.]+)/.exec(source("src/server/kb_server.c"));
  const stop = /stop_deadline_ms = zclock_mono\(\) \+ ([0-9]+);/.exec(source("src/service/engine/kb_engine.c"));
  const ws = /#define KB_WS_DEFAULT_CLOSE_MS ([0-9]+)/.exec(source("src/server/kb_ws.c"));
  assert.ok(drain && stop && ws, "the daemon's shutdown constants moved: update shutdownBoundSeconds()");
  const listeners = 3;
  return Number(stop[1]) / 1000 + listeners * (Number(drain[1]) + Number(ws[1]) / 1000);
}

// ---- tests -------------------------------------------------------------------------

test("every manifest is schema-valid, with no unknown field", async () => {
  assert.ok(objects.length >= 5, `too few objects: ${objects.length}`);
  for (const { file, doc } of objects) {
    assert.ok(doc.apiVersion && doc.kind, `${file}: apiVersion and kind`);
    const Model = await modelClass(doc.apiVersion, doc.kind);
    const errors = validate(Model, doc);
    assert.deepEqual(errors.map((e) => `${e.instancePath} ${e.message}`), [], `${file}: ${doc.kind}`);
    assert.deepEqual(unknownFields(Model, doc), [], `${file}: ${doc.kind}: fields the API does not know`);
  }
});

test("the unknown-field check catches a typo", async () => {
  const Model = await modelClass("apps/v1", "StatefulSet");
  const typo = structuredClone(sts);
  typo.spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem = true;
  assert.deepEqual(unknownFields(Model, typo), [
    "/spec/template/spec/containers/0/securityContext/readOnlyRootFileSystem",
  ]);
  const wrongType = structuredClone(sts);
  wrongType.spec.template.spec.terminationGracePeriodSeconds = "60";
  assert.notDeepEqual(validate(Model, wrongType), []);
});

test("kustomization.yaml lists every manifest, and the image", () => {
  const kustomizations = ALL.filter(({ doc }) => doc.kind === "Kustomization");
  assert.equal(kustomizations.length, 1);
  const { file, doc } = kustomizations[0];
  assert.equal(file, "kustomization.yaml");
  assert.equal(doc.apiVersion, "kustomize.config.k8s.io/v1beta1");
  const known = new Set(["apiVersion", "kind", "namespace", "resources", "images"]);
  assert.deepEqual(Object.keys(doc).filter((k) => !known.has(k)), []);
  const others = manifestFiles().filter((f) => f !== "kustomization.yaml");
  assert.deepEqual([...doc.resources].sort(), others);
  const namespaces = objects.filter(({ doc: d }) => d.kind === "Namespace");
  assert.deepEqual(namespaces.map(({ doc: d }) => d.metadata.name), [doc.namespace]);
  const imageName = container.image.split(":")[0];
  assert.ok(doc.images.some((i) => i.name === imageName), "images: names the StatefulSet's image");
});

test("sandbox_id is the pod name, reached through a headless Service", () => {
  assert.deepEqual(env.KB_SANDBOX_ID?.valueFrom, { fieldRef: { fieldPath: "metadata.name" } });
  assert.equal(flag("--sandbox-id"), undefined, "no --sandbox-id: it would win over the env");
  assert.equal(service.spec.clusterIP, "None");
  assert.equal(sts.spec.serviceName, service.metadata.name);
  assert.ok(matches(service.spec.selector, sts.spec.template.metadata.labels));
  assert.ok(matches(sts.spec.selector.matchLabels, sts.spec.template.metadata.labels));
  assert.ok(!service.spec.publishNotReadyAddresses, "DNS names only ready daemons");
  // The SDK's template http://{sandbox_id}.kernelbridge.<ns>.svc:8899
  assert.equal(service.metadata.name, "kernelbridge");
  const listen = flag("--listen");
  assert.match(listen, /^0\.0\.0\.0:[0-9]+$/);
  const port = Number(listen.split(":")[1]);
  assert.equal(port, 8899);
  const named = container.ports.find((p) => p.containerPort === port);
  assert.ok(named, "the listen port is a container port");
  assert.ok(service.spec.ports.some((p) => p.port === port && (p.targetPort === named.name || p.targetPort === port)));
});

test("probes on GET /health: startup, readiness, liveness", () => {
  const port = Number(flag("--listen").split(":")[1]);
  const named = container.ports.find((p) => p.containerPort === port).name;
  for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
    const get = container[probe]?.httpGet;
    assert.ok(get, `${probe}: httpGet`);
    assert.equal(get.path, "/health", probe);
    assert.ok(get.port === named || get.port === port, `${probe}: the API port`);
    assert.equal(get.httpHeaders, undefined, `${probe}: /health needs no token`);
  }
  // A restart kills every kernel: liveness gives up later than readiness.
  const patience = (p) => (p.periodSeconds ?? 10) * (p.failureThreshold ?? 3);
  assert.ok(patience(container.livenessProbe) >= 60);
  assert.ok(patience(container.livenessProbe) > patience(container.readinessProbe));
  // Startup covers restore and preloads (--start-timeout is 60 s).
  assert.ok(patience(container.startupProbe) >= 60);
});

test("readiness means re-adoption is done: the daemon restores before it listens", () => {
  // kb_service_new runs kb_engine_new, which restores (s_restore runs
  // kb_restore_run); the HTTP server (and so /health) starts after it.
  // Behaviour: tests/integration/test_durability.py (contexts are there at once).
  const engine = source("src/service/engine/kb_engine.c");
  const body = (name) => {
    const at = engine.search(new RegExp(`^[a-z][a-z_ ]*\\*?${name}\\(`, "m"));
    return at < 0 ? "" : engine.slice(at, engine.indexOf("\n}\n", at));
  };
  assert.ok(body("s_restore").includes("kb_restore_run("), "s_restore runs kb_restore_run");
  assert.ok(body("kb_engine_new").includes("s_restore("), "kb_engine_new restores");
  const serve = source("src/cli/kb_cli_serve.c");
  const start = serve.slice(serve.indexOf("static int start(daemon_t *d)"));
  const made = start.indexOf("start_service(d)");
  const listening = start.indexOf("start_server(d)");
  assert.ok(made > 0 && listening > made, "the service (restore) comes before the listener");
  assert.ok(serve.includes("d->service = kb_service_new("), "start_service makes the service");
  assert.ok(serve.includes("d->server = kb_server_new(d->service"), "start_server listens");
});

test("the state dir is in the volume claim, which a restarted pod gets back", () => {
  const stateDir = flag("--state-dir");
  assert.ok(stateDir && path.isAbsolute(stateDir));
  assert.equal(env.KB_EPHEMERAL, undefined);
  assert.ok(!args.includes("--ephemeral"));
  const claims = sts.spec.volumeClaimTemplates.map((c) => c.metadata.name);
  const mount = container.volumeMounts.find((m) => claims.includes(m.name));
  assert.ok(mount, "a volumeClaimTemplate is mounted");
  // A subdir: the daemon must own its state dir (0700), a volume's root is root's.
  assert.ok(stateDir.startsWith(mount.mountPath.replace(/\/$/, "") + "/"), `${stateDir} in ${mount.mountPath}`);
  assert.ok(!mount.readOnly);
  const claim = sts.spec.volumeClaimTemplates.find((c) => c.metadata.name === mount.name);
  assert.deepEqual(claim.spec.accessModes, ["ReadWriteOnce"], "one daemon per state dir");
  assert.ok(claim.spec.resources.requests.storage);
  // Kept kernels die with the container: --keep-kernels would only turn a
  // clean shutdown into a kill (deploy/README.md).
  assert.equal(env.KB_KEEP_KERNELS, undefined);
  assert.ok(!args.includes("--keep-kernels"));
});

test("the token comes from a Secret, and no token is committed", () => {
  assert.ok(env.KB_TOKEN?.valueFrom?.secretKeyRef?.name, "KB_TOKEN from secretKeyRef");
  assert.ok(env.KB_TOKEN.valueFrom.secretKeyRef.key);
  assert.equal(env.KB_TOKEN.value, undefined);
  assert.equal(flag("--token-file"), undefined);
  assert.equal(env.KB_INSECURE, undefined);
  assert.ok(!args.includes("--insecure"));
  for (const e of container.env) {
    if (/TOKEN|SECRET|PASSWORD/i.test(e.name)) assert.equal(e.value, undefined, `${e.name} has a value`);
  }
  for (const { file, doc } of objects.filter(({ doc: d }) => d.kind === "Secret")) {
    assert.equal(doc.data, undefined, `${file}: a Secret with data`);
    assert.equal(doc.stringData, undefined, `${file}: a Secret with stringData`);
  }
  const kustomization = ALL.find(({ doc }) => doc.kind === "Kustomization").doc;
  assert.equal(kustomization.secretGenerator, undefined);
});

test("a PodDisruptionBudget lets one daemon go at a time", () => {
  const pdb = only("PodDisruptionBudget");
  assert.ok(matches(pdb.spec.selector.matchLabels, sts.spec.template.metadata.labels));
  assert.ok(Object.keys(pdb.spec.selector.matchLabels).length > 0);
  assert.equal(pdb.spec.maxUnavailable, 1, "maxUnavailable 1: drains proceed, one pod at a time");
});

test("the NetworkPolicy admits only the platform's namespace", () => {
  const policy = only("NetworkPolicy");
  assert.ok(matches(policy.spec.podSelector.matchLabels, sts.spec.template.metadata.labels));
  assert.ok(Object.keys(policy.spec.podSelector.matchLabels).length > 0);
  assert.ok(policy.spec.policyTypes.includes("Ingress"));
  assert.ok(policy.spec.ingress.length >= 1);
  for (const rule of policy.spec.ingress) {
    assert.ok(rule.from?.length >= 1, "a rule with no from admits everyone");
    for (const peer of rule.from) {
      assert.deepEqual(Object.keys(peer), ["namespaceSelector"], "namespaceSelector only");
      assert.ok(Object.keys(peer.namespaceSelector.matchLabels ?? {}).length > 0, "a namespace, not all");
    }
    assert.deepEqual(rule.ports.map((p) => p.port), [8899]);
  }
});

test("securityContext: non-root, read-only root, no escalation, no capabilities", () => {
  const podSc = pod.securityContext;
  const sc = container.securityContext;
  assert.equal(podSc.runAsNonRoot, true);
  assert.equal(sc.runAsNonRoot, true);
  assert.ok(podSc.runAsUser > 0);
  assert.ok(podSc.fsGroup > 0, "fsGroup: the volume is writable for the pod's user");
  assert.equal(sc.readOnlyRootFilesystem, true);
  assert.equal(sc.allowPrivilegeEscalation, false);
  assert.deepEqual(sc.capabilities.drop, ["ALL"]);
  assert.equal(sc.capabilities.add, undefined);
  assert.ok(!sc.privileged);
  assert.equal((sc.seccompProfile ?? podSc.seccompProfile).type, "RuntimeDefault");
  // Pod Security "restricted" (namespace.yaml enforces it): no host namespaces or paths.
  for (const key of ["hostNetwork", "hostPID", "hostIPC"]) assert.ok(!pod[key], key);
  for (const volume of pod.volumes ?? []) assert.equal(volume.hostPath, undefined, volume.name);
  // Code in contexts must not find API credentials in the pod.
  assert.equal(pod.automountServiceAccountToken, false);
  // The pause process reaps orphans; no init keeps KB_TOKEN in its environ.
  assert.equal(pod.shareProcessNamespace, true);
  // With a read-only root, what the daemon and kernels write is mounted:
  // /tmp (ipc sockets, mkdtemp /tmp/kbXXXXXX in src/service) and HOME.
  const mounted = container.volumeMounts.map((m) => m.mountPath);
  assert.ok(mounted.includes("/tmp"), "/tmp is a writable mount");
  assert.ok(env.HOME?.value && mounted.includes(env.HOME.value), "HOME is a writable mount");
  for (const m of container.volumeMounts) {
    const volume = pod.volumes?.find((v) => v.name === m.name);
    if (volume) assert.ok(volume.emptyDir, `${m.name}: emptyDir`);
  }
});

test("resources: requests and limits, a request within its limit", () => {
  const { requests, limits } = container.resources;
  for (const name of ["cpu", "memory"]) {
    assert.ok(requests?.[name] && limits?.[name], `${name}: request and limit`);
    assert.ok(quantity(requests[name]) <= quantity(limits[name]), name);
  }
  // KB_MEMORY_LIMIT per context is at least the daemon's minimum of 256M.
  const perContext = quantity(env.KB_MEMORY_LIMIT.value.replace(/([KMG])$/, "$1i"));
  assert.ok(perContext >= 256 * 2 ** 20 && perContext <= quantity(limits.memory));
});

test("terminationGracePeriodSeconds is longer than the daemon's shutdown", () => {
  const bound = shutdownBoundSeconds();
  assert.ok(pod.terminationGracePeriodSeconds > bound, `${pod.terminationGracePeriodSeconds} s <= ${bound} s`);
  const text = readFileSync(path.join(K8S, "statefulset.yaml"), "utf8");
  assert.ok(text.includes(`within ${bound} s`), `statefulset.yaml's comment says ${bound} s`);
});

test("the Containerfile's user and defaults are the manifests'", () => {
  const file = readFileSync(path.join(DEPLOY, "Containerfile"), "utf8").replace(/\\\n/g, " ");
  const runtime = file.slice(file.lastIndexOf("\nFROM "));
  const user = /^USER ([0-9]+):([0-9]+)$/m.exec(runtime);
  assert.ok(user, "a numeric USER in the runtime stage (runAsNonRoot can check it)");
  assert.notEqual(user[1], "0");
  assert.equal(Number(user[1]), pod.securityContext.runAsUser);
  assert.equal(Number(user[2]), pod.securityContext.runAsGroup);
  const envLine = /^ENV (.*)$/m.exec(runtime)[1];
  const imageEnv = Object.fromEntries(envLine.trim().split(/\s+/).map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]));
  assert.equal(imageEnv.KB_STATE_DIR, flag("--state-dir"));
  assert.equal(imageEnv.HOME, env.HOME.value);
  assert.equal(imageEnv.KB_KERNELS, env.KB_KERNELS.value);
  assert.match(runtime, /^ENTRYPOINT \["\/usr\/local\/bin\/kernelbridge"\]$/m);
  assert.equal(args[0], "serve");
  assert.equal(container.command, undefined, "the image's entrypoint runs");
});

test("yamllint -s passes on deploy/", () => {
  const run = spawnSync("yamllint", ["-s", "-c", path.join(DEPLOY, ".yamllint"), DEPLOY], { encoding: "utf8" });
  assert.equal(run.error, undefined, "yamllint is installed (scripts/setup.sh)");
  assert.equal(run.status, 0, run.stdout + run.stderr);
  // and with yamllint's defaults, as `yamllint -s deploy/` from anywhere
  const plain = spawnSync("yamllint", ["-s", "-d", "default", DEPLOY], { encoding: "utf8" });
  assert.equal(plain.status, 0, plain.stdout + plain.stderr);
});
