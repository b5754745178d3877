// The visual editor (docs/web-view.md, "Editor"): a Workflow as a graph, forms and its YAML, side by side.
//
// The YAML text is the one source of truth: the graph and the forms are drawn from it, and each of their edits
// is a splice of it (editoryaml.js), so what is downloaded, diffed or applied is exactly the text shown. The
// draft lives in this browser's localStorage (per address) and reaches the server only when the person
// validates (as they type), diffs or applies. Undo/redo covers the text and the boxes' places alike.
import * as api from "./editorapi.js";
import { h, fill } from "./editordom.js";
import { parse, setMany, workflowOf, EMPTY } from "./editoryaml.js";
import { draw, place } from "./editorgraph.js";
import { stepForm, workflowForm, stepKind } from "./editorforms.js";
import { toolbar } from "./editortools.js";

const SECTIONS = ["steps", "finally", "compensations"];
const main = document.getElementById("main");
const query = new URLSearchParams(location.search);

const state = {
  text: "", base: "", workflow: null, parsed: null, catalog: { actions: [], stepTypes: [], kinds: [] },
  positions: new Map(), selected: null, selectedEdge: null, focus: null, problems: [], checked: false,
  live: null, origin: "new", undo: [], redo: [], lastKey: null, lastAt: 0,
};
const parts = {
  graph: h("div", { id: "editor-graph" }), form: h("div", { id: "editor-form" }),
  yaml: h("textarea", { id: "editor-yaml", spellcheck: "false", "aria-label": "the Workflow as YAML", wrap: "off" }),
  problems: h("ul", { id: "editor-problems" }), status: h("div", { id: "editor-status", role: "status" }),
  banner: h("div", { id: "editor-banner" }), tools: h("div", { id: "editor-tools" }),
};
const draftKey = () => `towline-editor:${location.pathname}${query.get("example") ? `?example=${query.get("example")}` : ""}`;

// ---- the text and its history ----------------------------------------------------------------------------------

function withOrder(path) {
  const step = state.workflow && path[0] === "spec" ? ((state.workflow.spec || {})[path[1]] || [])[path[2]] : null;
  const kind = step ? stepKind(step, state.catalog) : null;
  return kind && kind.schema ? Object.keys((kind.schema.properties) || {}) : [];
}

function snapshot() { return { text: state.text, positions: new Map(state.positions) }; }

// A change of the text (or of the places): kept for undo; typing in one field is one step of history.
function change(text, key, positions) {
  const now = performance.now();
  if (!(key && key === state.lastKey && now - state.lastAt < 1500)) state.undo.push(snapshot());
  if (state.undo.length > 200) state.undo.shift();
  state.redo = [];
  state.lastKey = key;
  state.lastAt = now;
  if (positions) state.positions = positions;
  setText(text, key);
}

function setText(text, from) {
  state.text = text;
  state.parsed = parse(text);
  state.workflow = workflowOf(state.parsed) || state.workflow;
  if (state.text === state.base) localStorage.removeItem(draftKey());
  else localStorage.setItem(draftKey(), JSON.stringify({ text: state.text, base: state.base }));
  render(from);
  scheduleCheck();
}

function travel(from, to) {
  if (!from.length) return;
  to.push(snapshot());
  const entry = from.pop();
  state.positions = entry.positions;
  state.lastKey = null;
  setText(entry.text, null);
}
const undo = () => travel(state.undo, state.redo);
const redo = () => travel(state.redo, state.undo);

function edit(edits, key) {
  try {
    change(setMany(state.text, edits, withOrder), key);
  } catch (error) {
    parts.status.textContent = error.message;
  }
}

// ---- what is drawn ---------------------------------------------------------------------------------------------

function stepsOf(workflow) {
  const spec = (workflow && workflow.spec) || {};
  return SECTIONS.flatMap((section) => (Array.isArray(spec[section]) ? spec[section] : []).map((step, index) => {
    const value = step && typeof step === "object" ? step : {};
    const id = typeof value.id === "string" ? value.id : "";
    return { key: `${section}:${id || `#${index}`}`, id, section, index, needs: Array.isArray(value.needs) ? value.needs : [],
      label: stepKind(value, state.catalog).label, problem: false };
  }));
}

function problemsMap() {
  const map = new Map();
  for (const problem of state.problems) {
    if (!map.has(problem.path)) map.set(problem.path, []);
    map.get(problem.path).push(problem);
  }
  return map;
}

const context = () => ({
  value: state.workflow || {}, catalog: state.catalog, problems: problemsMap(),
  get: (path) => path.reduce((node, key) => (node === undefined || node === null ? undefined : node[key]), state.workflow),
  set: (path, value, key) => edit(renames(path, value, [[path, value]]), key),
  setNeed: (section, index, id, on) => {
    const step = state.workflow.spec[section][index];
    const needs = (step.needs || []).filter((n) => n !== id);
    if (on) needs.push(id);
    edit([[["spec", section, index, "needs"], needs.length ? needs : undefined]], null);
  },
});

// Renaming a step renames it where its section's steps need it, and keeps its place on the canvas.
function renames(path, value, edits) {
  if (path.length !== 4 || path[0] !== "spec" || path[3] !== "id" || !SECTIONS.includes(path[1])) return edits;
  const steps = state.workflow.spec[path[1]];
  const old = steps[path[2]] && steps[path[2]].id;
  if (!old || typeof value !== "string" || !value) return edits;
  steps.forEach((step, index) => {
    if (Array.isArray(step.needs) && step.needs.includes(old)) {
      edits.push([["spec", path[1], index, "needs"], step.needs.map((n) => (n === old ? value : n))]);
    }
  });
  const at = state.positions.get(`${path[1]}:${old}`);
  if (at) state.positions.set(`${path[1]}:${value}`, at);
  if (state.selected === `${path[1]}:${old}`) state.selected = `${path[1]}:${value}`;
  return edits;
}

function render(from) {
  const steps = stepsOf(state.workflow);
  const marked = new Set(state.problems.map((p) => (p.path.match(/^spec\.(steps|finally|compensations)\[(\d+)\]/) || [])
    .slice(1).join(":")));
  for (const step of steps) step.problem = marked.has(`${step.section}:${step.index}`);
  state.positions = place(steps, state.positions);
  draw(parts.graph, steps, state, graphActions(steps));
  state.focusNow = false;
  if (from !== "yaml" && parts.yaml.value !== state.text) parts.yaml.value = state.text;
  const typing = from && from !== "yaml" && parts.form.contains(document.activeElement);
  if (!typing) renderForm(steps);
  showProblems();
  showStatus();
}

function showStatus() {
  parts.status.textContent = state.parsed.errors.length ? "The YAML does not parse: the graph shows the last text that did."
    : state.text === state.base ? "No changes." : "Changed (kept as a draft in this browser).";
}

function renderForm(steps) {
  const step = steps.find((s) => s.key === state.selected);
  if (!state.workflow) { fill(parts.form, h("p", { class: "muted" }, "Fix the YAML to edit with the forms.")); return; }
  fill(parts.form, step ? stepForm(context(), step.section, step.index) : workflowForm(context()));
}

// Problems go under the field they name, else on the nearest form that holds that path, else in the list.
function showProblems() {
  for (const old of main.querySelectorAll(".field-error.placed")) old.remove();
  const unplaced = [];
  const yamlProblems = state.parsed.errors;
  for (const problem of [...yamlProblems, ...state.problems]) {
    const exact = problem.path && parts.form.querySelector(`[data-field="${CSS.escape(problem.path)}"]`);
    if (exact) {
      if (!exact.querySelector(`.field-error[data-problem="${CSS.escape(problem.path)}"]`)) {
        exact.append(h("div", { class: "field-error placed", "data-problem": problem.path }, problem.message));
      }
    } else unplaced.push(problem);
  }
  fill(parts.problems, unplaced.map((p) => h("li", { class: "field-error", "data-problem": p.path, "data-source": p.source },
    p.path ? h("code", {}, p.path) : null, p.path ? ": " : null, p.message)));
  if (state.checked && !yamlProblems.length && !state.problems.length) {
    fill(parts.problems, h("li", { class: "result done", id: "editor-valid" }, "Valid: the API server's dry run accepts it."));
  }
}

function graphActions(steps) {
  const byKey = new Map(steps.map((s) => [s.key, s]));
  return {
    position: (key) => state.positions.get(key),
    select: (key) => { state.selected = key; state.selectedEdge = null; state.focus = key; state.focusNow = true; render(null); },
    focus: (key) => { state.focus = key; const node = parts.graph.querySelector(`g.node[data-key="${CSS.escape(key)}"]`); if (node) node.focus(); },
    selectEdge: (key) => { state.selectedEdge = key; render(null); },
    move: (key, at) => {
      const positions = new Map(state.positions);
      positions.set(key, at);
      state.focus = key;
      state.focusNow = true;
      change(state.text, null, positions);
    },
    connect: (from, to) => {
      const target = steps.find((s) => s.id === to);
      const source = steps.find((s) => s.id === from);
      if (!target || !source || target.section !== source.section) return;
      if (reaches(steps, to, from)) { parts.status.textContent = `${to} already runs before ${from}: that edge would make a cycle`; return; }
      if (target.needs.includes(from)) return;
      edit([[["spec", target.section, target.index, "needs"], [...target.needs, from]]], null);
    },
    deleteEdge: (from, to) => {
      const target = steps.find((s) => s.id === to);
      const needs = target.needs.filter((n) => n !== from);
      state.selectedEdge = null;
      edit([[["spec", target.section, target.index, "needs"], needs.length ? needs : undefined]], null);
    },
    deleteStep: (key) => deleteStep(byKey.get(key), steps),
  };
}

function reaches(steps, from, to) {
  const byId = new Map(steps.map((s) => [s.id, s]));
  const seen = new Set();
  const walk = (id) => id === to || (!seen.has(id) && (seen.add(id), (byId.get(id)?.needs || []).some(walk)));
  return walk(from);
}

function deleteStep(step, steps) {
  if (!step) return;
  const edits = steps.filter((s) => s.section === step.section && s.needs.includes(step.id)).map((s) => {
    const needs = s.needs.filter((n) => n !== step.id);
    return [["spec", s.section, s.index, "needs"], needs.length ? needs : undefined];
  });
  edits.push([["spec", step.section, step.index], undefined]);
  state.selected = null;
  edit(edits, null);
}

// A new step from the catalogue, with an id of its own; it is selected so its form opens.
function addStep(template) {
  const spec = (state.workflow && state.workflow.spec) || {};
  const steps = Array.isArray(spec.steps) ? spec.steps : [];
  const ids = new Set(steps.map((s) => s.id));
  const stem = template.stem.replace(/[^a-z0-9]+/gi, "_").toLowerCase().replace(/^_+|_+$/g, "") || "step";
  let id = stem;
  for (let n = 2; ids.has(id); n += 1) id = `${stem}_${n}`;
  const { stem: _, ...body } = template;
  state.selected = `steps:${id}`;
  edit([[["spec", "steps", steps.length], { id, ...body }]], null);
}

// ---- validation as you type ------------------------------------------------------------------------------------

let timer = null;
let sequence = 0;
function scheduleCheck() {
  clearTimeout(timer);
  state.checked = false;
  timer = setTimeout(check, 600);
}

// The Workflow document alone (a file may hold several): what is validated, diffed and applied.
export function workflowText() {
  const { docs, index } = state.parsed;
  if (docs.length < 2) return state.text;
  const doc = docs[index];
  return `${state.text.slice(doc.range[0], doc.range[2]).trimEnd()}\n`;
}

async function check() {
  if (state.parsed.errors.length) { state.problems = []; showProblems(); return; }
  const mine = (sequence += 1);
  parts.status.textContent = "Validating…";
  let answer;
  try { answer = await api.validate(workflowText()); } catch (error) { answer = { ok: false, status: 0, body: { message: error.message } }; }
  if (mine !== sequence) return;
  const before = JSON.stringify(state.problems);
  state.problems = answer.ok ? answer.body.problems || [] : [{ path: "", source: "server",
    message: `could not validate (${answer.status}): ${answer.body.message || ""}` }];
  state.checked = answer.ok;
  // The same problems as before (most answers while typing, every "valid" after a valid one): nothing on the graph
  // or the forms changes, so they are not drawn again, and the element under a person's pointer or keyboard focus
  // stays the one they are using. Other answers redraw both, to mark the steps and fields they name.
  if (JSON.stringify(state.problems) === before) {
    showProblems();
    showStatus();
  } else render(document.activeElement === parts.yaml ? "yaml" : "check");
}

// ---- the page --------------------------------------------------------------------------------------------------

function keys(event) {
  const mod = event.ctrlKey || event.metaKey;
  if (mod && event.key.toLowerCase() === "z") { event.preventDefault(); if (event.shiftKey) redo(); else undo(); }
  else if (mod && event.key.toLowerCase() === "y") { event.preventDefault(); redo(); }
}

function palette() {
  const add = (label, template, attrs) => h("button", { type: "button", class: "add", ...attrs,
    onclick: () => addStep(template) }, label);
  const { actions = [], stepTypes = [], kinds = [] } = state.catalog;
  const code = actions.filter((a) => a.name.startsWith("code."));
  const plainActions = actions.filter((a) => !a.name.startsWith("code."));
  const known = new Set(["action", "stepType", "code", "approval", "wait", "workflow"]);
  return h("nav", { id: "editor-palette", "aria-label": "add a step" },
    h("h2", {}, "Add a step"),
    h("h3", {}, "Actions"), plainActions.map((a) => add(a.name, { stem: a.name.split(".").pop(), action: a.name },
      { "data-add": a.name, title: a.description || a.title || a.name })),
    code.length ? [h("h3", {}, "Code"), code.map((a) => add(a.name, { stem: a.name.replace(".", "_"), action: a.name },
      { "data-add": a.name }))] : null,
    stepTypes.length ? [h("h3", {}, "Step types"), stepTypes.map((t) => {
      const action = `${t.kind === "StepType" ? "steptype" : "clustersteptype"}/${t.name}`;
      return add(action, { stem: t.name, action }, { "data-add": action });
    })] : null,
    h("h3", {}, "Control"),
    add("approval", { stem: "approve", approval: {} }, { "data-add": "approval" }),
    add("wait", { stem: "wait", wait: { duration: "10m" } }, { "data-add": "wait" }),
    kinds.includes("workflow") || !kinds.length ? add("workflow (subflow)", { stem: "subflow", workflow: { name: "" } },
      { "data-add": "workflow" }) : null,
    kinds.filter((k) => !known.has(k)).map((k) => add(k, { stem: k, [k]: {} }, { "data-add": k })),
    h("h3", {}, "Workflow"),
    h("button", { type: "button", id: "editor-settings", onclick: () => { state.selected = null; render(null); } },
      "Name, triggers, params"));
}

async function load() {
  const [catalog, opened] = await Promise.all([api.catalog(), opening()]);
  if (catalog.ok) state.catalog = catalog.body;
  else parts.banner.append(h("p", { class: "result refused" }, `The catalogue could not be read (${catalog.status}): ${catalog.body.message || ""}`));
  state.base = opened.text;
  const draft = JSON.parse(localStorage.getItem(draftKey()) || "null");
  let text = opened.text;
  if (draft && draft.text !== opened.text) {
    text = draft.text;
    parts.banner.append(h("p", { class: "banner", id: "editor-draft" }, "Your draft from this browser was restored",
      draft.base !== opened.text && state.origin === "live" ? " (the live Workflow has changed since you started it)" : "",
      ". ", h("button", { type: "button", id: "editor-discard", onclick: () => {
        localStorage.removeItem(draftKey()); location.reload(); } }, "Discard the draft")));
  }
  state.parsed = parse(text);
  state.text = text;
  state.workflow = workflowOf(state.parsed);
  fill(main, h("div", { class: "editor-head" }, h("h1", {}, opened.title), parts.tools), parts.banner,
    h("div", { class: "editor" }, palette(), parts.graph, parts.form,
      h("div", { class: "editor-text" }, parts.yaml, parts.status, parts.problems)));
  toolbar(parts.tools, { state, api, workflowText, undo, redo, setBase: (text) => { state.base = text; setText(state.text, null); } });
  parts.yaml.addEventListener("input", () => change(parts.yaml.value, "yaml"));
  document.addEventListener("keydown", keys, true);
  parts.yaml.value = state.text;
  render(null);
  scheduleCheck();
  document.body.dataset.editorReady = "true";
}

async function opening() {
  const name = document.body.dataset.subject;
  if (name) {
    const answer = await api.workflow(name);
    if (!answer.ok) throw new Error(`Workflow ${name}: ${answer.body.message || answer.status}`);
    state.live = answer.body;
    state.origin = "live";
    return { text: answer.body.yaml, title: `Edit ${name}` };
  }
  const example = query.get("example");
  if (example) {
    const answer = await api.examples();
    const found = answer.ok && answer.body.find((e) => e.name === example);
    if (!found) throw new Error(`no example ${example}`);
    state.origin = "example";
    return { text: found.yaml, title: `New workflow from ${example}` };
  }
  return { text: EMPTY, title: "New workflow" };
}

load().catch((error) => fill(main, h("p", { class: "result refused" }, `Could not open the editor: ${error.message}`)));
