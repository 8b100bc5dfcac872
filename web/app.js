// ARR-COC relevance demo: onnxruntime-web (WASM) on a user's image and a preset or typed query.
// A typed query is tokenized here (tokenizer.js) and embedded by the INT8 text encoder.
// Everything the page needs is served next to it (config.json, models, ORT files): no network.
import * as ort from './ort/ort.wasm.min.mjs';
import { BertTokenizer } from './tokenizer.js';

const MIN_SIDE = 16;              // the model looks at a 14x14 grid: smaller images carry nothing
const MAX_SIDE = 16384;           // beyond this, browsers fail to allocate the decode
const MAX_PIXELS = 80e6;
const MAX_BYTES = 64 * 1024 * 1024;
const DISPLAY = 448;

const $ = (id) => document.getElementById(id);
const state = { config: null, presets: null, sessions: {}, image: null, bitmap: null, last: null,
                firstResultMs: null, busy: false, query: null, tokenizer: null, textSession: null };

class UserError extends Error {}

// ---------- messages and status ----------
function showMessage(text, kind = 'error') {
  const box = $('message');
  box.textContent = text;
  box.className = kind;
  box.dataset.kind = kind;
  box.hidden = false;
}
function clearMessage() { $('message').hidden = true; $('message').textContent = ''; }
function setStatus(text) { $('status').textContent = text; }
function setState(s) { document.body.dataset.state = s; }
// A typed query is echoed in full only when short: a pasted page of text would stretch the page.
const SHOWN_QUERY = 80;
function shorten(text) { return text.length <= SHOWN_QUERY ? text : `${text.slice(0, SHOWN_QUERY - 1)}…`; }

// ---------- runtime ----------
function requestedThreads() {
  const p = parseInt(new URLSearchParams(location.search).get('threads') || '', 10);
  if (Number.isFinite(p) && p > 0) return p;
  return Math.max(1, Math.min(4, navigator.hardwareConcurrency || 1));
}
// More than one WASM thread needs SharedArrayBuffer, i.e. a cross-origin isolated page.
const THREADS = self.crossOriginIsolated ? requestedThreads() : 1;
ort.env.wasm.wasmPaths = new URL('./ort/', location.href).href;  // must be absolute
ort.env.wasm.numThreads = THREADS;
ort.env.logLevel = 'error';

async function fetchJson(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  return r.json();
}

async function session(name) {
  if (!state.sessions[name]) {
    const m = state.config.models.find((x) => x.name === name);
    if (!m) throw new UserError(`There is no "${name}" model in this build.`);
    state.sessions[name] = ort.InferenceSession.create(m.file, { executionProviders: ['wasm'],
                                                                   graphOptimizationLevel: 'all' })
      .catch((e) => { delete state.sessions[name];
        throw new UserError(`The ${name.toUpperCase()} model could not be loaded (${String(e.message || e).split('\n')[0]}). ` +
                            'Rebuild the site with "invoke build --target web".'); });
  }
  return state.sessions[name];
}

// image [b,3,S,S], query [b,D] (Float32Array) -> outputs as plain arrays, and the run's latency
async function runModel(name, image, query, batch = 1) {
  const c = state.config;
  const s = await session(name);
  const feeds = {
    image: new ort.Tensor('float32', image, [batch, 3, c.image_size, c.image_size]),
    query: new ort.Tensor('float32', query, [batch, c.query_dim]),
  };
  const t0 = performance.now();
  const out = await s.run(feeds);
  const ms = performance.now() - t0;
  return {
    relevance: Float32Array.from(out.relevance.data),
    weights: Float32Array.from(out.weights.data),
    topk: Array.from(out.topk_indices.data, Number),  // int64 arrives as BigInt64Array
    ms,
  };
}

// ---------- the text encoder (free-text queries) ----------
function textConfig() {
  const t = state.config.text_encoder;
  if (!t) throw new UserError(state.config.text_note || 'Free-text queries are not available in this build.');
  return t;
}

function textTokenizer() {
  const t = textConfig();
  if (!state.tokenizer) {
    state.tokenizer = BertTokenizer.load(t.vocab, { maxLength: t.max_length })
      .catch((e) => { state.tokenizer = null;
        throw new UserError(`The tokenizer could not be loaded (${String(e.message || e).split('\n')[0]}).`); });
  }
  return state.tokenizer;
}

function textSession() {
  const t = textConfig();
  if (!state.textSession) {
    state.textSession = ort.InferenceSession.create(t.file, { executionProviders: ['wasm'], graphOptimizationLevel: 'all' })
      .catch((e) => { state.textSession = null;
        throw new UserError(`The text encoder could not be loaded (${String(e.message || e).split('\n')[0]}). ` +
                            'Rebuild the site with "invoke build --target web".'); });
  }
  return state.textSession;
}

// texts -> L2-normalised embeddings [n, D] (Float32Array), token ids, and the encoder's run time.
// One run per text (batch 1: what the page does), or padded batches of `batch` texts (the verifier:
// padding must not change an embedding).
async function embedTexts(texts, batch = 1) {
  const t = textConfig();
  const [tokenizer, s] = await Promise.all([textTokenizer(), textSession()]);
  const encoded = texts.map((x) => tokenizer.encode(x).ids);
  const dim = state.config.query_dim;
  const out = new Float32Array(texts.length * dim);
  let ms = 0, row = 0;
  for (let start = 0; start < encoded.length; start += batch) {
    const group = encoded.slice(start, start + batch);
    const T = Math.max(...group.map((e) => e.length));
    const ids = new BigInt64Array(group.length * T), mask = new BigInt64Array(group.length * T);  // 0 = [PAD]
    group.forEach((e, i) => e.forEach((id, j) => { ids[i * T + j] = BigInt(id); mask[i * T + j] = 1n; }));
    const feeds = { [t.inputs[0]]: new ort.Tensor('int64', ids, [group.length, T]),
                    [t.inputs[1]]: new ort.Tensor('int64', mask, [group.length, T]) };
    const t0 = performance.now();
    const res = await s.run(feeds);
    ms += performance.now() - t0;
    out.set(res[t.output].data, row * dim);
    row += group.length;
  }
  return { embeddings: out, ids: encoded, ms };
}

// ---------- images ----------
async function decodeFile(file) {
  if (!file) throw new UserError('No file was given.');
  if (file.size === 0) throw new UserError(`"${file.name}" is empty.`);
  if (file.size > MAX_BYTES) {
    throw new UserError(`"${file.name}" is too large (${(file.size / 1048576).toFixed(0)} MB); the limit is 64 MB.`);
  }
  if (file.type && !file.type.startsWith('image/')) {
    throw new UserError(`"${file.name}" is not an image (${file.type}). Use a PNG, JPEG or WebP file.`);
  }
  let bmp;
  try {
    // EXIF orientation is applied, as a person expects to see the photo
    bmp = await createImageBitmap(file, { imageOrientation: 'from-image' });
  } catch (e) {
    throw new UserError(`"${file.name}" could not be decoded as an image. Use a PNG, JPEG or WebP file.`);
  }
  checkSize(bmp, file.name);
  return bmp;
}

function checkSize(bmp, name) {
  const { width: w, height: h } = bmp;
  if (Math.min(w, h) < MIN_SIDE) {
    bmp.close();
    throw new UserError(`"${name}" is too small (${w}×${h} pixels); use an image of at least ${MIN_SIDE}×${MIN_SIDE}.`);
  }
  if (Math.max(w, h) > MAX_SIDE || w * h > MAX_PIXELS) {
    bmp.close();
    throw new UserError(`"${name}" is too large (${w}×${h} pixels); the limit is ${MAX_SIDE} pixels a side and ${MAX_PIXELS / 1e6} megapixels.`);
  }
}

// Centre square crop drawn on white (transparent pixels become white), scaled to `size`.
function drawCrop(bmp, size) {
  const canvas = document.createElement('canvas');
  canvas.width = canvas.height = size;
  const g = canvas.getContext('2d', { willReadFrequently: true });
  g.fillStyle = '#fff';
  g.fillRect(0, 0, size, size);
  g.imageSmoothingEnabled = true;
  g.imageSmoothingQuality = 'high';
  const side = Math.min(bmp.width, bmp.height);
  g.drawImage(bmp, (bmp.width - side) / 2, (bmp.height - side) / 2, side, side, 0, 0, size, size);
  return canvas;
}

// RGBA canvas -> float32 [3,S,S] RGB in [0,1]
function toTensor(canvas) {
  const s = canvas.width;
  const px = canvas.getContext('2d').getImageData(0, 0, s, s).data;
  const out = new Float32Array(3 * s * s);
  for (let i = 0; i < s * s; i++) {
    out[i] = px[4 * i] / 255;
    out[s * s + i] = px[4 * i + 1] / 255;
    out[2 * s * s + i] = px[4 * i + 2] / 255;
  }
  return out;
}

// ---------- drawing ----------
function heatColour(v) {  // blue (low) -> green -> red (high)
  return `hsla(${Math.round(240 * (1 - v))}, 100%, 50%, ${0.12 + 0.43 * v})`;
}

function drawResult(res) {
  const c = state.config;
  const heat = $('heat');
  const g = heat.getContext('2d');
  g.clearRect(0, 0, DISPLAY, DISPLAY);
  const cell = DISPLAY / c.grid;
  res.relevance.forEach((v, i) => {
    g.fillStyle = heatColour(Math.min(1, Math.max(0, v)));
    g.fillRect((i % c.grid) * cell, Math.floor(i / c.grid) * cell, cell, cell);
  });
  g.lineWidth = 2;
  for (const i of res.topk) {
    const x = (i % c.grid) * cell, y = Math.floor(i / c.grid) * cell;
    g.strokeStyle = '#000'; g.strokeRect(x + 1, y + 1, cell - 2, cell - 2);
    g.strokeStyle = '#fff'; g.strokeRect(x + 2.5, y + 2.5, cell - 5, cell - 5);
  }
  heat.dataset.drawn = '1';
  ['w0', 'w1', 'w2'].forEach((id, k) => {
    $(id).style.width = `${(100 * res.weights[k]).toFixed(1)}%`;
    $(`${id}v`).textContent = res.weights[k].toFixed(3);
  });
  $('latency').textContent = `${res.ms.toFixed(1)} ms (inference only)`;
  const q = res.query;
  if (q.kind === 'text') {
    $('ran-query').textContent = `typed: "${shorten(q.label)}" (${q.label.length} characters, ${q.tokens} tokens)`;
    $('ran-query').title = q.label;
    $('encoder').textContent = `${state.config.text_encoder.name}, in this page: ${q.encoderMs.toFixed(1)} ms`;
  } else {
    $('ran-query').textContent = `preset: "${q.label}"`;
    $('ran-query').title = '';
    $('encoder').textContent = `${state.presets.encoder}, at build time`;
  }
  $('ran-model').textContent = `${res.model.toUpperCase()} (${state.config.models.find((m) => m.name === res.model).file})`;
  $('threads').textContent = `${ort.env.wasm.numThreads}${self.crossOriginIsolated ? ' (cross-origin isolated)' : ' (not cross-origin isolated: 1 thread)'}`;
  $('topk').textContent = `${res.topk.length} patches: ${[...res.topk].sort((a, b) => a - b).join(', ')}`;
}

function showPhoto(bmp) {
  const g = $('photo').getContext('2d');
  g.drawImage(drawCrop(bmp, DISPLAY), 0, 0);
  $('heat').getContext('2d').clearRect(0, 0, DISPLAY, DISPLAY);
  delete $('heat').dataset.drawn;
}

// ---------- actions ----------
function presetQuery() {
  const i = parseInt($('query').value, 10);
  return { kind: 'preset', label: state.presets.queries[i], embedding: Float32Array.from(state.presets.embeddings[i]) };
}

async function runCurrent() {
  if (!state.image) return null;
  const model = $('model').value;
  const query = state.query || presetQuery();
  setStatus('running…');
  const res = await runModel(model, state.image, query.embedding);
  res.model = model;
  res.query = { kind: query.kind, label: query.label, encoderMs: query.encoderMs, tokens: query.tokens };
  state.last = res;
  drawResult(res);
  if (state.firstResultMs === null) state.firstResultMs = performance.now();
  setStatus('done');
  return res;
}

async function useBitmap(bmp) {
  if (state.bitmap) state.bitmap.close();
  state.bitmap = bmp;
  state.image = toTensor(drawCrop(bmp, state.config.image_size));
  showPhoto(bmp);
  return runCurrent();
}

// Every user action goes through here: a UserError becomes a message, never a broken page.
async function guarded(fn) {
  if (state.busy) {  // one run at a time: say so rather than drop the click silently
    showMessage('Busy: the current run is still in progress. Try again when it has finished.', 'info');
    return null;
  }
  state.busy = true;
  try {
    clearMessage();
    return await fn();
  } catch (e) {
    setStatus('');
    if (e instanceof UserError) showMessage(e.message);
    else { showMessage(`Something went wrong: ${e.message || e}`); console.warn(e); }
    return null;
  } finally {
    state.busy = false;
  }
}

// The typed query: tokenized and embedded in the page, then run like a preset on the current photo.
async function runText(text) {
  textConfig();
  if (!text.trim()) throw new UserError('The query box is empty: type what to look for (e.g. "a striped tail"), or pick a preset.');
  if (!state.image) throw new UserError('Open a photo first.');
  setStatus('encoding the query…');
  const { embeddings, ids, ms } = await embedTexts([text]);
  state.query = { kind: 'text', label: text, embedding: embeddings, encoderMs: ms, tokens: ids[0].length };
  return runCurrent();
}

const openFile = (file) => guarded(async () => useBitmap(await decodeFile(file)));

async function openSample(sample) {
  return guarded(async () => {
    const r = await fetch(sample.file);
    if (!r.ok) throw new UserError(`The sample ${sample.name} is missing from this build (HTTP ${r.status}).`);
    const bmp = await createImageBitmap(await r.blob());
    return useBitmap(bmp);
  });
}

// ---------- self-check: the golden bundle vs the Python onnxruntime reference ----------
async function loadBundle() {
  const c = state.config.selfcheck;
  const [meta, buf] = await Promise.all([fetchJson(c.index), fetch(c.data).then((r) => r.arrayBuffer())]);
  const arr = (name) => {
    const a = meta.arrays[name];
    const Typed = { float32: Float32Array, int64: BigInt64Array, int32: Int32Array }[a.dtype];
    return new Typed(buf.slice(a.offset, a.offset + a.bytes));
  };
  return { meta, arr };
}

// Top-K agreement as pipeline/parity.py counts it: a pick the reference did not make still agrees
// when it is a tie at the K-th place (its reference score within `tie` of the K-th score) and it
// replaces a reference pick that is itself within `tie` of it; the strict overlap is kept too.
function compare(res, ref, n, k, tie = 0) {
  let relMax = 0, wMax = 0, overlap = 0, strict = 0, overlapMin = 1;
  for (let i = 0; i < res.relevance.length; i++) relMax = Math.max(relMax, Math.abs(res.relevance[i] - ref.relevance[i]));
  for (let i = 0; i < res.weights.length; i++) wMax = Math.max(wMax, Math.abs(res.weights[i] - ref.weights[i]));
  const patches = ref.relevance.length / n;
  for (let s = 0; s < n; s++) {
    const scores = ref.relevance.slice(s * patches, (s + 1) * patches);
    const kth = Array.from(scores).sort((x, y) => y - x)[k - 1];
    const a = new Set(Array.from(ref.topk.slice(s * k, (s + 1) * k), Number));
    const b = new Set(Array.from(res.topk.slice(s * k, (s + 1) * k), Number));
    const common = [...b].filter((x) => a.has(x)).length;
    const extra = [...b].filter((x) => !a.has(x) && x >= 0 && x < patches && scores[x] >= kth - tie).length;
    const dropped = [...a].filter((x) => !b.has(x) && scores[x] <= kth + tie).length;
    const withTies = (common + Math.min(extra, dropped)) / k;
    overlap += withTies / n;
    strict += common / k / n;
    overlapMin = Math.min(overlapMin, withTies);
  }
  return { relevance_max_abs: relMax, weights_max_abs: wMax, topk_overlap_mean: overlap,
           topk_overlap_strict_mean: strict, topk_overlap_min: overlapMin };
}

function judge(metrics, gate) {
  const fails = [];
  for (const [k, lim] of Object.entries(gate.max || {})) if (!(metrics[k] <= lim)) fails.push(`${k} > ${lim}`);
  for (const [k, lim] of Object.entries(gate.min || {})) if (!(metrics[k] >= lim)) fails.push(`${k} < ${lim}`);
  return fails;
}

async function selfCheck() {
  const { meta, arr } = await loadBundle();
  const n = meta.samples.length, k = state.config.top_k;
  const image = arr('image'), query = arr('query');
  const rows = [];
  for (const m of state.config.models) {
    const res = await runModel(m.name, image, query, n);
    const ref = { relevance: arr(`${m.name}.relevance`), weights: arr(`${m.name}.weights`), topk: arr(`${m.name}.topk_indices`) };
    const metrics = compare(res, ref, n, k, m.browser_gate.tie_tolerance || 0);
    const fails = judge(metrics, m.browser_gate);
    rows.push({ model: m.name, samples: n, metrics, gate: m.browser_gate, passed: fails.length === 0, failures: fails, ms: res.ms });
  }
  renderSelfCheck(rows, meta.reference);
  return rows;
}

function renderSelfCheck(rows, reference) {
  const fmt = (v) => (v < 1e-3 && v > 0 ? v.toExponential(1) : v.toFixed(4));
  const body = rows.map((r) => `<tr><td>${r.model.toUpperCase()}</td><td>${r.samples}</td>` +
    `<td>${fmt(r.metrics.relevance_max_abs)}</td><td>${fmt(r.metrics.weights_max_abs)}</td>` +
    `<td>${r.metrics.topk_overlap_mean.toFixed(3)}</td>` +
    `<td class="${r.passed ? 'pass' : 'fail'}" data-status="${r.passed ? 'pass' : 'fail'}">${r.passed ? 'PASS' : 'FAIL: ' + r.failures.join('; ')}</td></tr>`).join('');
  $('selfcheck-result').innerHTML = `<h2>Self-check vs ${reference}</h2><table><tr><th>model</th><th>samples</th>` +
    `<th>relevance max err</th><th>weights max err</th><th>top-K overlap</th><th>gate</th></tr>${body}</table>`;
  $('selfcheck-result').dataset.status = rows.every((r) => r.passed) ? 'pass' : 'fail';
}

// ---------- test / verification hooks (used by the build's verifier and the tests) ----------
function b64ToF32(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Float32Array(bytes.buffer);
}
function f32ToB64(f) {
  const bytes = new Uint8Array(f.buffer, f.byteOffset, f.byteLength);
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

window.arrcoc = {
  // Raw tensors in, raw outputs out (base64 float32): how parity is measured without browser resizing.
  async runRaw(model, imageB64, queryB64, batch) {
    const r = await runModel(model, b64ToF32(imageB64), b64ToF32(queryB64), batch);
    return { relevance: f32ToB64(r.relevance), weights: f32ToB64(r.weights), topk: r.topk, ms: r.ms };
  },
  // For `invoke bench`: upload inputs once, then time runs of them (returns the in-page ms).
  // An untimed run comes right before the timed one, in the same call, as the native cases do it
  // (a separate round trip left the page idle in between: G=14 median 1.09 ms, now 0.84).
  store(imageB64, queryB64) { state.stored = { image: b64ToF32(imageB64), query: b64ToF32(queryB64) }; },
  async runStored(model, batch) {
    await runModel(model, state.stored.image, state.stored.query, batch);
    return (await runModel(model, state.stored.image, state.stored.query, batch)).ms;
  },
  selfCheck: () => guarded(selfCheck),
  // The self-check's top-K rule, for the test that holds it to pipeline/parity.py's.
  compareTopk: (relevance, refTopk, gotTopk, n, k, tie) => compare(
    { relevance, weights: [], topk: gotTopk }, { relevance, weights: [], topk: refTopk }, n, k, tie),
  // The tokenizer and the text encoder, for the verifier's parity check against Python.
  async tokenize(texts) { const tok = await textTokenizer(); return texts.map((x) => tok.encode(x).ids); },
  async embedTexts(texts, batch = 1) {
    const r = await embedTexts(texts, batch);
    return { embeddings: f32ToB64(r.embeddings), ms: r.ms };
  },
  runText: (text) => guarded(() => runText(text)),
  threads: () => ort.env.wasm.numThreads,
  imageSize: () => state.bitmap && [state.bitmap.width, state.bitmap.height],  // after EXIF rotation
  firstResultMs: () => state.firstResultMs,
  last: () => state.last && { ...state.last, relevance: Array.from(state.last.relevance), weights: Array.from(state.last.weights) },
  textEnabled: () => Boolean(state.config && state.config.text_encoder),
};

// ---------- wiring ----------
function wire() {
  $('file').addEventListener('change', (e) => { const f = e.target.files[0]; e.target.value = ''; openFile(f); });
  const drop = $('drop');
  drop.addEventListener('dragover', (e) => { e.preventDefault(); drop.classList.add('over'); });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (e) => {
    e.preventDefault();
    drop.classList.remove('over');
    const files = e.dataTransfer && e.dataTransfer.files;
    if (!files || !files.length) { showMessage('Nothing to open: drop an image file.'); return; }
    openFile(files[0]);
  });
  $('query').addEventListener('change', () => { state.query = null; return guarded(runCurrent); });
  $('text-form').addEventListener('submit', (e) => { e.preventDefault(); guarded(() => runText($('text').value)); });
  $('model').addEventListener('change', () => guarded(runCurrent));
  $('run').addEventListener('click', () => guarded(runCurrent));
  $('selfcheck').addEventListener('click', () => guarded(selfCheck));
}

function populate() {
  const c = state.config;
  $('query').innerHTML = '';
  state.presets.queries.forEach((q, i) => $('query').add(new Option(q, String(i))));
  $('model').innerHTML = '';
  c.models.forEach((m) => $('model').add(new Option(`${m.name.toUpperCase()} (${(m.bytes / 1024).toFixed(0)} KB)`, m.name)));
  $('model-note').textContent = c.note || '';
  $('text-note').textContent = c.text_encoder
    ? `Typed queries: tokenized and embedded here by ${c.text_encoder.name} (${(c.text_encoder.bytes / 1048576).toFixed(1)} MB, loaded on first use).`
    : (c.text_note || 'Free-text queries are not available in this build: presets only.');
  if (state.presets.note) $('footer-note').textContent = `Preset queries: ${state.presets.encoder}.`;
  c.samples.forEach((s) => {
    const b = document.createElement('button');
    b.type = 'button';
    b.textContent = s.name;
    b.dataset.sample = s.name;
    b.addEventListener('click', () => openSample(s));
    $('samples').append(b);
  });
}

async function main() {
  wire();
  try {
    state.config = await fetchJson('config.json');
    state.presets = await fetchJson(state.config.presets);
  } catch (e) {
    showMessage(`This build is incomplete (${e.message}). Rebuild with "invoke build --target web".`);
    setState('error');
    return;
  }
  populate();
  $('threads').textContent = String(THREADS);
  const ok = await guarded(async () => { await session(state.config.models[0].name); return true; });
  if (!ok) { setStatus('model failed to load'); setState('error'); return; }
  $('run').disabled = false;
  $('selfcheck').disabled = false;
  $('text').disabled = $('text-run').disabled = !state.config.text_encoder;
  setStatus('ready');
  await openSample(state.config.samples[0]);
  setState('ready');
}

main();
