// ARR-COC relevance demo: onnxruntime-web (WASM) on a user's image and a preset or typed query.
// A typed query is tokenized here by @huggingface/tokenizers from the build's tokenizer.json and
// embedded by the build's query encoder (config.json text_encoder.kind: all-MiniLM-L6-v2 INT8, or
// arr-coc-0-1's Qwen3-VL token-embedding mean for a reference checkpoint).
// Everything the page needs is served next to it (config.json, models, ORT and tokenizer library): no network.
import * as ort from './ort/ort.wasm.min.mjs';
import { Tokenizer } from './lib/tokenizers.min.mjs';

// The model takes the photo as decoded: uint8 [1,H,W,3], RGB, rows top to bottom, EXIF orientation
// applied, any size 16..8192 per side (config.json min_side/max_side, from pipeline/relevance/model.py). The
// page does no crop, no resize and no float conversion: the graph does arr-coc-0-1's own resize.
const MAX_BYTES = 64 * 1024 * 1024;
const DISPLAY = 448;          // CSS pixels of the longer side of the shown photo
const DISPLAY_BACKING = 896;  // canvas pixels of the longer side (sharp on 2x screens); never upscaled

const $ = (id) => document.getElementById(id);
const state = { config: null, presets: null, sessions: {}, image: null, bitmap: null, last: null, lastInput: null,
                overlay: null, firstResultMs: null, busy: false, query: null, tokenizer: null, textSession: null,
                textLoadMs: {} };

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
function setStatus(text) { $('status').textContent = text; delete $('status').dataset.verdict; }
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

// image: uint8 pixels [b,H,W,3] (Uint8Array), query [b,D] (Float32Array) -> outputs as plain arrays,
// and the run's latency (session.run only)
async function runModel(name, image, height, width, query, batch = 1) {
  const c = state.config;
  const s = await session(name);
  const feeds = {
    image: new ort.Tensor('uint8', image, [batch, height, width, 3]),
    query: new ort.Tensor('float32', query, [batch, c.query_dim]),
  };
  state.lastInput = { shape: [batch, height, width, 3], dtype: 'uint8', bytes: image.length, data: image };
  const t0 = performance.now();
  const out = await s.run(feeds);
  const ms = performance.now() - t0;
  return {
    relevance: Float32Array.from(out.relevance.data),
    weights: Float32Array.from(out.weights.data),
    evidence: Float32Array.from(out.evidence.data),  // [b,4]: config.json evidence_names
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

// tokenizers.js 0.2.0's BertNormalizer departs from the Rust crate that Python runs in two steps
// (measured on the build's corpus): it lowercases the whole string, so a final capital sigma becomes
// 'ς' where the crate, lowercasing per character, gives 'σ'; and it isolates CJK ideographs per
// UTF-16 unit, so those outside the BMP (extension B on) stay glued to their neighbours. Both steps
// are redone per code point, with the crate's ideograph ranges (bert.rs is_chinese_char, including
// its U+2B920 start of extension E); cleaning, accent stripping, the pre-tokenizer, WordPiece and
// the template stay the library's.
const CJK = /[\u{4E00}-\u{9FFF}\u{3400}-\u{4DBF}\u{20000}-\u{2A6DF}\u{2A700}-\u{2B73F}\u{2B740}-\u{2B81F}\u{2B920}-\u{2CEAF}\u{F900}-\u{FAFF}\u{2F800}-\u{2FA1F}]/gu;

function asRustCrate(tokenizer) {
  const n = tokenizer.normalizer;
  if (!n || !n.config || n.config.type !== 'BertNormalizer') return tokenizer;
  n.normalize = function normalize(text) {
    const c = this.config;
    if (c.clean_text) text = this.clean_text(text);
    if (c.handle_chinese_chars) text = text.replace(CJK, ' $& ');
    if (c.lowercase) text = Array.from(text, (ch) => ch.toLowerCase()).join('');
    if (c.lowercase ? c.strip_accents !== false : c.strip_accents) text = this.strip_accents(text);
    return text;
  };
  return tokenizer;
}

function textTokenizer() {
  const t = textConfig();
  if (!state.tokenizer) {
    state.tokenizer = timedLoad('tokenizer', Promise.all([fetchJson(t.tokenizer), fetchJson(t.tokenizer_config)])
      .then(([json, config]) => asRustCrate(new Tokenizer(json, config))))
      .catch((e) => { state.tokenizer = null;
        throw new UserError(`The tokenizer could not be loaded (${String(e.message || e).split('\n')[0]}).`); });
  }
  return state.tokenizer;
}

// The ids Python feeds the same encoder: MiniLM's with [CLS]/[SEP], cut to max_length as
// transformers cuts a single text (the first max_length - 2 tokens, then [SEP], the template's last
// id); arr-coc-0-1's the raw text's ids, no special tokens, no truncation (max_length null).
function tokenIds(tokenizer, text) {
  const t = textConfig();
  const ids = tokenizer.encode(text, { add_special_tokens: t.add_special_tokens }).ids;
  if (!t.max_length || ids.length <= t.max_length) return ids;
  return [...ids.slice(0, t.max_length - 1), ids[ids.length - 1]];
}

// The first use loads the tokenizer and the encoder (fetch + parse): timed apart from the queries.
function timedLoad(key, promise) {
  const t0 = performance.now();
  return promise.then((v) => { state.textLoadMs[key] = performance.now() - t0; return v; });
}

function textSession() {
  const t = textConfig();
  if (!state.textSession) {
    state.textSession = timedLoad('encoder', ort.InferenceSession.create(t.file, { executionProviders: ['wasm'],
                                                                                   graphOptimizationLevel: 'all' }))
      .catch((e) => { state.textSession = null;
        throw new UserError(`The text encoder could not be loaded (${String(e.message || e).split('\n')[0]}). ` +
                            'Rebuild the site with "invoke build --target web".'); });
  }
  return state.textSession;
}

// texts -> embeddings [n, D] (Float32Array), token ids, and the time per text (tokenize + encode,
// performance.now() around each; the first use's loading is not counted). MiniLM: one run per text
// (batch 1: what the page does), or padded batches of `batch` texts (the verifier: padding must not
// change an embedding). arr-coc-0-1's encoder takes one text's ids, [T] with no batch dimension.
async function embedTexts(texts, batch = 1) {
  const t = textConfig();
  const [tokenizer, s] = await Promise.all([textTokenizer(), textSession()]);
  const run = t.kind === 'qwen-token-mean' ? runQwen : runMiniLM;
  const dim = state.config.query_dim;
  const out = new Float32Array(texts.length * dim);
  const ids = [], tokenizeMs = [], encodeMs = [];
  const step = t.kind === 'qwen-token-mean' ? 1 : batch;
  for (let start = 0; start < texts.length; start += step) {
    const group = texts.slice(start, start + step);
    const t0 = performance.now();
    const encoded = group.map((x) => tokenIds(tokenizer, x));
    const t1 = performance.now();
    out.set(await run(s, t, encoded), start * dim);
    const t2 = performance.now();
    ids.push(...encoded);
    group.forEach(() => { tokenizeMs.push((t1 - t0) / group.length); encodeMs.push((t2 - t1) / group.length); });
  }
  return { embeddings: out, ids, tokenizeMs, encodeMs, ms: tokenizeMs.map((x, i) => x + encodeMs[i]) };
}

async function runMiniLM(s, t, group) {
  const T = Math.max(...group.map((e) => e.length));
  const ids = new BigInt64Array(group.length * T), mask = new BigInt64Array(group.length * T);  // 0 = [PAD]
  group.forEach((e, i) => e.forEach((id, j) => { ids[i * T + j] = BigInt(id); mask[i * T + j] = 1n; }));
  const res = await s.run({ [t.inputs[0]]: new ort.Tensor('int64', ids, [group.length, T]),
                            [t.inputs[1]]: new ort.Tensor('int64', mask, [group.length, T]) });
  return res[t.output].data;
}

async function runQwen(s, t, [ids]) {
  if (!ids.length) throw new UserError('This query has no tokens, so it has no embedding: type a word or two.');
  const res = await s.run({ [t.inputs[0]]: new ort.Tensor('int64', BigInt64Array.from(ids, BigInt), [ids.length]) });
  return res[t.output].data;
}

// ---------- images ----------
// The photo as the browser decodes it: EXIF orientation applied ('from-image'), no colour
// management ('none': the pixels as stored, as PIL gives them; an embedded ICC profile is not
// applied by either), no premultiplication where the browser honours it.
const BITMAP_OPTIONS = { imageOrientation: 'from-image', colorSpaceConversion: 'none', premultiplyAlpha: 'none' };

async function bitmapOf(blob) {
  try {
    return await createImageBitmap(blob, BITMAP_OPTIONS);
  } catch (e) {
    if (!(e instanceof TypeError)) throw e;  // an option this browser does not know: EXIF still applies
    return createImageBitmap(blob, { imageOrientation: 'from-image' });
  }
}

// The size of an image the browser could not decode into a bitmap (a header read by <img>), or null.
function probeSize(blob) {
  return new Promise((resolve) => {
    const url = URL.createObjectURL(blob);
    const img = new Image();
    img.onload = () => { URL.revokeObjectURL(url); resolve([img.naturalWidth, img.naturalHeight]); };
    img.onerror = () => { URL.revokeObjectURL(url); resolve(null); };
    img.src = url;
  });
}

async function decodeFile(file) {
  if (!file) throw new UserError('No file was given.');
  if (file.size === 0) throw new UserError(`"${file.name}" is empty.`);
  if (file.size > MAX_BYTES) {
    throw new UserError(`"${file.name}" is too large (${(file.size / 1048576).toFixed(0)} MB); the limit is 64 MB.`);
  }
  if (file.type && !file.type.startsWith('image/')) {
    throw new UserError(`"${file.name}" is not an image (${file.type}). Use a PNG, JPEG or WebP file.`);
  }
  return decodeBlob(file, file.name);
}

async function decodeBlob(blob, name) {
  let bmp;
  try {
    bmp = await bitmapOf(blob);
  } catch (e) {
    const size = await probeSize(blob);  // a photo too large to decode still says its size
    if (size) checkSize(size[0], size[1], name);
    throw new UserError(`"${name}" could not be decoded as an image. Use a PNG, JPEG or WebP file.`);
  }
  try {
    checkSize(bmp.width, bmp.height, name);
  } catch (e) {
    bmp.close();
    throw e;
  }
  return bmp;
}

function checkSize(w, h, name) {
  const { min_side: lo, max_side: hi } = state.config;
  if (Math.max(w, h) > hi) {
    throw new UserError(`"${name}" is ${w}×${h} pixels: the model takes photos of at most ${hi} pixels per side. ` +
                        `Downscale it to ${hi} pixels or less on its longer side and open it again.`);
  }
  if (Math.min(w, h) < lo) {
    throw new UserError(`"${name}" is too small (${w}×${h} pixels); use an image of at least ${lo}×${lo}.`);
  }
}

// A bitmap's RGBA as stored (not premultiplied), read through WebGL2: a 2D canvas keeps premultiplied
// alpha, which rounds the colour of semi-transparent pixels and blackens transparent ones, while
// PIL's convert("RGB") keeps the stored colour. null where WebGL2 or the size is not available.
function storedRGBA(bmp) {
  const w = bmp.width, h = bmp.height;
  const gl = document.createElement('canvas').getContext('webgl2');
  if (!gl) return null;
  try {
    const limit = gl.getParameter(gl.MAX_TEXTURE_SIZE);
    if (w > limit || h > limit) return null;
    gl.pixelStorei(gl.UNPACK_PREMULTIPLY_ALPHA_WEBGL, false);
    gl.pixelStorei(gl.UNPACK_COLORSPACE_CONVERSION_WEBGL, gl.NONE);
    gl.pixelStorei(gl.UNPACK_FLIP_Y_WEBGL, false);
    const tex = gl.createTexture();
    gl.bindTexture(gl.TEXTURE_2D, tex);
    gl.texImage2D(gl.TEXTURE_2D, 0, gl.RGBA8, w, h, 0, gl.RGBA, gl.UNSIGNED_BYTE, bmp);
    const fb = gl.createFramebuffer();
    gl.bindFramebuffer(gl.FRAMEBUFFER, fb);
    gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, tex, 0);
    if (gl.checkFramebufferStatus(gl.FRAMEBUFFER) !== gl.FRAMEBUFFER_COMPLETE) return null;
    const out = new Uint8Array(w * h * 4);
    gl.readPixels(0, 0, w, h, gl.RGBA, gl.UNSIGNED_BYTE, out);  // texture row 0 = the photo's top row
    return gl.getError() === gl.NO_ERROR ? out : null;
  } finally {
    const lose = gl.getExtension('WEBGL_lose_context');
    if (lose) lose.loseContext();
  }
}

// The decoded bitmap -> uint8 [H,W,3] RGB, rows top to bottom: drawn 1:1 on a canvas of the photo's
// own size (no smoothing, no scaling), read back, alpha dropped. An opaque photo (every JPEG) is
// read exactly so; one with transparency is read again through WebGL2 (storedRGBA), so that the
// colour under the alpha is the stored one, as PIL's convert("RGB") keeps it.
function photoPixels(bmp) {
  const w = bmp.width, h = bmp.height;
  const canvas = document.createElement('canvas');
  canvas.width = w;
  canvas.height = h;
  const g = canvas.getContext('2d', { willReadFrequently: true, colorSpace: 'srgb' });
  g.imageSmoothingEnabled = false;
  g.drawImage(bmp, 0, 0);
  let px = g.getImageData(0, 0, w, h).data;
  canvas.width = canvas.height = 0;  // release the backing store now (a 12 MP canvas is 48 MB)
  let alpha = 'opaque';
  for (let i = 3; i < px.length; i += 4) {
    if (px[i] !== 255) {
      const stored = storedRGBA(bmp);
      if (stored) { px = stored; alpha = 'transparent: colour as stored (WebGL2 read)'; }
      else alpha = 'transparent: colour read through a canvas (semi-transparent pixels rounded, transparent ones black)';
      break;
    }
  }
  const out = new Uint8Array(w * h * 3);
  for (let i = 0, j = 0; i < px.length; i += 4, j += 3) {
    out[j] = px[i]; out[j + 1] = px[i + 1]; out[j + 2] = px[i + 2];
  }
  return { pixels: out, width: w, height: h, alpha };
}

// ---------- drawing ----------
function heatColour(v) {  // blue (low) -> green -> red (high)
  return `hsla(${Math.round(240 * (1 - v))}, 100%, 50%, ${0.12 + 0.43 * v})`;
}

// The shown photo: its own aspect, the longer side DISPLAY_BACKING canvas pixels at most.
function displaySize(w, h) {
  const scale = Math.min(1, DISPLAY_BACKING / Math.max(w, h));
  return { dw: Math.max(1, Math.round(w * scale)), dh: Math.max(1, Math.round(h * scale)) };
}

// The G x G grid over the WHOLE photo, as the model's resize stretches it: a cell is W/G wide and
// H/G tall (not square on a non-square photo).
function drawResult(res) {
  const c = state.config;
  const heat = $('heat');
  const g = heat.getContext('2d');
  const dw = heat.width, dh = heat.height, G = c.grid;
  g.clearRect(0, 0, dw, dh);
  const cw = dw / G, ch = dh / G;
  const box = (i) => { const col = i % G, row = Math.floor(i / G);
    // edges at rounded multiples of the cell size: neighbouring cells tile without gaps or overlaps
    const x0 = Math.round(col * cw), y0 = Math.round(row * ch);
    return [x0, y0, Math.round((col + 1) * cw) - x0, Math.round((row + 1) * ch) - y0]; };
  res.relevance.forEach((v, i) => {
    g.fillStyle = heatColour(Math.min(1, Math.max(0, v)));
    g.fillRect(...box(i));
  });
  const line = Math.max(1, Math.round(Math.min(dw, dh) / 224));
  g.lineWidth = line;
  const outlined = outlinedCells(res, G);
  for (const i of outlined) {
    const [x, y, w, h] = box(i);
    g.strokeStyle = '#000'; g.strokeRect(x + line / 2, y + line / 2, w - line, h - line);
    g.strokeStyle = '#fff'; g.strokeRect(x + 1.5 * line, y + 1.5 * line, w - 3 * line, h - 3 * line);
  }
  const { width: W, height: H } = state.image;
  state.overlay = { photo: [W, H], canvas: [dw, dh], grid: G, cell: [W / G, H / G], cells: outlined,
                    // the outlined cells in photo pixels: [left, top, right, bottom] (pipeline/publishing/overlay.py's cell_box)
                    boxes: outlined.map((i) => [(i % G) * W / G, Math.floor(i / G) * H / G,
                                                (i % G + 1) * W / G, (Math.floor(i / G) + 1) * H / G]) };
  heat.dataset.drawn = '1';
  ['w0', 'w1', 'w2'].forEach((id, k) => {
    $(id).style.width = `${(100 * res.weights[k]).toFixed(1)}%`;
    $(`${id}v`).textContent = res.weights[k].toFixed(3);
  });
  $('latency').textContent = `${res.ms.toFixed(1)} ms (inference only, ${W}×${H} photo)`;
  const q = res.query;
  if (q.kind === 'text') {
    $('ran-query').textContent = `typed: "${shorten(q.label)}" (${q.label.length} characters, ${q.tokens} tokens)`;
    $('ran-query').title = q.label;
    $('encoder').textContent = `${state.config.text_encoder.name}, in this page: ${q.encoderMs.toFixed(1)} ms ` +
      `(tokenize ${q.tokenizeMs.toFixed(1)} + encode ${q.encodeMs.toFixed(1)})`;
  } else {
    $('ran-query').textContent = `preset: "${q.label}"`;
    $('ran-query').title = '';
    $('encoder').textContent = `${state.presets.encoder}, at build time`;
  }
  $('ran-model').textContent = `${res.model.toUpperCase()} (${state.config.models.find((m) => m.name === res.model).file})`;
  $('threads').textContent = `${ort.env.wasm.numThreads}${self.crossOriginIsolated ? ' (cross-origin isolated)' : ' (not cross-origin isolated: 1 thread)'}`;
  showAnswer(res, G);
}

// ---------- the verdict: the model's evidence output through the folder's calibration ----------
// relevance is min-max normalised per photo (its top cell is always 1), so it cannot say whether
// anything is there. The model's `evidence` output (config.json evidence_names: the participatory
// map before any min-max) can: calibration.json, published beside manifest.json and served next to
// this page, maps it to a confidence (arrcoc_edge/relevance/evidence.py's Calibration, computed the
// same way here; tests/test_web.py holds the two equal). No calibration: no number, and the page says so.
const CALIBRATION = { file: 'calibration.json', format: 'arrcoc-edge/confidence-calibration/1', standsOut: 0.5 };
const STRONGEST_SHARE = 1 / 24;  // arrcoc_edge.relevance.signature.STRONGEST_SHARE
const SHOWN_CELLS = 5;

// The strongest cells of a G x G map: the ones the answer rests on (signature.strongest_cells).
function strongestCells(cells) { return Math.max(1, Math.min(cells, Math.round(cells * STRONGEST_SHARE))); }

// { coef, bias } from calibration.json, or { missing } / { error } saying why there is none.
async function loadCalibration() {
  let r;
  try { r = await fetch(CALIBRATION.file); } catch (e) { return { missing: true }; }
  if (r.status === 404) return { missing: true };
  try {
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const c = await r.json();
    if (c === null) return { missing: true };  // invoke serve: this publish has none
    const names = state.config.evidence_names || [];
    const numbers = Array.isArray(c.coef) ? [...c.coef, c.bias] : [];
    if (c.format !== CALIBRATION.format || c.model !== 'logistic' || JSON.stringify(c.features) !== JSON.stringify(names)
        || numbers.length !== names.length + 1 || !numbers.every((v) => typeof v === 'number' && Number.isFinite(v))) {
      throw new Error(`not a ${CALIBRATION.format} calibration of ${names.join(', ')}`);
    }
    return { coef: c.coef, bias: c.bias };
  } catch (e) {
    return { error: String(e.message || e) };
  }
}

// The probability that what the query asks for is in the photo, or null without a calibration.
function confidenceOf(evidence, cal) {
  if (!cal || !cal.coef || !evidence || evidence.length !== cal.coef.length) return null;
  let z = cal.bias;
  for (let i = 0; i < evidence.length; i++) z += cal.coef[i] * evidence[i];
  return 1 / (1 + Math.exp(-Math.min(60, Math.max(-60, z))));
}

// 0.873 -> "87%"; never "0%" or "100%" for a probability strictly between them (predict.py's percent).
function percent(v) {
  const shown = Math.round(100 * v);
  if (shown === 0 && v > 0) return '<1%';
  if (shown === 100 && v < 1) return '>99%';
  return `${shown}%`;
}

// The top-K cells most relevant first; outlined: the strongest few, or all K when asked for.
function rankedTopk(res) { return [...res.topk].sort((a, b) => res.relevance[b] - res.relevance[a]); }
function outlinedCells(res, G) {
  const order = rankedTopk(res);
  return $('show-topk') && $('show-topk').checked ? order : order.slice(0, strongestCells(G * G));
}

function verdictText(res) {
  const cal = state.calibration || { missing: true };
  if (res.confidence !== null) {
    return res.standsOut ? `Stands out: ${percent(res.confidence)} confident it is in this photo.`
      : `Nothing in this photo stands out for this query: ${percent(res.confidence)} confident it is there; ` +
        'the outlined cells are only where the model looks.';
  }
  if (cal.error) return `Confidence unknown: this folder's calibration.json is not one this page reads (${cal.error}).`;
  return 'Confidence unknown: no calibration in this folder (the outlined cells are where the model looks, whatever is there).';
}

// A cell's place in words, by thirds of the photo (arrcoc_edge/frontends/predict.py's where).
function where(row, col, G) {
  const third = (i) => Math.min(2, Math.floor(3 * i / G));
  const v = ['top', 'middle', 'bottom'][third(row)], h = ['left', 'centre', 'right'][third(col)];
  if (v === 'middle') return h === 'centre' ? 'centre' : `middle ${h}`;
  return h === 'centre' ? v : `${v} ${h}`;
}

function showAnswer(res, G) {
  res.confidence = confidenceOf(res.evidence, state.calibration);
  res.standsOut = res.confidence === null ? null : res.confidence >= CALIBRATION.standsOut;
  const answer = $('answer');
  answer.dataset.standsOut = res.standsOut === null ? 'unknown' : String(res.standsOut);
  answer.textContent = verdictText(res);
  const order = rankedTopk(res);
  const list = $('topk');
  list.replaceChildren(...order.slice(0, SHOWN_CELLS).map((i) => {
    const li = document.createElement('li');
    const row = Math.floor(i / G), col = i % G;
    li.textContent = `row ${row}, col ${col}: ${res.relevance[i].toFixed(3)} (${where(row, col, G)})`;
    return li;
  }));
  const outlined = outlinedCells(res, G).length;
  $('topk-note').textContent = `the strongest ${Math.min(SHOWN_CELLS, order.length)} of the ${order.length} top-K cells ` +
    `(row and column from the top left); ${outlined === order.length ? `all ${outlined}` : `the strongest ${outlined}`} outlined`;
}

function showPhoto(bmp) {
  const { dw, dh } = displaySize(bmp.width, bmp.height);
  const stack = $('stack');
  stack.style.aspectRatio = `${bmp.width} / ${bmp.height}`;
  // a tall photo is as tall as a square one would be, not taller
  stack.style.maxWidth = `${Math.min(DISPLAY, DISPLAY * bmp.width / bmp.height).toFixed(1)}px`;
  for (const id of ['photo', 'heat']) { $(id).width = dw; $(id).height = dh; }
  const g = $('photo').getContext('2d');
  g.imageSmoothingQuality = 'high';
  g.drawImage(bmp, 0, 0, dw, dh);  // for the eye only: the model gets the decoded pixels
  delete $('heat').dataset.drawn;
  const alpha = state.image && state.image.alpha !== 'opaque' ? `; ${state.image.alpha}` : '';
  $('photo-size').textContent = `${bmp.width}×${bmp.height} pixels, handed to the model as decoded (uint8, no crop, no resize)${alpha}`;
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
  const { pixels, height, width } = state.image;
  const res = await runModel(model, pixels, height, width, query.embedding);
  res.model = model;
  res.query = { kind: query.kind, label: query.label, encoderMs: query.encoderMs, tokenizeMs: query.tokenizeMs,
                encodeMs: query.encodeMs, tokens: query.tokens };
  state.last = res;
  drawResult(res);
  if (state.firstResultMs === null) state.firstResultMs = performance.now();
  setStatus('done');
  return res;
}

async function useBitmap(bmp) {
  if (state.bitmap) state.bitmap.close();
  state.bitmap = bmp;
  state.image = photoPixels(bmp);
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
    clearAnswer();
    setStatus('no answer: see the message above');
    if (e instanceof UserError) showMessage(e.message);
    else { showMessage(`Something went wrong: ${e.message || e}`); console.warn(e); }
    return null;
  } finally {
    state.busy = false;
  }
}

// After an error the previous answer would read as the answer to what just failed: take it off the
// page (the photo stays; window.arrcoc.last() keeps the last run for the tests).
function clearAnswer() {
  const heat = $('heat');
  heat.getContext('2d').clearRect(0, 0, heat.width, heat.height);
  delete heat.dataset.drawn;
  ['w0', 'w1', 'w2'].forEach((id) => { $(id).style.width = '0'; $(`${id}v`).textContent = '–'; });
  for (const id of ['latency', 'ran-model', 'ran-query', 'encoder', 'answer']) $(id).textContent = '–';
  $('answer').dataset.standsOut = '';
  $('topk').replaceChildren();
  $('topk-note').textContent = '';
  delete $('status').dataset.verdict;
}

// The typed query: tokenized and embedded in the page, then run like a preset on the current photo.
async function runText(text) {
  textConfig();
  if (!text.trim()) throw new UserError('The query box is empty: type what to look for (e.g. "something red" or "the top left"), or pick a preset.');
  // zero-width spaces, joiners, a BOM, direction marks: the tokenizer drops them all (as predict refuses them)
  if (!/[^\s\p{Cf}\p{Cc}]/u.test(text)) throw new UserError('The query has no visible characters (only invisible ones such as zero-width spaces): type what to look for (e.g. "something red"), or pick a preset.');
  if (!state.image) throw new UserError('Open a photo first.');
  setStatus('encoding the query…');
  const { embeddings, ids, ms, tokenizeMs, encodeMs } = await embedTexts([text]);
  state.query = { kind: 'text', label: text, embedding: embeddings, encoderMs: ms[0], tokenizeMs: tokenizeMs[0],
                  encodeMs: encodeMs[0], tokens: ids[0].length };
  const res = await runCurrent();
  showTypedInDropdown(text);
  const warning = vocabularyWarning(await textTokenizer(), text);
  if (warning) showMessage(warning, 'info');
  return res;
}

// ---------- what was asked: the dropdown names a typed query while it is the one answered ----------
const TYPED = 'typed';
function showTypedInDropdown(text) {
  const select = $('query');
  let option = select.querySelector(`option[value="${TYPED}"]`);
  if (!option) {
    option = new Option('', TYPED);
    option.disabled = true;  // shown, not chosen: picking a preset leaves the typed query
    select.prepend(option);
  }
  option.textContent = `typed: ${shorten(text)}`;
  option.title = text;
  select.value = TYPED;
}
function forgetTypedInDropdown() {
  const option = $('query').querySelector(`option[value="${TYPED}"]`);
  if (option) option.remove();
}

// ---------- the English-only warning, as `predict` gives it (pipeline/frontends/queries.py) ----------
// A WordPiece piece the vocabulary lacks is [UNK], or a lone non-ASCII character (MiniLM keeps single
// kana, CJK and other characters as pieces of their own, learned from almost no English text).
// UNKNOWN_SHARE is queries.UNKNOWN_SHARE (tests/test_web.py holds them equal).
const VOCABULARY = { unknownShare: 0.5, encoder: 'all-MiniLM-L6-v2' };
function vocabularyWarning(tokenizer, text) {
  if (textConfig().kind === 'qwen-token-mean') return null;  // byte-level pieces: none is unknown
  const pieces = tokenizer.tokenize(text, { add_special_tokens: false });
  const unknown = pieces.filter((piece) => {
    const bare = piece.startsWith('##') ? piece.slice(2) : piece;
    return piece === '[UNK]' || ([...bare].length === 1 && /[^\x00-\x7F]/.test(bare));
  }).length;
  if (!pieces.length || unknown / pieces.length <= VOCABULARY.unknownShare) return null;
  return `The query "${shorten(text)}" is mostly outside the query encoder's English vocabulary (${unknown} of ` +
    `${pieces.length} pieces unknown to ${VOCABULARY.encoder}): its answer means little. Ask in English, ` +
    'e.g. "something red" or "the top left".';
}

const openFile = (file) => guarded(async () => useBitmap(await decodeFile(file)));

async function openSample(sample) {
  return guarded(async () => {
    const r = await fetch(sample.file);
    if (!r.ok) throw new UserError(`The sample ${sample.name} is missing from this build (HTTP ${r.status}).`);
    return useBitmap(await decodeBlob(await r.blob(), sample.name));
  });
}

// ---------- self-check: the golden bundle vs the Python onnxruntime reference ----------
// selfcheck.json lists samples as golden.json does (pipeline/stages/golden.py write_bundle): each sample is
// one batch-1 run, its arrays (dtype, shape, byte offset into selfcheck.bin) under sample.arrays.
async function loadBundle() {
  const c = state.config.selfcheck;
  const [meta, buf] = await Promise.all([fetchJson(c.index), fetch(c.data).then((r) => r.arrayBuffer())]);
  const arr = (sample, name) => {
    const a = sample.arrays[name];
    if (!a) throw new Error(`selfcheck.json: sample ${sample.name} has no array ${name}`);
    const Typed = { float32: Float32Array, int64: BigInt64Array, int32: Int32Array, uint8: Uint8Array }[a.dtype];
    return new Typed(buf.slice(a.offset, a.offset + a.bytes));
  };
  return { meta, arr };
}

// Top-K agreement as pipeline/stages/parity.py counts it: a pick the reference did not make still agrees
// when it is a tie at the K-th place (its reference score within `tie` of the K-th score) and it
// replaces a reference pick that is itself within `tie` of it; the strict overlap is kept too.
function compare(res, ref, n, k, tie = 0) {
  let relMax = 0, wMax = 0, eMax = 0, overlap = 0, strict = 0, overlapMin = 1;
  for (let i = 0; i < res.relevance.length; i++) relMax = Math.max(relMax, Math.abs(res.relevance[i] - ref.relevance[i]));
  for (let i = 0; i < res.weights.length; i++) wMax = Math.max(wMax, Math.abs(res.weights[i] - ref.weights[i]));
  for (let i = 0; i < (res.evidence || []).length; i++) eMax = Math.max(eMax, Math.abs(res.evidence[i] - ref.evidence[i]));
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
  return { relevance_max_abs: relMax, weights_max_abs: wMax, evidence_max_abs: eMax, topk_overlap_mean: overlap,
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
  const k = state.config.top_k;
  const rows = [];
  for (const m of state.config.models) {
    const tie = m.browser_gate.tie_tolerance || 0;
    const per = [], all = { relevance: [], weights: [], evidence: [], topk: [] };
    const refs = { relevance: [], weights: [], evidence: [], topk: [] };
    for (const sample of meta.samples) {
      const [, h, w] = sample.arrays.image.shape;
      const res = await runModel(m.name, arr(sample, 'image'), h, w, arr(sample, 'query'), 1);
      const ref = { relevance: arr(sample, `${m.name}.relevance`), weights: arr(sample, `${m.name}.weights`),
                    evidence: arr(sample, `${m.name}.evidence`), topk: arr(sample, `${m.name}.topk_indices`) };
      per.push({ name: sample.name, size: [w, h], metrics: compare(res, ref, 1, k, tie), ms: res.ms });
      for (const key of Object.keys(all)) { all[key].push(...res[key]); refs[key].push(...ref[key]); }
    }
    // judged over all samples together, as the build's gate is
    const metrics = compare(all, refs, per.length, k, tie);
    const fails = judge(metrics, m.browser_gate);
    rows.push({ model: m.name, samples: per.length, perSample: per, metrics, gate: m.browser_gate,
                passed: fails.length === 0, failures: fails });
  }
  renderSelfCheck(rows, meta.reference);
  return rows;
}

const esc = (t) => String(t).replace(/[&<>"]/g, (ch) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[ch]);
const fmt = (v) => (v < 1e-3 && v > 0 ? v.toExponential(1) : v.toFixed(4));

function renderSelfCheck(rows, reference) {
  // the verdict is the second column: on a 390 px phone the table scrolls, and PASS stays in sight
  const body = rows.map((r) => {
    const samples = r.perSample.map((s) => `<tr class="sample" data-sample="${esc(s.name)}"><td></td><td></td>` +
      `<td>${esc(s.name)} (${s.size[0]}×${s.size[1]})</td><td>${fmt(s.metrics.relevance_max_abs)}</td>` +
      `<td>${fmt(s.metrics.weights_max_abs)}</td><td>${fmt(s.metrics.evidence_max_abs)}</td>` +
      `<td>${s.metrics.topk_overlap_mean.toFixed(3)}</td>` +
      `<td>${s.ms.toFixed(1)} ms</td></tr>`).join('');
    return `<tr><td>${r.model.toUpperCase()}</td>` +
      `<td class="${r.passed ? 'pass' : 'fail'}" data-status="${r.passed ? 'pass' : 'fail'}">${r.passed ? 'PASS' : 'FAIL: ' + esc(r.failures.join('; '))}</td>` +
      `<td>all ${r.samples}</td><td>${fmt(r.metrics.relevance_max_abs)}</td><td>${fmt(r.metrics.weights_max_abs)}</td>` +
      `<td>${fmt(r.metrics.evidence_max_abs)}</td><td>${r.metrics.topk_overlap_mean.toFixed(3)}</td><td></td></tr>${samples}`;
  }).join('');
  $('selfcheck-result').innerHTML = `<h2>Self-check vs ${esc(reference)}</h2>` +
    '<p class="hint">Each sample is one whole photo as the model takes it (uint8, its own size), run alone.</p>' +
    '<table><tr><th>model</th><th>gate</th><th>sample</th><th>relevance max err</th><th>weights max err</th>' +
    '<th>evidence max err</th><th>top-K overlap</th><th>time</th></tr>' +
    `${body}</table>${decodeGapHtml()}`;
  $('selfcheck-result').dataset.status = rows.every((r) => r.passed) ? 'pass' : 'fail';
}

// The self-check's verdict in the status line, where the eye is after the click (the table may
// be below the fold or scrolled on a phone).
function sayVerdict(rows) {
  const passed = rows.every((r) => r.passed);
  setStatus(`self-check: ${passed ? 'PASS' : 'FAIL'} (${rows.map((r) => `${r.model.toUpperCase()} ${r.passed ? 'passed' : 'failed'}`).join(', ')}; ` +
            'the table is below the answer)');
  $('status').dataset.verdict = passed ? 'pass' : 'fail';
  return rows;
}

// Chromium's JPEG decoding vs PIL's, measured at build time (config.json decode_gap): the same
// page code path (photoPixels) on the golden JPEGs, and what the difference does to the model.
function decodeGapHtml() {
  const gap = state.config.decode_gap;
  if (!gap || !gap.photos) {
    return `<p id="decode-gap" class="hint">Browser JPEG decoding vs PIL: not measured in this build${gap && gap.note ? ` (${esc(gap.note)})` : ''}.</p>`;
  }
  const pct = (v) => `${(100 * v).toFixed(v > 0 && v < 0.001 ? 4 : 2)}%`;
  const rows = gap.photos.map((p) => `<tr data-photo="${esc(p.name)}"><td>${esc(p.name)} (${p.size[0]}×${p.size[1]})</td>` +
    `<td>${p.pixel_max_abs}</td><td>${p.pixel_mean_abs.toFixed(4)}</td><td>${pct(p.pixels_differing)}</td>` +
    `<td>${p.topk_overlap_mean.toFixed(3)} / ${p.topk_overlap_min.toFixed(3)}</td><td>${fmt(p.relevance_max_abs)}</td></tr>`).join('');
  return `<div id="decode-gap"><h2>Browser JPEG decoding vs PIL</h2><p class="hint">${esc(gap.summary)}</p>` +
    '<table><tr><th>JPEG</th><th>pixel max abs</th><th>pixel mean abs</th><th>pixels differing</th>' +
    `<th>top-K overlap mean / min</th><th>relevance max abs</th></tr>${rows}</table></div>`;
}

// ---------- test / verification hooks (used by the build's verifier and the tests) ----------
function b64ToF32(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Float32Array(bytes.buffer);
}
function f32ToB64(f) { return u8ToB64(new Uint8Array(f.buffer, f.byteOffset, f.byteLength)); }

function u8ToB64(bytes) {
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

// Photos reach the page by URL from the server it came from: 36 MB of a 12 MP photo took 21-34 s
// as a base64 argument through Playwright, 0.2-0.4 s as a fetch (measured in headless Chromium).
async function fetchBytes(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  return new Uint8Array(await r.arrayBuffer());
}

window.arrcoc = {
  // Raw uint8 pixels [b,H,W,3] (fetched from imageUrl) and a base64 float32 query in, raw outputs
  // out (base64 float32): how parity is measured on exactly the golden pixels.
  async runUrl(model, imageUrl, shape, queryB64) {
    const [b, h, w] = shape;
    const image = await fetchBytes(imageUrl);
    if (image.length !== b * h * w * 3) throw new Error(`${imageUrl}: ${image.length} bytes, expected ${b}x${h}x${w}x3`);
    const r = await runModel(model, image, h, w, b64ToF32(queryB64), b);
    return { relevance: f32ToB64(r.relevance), weights: f32ToB64(r.weights), evidence: f32ToB64(r.evidence),
             topk: r.topk, ms: r.ms };
  },
  // An image file (by URL) decoded exactly as the page decodes a user's photo: uint8 RGB [H,W,3] (base64).
  async decodeUrl(url) {
    const blob = new Blob([await fetchBytes(url)]);
    const bmp = await bitmapOf(blob);
    try {
      const { pixels, width, height, alpha } = photoPixels(bmp);
      return { width, height, alpha, pixels: u8ToB64(pixels) };
    } finally { bmp.close(); }
  },
  // For `invoke bench`: fetch the inputs once, then time runs of them (returns the in-page ms).
  // An untimed run comes right before the timed one, in the same call, as the native cases do it
  // (a separate round trip left the page idle in between: G=14 median 1.09 ms, now 0.84).
  async storeUrl(imageUrl, shape, queryB64) {
    state.stored = { image: await fetchBytes(imageUrl), shape, query: b64ToF32(queryB64) };
  },
  async runStored(model) {
    const { image, shape: [b, h, w], query } = state.stored;
    await runModel(model, image, h, w, query, b);
    return (await runModel(model, image, h, w, query, b)).ms;
  },
  selfCheck: () => guarded(selfCheck),
  // The self-check's top-K rule, for the test that holds it to pipeline/stages/parity.py's.
  compareTopk: (relevance, refTopk, gotTopk, n, k, tie) => compare(
    { relevance, weights: [], topk: gotTopk }, { relevance, weights: [], topk: refTopk }, n, k, tie),
  // The tokenizer and the text encoder, for the verifier's parity check against Python.
  async tokenize(texts) { const tok = await textTokenizer(); return texts.map((x) => tokenIds(tok, x)); },
  // The same for many short texts (the code-point sweep): ids as base64 uint32, lengths as uint16.
  async tokenizePacked(texts) {
    const tok = await textTokenizer();
    const ids = [], lengths = new Uint16Array(texts.length);
    texts.forEach((x, i) => { const e = tokenIds(tok, x); lengths[i] = e.length; ids.push(...e); });
    return { ids: u8ToB64(new Uint8Array(Uint32Array.from(ids).buffer)), lengths: u8ToB64(new Uint8Array(lengths.buffer)) };
  },
  async embedTexts(texts, batch = 1) {
    const r = await embedTexts(texts, batch);
    return { embeddings: f32ToB64(r.embeddings), ms: r.ms, tokenizeMs: r.tokenizeMs, encodeMs: r.encodeMs };
  },
  runText: (text) => guarded(() => runText(text)),
  textLoadMs: () => state.textLoadMs,
  threads: () => ort.env.wasm.numThreads,
  imageSize: () => state.bitmap && [state.bitmap.width, state.bitmap.height],  // after EXIF rotation
  // What the model was last fed: shape [b,H,W,3] and dtype; lastInputPixels() gives the bytes (base64).
  lastInput: () => state.lastInput && { shape: state.lastInput.shape, dtype: state.lastInput.dtype, bytes: state.lastInput.bytes },
  lastInputPixels: () => state.lastInput && u8ToB64(state.lastInput.data),
  async lastInputSha256() {  // hex SHA-256 of those bytes: checks a 12 MP input without moving 36 MB
    const d = new Uint8Array(await crypto.subtle.digest('SHA-256', state.lastInput.data));
    return Array.from(d, (x) => x.toString(16).padStart(2, '0')).join('');
  },
  // The drawn overlay: photo and canvas sizes, the cell size in photo pixels, the top-K cells' boxes.
  overlay: () => state.overlay,
  firstResultMs: () => state.firstResultMs,
  last: () => state.last && { ...state.last, relevance: Array.from(state.last.relevance), weights: Array.from(state.last.weights),
                              evidence: Array.from(state.last.evidence) },
  calibration: () => state.calibration,
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
  $('query').addEventListener('change', () => { state.query = null; forgetTypedInDropdown(); return guarded(runCurrent); });
  $('text-form').addEventListener('submit', (e) => { e.preventDefault(); guarded(() => runText($('text').value)); });
  $('model').addEventListener('change', () => guarded(runCurrent));
  $('run').addEventListener('click', () => guarded(runCurrent));
  $('selfcheck').addEventListener('click', () => guarded(async () => sayVerdict(await selfCheck())));
  $('show-topk').addEventListener('change', () => { if (state.last) drawResult(state.last); });
}

function populate() {
  const c = state.config;
  $('query').innerHTML = '';
  state.presets.queries.forEach((q, i) => $('query').add(new Option(q, String(i))));
  $('model').innerHTML = '';
  c.models.forEach((m) => $('model').add(new Option(`${m.name.toUpperCase()} (${(m.bytes / 1024).toFixed(0)} KB)`, m.name)));
  $('model-note').textContent = c.note || '';
  $('text-note').textContent = c.text_encoder
    ? `Typed queries: tokenized and embedded here by ${c.text_encoder.name} (${(c.text_encoder.bytes / 1048576).toFixed(1)} MB ` +
      'with its tokenizer, loaded on first use).'
    : (c.text_note || 'Free-text queries are not available in this build: presets only.');
  $('footer-note').textContent = `Preset query embeddings were computed at build time by ${state.presets.encoder}` +
    (c.text_encoder ? `; a typed query is tokenized and embedded in this page by ${c.text_encoder.name}.` : '.');
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
    state.calibration = await loadCalibration();
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
