// The Dead letters page: the namespace's refused deliveries and runs that failed before their first step, read as
// you, each with the Replay button `kubectl towline deadletters replay ID` is (ui/deadletters.py shares its code).
// Drawn with app.js's helpers (h, fill, link, write, runLink; loaded after this file, run once both are); every text
// is textContent. The nav link appears only where the API server says you may read the letters.
"use strict";

const LETTER_WHAT = {
  delivery: (letter) => `${letter.workflow}/${letter.trigger}`,
  run: (letter) => `${letter.workflow}/${letter.trigger}${letter.archived ? " (archived)" : ""}`,
};

async function deadLettersNav() {
  const response = await fetch(link("/api/deadletters/access"));
  if (!response.ok || !(await response.json()).list) return;
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

async function deadLettersPage() {
  const response = await fetch(link("/api/deadletters"));
  const body = await response.json();
  if (!response.ok) {
    fill(main, h("h1", {}, "Dead letters"), h("p", { class: "result refused", id: "deadletters-refused" },
      `The API server refused (${response.status}): ${body.message || response.statusText}`));
    return;
  }
  const items = body.items || [];
  fill(main, h("h1", {}, "Dead letters"),
    h("p", { class: "muted" }, "Deliveries the ingress refused after their signature checked, and runs that failed ",
      "before their first step. Replay starts one new run as you, recorded as your replay."),
    items.length === 0 ? h("p", { class: "muted", id: "deadletters-empty" }, `No dead letters in ${body.namespace}.`)
      : h("table", { id: "deadletters" }, h("thead", {}, h("tr", {}, ["Kind", "ID", "Workflow/trigger", "Failed",
        "Reason", "Replayed", ""].map((t) => h("th", {}, t)))), h("tbody", {}, items.map(letterRow))));
}
