// The editor's toolbar: hand the YAML to git (download, copy, diff against the live object or a file of the
// author's checkout) and, only when the server says the person may (`canApply`), apply it as them. A Workflow
// that Argo CD or Flux manages is never applied from here: the toolbar says so and offers the YAML.
import { h, fill } from "./editordom.js";
import { workflowOf } from "./editoryaml.js";

const MANAGERS = { argocd: "Argo CD", flux: "Flux" };

function download(text, name) {
  const url = URL.createObjectURL(new Blob([text], { type: "application/yaml" }));
  const anchor = h("a", { href: url, download: `${name}.yaml`, hidden: true });
  document.body.append(anchor);
  anchor.click();
  anchor.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

function problemsText(problems) {
  return (problems || []).map((p) => (p.path ? `${p.path}: ${p.message}` : p.message)).join("\n");
}

export function toolbar(container, { state, api, workflowText, undo, redo, setBase }) {
  const out = h("div", { id: "editor-output", role: "status" });
  const name = () => (workflowOf(state.parsed) || {}).metadata?.name || "workflow";
  const show = (cls, ...text) => fill(out, h("div", { class: cls }, ...text));
  const diffShown = (answer) => {
    if (!answer.ok) { show("result refused", `diff refused (${answer.status}): ${answer.body.message || ""}`); return; }
    fill(out, answer.body.same ? h("p", { class: "result done", id: "editor-same" }, "No difference.")
      : h("pre", { class: "diff", id: "editor-diff" }, answer.body.diff));
  };
  const upload = h("input", { type: "file", accept: ".yaml,.yml,text/yaml", hidden: true, id: "editor-upload",
    onchange: async () => {
      const file = upload.files[0];
      if (!file) return;
      diffShown(await api.diff(workflowText(), "text", await file.text()));
      upload.value = "";
    } });
  const live = state.live;
  let applyPart;
  if (live && live.canApply) {
    applyPart = h("button", { type: "button", id: "editor-apply", class: "approve", onclick: async () => {
      show("result", "applying…");
      const answer = await api.apply(workflowText(), live.generation);
      if (answer.ok && answer.body.applied) {
        live.resourceVersion = answer.body.resourceVersion;
        live.generation = answer.body.generation;
        show("result done", `applied as you (resourceVersion ${answer.body.resourceVersion})`);
        setBase(state.text);
      } else {
        show("result refused", `refused (${answer.status}): `, answer.body.message || problemsText(answer.body.problems));
      }
    } }, "Apply");
  } else if (live && live.managedBy) {
    applyPart = h("span", { class: "muted", id: "editor-no-apply" },
      `managed by ${MANAGERS[live.managedBy] || live.managedBy}: commit the YAML to git`);
  } else if (live) {
    applyPart = h("span", { class: "muted", id: "editor-no-apply" },
      "applying from the editor is off here (ui.editor.allowApply) or not yours to do: commit the YAML to git");
  } else {
    applyPart = h("span", { class: "muted", id: "editor-no-apply" }, "a new Workflow: commit the YAML to git");
  }
  const copy = async () => {
    try { await navigator.clipboard.writeText(state.text); show("result done", "copied"); }
    catch (error) { show("result refused", `could not copy: ${error.message}`); }
  };
  fill(container,
    h("button", { type: "button", id: "editor-undo", title: "Ctrl+Z", onclick: undo }, "Undo"),
    h("button", { type: "button", id: "editor-redo", title: "Ctrl+Shift+Z", onclick: redo }, "Redo"),
    h("button", { type: "button", id: "editor-download", onclick: () => download(state.text, name()) }, "Download"),
    h("button", { type: "button", id: "editor-copy", onclick: copy }, "Copy"),
    live ? h("button", { type: "button", id: "editor-diff-live", onclick: async () =>
      diffShown(await api.diff(workflowText(), "live")) }, "Diff against live") : null,
    h("button", { type: "button", id: "editor-diff-file", onclick: () => upload.click() }, "Diff against a file…"),
    upload, applyPart, examplesMenu(api), out);
}

// Start over: an empty canvas or one of the shipped examples (each its own address, so its own draft).
function examplesMenu(api) {
  const menu = h("select", { id: "editor-open", "aria-label": "open an example", onchange: (event) => {
    const value = event.target.value;
    if (value === "") return;
    location.assign(api.link(value === "-" ? "/editor" : `/editor?example=${encodeURIComponent(value)}`));
  } }, h("option", { value: "" }, "Open…"), h("option", { value: "-" }, "an empty canvas"));
  api.examples().then((answer) => {
    if (answer.ok) for (const example of answer.body) menu.append(h("option", { value: example.name }, `example: ${example.name}`));
  });
  return menu;
}
