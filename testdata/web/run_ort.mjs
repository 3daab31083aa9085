// run_ort.mjs runs ONNX models in onnxruntime-web (the WASM build, the
// runtime of the browser, here in Node.js) and in onnxruntime-node (the
// native library behind Node's binding), and writes their outputs as JSON.
// It is the JavaScript half of cmd/convert's TestWebRuntimes, which feeds
// the same inputs to `convert run` (Go + the onnxruntime C library) and
// compares.
//
//   node testdata/web/run_ort.mjs --out OUT.json [--runtime web,node] \
//        [--modules DIR] --inputs IN.json MODEL.onnx... [--inputs IN2.json MODEL...]
//
// Each --inputs feeds the MODELs after it (models of different inputs
// share one run: starting the WASM build is most of its time).
//
// The packages come from DIR (default: the repository's
// .tools/node/node_modules, which `bash scripts/web-check-setup.sh`
// fills); nothing is resolved from the npm cache or a global install.
// Each runtime runs in its own child process (both packages register an
// onnxruntime-common backend named "cpu", so they do not share a process),
// on one thread: onnxruntime-web with ort.env.wasm.numThreads = 1 and the
// "wasm" execution provider only, onnxruntime-node with the "cpu" provider
// and intra/inter-op threads 1.
//
// IN.json:  {"inputs": {"NAME": {"type": "int64", "dims": [2, 16],
//            "data": [1, 2, ...]}, ...}}
// OUT.json: {"runtimes": {"web": {"versions": {...}, "models": {
//            "MODEL.onnx": {"outputs": {"NAME": {"type": "float32",
//            "dims": [...], "data": [...]}}} or {"error": "..."}}}, ...}}
// Non-finite floats are written as the strings "NaN", "Infinity" and
// "-Infinity" (JSON has no such numbers); 64-bit integers beyond 2^53
// as decimal strings. The exit code is 0 when every model ran in every
// runtime, 1 when one failed (OUT.json still says which and why), 2 on a
// bad command line or missing packages.

import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const RUNTIMES = ['web', 'node'];

function usage(msg) {
  process.stderr.write(`run_ort: ${msg}\nusage: node run_ort.mjs --out OUT.json [--runtime web,node] [--modules DIR] --inputs IN.json MODEL.onnx... [--inputs IN2.json MODEL.onnx...]\n`);
  process.exit(2);
}

function parseArgs(argv) {
  // models: [{model, inputs}], each with the --inputs before it.
  const o = { runtimes: RUNTIMES, modules: path.resolve(here, '..', '..', '.tools', 'node', 'node_modules'), models: [] };
  let inputs;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--inputs') inputs = path.resolve(value());
    else if (a === '--out') o.out = value();
    else if (a === '--modules') o.modules = path.resolve(value());
    else if (a === '--runtime') {
      o.runtimes = value().split(',').filter((r) => r !== '');
      for (const r of o.runtimes) if (!RUNTIMES.includes(r)) usage(`unknown runtime ${JSON.stringify(r)} (want web or node)`);
      if (o.runtimes.length === 0) usage('--runtime names no runtime');
    } else if (a.startsWith('-')) usage(`unknown flag ${a}`);
    else if (!inputs) usage(`no --inputs before ${a}`);
    else o.models.push({ model: path.resolve(a), inputs });
  }
  if (!o.out) usage('--out is required');
  if (o.models.length === 0) usage('no MODEL given');
  return o;
}

// loadRuntime returns the ort namespace of one runtime from the modules
// folder and the execution provider and session options to use.
async function loadRuntime(name, modules) {
  const pkg = name === 'web' ? 'onnxruntime-web' : 'onnxruntime-node';
  for (const p of [pkg, 'onnxruntime-common']) {
    if (!existsSync(path.join(modules, p, 'package.json'))) {
      process.stderr.write(`run_ort: ${p} is missing from ${modules} (install it with: bash scripts/web-check-setup.sh)\n`);
      process.exit(2);
    }
  }
  if (name === 'web') {
    // The ESM build for Node (package.json exports "node" → "import"); it
    // imports onnxruntime-common from the same node_modules and loads
    // dist/ort-wasm-simd-threaded.{mjs,wasm} beside itself.
    const ort = await import(pathToFileURL(path.join(modules, 'onnxruntime-web', 'dist', 'ort.node.min.mjs')).href);
    ort.env.wasm.numThreads = 1;
    ort.env.wasm.proxy = false;
    ort.env.logLevel = 'error';
    return { ort, options: { executionProviders: ['wasm'], logSeverityLevel: 3 } };
  }
  const require = createRequire(path.join(modules, 'package.json'));
  const ort = require('onnxruntime-node');
  ort.env.logLevel = 'error';
  return { ort, options: { executionProviders: ['cpu'], intraOpNumThreads: 1, interOpNumThreads: 1, logSeverityLevel: 3 } };
}

const ARRAYS = {
  float32: Float32Array,
  float64: Float64Array,
  int8: Int8Array,
  uint8: Uint8Array,
  int16: Int16Array,
  uint16: Uint16Array,
  int32: Int32Array,
  uint32: Uint32Array,
  int64: BigInt64Array,
  uint64: BigUint64Array,
  bool: Uint8Array,
};

function toNumber(v, type) {
  if (typeof v === 'string') {
    if (v === 'NaN') return NaN;
    if (v === 'Infinity') return Infinity;
    if (v === '-Infinity') return -Infinity;
    if (type === 'int64' || type === 'uint64') return v;
    throw new Error(`bad value ${JSON.stringify(v)} for ${type}`);
  }
  return v;
}

function toTensor(ort, name, spec) {
  const Arr = ARRAYS[spec.type];
  if (!Arr) throw new Error(`input ${name}: unsupported type ${spec.type}`);
  const n = spec.dims.reduce((a, b) => a * b, 1);
  if (spec.data.length !== n) throw new Error(`input ${name}: ${spec.data.length} values for dims [${spec.dims}]`);
  const big = spec.type === 'int64' || spec.type === 'uint64';
  const data = Arr.from(spec.data, (v) => {
    const x = toNumber(v, spec.type);
    if (big) return BigInt(x);
    if (spec.type === 'bool') return x ? 1 : 0;
    return x;
  });
  return new ort.Tensor(spec.type, data, spec.dims);
}

function halfToFloat(h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return s * f * 2 ** -24;
  if (e === 31) return f ? NaN : s * Infinity;
  return s * (1 + f / 1024) * 2 ** (e - 15);
}

function fromTensor(t) {
  let data;
  if (t.type === 'int64' || t.type === 'uint64') {
    data = Array.from(t.data, (v) => (v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(v) : v.toString()));
  } else if (t.type === 'float16') {
    // Without Float16Array the data is the raw halves in a Uint16Array.
    data = t.data instanceof Uint16Array ? Array.from(t.data, halfToFloat) : Array.from(t.data);
  } else if (t.type === 'bool') {
    data = Array.from(t.data, (v) => (v ? 1 : 0));
  } else {
    data = Array.from(t.data);
  }
  data = data.map((v) => (typeof v === 'number' && !Number.isFinite(v) ? String(v) : v));
  return { type: t.type, dims: Array.from(t.dims), data };
}

// runOne runs every model in one runtime and returns its part of OUT.json.
async function runOne(name, o) {
  const { ort, options } = await loadRuntime(name, o.modules);
  const result = { versions: { ...ort.env.versions }, models: {} };
  const specs = new Map();
  let failed = false;
  for (const { model, inputs } of o.models) {
    try {
      if (!specs.has(inputs)) specs.set(inputs, JSON.parse(readFileSync(inputs, 'utf8')).inputs);
      const spec = specs.get(inputs);
      const session = await ort.InferenceSession.create(readFileSync(model), options);
      const feed = {};
      for (const input of session.inputNames) {
        if (!(input in spec)) throw new Error(`no value for input ${input} in ${inputs}`);
        feed[input] = toTensor(ort, input, spec[input]);
      }
      const out = await session.run(feed);
      const outputs = {};
      for (const k of session.outputNames) outputs[k] = fromTensor(out[k]);
      await session.release();
      result.models[model] = { outputs };
    } catch (e) {
      failed = true;
      result.models[model] = { error: `${name}: ${e && e.message ? e.message : e}` };
    }
  }
  return { result, failed };
}

// runChild runs this script for one runtime in a child process and
// returns its OUT.json.
function runChild(name, o, dir) {
  const out = path.join(dir, `${name}.json`);
  const args = [fileURLToPath(import.meta.url), '--runtime', name, '--modules', o.modules, '--out', out];
  let inputs;
  for (const m of o.models) {
    if (m.inputs !== inputs) args.push('--inputs', (inputs = m.inputs));
    args.push(m.model);
  }
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'inherit', 'inherit'] });
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (code === 2 || signal || !existsSync(out)) {
        reject(Object.assign(new Error(`${name} runtime: the child process exited with ${signal || code} and wrote no result`), { reported: true }));
        return;
      }
      resolve({ result: JSON.parse(readFileSync(out, 'utf8')).runtimes[name], failed: code !== 0 });
    });
  });
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const runtimes = {};
  let failed = false;
  if (o.runtimes.length === 1) {
    const r = await runOne(o.runtimes[0], o);
    runtimes[o.runtimes[0]] = r.result;
    failed = r.failed;
  } else {
    const dir = mkdtempSync(path.join(tmpdir(), 'run-ort-'));
    try {
      const rs = await Promise.all(o.runtimes.map((name) => runChild(name, o, dir)));
      o.runtimes.forEach((name, i) => {
        runtimes[name] = rs[i].result;
        failed ||= rs[i].failed;
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  writeFileSync(o.out, JSON.stringify({ runtimes }));
  process.exitCode = failed ? 1 : 0;
}

main().catch((e) => {
  process.stderr.write(`run_ort: ${e && e.reported ? e.message : e && e.stack ? e.stack : e}\n`);
  process.exit(2);
});
