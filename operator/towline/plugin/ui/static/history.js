// The History pages: runs the archive kept (archive.towline.dev), read as you, drawn with the run page's own
// graph and step panel (app.js, loaded after this file: these functions run once both are loaded). Texts are set
// with textContent only, as everywhere in the view. The archive never changes a record: no stream, one fetch.
"use strict";

const HISTORY_FILTERS = ["workflow", "requester", "approver", "phase", "since", "until", "labelSelector", "limit"];

// Refusals say what is missing (a right, the archive itself); the local server words them (ui/history.py).
function archiveProblem(body, status) {
  return h("p", { class: "result refused", "data-problem": body.problem || "error" },
    body.message || `The archive answered ${status}.`);
}

async function archiveJson(path) {
  const response = await fetch(path);
  const body = await response.json();
  return { ok: response.ok, status: response.status, body };
}

// <input type=datetime-local> speaks the browser's local time without a zone; the URL and the archive speak RFC 3339.
function localInput(iso) {
  const when = iso ? new Date(iso) : null;
  if (!when || Number.isNaN(when.getTime())) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return `${when.getFullYear()}-${pad(when.getMonth() + 1)}-${pad(when.getDate())}T${pad(when.getHours())}:` +
    `${pad(when.getMinutes())}`;
}

function rfc3339(local) {
  const when = local ? new Date(local) : null;
  return when && !Number.isNaN(when.getTime()) ? when.toISOString().replace(".000Z", "Z") : "";
}

const archivedLink = (name) => h("a", { href: link(`/history/${encodeURIComponent(name)}`) }, name);

function historyPage() {
  const query = new URLSearchParams(location.search);
  const value = (key) => query.get(key) || "";
  const controls = {};
  const field = (label, key, control) => { controls[key] = control; return h("label", {}, label, control); };
  const text = (key, placeholder) => h("input", { name: key, value: value(key), placeholder });
  const when = (key) => h("input", { name: key, type: "datetime-local", value: localInput(value(key)) });
  const phases = h("select", { name: "phase" }, [["", "any"], ...RUN_PHASES.map((p) => [p, p])]
    .map(([v, t]) => h("option", { value: v, selected: v === value("phase") }, t)));
  const sizes = h("select", { name: "limit" }, ["20", "50", "100", "200", "500"]
    .map((n) => h("option", { value: n, selected: n === (value("limit") || "50") }, n)));
  const search = (event) => {
    event.preventDefault();
    const params = {};
    for (const key of HISTORY_FILTERS) {
      const raw = controls[key].value.trim();
      params[key] = key === "since" || key === "until" ? rfc3339(raw) : raw;
    }
    location.assign(link("/history", params));
  };
  const rows = h("tbody");
  const status = h("div", { id: "history-status" });
  const table = h("table", { id: "history" }, h("thead", {}, h("tr", {}, ["Run", "Workflow", "Phase",
    "Requested by", "Approved by", "Trigger", "Started", "Duration", "Record"].map((t) => h("th", {}, t)))), rows);
  const pager = h("p", { class: "pager" });
  fill(main,
    h("h1", {}, "History ", h("span", { class: "muted" }, "runs the archive kept")),
    h("form", { class: "filters", id: "history-filters", onsubmit: search },
      field("Workflow", "workflow", text("workflow")),
      field("Requested by", "requester", text("requester")),
      field("Approved by", "approver", text("approver")),
      field("Phase", "phase", phases),
      field("Started from (your time)", "since", when("since")),
      field("Started before", "until", when("until")),
      field("Label", "labelSelector", text("labelSelector", "key=value,key2=value2")),
      field("Per page", "limit", sizes),
      h("label", {}, "\u00a0", h("button", { type: "submit" }, "Search"))),
    status,
    table,
    pager);
  const asked = {};
  for (const key of [...HISTORY_FILTERS, "continue"]) asked[key] = value(key);
  return archiveJson(link("/api/history", asked)).then(({ ok, status: code, body }) => {
    if (!ok) { fill(status, archiveProblem(body, code)); table.remove(); return; }
    fill(rows, ...body.runs.map((run) => h("tr", { "data-run": run.name, "data-phase": run.phase },
      h("td", {}, archivedLink(run.name), run.deletedBeforeItEnded ? " (deleted before it ended)" : ""),
      h("td", {}, run.workflow || ""), h("td", {}, badge(run.phase)), h("td", {}, run.requestedBy || ""),
      h("td", {}, run.approvers.join(", ")), h("td", {}, run.trigger), h("td", { title: run.startedAt || "" },
        run.startedAt || ""), h("td", {}, run.finishedAt ? duration(run.startedAt, run.finishedAt) : ""),
      h("td", { title: run.chain.digest || "" }, run.chain.seq === null ? "" : `#${run.chain.seq}`))));
    if (!body.runs.length) fill(status, h("p", { class: "muted" }, "No archived runs match."));
    const first = { ...asked, continue: "" };
    fill(pager,
      asked.continue ? h("a", { href: link("/history", first), id: "first-page" }, "\u2190 first page") : null,
      asked.continue && body.continue ? " · " : null,
      body.continue ? h("a", { href: link("/history", { ...asked, continue: body.continue }), id: "next-page" },
        "next page \u2192") : null);
  });
}

function archivedApprovals(approvals) {
  if (!approvals.length) return h("p", { class: "muted" }, "The run asked for no approval.");
  return h("table", { id: "archived-approvals" }, h("thead", {}, h("tr", {}, ["Approval", "Step", "Decision",
    "Decided by", "When", "Reason", "Message", "Phase"].map((t) => h("th", {}, t)))),
  h("tbody", {}, approvals.map((a) => h("tr", { "data-approval": a.name },
    h("td", {}, a.name), h("td", {}, a.step || ""), h("td", {}, a.decision ? badge(a.decision) : ""),
    h("td", {}, a.decidedBy || ""), h("td", {}, a.decidedAt || ""), h("td", {}, a.reason || ""),
    // A message that binds the run's values was partly written by whoever started the run: quoted, and said so.
    h("td", {}, a.messageFromInputs ? h("blockquote", { class: "from-inputs" },
      h("span", { class: "muted" }, "Quotes the run's inputs (not written by the Workflow's author):"), " ",
      h("q", {}, a.message)) : a.message),
    h("td", {}, badge(a.phase))))));
}

function archivedLogs(name, stepId, pre, kept) {
  if (!kept.some((log) => log.step === stepId)) {
    fill(pre, "The archive holds no log of this step (it ran no pod, or none was written).");
    return;
  }
  fill(pre, "loading…");
  fetch(link(`/api/history/${encodeURIComponent(name)}/log`, { step: stepId })).then(async (response) => {
    const text = await response.text();
    if (response.ok) { fill(pre, text); return; }
    let message = text;
    try { message = JSON.parse(text).message; } catch (_) { /* the server's own text */ }
    fill(pre, `[${message}]`);
  });
}

async function archivedRunPage() {
  const name = SUBJECT;
  const { ok, status, body: run } = await archiveJson(`/api/history/${encodeURIComponent(name)}`);
  if (!ok) { fill(main, h("h1", {}, `Archived run ${name}`), archiveProblem(run, status)); return; }
  const graph = h("div", { id: "graph" });
  const panel = h("div", { id: "step" });
  const logs = h("pre", { class: "logs", id: "logs" });
  let selected = new URLSearchParams(location.search).get("step");
  fill(main,
    h("h1", {}, `Run ${run.name} `, badge(run.phase), " ", h("span", { class: "muted" }, "archived")),
    h("div", { class: "banner", id: "archived-banner" }, "As the archive kept it when the run ended: read-only. ",
      run.deletedBeforeItEnded ? "The run was deleted before it ended. " : "",
      h("a", { href: link("/history", { workflow: run.workflow }) }, `History of ${run.workflow}`)),
    facts([["Workflow", run.workflow], ["Requested by", run.requestedBy], ["Approved by", run.approvers.join(", ")],
      ["Trigger", run.trigger], ["Started", run.startedAt], ["Finished", run.finishedAt],
      ["Duration", run.finishedAt ? duration(run.startedAt, run.finishedAt) : ""], ["Message", run.message],
      ["Params", Object.keys(run.params).length ? JSON.stringify(run.params) : ""],
      ["Outputs", run.outputs ? JSON.stringify(run.outputs) : ""], ["UID", run.uid],
      ["Labels", Object.entries(run.labels).map(([k, v]) => `${k}=${v}`).join(", ")],
      ["Record", run.chain.seq === null ? "" : `#${run.chain.seq} in the namespace's chain, digest ${run.chain.digest}`]]),
    h("h2", {}, "Approvals"), archivedApprovals(run.approvals),
    h("h2", {}, "Steps"),
    run.steps.length ? h("div", { class: "run-layout" }, graph, panel)
      : h("p", { class: "muted" }, "The record holds no steps (the run ended before it started any)."));
  if (!run.steps.length) return;
  const select = (id) => {
    selected = id;
    history.replaceState(null, "", link(`/history/${encodeURIComponent(name)}`, { step: id }));
    render();
  };
  function render() {
    drawGraph(graph, run.steps, selected, select);
    const step = run.steps.find((candidate) => candidate.id === selected);
    stepPanel(panel, run, step, logs);
    // A record is not a live gate: a run deleted while it waited must not offer a decision here.
    for (const box of panel.querySelectorAll(".decide-box")) box.remove();
    if (step && !step.gate) archivedLogs(name, step.id, logs, run.logs);
  }
  render();
}
