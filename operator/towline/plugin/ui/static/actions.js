// The web view's actions beyond approvals: the start form, a run's operations (cancel, suspend, resume, retry
// with its options, resubmit) and Events, the workflow page, the namespace switcher and the all-namespaces runs. Loaded before
// app.js and drawn with its helpers (h, fill, link, write, live, badge, facts); every text is textContent.
"use strict";

const ACTION_LABELS = { cancel: "Cancel", stop: "Stop (no finally steps)", suspend: "Suspend", resume: "Resume",
  retry: "Retry from the failed step", resubmit: "Resubmit with the same params" };

// A write's answer: done (with a link to a run it created) or the server's refusal in its own words.
async function showAnswer(result, response) {
  let body = {};
  try { body = await response.json(); } catch (error) { body = { message: response.statusText }; }
  if (response.ok) {
    result.className = "result done";
    // A new run (retry, resubmit, the form) is linked; the run this page shows is not.
    fill(result, body.message || "done", body.run && body.run !== SUBJECT ? [" ", runLink(body.run)] : null);
  } else {
    result.className = "result refused";
    result.textContent = `refused (${response.status}): ${body.message || response.statusText}`;
  }
  return { ok: response.ok, body };
}

// The run's operations that apply to it now (the server says which), each a POST with the page's CSRF token.
function runActions(bar, run) {
  const offered = (run.actions || []).join(",");
  if (bar.dataset.offered === offered) return;
  bar.dataset.offered = offered;
  const result = bar.querySelector(".result") || h("div", { class: "result", role: "status", id: "action-result" });
  const retry = (run.actions || []).includes("retry") ? retryOptions(run) : null;
  fill(bar, h("div", { class: "decide" }, (run.actions || []).map((action) => h("button", {
    type: "button", class: `run-action action-${action}`, "data-action": action,
    onclick: async () => {
      result.className = "result";
      result.textContent = "sending…";
      if (retry) retry.clearErrors();
      const answer = await showAnswer(result, await write(`/api/runs/${encodeURIComponent(run.name)}/${action}`,
        action === "retry" && retry ? retry.body() : {}));
      if (action === "retry" && retry && !answer.ok && answer.body.fields) retry.showErrors(answer.body.fields);
    } }, ACTION_LABELS[action] || action))), retry ? retry.box : null, result);
}

// A retry's options, as `kubectl towline retry --workflow-changed -p NAME=VALUE` has them: rerun the failed
// steps under the Workflow as it is now, and params to change (an empty field keeps the run's value). The
// fields are the Workflow's start form, loaded when the options are opened; the server checks the rest.
function retryOptions(run) {
  const changed = h("input", { type: "checkbox", id: "retry-workflow-changed" });
  const controls = new Map();
  const errors = new Map();
  const rows = h("tbody");
  const box = h("details", { id: "retry-options", ontoggle: async () => {
    if (!box.open || box.dataset.loaded) return;
    box.dataset.loaded = "1";
    const form = await getJson(`/api/workflows/${encodeURIComponent(run.workflow)}/form`);
    fill(rows, form.fields.map((field) => {
      const was = (run.params || {})[field.name];
      const shown = { ...field, control: field.control === "checkbox" ? "text" : field.control,
        hasDefault: was !== undefined, defaultText: typeof was === "string" ? was : JSON.stringify(was) };
      controls.set(field.name, paramControl(shown, "retry-param"));
      errors.set(field.name, h("span", { class: "field-error", "data-error-for": field.name }));
      return h("tr", { "data-field": field.name }, h("th", {}, h("label", { for: `retry-param-${field.name}` },
        field.name)), h("td", {}, field.type), h("td", {}, controls.get(field.name), " ", errors.get(field.name)));
    }));
    box.dataset.ready = "1";
  } }, h("summary", {}, "Retry options (--workflow-changed, -p)"),
  h("p", {}, h("label", {}, changed, " rerun the failed steps under the Workflow as it is now (fix it in git, ",
    "then retry)")),
  h("table", { class: "params", id: "retry-params" }, h("thead", {}, h("tr", {},
    ["Param", "Type", "New value (empty: the run's)"].map((t) => h("th", {}, t)))), rows));
  const body = () => {
    const params = {};
    for (const [name, control] of controls) if (control.value !== "") params[name] = control.value;
    return { workflowChanged: changed.checked, params };
  };
  const clearErrors = () => { for (const span of errors.values()) span.textContent = ""; };
  const showErrors = (fields) => {
    for (const [name, message] of Object.entries(fields)) if (errors.has(name)) errors.get(name).textContent = message;
  };
  return { box, body, clearErrors, showErrors };
}

// The run's Events as the API server keeps them (the operator's and Kubernetes'), live.
function runEvents(name) {
  const rows = h("tbody");
  const events = new Map();
  const redraw = () => fill(rows, [...events.values()].sort((a, b) => (a.last || a.first || "")
    .localeCompare(b.last || b.first || "")).map((e) => h("tr", { "data-reason": e.reason || "" },
    h("td", {}, e.type || ""), h("td", {}, e.reason || ""), h("td", { title: e.last || e.first || "" },
      age(e.last || e.first)), h("td", {}, e.count > 1 ? `×${e.count}` : ""), h("td", {}, e.from || ""),
    h("td", {}, e.message || ""))));
  const note = h("p", { class: "muted", id: "events-note" });
  live(`/events/runs/${encodeURIComponent(name)}/events`, {
    // Events are core/v1 objects: a person may read runs without them (RBAC). Say so here, not as a page error.
    problem: ({ status, message }) => { note.textContent = `You may not list Events here (${status}): ${message}`; },
    snapshot: (items) => { events.clear(); for (const e of items) events.set(e.uid, e); redraw(); },
    change: ({ type, event }) => { if (type === "DELETED") events.delete(event.uid); else events.set(event.uid, event);
      redraw(); },
  });
  return [h("h2", {}, "Events"), note, h("table", { id: "events" }, h("thead", {}, h("tr", {},
    ["Type", "Reason", "Age", "Count", "From", "Message"].map((t) => h("th", {}, t)))), rows)];
}

// ---- start a run -------------------------------------------------------------------------------------------

function paramControl(field, prefix = "param") {
  const attrs = { name: field.name, id: `${prefix}-${field.name}`, "data-param": field.name };
  if (field.control === "checkbox") return h("input", { ...attrs, type: "checkbox", checked: field.default === true });
  if (field.control === "json") {
    return h("textarea", { ...attrs, rows: 3, placeholder: field.hasDefault ? field.defaultText : "JSON" });
  }
  return h("input", { ...attrs, type: field.control === "number" ? "text" : "text",
    inputmode: field.control === "number" ? "decimal" : null,
    placeholder: field.hasDefault ? field.defaultText : "" });
}

async function startPage() {
  const form = await getJson(`/api/workflows/${encodeURIComponent(SUBJECT)}/form`);
  const result = h("div", { class: "result", role: "status", id: "start-result" });
  const errors = new Map(form.fields.map((field) => [field.name, h("span", { class: "field-error",
    "data-error-for": field.name })]));
  const controls = new Map(form.fields.map((field) => [field.name, paramControl(field)]));
  const rows = form.fields.map((field) => h("tr", { "data-field": field.name },
    h("th", {}, h("label", { for: `param-${field.name}` }, field.name)),
    h("td", {}, field.type, field.required ? h("strong", {}, " required") : ""),
    h("td", {}, controls.get(field.name), " ", errors.get(field.name)),
    h("td", { class: "muted" }, field.description || "", field.hasDefault ? ` (default ${field.defaultText})` : "")));
  async function submit(event) {
    event.preventDefault();
    const params = {};
    for (const field of form.fields) {
      const control = controls.get(field.name);
      params[field.name] = field.control === "checkbox" ? control.checked : control.value;
    }
    for (const span of errors.values()) span.textContent = "";
    result.className = "result";
    result.textContent = "checking…";
    const answer = await showAnswer(result, await write(`/api/workflows/${encodeURIComponent(SUBJECT)}/runs`,
      { params }));
    if (!answer.ok && answer.body.fields) {
      for (const [name, message] of Object.entries(answer.body.fields)) {
        if (errors.has(name)) errors.get(name).textContent = message;
      }
    }
  }
  fill(main, h("h1", {}, `Start a run of ${form.workflow}`),
    h("p", { class: "muted" }, "Checked as the operator checks a run's params before anything is created; the run ",
      "is created as you, and the API server records who asked."),
    h("form", { id: "start-form", onsubmit: submit },
      form.fields.length ? h("table", { class: "params" }, h("thead", {}, h("tr", {},
        ["Param", "Type", "Value", ""].map((t) => h("th", {}, t)))), h("tbody", {}, rows))
        : h("p", { class: "muted" }, "This workflow declares no params."),
      h("button", { type: "submit", id: "start-run", class: "approve" }, "Start run")),
    result);
}

// ---- a workflow -------------------------------------------------------------------------------------------

function triggerRow(t) {
  let detail = t.detail;
  // Its URL when the view knows the webhook ingress's public origin (ui.webhookUrl), else its path there.
  if (t.type === "webhook") detail = h("span", {}, `webhook (${t.scheme}) POST `, h("code", {}, t.url || t.path),
    t.url ? null : " at the webhook ingress");
  if (t.type === "cloudEvent" && t.url) detail = h("span", {}, `${t.detail}: `, h("code", {}, t.url));
  if (t.type === "schedule") {
    detail = `${t.cron} (${t.timeZone}, ${t.concurrencyPolicy}); next ${t.nextScheduleTime || "none"}, ` +
      `last ${t.lastScheduleTime || "never"}`;
  }
  return h("tr", { "data-trigger": t.name }, h("td", {}, t.name), h("td", {}, t.type), h("td", {}, detail));
}

async function workflowShowPage() {
  const w = await getJson(`/api/workflows/${encodeURIComponent(SUBJECT)}`);
  const graph = h("div", { id: "graph" });
  fill(main, h("h1", {}, `Workflow ${w.name} `, badge(w.ready.status)),
    h("p", {}, h("a", { class: "button", id: "start-link", href: link(`/workflows/${encodeURIComponent(w.name)}/start`) },
      "Start a run…"), " ", h("a", { class: "button", id: "editor-link", href: link(`/editor/${encodeURIComponent(w.name)}`) },
      "Open in the editor")),
    facts([["Ready", w.readyText], ["Suspended", w.suspend ? "yes: no new runs start" : ""],
      ["Next schedule", w.nextScheduleTime], ["Runs", h("a", { href: link("/runs", { workflow: w.name }) },
        "live list")]]),
    w.validationErrors.length ? [h("h2", {}, "Validation errors"), asJson(w.validationErrors)] : null,
    h("h2", {}, "Steps"), graph,
    h("h2", {}, "Params"), w.params.length ? h("table", { id: "params" }, h("thead", {}, h("tr", {},
      ["Param", "Type", "Default", "Description"].map((t) => h("th", {}, t)))), h("tbody", {}, w.params.map((p) =>
      h("tr", { "data-param": p.name }, h("td", {}, p.name), h("td", {}, p.type),
        h("td", {}, p.hasDefault ? JSON.stringify(p.default) : "(required)"), h("td", {}, p.description))))) :
      h("p", { class: "muted" }, "none"),
    h("h2", {}, "Triggers"), h("table", { id: "triggers" }, h("tbody", {}, w.triggers.map(triggerRow))),
    h("h2", {}, "Definition"), h("pre", { id: "definition" }, w.yaml),
    h("h2", {}, "Runs"), runsTable(w.runs));
  drawGraph(graph, w.graph, null, () => {});
}

// ---- namespaces -------------------------------------------------------------------------------------------

async function namespaceSwitcher() {
  const spot = document.querySelector("header .who");
  if (!spot) return;
  let answer;
  try { answer = await getJson("/api/namespaces"); } catch (error) { return; }
  const select = h("select", { id: "namespace", "aria-label": "namespace", onchange: (event) => {
    location.assign(`/ns/${encodeURIComponent(event.target.value)}/runs`);
  } }, answer.namespaces.map((name) => h("option", { value: name, selected: name === answer.current }, name)));
  spot.after(h("span", { class: "switcher" }, select, " ", h("a", { href: "/all/runs", id: "all-namespaces" },
    "all namespaces"), answer.note ? h("span", { class: "muted", title: answer.note }, " (only yours)") : null));
}

async function allRunsPage() {
  const answer = await getJson("/api/all/runs");
  fill(main, h("h1", {}, "Runs in every namespace you may list"),
    answer.refused.map((r) => h("p", { class: "muted", "data-refused": r.namespace },
      `${r.namespace}: you may not list its runs (${r.message})`)),
    h("table", { id: "runs" }, h("thead", {}, h("tr", {}, ["Namespace", "Run", "Workflow", "Phase",
      "Requested by", "Age"].map((t) => h("th", {}, t)))), h("tbody", {}, answer.runs.map((run) => h("tr",
      { "data-run": run.name, "data-namespace": run.namespace }, h("td", {}, run.namespace),
      h("td", {}, h("a", { href: `/ns/${encodeURIComponent(run.namespace)}/runs/${encodeURIComponent(run.name)}` },
        run.name)), h("td", {}, run.workflow || ""), h("td", {}, badge(run.phase)),
      h("td", {}, run.requestedBy || ""), h("td", { title: run.created }, age(run.created)))))));
}
