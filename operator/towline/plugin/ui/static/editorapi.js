// The editor's calls to its server (docs/web-view.md, "Editor"): JSON in and out, as the signed-in person. Every
// POST carries the page's CSRF token, as every other write of the web view does. Nothing here stores anything:
// the draft stays in this browser (editor.js) until the person validates, diffs or applies.
const BASE = document.body.dataset.base || "";
const csrf = () => document.querySelector('meta[name="towline-csrf"]').content;

async function answer(response) {
  let body;
  try { body = await response.json(); } catch { body = { message: `${response.status} ${response.statusText}` }; }
  return { ok: response.ok, status: response.status, body };
}

export async function get(path) {
  return answer(await fetch(BASE + path, { headers: { Accept: "application/json" } }));
}

export async function post(path, body) {
  return answer(await fetch(BASE + path, {
    method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", Accept: "application/json", "X-Towline-CSRF": csrf() },
  }));
}

export const catalog = () => get("/api/editor/catalog");
export const examples = () => get("/api/editor/examples");
export const workflow = (name) => get(`/api/editor/workflows/${encodeURIComponent(name)}`);
export const validate = (yaml) => post("/api/editor/validate", { yaml });
export const diff = (yaml, against, text) => post("/api/editor/diff", text === undefined ? { yaml, against }
  : { yaml, against, text });
export const apply = (yaml, generation) => post("/api/editor/apply", Number.isInteger(generation) ? { yaml, generation }
  : { yaml });
export const link = (path) => BASE + path;
