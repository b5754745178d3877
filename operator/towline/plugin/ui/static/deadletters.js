// The Dead letters page: the namespace's refused deliveries and runs that failed before their first step, read as
// you, each with the Replay button `kubectl towline deadletters replay ID` is (ui/deadletters.py shares its code),
// and, for a person the API server says may read them, the events sink's letters of the operator's namespace, with
// Replay (one, or all) for one who may update them: the operator sends them again.
// Drawn with app.js's helpers (h, fill, link, write, runLink; loaded after this file, run once both are); every text
// is textContent. The nav link appears only where the API server says you may read some letters.
"use strict";

const LETTER_WHAT = {
  delivery: (letter) => `${letter.workflow}/${letter.trigger}`,
  run: (letter) => `${letter.workflow}/${letter.trigger}${letter.archived ? " (archived)" : ""}`,
};

// What the API server says you may do here ({list, events, replayEvents}), asked once per page.
let deadLettersAccessAnswer = null;
function deadLettersAccess() {
  deadLettersAccessAnswer ??= fetch(link("/api/deadletters/access")).then((response) => (response.ok
    ? response.json() : { list: false, events: false, replayEvents: false }));
  return deadLettersAccessAnswer;
}

async function deadLettersNav() {
  const access = await deadLettersAccess();
  if (!access.list && !access.events) return;
  document.querySelector("header nav").append(h("a", { href: link("/deadletters"), id: "nav-deadletters" },
    "Dead letters"));
}

function replayable(letter) {
  return !letter.replayRun && (letter.kind === "run" || letter.data !== null);
}

function letterRow(letter) {
  const result = h("span", { class: "result", role: "status", "data-result-for": letter.id });
  const button = replayable(letter) ? h("button", { type: "button", class: "replay", "data-replay": letter.id,
    onclick: async () => {
      button.disabled = true;
      result.className = "result";
      result.textContent = "sending…";
      const answer = await showAnswer(result, await write(`/api/deadletters/${encodeURIComponent(letter.id)}/replay`));
      button.disabled = answer.ok;
    } }, "Replay") : null;
  const replayed = letter.replayRun ? [runLink(letter.replayRun), ` by ${letter.replayedBy || "someone"}`] : "";
  return h("tr", { "data-letter": letter.id, "data-kind": letter.kind },
    h("td", {}, letter.kind), h("td", {}, letter.kind === "run" && !letter.archived ? runLink(letter.id) : letter.id),
    h("td", {}, LETTER_WHAT[letter.kind] ? LETTER_WHAT[letter.kind](letter) : ""), h("td", {}, letter.failedAt || ""),
    h("td", { class: "reason" }, letter.reason || ""), h("td", {}, replayed), h("td", {}, button, " ", result));
}

// One replay request of the events sink's letters (`path`), its answer shown in `result`.
async function replayEvents(button, result, path) {
  button.disabled = true;
  result.className = "result";
  result.textContent = "sending…";
  const answer = await showAnswer(result, await write(path));
  button.disabled = answer.ok;
}

function eventLetterRow(letter, replay) {
  const result = h("span", { class: "result", role: "status", "data-event-result-for": letter.id });
  const button = replay ? h("button", { type: "button", class: "replay", "data-replay-event": letter.id,
    onclick: () => replayEvents(button, result, `/api/eventletters/${encodeURIComponent(letter.id)}/replay`) },
  "Replay") : null;
  const event = letter.event || {};
  return h("tr", { "data-event-letter": letter.id }, h("td", {}, letter.id), h("td", {}, event.type || ""),
    h("td", {}, event.subject || ""), h("td", {}, letter.failedAt || ""), h("td", {}, String(letter.attempts)),
    h("td", { class: "reason" }, letter.error || ""), h("td", {}, button, " ", result));
}

// The events sink's letters, shown only where the API server says you may read them.
async function eventLettersSection(access) {
  const response = await fetch(link("/api/eventletters"));
  const body = await response.json();
  const title = h("h2", {}, "Events the sink could not deliver");
  if (!response.ok) {
    return h("section", { id: "eventletters" }, title, h("p", { class: "result refused" },
      `The API server refused (${response.status}): ${body.message || response.statusText}`));
  }
  const items = body.items || [];
  const result = h("span", { class: "result", role: "status", id: "replay-all-events-result" });
  const all = access.replayEvents ? h("button", { type: "button", id: "replay-all-events",
    onclick: () => replayEvents(all, result, "/api/eventletters/replay") }, "Replay all") : null;
  return h("section", { id: "eventletters" }, title,
    h("p", { class: "muted" }, `CloudEvents the operator's events sink could not deliver, kept in ${
      body.operatorNamespace}. Replay hands them to the operator, which sends each again with its own id.`),
    items.length === 0 ? h("p", { class: "muted", id: "eventletters-empty" }, "No undelivered events.")
      : [h("table", { id: "eventletters-table" }, h("thead", {}, h("tr", {}, ["ID", "Type", "Subject", "Failed",
        "Attempts", "Error", ""].map((t) => h("th", {}, t)))),
      h("tbody", {}, items.map((letter) => eventLetterRow(letter, access.replayEvents)))), all, " ", result]);
}

async function deadLettersPage() {
  const access = await deadLettersAccess();
  const response = await fetch(link("/api/deadletters"));
  const body = await response.json();
  const events = access.events ? await eventLettersSection(access) : null;
  if (!response.ok) {
    fill(main, h("h1", {}, "Dead letters"), h("p", { class: "result refused", id: "deadletters-refused" },
      `The API server refused (${response.status}): ${body.message || response.statusText}`), events);
    return;
  }
  const items = body.items || [];
  fill(main, h("h1", {}, "Dead letters"),
    h("p", { class: "muted" }, "Deliveries the ingress refused after their signature checked, and runs that failed ",
      "before their first step. Replay starts one new run as you, recorded as your replay."),
    items.length === 0 ? h("p", { class: "muted", id: "deadletters-empty" }, `No dead letters in ${body.namespace}.`)
      : h("table", { id: "deadletters" }, h("thead", {}, h("tr", {}, ["Kind", "ID", "Workflow/trigger", "Failed",
        "Reason", "Replayed", ""].map((t) => h("th", {}, t)))), h("tbody", {}, items.map(letterRow))), events);
}
