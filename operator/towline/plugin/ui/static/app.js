// The web view's pages: plain DOM code, no framework, no build step. Every text is set with
// textContent (never innerHTML), so nothing an object holds can become markup. Live pages read
// server-sent events the local server feeds from API watches; nothing here polls.
"use strict";

const SUBJECT = document.body.dataset.subject;
// "" for `kubectl towline ui`'s one namespace, "/ns/<namespace>" when the address named one (the in-cluster view).
const BASE = document.body.dataset.base || "";
const main = document.getElementById("main");
const RUN_PHASES = ["Pending", "Running", "Waiting", "AwaitingApproval", "RetryScheduled", "Succeeded", "Failed",
  "Cancelled"];

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// replaceChildren for lists that may hold null/false placeholders (which the DOM would print as text).
function fill(node, ...children) {
  node.replaceChildren(...children.flat(Infinity).filter((c) => c !== undefined && c !== null && c !== false));
}

function s(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function link(path, params) {
  const url = new URL(BASE + path, location.origin);
  for (const [key, value] of Object.entries(params || {})) if (value) url.searchParams.set(key, value);
  return url.pathname + url.search;
}

// A stream the API server refused (say, RBAC) ends with `problem`: show it, and do not reconnect.
function live(path, handlers) {
  const source = new EventSource(link(path));
  const all = { problem: ({ status, message }) => {
    source.close();
    main.prepend(h("p", { class: "result refused" }, `The API server refused (${status}): ${message}`));
  }, ...handlers };
  for (const [event, handle] of Object.entries(all)) {
    source.addEventListener(event, (message) => handle(JSON.parse(message.data)));
  }
  return source;
}

// Every write carries the page's CSRF token; the server refuses a write without it.
const csrfToken = () => document.querySelector('meta[name="towline-csrf"]').content;

function write(path, body, method = "POST") {
  return fetch(link(path), {
    method, headers: { "Content-Type": "application/json", "X-Towline-CSRF": csrfToken() },
    body: JSON.stringify(body === undefined ? {} : body),
  });
}

// The in-cluster view signs out on the server (the session is forgotten there), then shows the signed-out page.
function signOutButton() {
  const path = document.body.dataset.signout;
  if (!path) return;
  const button = h("button", { type: "button", id: "sign-out", onclick: async () => {
    const response = await fetch(path, { method: "POST", headers: { "X-Towline-CSRF": csrfToken() } });
    location.assign(response.ok ? `${path}/done` : location.href);
  } }, "Sign out");
  document.querySelector("header").append(button);
}

async function getJson(path) {
  const response = await fetch(link(path));
  const body = await response.json();
  if (!response.ok) throw new Error(body.message || response.statusText);
  return body;
}

function age(timestamp) {
  if (!timestamp) return "";
  const seconds = Math.max(0, (Date.now() - Date.parse(timestamp)) / 1000);
  if (seconds < 120) return `${Math.round(seconds)}s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)}m`;
  if (seconds < 172800) return `${Math.round(seconds / 3600)}h`;
  return `${Math.round(seconds / 86400)}d`;
}

function duration(start, end) {
  if (!start) return "";
  const seconds = ((end ? Date.parse(end) : Date.now()) - Date.parse(start)) / 1000;
  return seconds < 120 ? `${seconds.toFixed(1)}s` : `${Math.round(seconds / 60)}m`;
}

const badge = (phase) => h("span", { class: `phase phase-${phase}` }, phase);
const runLink = (name) => h("a", { href: link(`/runs/${encodeURIComponent(name)}`) }, name);
const workflowLink = (name) => h("a", { href: link(`/workflows/${encodeURIComponent(name)}`) }, name);

// Coalesce bursts of events into one render per frame: a page with a thousand runs stays smooth.
function scheduler(render) {
  let queued = false;
  return () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; render(); });
  };
}

// ---- runs ----------------------------------------------------------------------------------------------------

const SINCE = { "": 0, "1h": 3600, "24h": 86400, "7d": 604800 };

function runsPage() {
  const query = new URLSearchParams(location.search);
  const filters = { workflow: query.get("workflow") || "", phase: query.get("phase") || "",
    requester: query.get("requester") || "", since: query.get("since") || "" };
  const runs = new Map();
  const rows = h("tbody");
  const count = h("span", { class: "muted" });
  const field = (name, control) => h("label", {}, name, control);
  const input = (key) => h("input", { name: key, value: filters[key], oninput: (e) => update(key, e.target.value) });
  const select = (key, options) => {
    const control = h("select", { name: key, onchange: (e) => update(key, e.target.value) },
      options.map(([value, text]) => h("option", { value, selected: value === filters[key] }, text)));
    return control;
  };
  function update(key, value) {
    filters[key] = value;
    const url = new URL(link("/runs", filters), location.origin);
    history.replaceState(null, "", url.pathname + url.search);
    redraw();
  }
  function visible(run) {
    if (filters.workflow && run.workflow !== filters.workflow) return false;
    if (filters.phase && run.phase !== filters.phase) return false;
    if (filters.requester && run.requestedBy !== filters.requester) return false;
    const since = SINCE[filters.since] || 0;
    return !since || Date.now() - Date.parse(run.created) <= since * 1000;
  }
  const redraw = scheduler(() => {
    const shown = [...runs.values()].filter(visible)
      .sort((a, b) => (b.created || "").localeCompare(a.created || "") || b.name.localeCompare(a.name));
    fill(rows, ...shown.map((run) => h("tr", { "data-run": run.name, "data-phase": run.phase },
      h("td", {}, runLink(run.name)), h("td", {}, workflowLink(run.workflow || "")), h("td", {}, badge(run.phase)),
      h("td", {}, run.currentStep || ""), h("td", {}, run.requestedBy || ""), h("td", {}, run.trigger),
      h("td", { title: run.created }, age(run.created)), h("td", {}, duration(run.startedAt, run.finishedAt)))));
    count.textContent = `${shown.length} of ${runs.size} runs`;
  });
  fill(main,
    h("h1", {}, "Runs ", count),
    h("form", { class: "filters", onsubmit: (e) => e.preventDefault() },
      field("Workflow", input("workflow")),
      field("Phase", select("phase", [["", "any"], ...RUN_PHASES.map((p) => [p, p])])),
      field("Requested by", input("requester")),
      field("Created", select("since", [["", "any time"], ["1h", "last hour"], ["24h", "last day"],
        ["7d", "last week"]]))),
    h("table", { id: "runs" }, h("thead", {}, h("tr", {}, ["Run", "Workflow", "Phase", "Step", "Requested by",
      "Trigger", "Age", "Duration"].map((t) => h("th", {}, t)))), rows));
  live("/events/runs", {
    snapshot: (items) => { runs.clear(); for (const run of items) runs.set(run.name, run); redraw(); },
    change: ({ type, run }) => { if (type === "DELETED") runs.delete(run.name); else runs.set(run.name, run); redraw(); },
  });
}

// ---- one run ---------------------------------------------------------------------------------------------------

const NODE = { width: 190, height: 46 };

// Top to bottom reads best; a wide fan-out (twenty steps side by side) reads better left to right.
function layoutGraph(steps, available) {
  const tall = layoutIn("TB", steps);
  const { width, height } = tall.graph();
  return width > available && width > 1.6 * height ? layoutIn("LR", steps) : tall;
}

function layoutIn(rankdir, steps) {
  const graph = new dagre.graphlib.Graph();
  graph.setGraph({ rankdir, nodesep: 22, ranksep: rankdir === "TB" ? 42 : 60, marginx: 14, marginy: 14 });
  graph.setDefaultEdgeLabel(() => ({}));
  for (const step of steps) graph.setNode(step.id, { ...NODE });
  const ids = new Set(steps.map((step) => step.id));
  for (const step of steps) for (const need of step.needs) if (ids.has(need)) graph.setEdge(need, step.id);
  // A compensation hangs below the step whose failure ran it, on a dashed edge.
  for (const step of steps) {
    for (const failed of step.compensates) if (ids.has(failed)) graph.setEdge(failed, step.id, { failure: true });
  }
  dagre.layout(graph);
  return graph;
}

function drawGraph(container, steps, selected, onSelect) {
  const key = JSON.stringify(steps.map((step) => [step.id, step.needs, step.compensates]));
  if (container.dataset.layout !== key) {
    const graph = layoutGraph(steps, container.clientWidth || 800);
    const { width, height } = graph.graph();
    const root = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
    for (const edge of graph.edges()) {
      const { points, failure } = graph.edge(edge);
      root.append(s("path", { class: failure ? "edge failure" : "edge", "marker-end": "url(#arrow)",
        d: points.map((p, i) => `${i ? "L" : "M"}${p.x},${p.y}`).join(" ") }));
    }
    root.prepend(s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
      markerWidth: 7, markerHeight: 7, orient: "auto" }, s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#90a4ae" }))));
    for (const step of steps) {
      const box = graph.node(step.id);
      const x = box.x - NODE.width / 2;
      const y = box.y - NODE.height / 2;
      const node = s("g", { class: "node", "data-step": step.id, transform: `translate(${x},${y})` },
        s("title", {}, step.id),
        s("rect", { width: NODE.width, height: NODE.height }),
        s("text", { x: 9, y: 18 }, step.id.length > 26 ? `${step.id.slice(0, 25)}…` : step.id),
        s("text", { x: 9, y: 35, class: "sub" }, ""));
      node.addEventListener("click", () => onSelect(step.id));
      root.append(node);
    }
    fill(container, root);
    container.dataset.layout = key;
    const chosen = root.querySelector(`g.node[data-step="${CSS.escape(selected || "")}"]`);
    if (chosen) chosen.scrollIntoView({ block: "nearest", inline: "nearest" });
  }
  for (const step of steps) {
    const node = container.querySelector(`g.node[data-step="${CSS.escape(step.id)}"]`);
    const label = step.loop ? loopLabel(step.loop)
      : `${step.label} · ${step.phase}${step.attempt > 1 ? ` (attempt ${step.attempt})` : ""}`;
    node.setAttribute("data-phase", step.phase);
    node.classList.toggle("selected", step.id === selected);
    node.setAttribute("data-kind", step.kind);
    node.setAttribute("data-section", step.section);
    node.classList.toggle("finally", step.section === "finally");
    node.classList.toggle("compensation", step.section === "compensations");
    node.querySelector("rect").setAttribute("fill", PHASE_FILL[step.phase] || "#ffffff");
    node.querySelector("text.sub").textContent = label.length > 30 ? `${label.slice(0, 29)}…` : label;
  }
}

// A loop is one node: how many of its instances succeeded, failed and run (the step panel lists them).
function loopLabel(loop) {
  const parts = [`${loop.succeeded}/${loop.total} ok`];
  if (loop.failed) parts.push(`${loop.failed} failed`);
  if (loop.running) parts.push(`${loop.running} running`);
  return parts.join(" · ");
}

function instancesTable(step) {
  if (!step.loop) return null;
  const rows = step.instances.map((instance) => h("tr", { "data-instance": instance.id },
    h("td", {}, instance.id), h("td", {}, badge(instance.phase)), h("td", {}, instance.attempt || ""),
    h("td", {}, instance.errorClass || ""),
    h("td", {}, instance.decision ? `${instance.decision} by ${instance.decidedBy}` : ""),
    h("td", {}, waitingForDecision(instance) ? decisionControls(instance.approvalName) : instance.message || "")));
  return [h("h2", {}, `Instances (${step.loop.text})`), h("table", { class: "instances" }, h("thead", {},
    h("tr", {}, ["Instance", "Phase", "Attempt", "Error class", "Decision", ""].map((t) => h("th", {}, t)))),
  h("tbody", {}, rows))];
}

const PHASE_FILL = { Pending: "#eeeeee", Running: "#90caf9", Retrying: "#ffcc80", Succeeded: "#a5d6a7",
  Failed: "#ef9a9a", Skipped: "#f5f5f5", Cancelled: "#bcaaa4" };

function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.filter(([, value]) => value !== undefined && value !== null && value !== "")
    .map(([name, value]) => [h("dt", {}, name), h("dd", {}, value)]));
}

const asJson = (value) => h("pre", {}, JSON.stringify(value, null, 2));

function decisionControls(approvalName, onDone) {
  const reason = h("input", { placeholder: "reason (optional)", "aria-label": "reason" });
  const result = h("div", { class: "result", role: "status" });
  const send = (decision) => async () => {
    result.className = "result";
    result.textContent = "sending…";
    const response = await write(`/api/approvals/${encodeURIComponent(approvalName)}`,
      { decision, reason: reason.value });
    const body = await response.json();
    if (response.ok) {
      result.className = "result done";
      result.textContent = `${decision.toLowerCase()} by ${body.decidedBy}`;
      if (onDone) onDone();
    } else {
      result.className = "result refused";
      result.textContent = `refused by the API server (${response.status}): ${body.message}`;
    }
  };
  return h("div", { class: "decide-box", "data-approval": approvalName },
    h("div", { class: "decide" }, reason,
      h("button", { class: "approve", type: "button", onclick: send("Approved") }, "Approve"),
      h("button", { class: "reject", type: "button", onclick: send("Rejected") }, "Reject")),
    result);
}

function waitingForDecision(step) {
  return step.waitingForDecision;
}

function stepPanel(panel, run, step, logs) {
  if (!step) { fill(panel, h("p", { class: "muted" }, "Select a step in the graph.")); return; }
  const attempts = step.history.map((record) => h("tr", {},
    h("td", {}, record.attempt), h("td", {}, record.jobName || ""), h("td", {}, duration(record.startedAt,
      record.finishedAt)), h("td", {}, record.errorClass || ""), h("td", {}, record.message || "")));
  fill(panel,
    h("h2", {}, `Step ${step.id} `, badge(step.phase)),
    facts([["Kind", step.kind], ["Action", step.action], ["Section", step.section === "steps" ? "" : step.section],
      ["Gate for", step.gateFor], ["Compensates", step.compensates.join(", ")],
      ["Needs", step.needs.join(", ")], ["When", step.when], ["Reason", step.reason],
      ["Attempt", step.attempt || ""], ["Job", step.jobName], ["Started", step.startedAt],
      ["Finished", step.finishedAt], ["Duration", duration(step.startedAt, step.finishedAt)],
      ["Retry at", step.retryAt], ["Error class", step.errorClass], ["Message", step.message],
      ["Credentials", step.credentials.join(", ")], ["Approval", step.approvalName],
      ["Child run", step.childRun ? runLink(step.childRun) : ""],
      ["Decision", step.decision ? `${step.decision} by ${step.decidedBy}` : ""]]),
    waitingForDecision(step) ? decisionControls(step.approvalName) : null,
    instancesTable(step),
    h("h2", {}, "Inputs (as the run recorded the step)"), asJson(step.inputs ?? {}),
    h("h2", {}, "Output"), asJson(step.output ?? null),
    attempts.length ? [h("h2", {}, "Earlier attempts"), h("table", {}, h("thead", {}, h("tr", {},
      ["#", "Job", "Took", "Error class", "Message"].map((t) => h("th", {}, t)))), h("tbody", {}, attempts))] : null,
    step.gate ? null : [h("h2", {}, "Logs"), logs]);
}

function followLogs(run, stepId, pre) {
  fill(pre);
  const add = (text) => { pre.append(`${text}\n`); pre.scrollTop = pre.scrollHeight; };
  const source = live(`/events/runs/${encodeURIComponent(run)}/logs/${encodeURIComponent(stepId)}`, {
    pod: ({ pod, attempt }) => add(`==> attempt ${attempt} (pod ${pod}) <==`),
    line: add,
    waiting: ({ message }) => { fill(pre, `${message}\n`); },
    problem: ({ message }) => add(`[${message}]`),
    end: () => source.close(),
  });
  return source;
}

function runPage() {
  const name = SUBJECT;
  const head = h("div");
  const banner = h("div");
  const graph = h("div", { id: "graph" });
  const panel = h("div", { id: "step" });
  let run = null;
  let selected = new URLSearchParams(location.search).get("step");
  let logSource = null;
  const logs = h("pre", { class: "logs", id: "logs" });
  const bar = h("div", { id: "run-actions", class: "decide-box" });
  fill(main, head, bar, banner, h("div", { class: "run-layout" }, graph, panel), runEvents(name));
  const select = (id) => {
    selected = id;
    history.replaceState(null, "", link(`/runs/${encodeURIComponent(name)}`, { step: id }));
    if (logSource) logSource.close();
    logSource = null;
    render(true);
  };
  function render(stepChanged) {
    if (!run) { fill(head, h("h1", {}, `Run ${name}`), h("p", {}, "No such run (or not yet visible).")); return; }
    fill(head, h("h1", {}, `Run ${run.name} `, badge(run.phase)),
      facts([["Workflow", workflowLink(run.workflow || "")], ["Requested by", run.requestedBy],
        ["Trigger", run.trigger], ["Started", run.startedAt], ["Finished", run.finishedAt],
        ["Duration", duration(run.startedAt, run.finishedAt)], ["Message", run.message],
        ["Params", Object.keys(run.params).length ? JSON.stringify(run.params) : ""],
        ["Outputs", run.outputs ? JSON.stringify(run.outputs) : ""]]));
    runActions(bar, run);
    const gates = run.steps.filter(waitingForDecision);
    fill(banner, ...gates.map((gate) => h("div", { class: "banner" },
      `Step ${gate.id} waits for a decision on approval ${gate.approvalName}. `,
      h("a", { href: link("/approvals") }, "Approvals"))));
    drawGraph(graph, run.steps, selected, select);
    const step = run.steps.find((candidate) => candidate.id === selected);
    const panelBusy = panel.contains(document.activeElement) && document.activeElement.tagName === "INPUT";
    if (stepChanged || !panelBusy) stepPanel(panel, run, step, logs);
    if (step && !step.gate && !logSource && step.phase !== "Pending" && step.phase !== "Skipped") {
      logSource = followLogs(name, step.id, logs);
    }
  }
  live(`/events/runs/${encodeURIComponent(name)}`, {
    snapshot: (detail) => { run = detail; render(false); },
    change: (detail) => { if (detail) { run = detail; render(false); } },
  });
}

// ---- approvals -------------------------------------------------------------------------------------------------

// A message that binds the run's values was partly written by whoever started the run (a param, a webhook's
// body): it is never the card's headline, and it says where it came from.
function approvalHeadline(approval) {
  if (!approval.messageFromInputs) return [h("strong", {}, approval.message || approval.name)];
  return [h("strong", {}, `Approve step ${approval.step} of run ${approval.run}?`),
    h("blockquote", { class: "from-inputs" },
      h("span", { class: "muted" }, "Quotes the run's inputs (not written by the Workflow's author):"), " ",
      h("q", {}, approval.message))];
}

function approvalsPage() {
  const approvals = new Map();
  const open = h("div", { id: "open" });
  const decided = h("tbody");
  fill(main, h("h1", {}, "Approvals"), h("h2", {}, "Waiting"), open, h("h2", {}, "Decided"),
    h("table", {}, h("thead", {}, h("tr", {}, ["Approval", "Run", "Step", "Decision", "By", "Reason", "Phase"]
      .map((t) => h("th", {}, t)))), decided));
  const redraw = scheduler(() => {
    // A notification's link (/approvals/<name>) shows that approval only.
    const all = [...approvals.values()].filter((a) => !SUBJECT || a.name === SUBJECT)
      .sort((a, b) => (b.created || "").localeCompare(a.created || ""));
    const waiting = all.filter((a) => !a.decision && a.phase === "Pending");
    for (const card of [...open.children]) {
      if (!waiting.some((a) => a.name === card.dataset.approval)) card.remove();
    }
    for (const approval of waiting) {
      if (open.querySelector(`[data-approval="${CSS.escape(approval.name)}"]`)) continue;
      const who = [...(approval.approvers.users || []), ...(approval.approvers.groups || []).map((g) => `group ${g}`)];
      open.append(h("div", { class: "approval", "data-approval": approval.name },
        ...approvalHeadline(approval),
        facts([["Approval", approval.name], ["Run", runLink(approval.run)], ["Step", approval.step],
          ["Workflow", approval.workflow], ["Requested by", approval.requestedBy], ["Approvers", who.join(", ")],
          ["Four eyes", approval.fourEyes ? "yes: the requester may not approve" : "no"],
          ["Expires", approval.expiresAt]]),
        decisionControls(approval.name)));
    }
    if (!open.children.length) open.append(h("p", { class: "muted", "data-approval": "" }, "Nothing waits for a decision."));
    fill(decided, ...all.filter((a) => a.decision || a.phase !== "Pending").map((a) => h("tr",
      { "data-approval": a.name }, h("td", {}, a.name), h("td", {}, runLink(a.run)), h("td", {}, a.step),
      h("td", {}, a.decision ? badge(a.decision) : ""), h("td", {}, a.decidedBy || ""), h("td", {}, a.reason || ""),
      h("td", {}, badge(a.phase)))));
  });
  live("/events/approvals", {
    snapshot: (items) => { approvals.clear(); for (const a of items) approvals.set(a.name, a); redraw(); },
    change: ({ type, approval }) => {
      if (type === "DELETED") approvals.delete(approval.name); else approvals.set(approval.name, approval);
      redraw();
    },
  });
}

// ---- workflows -------------------------------------------------------------------------------------------------

function runsTable(runs) {
  return h("table", {}, h("thead", {}, h("tr", {}, ["Run", "Phase", "Requested by", "Trigger", "Age"]
    .map((t) => h("th", {}, t)))), h("tbody", {}, runs.map((run) => h("tr", { "data-run": run.name },
    h("td", {}, runLink(run.name)), h("td", {}, badge(run.phase)), h("td", {}, run.requestedBy || ""),
    h("td", {}, run.trigger), h("td", {}, age(run.created))))));
}

// The list names each trigger and its kind; the workflow page shows each in full (a webhook's path, a schedule).
const triggerText = (triggers) => triggers.map((t) => (t.type === "manual" ? t.name : `${t.name} (${t.type})`))
  .join(", ");

async function workflowsPage() {
  const items = await getJson("/api/workflows");
  fill(main, h("h1", {}, "Workflows"), h("table", { id: "workflows" }, h("thead", {}, h("tr", {},
    ["Workflow", "Ready", "Triggers", "Next schedule", "Last run", "Steps"].map((t) => h("th", {}, t)))),
  h("tbody", {}, items.map((w) => h("tr", { "data-workflow": w.name },
    h("td", {}, workflowLink(w.name), w.suspend ? " (suspended)" : ""),
    h("td", { title: w.ready.message || "" }, badge(w.ready.status), " ", w.ready.reason || ""),
    h("td", {}, triggerText(w.triggers)), h("td", {}, w.nextScheduleTime || ""),
    h("td", {}, w.lastRun ? [runLink(w.lastRun.name), " ", badge(w.lastRun.phase)] : ""),
    h("td", {}, w.steps))))));
}

const PAGES = { runs: runsPage, run: runPage, approvals: approvalsPage, workflows: workflowsPage,
  workflow: workflowShowPage, history: historyPage, archived: archivedRunPage, start: startPage,
  allruns: allRunsPage, editor: () => undefined /* editor.js, a module, draws the editor */,
  deadletters: deadLettersPage };

signOutButton();
namespaceSwitcher();
deadLettersNav().catch(() => undefined);  // only a link: the page itself says what the API server refuses
Promise.resolve(PAGES[document.body.dataset.page]()).catch((error) => {
  fill(main, h("p", { class: "result refused" }, `Could not load this page: ${error.message}`));
});
