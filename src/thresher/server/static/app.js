// thresher playground: one POST /v1/compress per run; sliders re-select from the returned scores.
// The selection rules mirror the engine exactly (thresher.engine.reduce and engine.result), so
// what the page shows and copies is what the API returns for the same threshold or keep_ratio.
"use strict";

const RUN_SEPARATOR = " "; // engine.result.RUN_SEPARATOR: joins runs of consecutive kept sentences
const PASSAGE_SEPARATOR = "\n\n"; // between passages in the copied context
const TOKEN_KEY = "thresher.token";
const STAGES = ["segment", "tokenize", "pack", "run", "reduce", "assemble", "queue", "total"];

// ---- Selection (pure functions; the browser test checks them against the engine) ----

// reduce.keep_by_threshold is NumPy's `scores >= threshold`: a scorer's float32 scores are compared
// with the threshold cast to float32 (NEP 50), float64 scores (encoder-pruner's means) in float64.
// JSON does not carry the dtype; float32 scores are exactly the values Math.fround leaves alone,
// while float64 means almost never all are.
function keepByThreshold(scores, threshold) {
  const float32 = scores.every((s) => Math.fround(s) === s);
  const t = float32 ? Math.fround(threshold) : threshold;
  return scores.map((s) => s >= t);
}

// reduce.keep_by_ratio: best score first (ties: earlier first) until ratio of all characters.
function keepByRatio(scores, lengths, ratio) {
  const n = scores.length;
  const keep = new Array(n).fill(false);
  if (n === 0) return keep;
  const order = [...Array(n).keys()].sort(
    (a, b) => (scores[a] > scores[b] ? -1 : scores[a] < scores[b] ? 1 : a - b));
  const cum = [];
  let sum = 0;
  for (const i of order) cum.push((sum += lengths[i]));
  const budget = ratio * cum[n - 1];
  let count = cum.findIndex((c) => c >= budget); // numpy searchsorted(side="left")
  count = count < 0 ? n : count + 1;
  for (const i of order.slice(0, Math.min(count, n))) keep[i] = true;
  return keep;
}

// result.pruned_text. `chars` is the passage as code points: engine offsets count code points,
// while JS strings index UTF-16 units (they differ past U+FFFF, e.g. emoji).
function prunedText(chars, sentences, keep, joiner) {
  const idx = keep.flatMap((k, i) => (k ? [i] : []));
  if (idx.length === 0) return "";
  const slice = (a, b) => chars.slice(a, b).join("");
  if (joiner !== null && joiner !== undefined) {
    return idx.map((i) => slice(sentences[i].start, sentences[i].end)).join(joiner);
  }
  const runs = [];
  let first = idx[0], last = idx[0];
  for (const i of idx.slice(1)) {
    if (i === last + 1) { last = i; continue; }
    runs.push([first, last]);
    first = last = i;
  }
  runs.push([first, last]);
  return runs.map(([a, b]) => slice(sentences[a].start, sentences[b].end)).join(RUN_SEPARATOR);
}

// Keep flags per passage; keep_ratio is over the whole request, as in engine.pipeline.select.
// The model's default operating point adds two cuts: in threshold mode a sentence must also reach
// `relative` x its passage's best score (0 = none), and a passage whose rerank score is below `cut`
// keeps nothing (null = none).
function selectKeep(passages, mode, value, relative = 0, cut = null) {
  const scores = passages.flatMap((p) => p.sentences.map((s) => s.score));
  const flat = mode === "threshold" ? keepByThreshold(scores, value)
    : keepByRatio(scores, passages.flatMap((p) => p.sentences.map((s) => s.end - s.start)), value);
  let at = 0;
  return passages.map((p) => {
    let keep = flat.slice(at, (at += p.sentences.length));
    if (mode === "threshold" && relative) {
      const best = Math.max(0, ...p.sentences.map((s) => s.score));
      keep = keep.map((k, i) => k && p.sentences[i].score >= relative * best);
    }
    if (cut !== null && cut !== undefined && p.rerank_score !== null && p.rerank_score < cut) keep = keep.map(() => false);
    return keep;
  });
}

// engine.result.assemble with reorder=True: stable sort by rerank score, best first.
function rerankOrder(passages) {
  const idx = [...passages.keys()];
  if (passages.some((p) => p.rerank_score === null)) return idx;
  return idx.sort((a, b) => {
    const x = passages[a].rerank_score, y = passages[b].rerank_score;
    return x > y ? -1 : x < y ? 1 : a - b;
  });
}

// ---- Page state ----

// `point`: the model's relative and passage cuts, which apply (as in the API) until the user picks a
// threshold or keep ratio of their own; then the page shows exactly that, like compress(threshold=t).
const state = { info: null, presets: [], request: null, result: null, chars: [], keep: [], steps: [], point: null };
const $ = (id) => document.getElementById(id);

function parsePassages(text) {
  return text.split(/\n[ \t]*\n/).map((block) => block.trim()).filter(Boolean).map((block) => {
    if (!block.startsWith("## ")) return { title: null, text: block };
    const nl = block.indexOf("\n");
    return nl < 0 ? { title: block.slice(3).trim(), text: "" }
                  : { title: block.slice(3, nl).trim(), text: block.slice(nl + 1).trim() };
  });
}

function formatPassages(passages) {
  return passages.map((p) => (p.title ? `## ${p.title}\n${p.text}` : p.text)).join("\n\n");
}

function currentSelection() {
  const mode = $("mode-ratio").checked ? "ratio" : "threshold";
  const value = Number(mode === "ratio" ? $("ratio-value").value : $("threshold-value").value);
  return { mode, value };
}

function order() {
  const passages = state.result.passages;
  return $("reorder").checked ? rerankOrder(passages) : [...passages.keys()];
}

function prunedPassages() {
  const joiner = state.info ? state.info.sentence_joiner : null;
  return state.result.passages.map((p, i) => prunedText(state.chars[i], p.sentences, state.keep[i], joiner));
}

function prunedContext() {
  const pruned = prunedPassages();
  return order().map((i) => pruned[i]).filter(Boolean).join(PASSAGE_SEPARATOR);
}

function compressionRate() {
  const total = state.chars.reduce((n, c) => n + c.length, 0);
  const kept = prunedPassages().reduce((n, t) => n + [...t].length, 0);
  return total === 0 ? 0 : 1 - kept / total;
}

// ---- Rendering ----

function el(tag, props = {}, ...children) {
  const node = Object.assign(document.createElement(tag), props);
  for (const c of children) node.append(c);
  return node;
}

function fmt(x, digits = 4) {
  return x === null || x === undefined ? "n/a" : Number(x).toFixed(digits);
}

function renderPassages() {
  const list = $("passage-list");
  list.replaceChildren();
  const ranks = new Map(rerankOrder(state.result.passages).map((i, r) => [i, r + 1]));
  for (const i of order()) {
    const p = state.result.passages[i];
    const chars = state.chars[i];
    const title = p.title || `passage ${p.index + 1}`;
    const head = el("h3", {}, el("span", { className: "rank", textContent: `#${ranks.get(i)}` }), ` ${title}`);
    const meta = el("p", { className: "muted small",
                           textContent: `input position ${p.index + 1} · rerank score ${fmt(p.rerank_score)}` });
    const body = el("p", { className: "passage" });
    let at = 0;
    p.sentences.forEach((s, j) => {
      if (s.start > at) body.append(chars.slice(at, s.start).join(""));
      const span = el("span", { className: "s", tabIndex: 0, textContent: chars.slice(s.start, s.end).join("") });
      span.dataset.passage = String(i);
      span.dataset.sentence = String(j);
      span.dataset.score = String(s.score);
      body.append(span);
      at = s.end;
    });
    if (at < chars.length) body.append(chars.slice(at).join(""));
    list.append(el("li", { className: "card", id: `passage-${p.index}` }, head, meta, body));
  }
}

function renderTimings() {
  const rows = STAGES.filter((k) => k in state.result.timings_ms).map((k) => el("tr", {},
    el("th", { scope: "row", textContent: k }), el("td", { textContent: fmt(state.result.timings_ms[k], 1) })));
  $("timings").tBodies[0].replaceChildren(...rows);
}

// Instant: recomputes keep flags from the scores and restyles; never sends a request.
function applySelection() {
  if (!state.result) return;
  const { mode, value } = currentSelection();
  if (!Number.isFinite(value)) return;
  const point = state.point || { relative: 0, cut: null };
  state.keep = selectKeep(state.result.passages, mode, value, point.relative, point.cut);
  for (const span of document.querySelectorAll("#passage-list .s")) {
    const kept = state.keep[Number(span.dataset.passage)][Number(span.dataset.sentence)];
    span.classList.toggle("kept", kept);
    span.classList.toggle("dropped", !kept);
    const tip = `score ${fmt(Number(span.dataset.score))} · ${kept ? "kept" : "dropped"}`;
    span.title = tip;
    span.dataset.tip = tip;
    span.setAttribute("aria-label", `${tip}: ${span.textContent}`);
  }
  const nKept = state.keep.flat().filter(Boolean).length;
  const nAll = state.keep.flat().length;
  let rule = mode === "threshold" ? `score ≥ ${value}` : `keep ratio ${value}`;
  if (state.point && mode === "threshold" && state.point.relative) {
    rule += ` and ≥ ${state.point.relative} × its passage's best: the model's default`;
  }
  $("summary").textContent = `${(100 * compressionRate()).toFixed(1)}% of characters removed · `
    + `${nKept} of ${nAll} sentences kept (${rule}) · model ${state.result.model}`;
  $("context").value = prunedContext();
}

function showResult(result) {
  state.result = result;
  // a fresh run shows the API's answer: the default operating point when no option was picked
  state.point = state.custom ? null : { relative: state.info.relative_threshold || 0, cut: state.info.passage_threshold };
  state.chars = state.request.passages.map((p) => [...p.text]);
  state.steps = [...new Set(result.passages.flatMap((p) => p.sentences.map((s) => s.score)))].sort((a, b) => a - b);
  const slider = $("threshold");
  slider.disabled = state.steps.length === 0;
  slider.max = String(Math.max(state.steps.length - 1, 0));
  if (state.steps.length) slider.value = String(positionOf(Number($("threshold-value").value)));
  $("results").hidden = false;
  renderTimings();
  renderPassages();
  applySelection();
}

// ---- Requests ----

function headers() {
  const h = { "Content-Type": "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) h.Authorization = `Bearer ${token}`;
  return h;
}

async function run(event) {
  event.preventDefault();
  $("error").textContent = "";
  const request = { question: $("question").value, passages: parsePassages($("passages").value) };
  if (request.passages.length === 0) {
    $("error").textContent = "passages: add at least one passage (blocks separated by a blank line)";
    return;
  }
  $("run").disabled = true;
  try {
    const response = await fetch("/v1/compress", { method: "POST", headers: headers(), body: JSON.stringify(request) });
    const body = await response.json().catch(() => ({ error: response.statusText }));
    if (!response.ok) {
      const hint = response.status === 401 ? " (enter the server's API key above)" : "";
      $("error").textContent = `${response.status}: ${body.error}${hint}`;
      return;
    }
    state.request = request;
    showResult(body);
  } catch (e) {
    $("error").textContent = `the request failed: ${e.message}`;
  } finally {
    $("run").disabled = false;
  }
}

function loadPreset() {
  const preset = state.presets[Number($("preset").value)];
  $("preset-credit").textContent = preset ? `${preset.source} ${preset.id}: ${preset.license}` : "";
  if (!preset) return;
  $("question").value = preset.question;
  $("passages").value = formatPassages(preset.passages);
}

// The threshold slider steps through the returned scores (ascending): each step keeps one sentence
// fewer or more, whatever the model's score scale (keep probabilities bunch near 0, cosines span -1..1).
function thresholdAt(position) {
  return state.steps[Math.min(Number(position), state.steps.length - 1)];
}

function positionOf(threshold) {
  const i = state.steps.findIndex((s) => s >= threshold);
  return i < 0 ? state.steps.length - 1 : i;
}

function linkThreshold() {
  const slider = $("threshold"), box = $("threshold-value");
  slider.addEventListener("input", () => {
    box.value = String(thresholdAt(slider.value));
    $("mode-threshold").checked = true;
    custom();
  });
  box.addEventListener("input", () => {
    if (state.steps.length) slider.value = String(positionOf(Number(box.value)));
    $("mode-threshold").checked = true;
    custom();
  });
}

// The user picked a threshold or ratio: from now on the page shows exactly that rule.
function custom() {
  state.custom = true;
  state.point = null;
  applySelection();
}

function linkRatio() {
  const slider = $("ratio"), box = $("ratio-value");
  slider.addEventListener("input", () => { box.value = slider.value; $("mode-ratio").checked = true; custom(); });
  box.addEventListener("input", () => { slider.value = box.value; $("mode-ratio").checked = true; custom(); });
}

async function start() {
  const [info, presets] = await Promise.all([
    fetch("/playground/info").then((r) => r.json()), fetch("/playground/presets.json").then((r) => r.json())]);
  state.info = info;
  state.presets = presets.presets;
  $("model-line").textContent = `model ${info.model} (${info.kind}) · default threshold ${info.threshold}`;
  $("threshold-value").value = String(info.threshold);
  state.presets.forEach((p, i) => $("preset").append(el("option", { value: String(i), textContent: p.name })));
  $("token-row").hidden = !info.auth_required;
  $("token").value = sessionStorage.getItem(TOKEN_KEY) || "";
  $("token").addEventListener("input", () => sessionStorage.setItem(TOKEN_KEY, $("token").value));
  $("preset").addEventListener("change", loadPreset);
  $("request-form").addEventListener("submit", run);
  linkThreshold();
  linkRatio();
  for (const id of ["mode-threshold", "mode-ratio"]) $(id).addEventListener("change", custom);
  $("reorder").addEventListener("change", () => { renderPassages(); applySelection(); });
  $("copy").addEventListener("click", copyContext);
  document.body.dataset.ready = "true";
}

async function copyContext() {
  const text = prunedContext();
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    $("context").select(); // no clipboard API outside secure contexts (plain http on a LAN address)
    document.execCommand("copy");
  }
  $("copy-status").textContent = `copied ${[...text].length} characters`;
}

// For the browser test: the same functions, and what the page last sent and shows.
window.thresherPlayground = {
  keepByThreshold, keepByRatio, prunedText, rerankOrder,
  lastRequest: () => state.request,
  view: () => ({ keep: state.keep, pruned: prunedPassages(), context: prunedContext(), rate: compressionRate(),
                 order: order() }),
};

start().catch((e) => { $("error").textContent = `the page could not load its settings: ${e.message}`; });
