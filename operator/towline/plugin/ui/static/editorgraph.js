// The editor's canvas: the Workflow's steps as boxes and their `needs` as arrows, in SVG.
//
// dagre places the steps the first time they are seen; after that a box stays where the person dragged it.
// Positions are view state: they live here and in the undo history, never in the YAML. Dragging from a box's
// lower handle to another box draws an edge (the second step then needs the first); an edge or a box is
// selected with a click or the keyboard and removed with Delete. Everything is reachable without a mouse:
// Tab/arrow keys move between steps, Enter opens one, Delete removes it, Alt+arrows move it.
import { s, fill } from "./editordom.js";

export const BOX = { width: 190, height: 50 };
const MARGIN = 20;

// Positions for every step: those already placed keep their place; the rest come from a dagre layout.
export function place(steps, positions) {
  const missing = steps.filter((step) => !positions.has(step.key));
  if (!missing.length || typeof dagre === "undefined") return positions;
  const graph = new dagre.graphlib.Graph();
  graph.setGraph({ rankdir: "TB", nodesep: 24, ranksep: 46, marginx: MARGIN, marginy: MARGIN });
  graph.setDefaultEdgeLabel(() => ({}));
  for (const step of steps) graph.setNode(step.key, { ...BOX });
  const keys = new Map(steps.map((step) => [step.id, step.key]));
  for (const step of steps) {
    for (const need of step.needs) if (keys.has(need)) graph.setEdge(keys.get(need), step.key);
  }
  dagre.layout(graph);
  const next = new Map(positions);
  const placedBefore = steps.length - missing.length;
  let lowest = 0;
  for (const [, at] of positions) lowest = Math.max(lowest, at.y + BOX.height);
  for (const step of missing) {
    const box = graph.node(step.key);
    const x = box.x - BOX.width / 2;
    // A step added to a drawn graph goes below what is there, at its layer's x.
    const y = placedBefore ? lowest + 30 + (box.y - BOX.height / 2) % 40 : box.y - BOX.height / 2;
    next.set(step.key, { x: Math.max(MARGIN, x), y: Math.max(MARGIN, y) });
  }
  return next;
}

function edgePath(from, to) {
  const x1 = from.x + BOX.width / 2;
  const y1 = from.y + BOX.height;
  const x2 = to.x + BOX.width / 2;
  const y2 = to.y;
  const bend = Math.max(30, Math.abs(y2 - y1) / 2);
  return `M${x1},${y1} C${x1},${y1 + bend} ${x2},${y2 - bend} ${x2},${y2}`;
}

// A drag in progress holds the drawing (an answer of the validation may arrive meanwhile): drawn when it ends.
let dragging = false;
let held = null;

// Draw `steps` ({key, id, label, needs, section, problem}) into `container`; `on` holds the callbacks.
export function draw(container, steps, view, on) {
  if (dragging) { held = () => draw(container, steps, view, on); return; }
  const { positions, selected, selectedEdge } = view;
  let width = 600;
  let height = 300;
  for (const [, at] of positions) {
    width = Math.max(width, at.x + BOX.width + MARGIN);
    height = Math.max(height, at.y + BOX.height + MARGIN);
  }
  const root = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, id: "editor-svg",
    "aria-label": "the workflow's steps" });
  root.append(s("defs", {}, s("marker", { id: "editor-arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: "auto" }, s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#78909c" }))));
  const byId = new Map(steps.map((step) => [step.id, step]));
  for (const step of steps) {
    for (const need of step.needs) {
      const from = byId.get(need);
      if (!from) continue;
      const key = `${need}->${step.id}`;
      const edge = s("path", { class: `edge${key === selectedEdge ? " selected" : ""}`, tabindex: 0,
        "data-edge": key, d: edgePath(positions.get(from.key), positions.get(step.key)),
        "marker-end": "url(#editor-arrow)" });
      edge.append(s("title", {}, `${step.id} needs ${need}`));
      edge.addEventListener("click", () => on.selectEdge(key));
      edge.addEventListener("keydown", (event) => {
        if (event.key === "Delete" || event.key === "Backspace") { event.preventDefault(); on.deleteEdge(need, step.id); }
      });
      root.append(edge);
    }
  }
  for (const step of steps) root.append(node(root, step, positions.get(step.key), step.key === selected, steps, on));
  fill(container, root);
  const focused = view.focusNow && view.focus && root.querySelector(`g.node[data-key="${CSS.escape(view.focus)}"]`);
  if (focused) focused.focus();
}

function node(root, step, at, isSelected, steps, on) {
  const classes = ["node", step.section, isSelected ? "selected" : "", step.problem ? "problem" : ""];
  const group = s("g", { class: classes.filter(Boolean).join(" "), tabindex: 0, role: "button",
    "data-step": step.id, "data-key": step.key, "aria-label": `step ${step.id}: ${step.label}`,
    transform: `translate(${at.x},${at.y})` });
  const label = (text, n) => (text.length > n ? `${text.slice(0, n - 1)}…` : text);
  group.append(s("title", {}, `${step.id} (${step.label})`),
    s("rect", { width: BOX.width, height: BOX.height, rx: 6 }),
    s("text", { x: 10, y: 20 }, label(step.id || "(no id)", 26)),
    s("text", { x: 10, y: 38, class: "sub" }, label(step.label, 30)));
  const handle = s("circle", { class: "handle", cx: BOX.width / 2, cy: BOX.height, r: 6 });
  handle.append(s("title", {}, `drag to a step that needs ${step.id}`));
  group.append(handle);
  drag(root, group, handle, step, at, steps, on);
  group.addEventListener("keydown", (event) => keys(event, step, at, steps, on));
  return group;
}

function release() {
  dragging = false;
  const redraw = held;
  held = null;
  if (redraw) redraw();
}

function pointIn(root, event) {
  const box = root.getBoundingClientRect();
  return { x: event.clientX - box.left, y: event.clientY - box.top };
}

function stepAt(root, point, steps, positions) {
  return steps.find((step) => {
    const at = positions(step.key);
    return point.x >= at.x && point.x <= at.x + BOX.width && point.y >= at.y && point.y <= at.y + BOX.height;
  });
}

// Dragging a box moves it; dragging its handle draws an edge to the box it is dropped on.
function drag(root, group, handle, step, at, steps, on) {
  handle.addEventListener("pointerdown", (event) => {
    event.stopPropagation();
    event.preventDefault();
    dragging = true;
    const start = { x: at.x + BOX.width / 2, y: at.y + BOX.height };
    const line = s("path", { class: "edge drawing", d: `M${start.x},${start.y}` });
    root.append(line);
    const move = (e) => { const p = pointIn(root, e); line.setAttribute("d", `M${start.x},${start.y} L${p.x},${p.y}`); };
    const up = (e) => {
      window.removeEventListener("pointermove", move);
      window.removeEventListener("pointerup", up);
      line.remove();
      const target = stepAt(root, pointIn(root, e), steps, (key) => on.position(key));
      release();
      if (target && target.key !== step.key) on.connect(step.id, target.id);
    };
    window.addEventListener("pointermove", move);
    window.addEventListener("pointerup", up);
  });
  group.addEventListener("pointerdown", (event) => {
    if (event.button !== 0) return;
    const origin = pointIn(root, event);
    dragging = true;
    let moved = false;
    const move = (e) => {
      const p = pointIn(root, e);
      const dx = p.x - origin.x;
      const dy = p.y - origin.y;
      if (!moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      moved = true;
      group.setAttribute("transform", `translate(${Math.max(0, at.x + dx)},${Math.max(0, at.y + dy)})`);
    };
    const up = (e) => {
      window.removeEventListener("pointermove", move);
      window.removeEventListener("pointerup", up);
      const p = pointIn(root, e);
      release();
      if (moved) on.move(step.key, { x: Math.max(0, at.x + p.x - origin.x), y: Math.max(0, at.y + p.y - origin.y) });
      else on.select(step.key);
    };
    window.addEventListener("pointermove", move);
    window.addEventListener("pointerup", up);
  });
}

// Arrows move the focus to the nearest step that way; Alt+arrows move the step; Enter opens; Delete removes.
function keys(event, step, at, steps, on) {
  const arrows = { ArrowUp: [0, -1], ArrowDown: [0, 1], ArrowLeft: [-1, 0], ArrowRight: [1, 0] };
  if (event.key === "Enter" || event.key === " ") { event.preventDefault(); on.select(step.key); return; }
  if (event.key === "Delete" || event.key === "Backspace") { event.preventDefault(); on.deleteStep(step.key); return; }
  const arrow = arrows[event.key];
  if (!arrow) return;
  event.preventDefault();
  if (event.altKey) { on.move(step.key, { x: Math.max(0, at.x + arrow[0] * 20), y: Math.max(0, at.y + arrow[1] * 20) }); return; }
  let best = null;
  let bestScore = Infinity;
  for (const other of steps) {
    if (other.key === step.key) continue;
    const there = on.position(other.key);
    const dx = there.x - at.x;
    const dy = there.y - at.y;
    const along = dx * arrow[0] + dy * arrow[1];
    if (along <= 0) continue;
    const score = along + 2 * Math.abs(dx * arrow[1] + dy * arrow[0]);
    if (score < bestScore) { bestScore = score; best = other; }
  }
  if (best) on.focus(best.key);
}
