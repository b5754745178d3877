// The editor's YAML: the text is the source of truth; every edit is a splice of that text.
//
// An edit re-prints only the smallest piece it touches (one item of spec.steps/finally/compensations/triggers/params,
// or one key of metadata or spec) with the yaml library, and leaves every other byte as it was: comments,
// alignment, quoting and line breaks of untouched parts are kept exactly. Inside the piece an edit touches, the
// library keeps comments, key order and scalar styles, but not the column of a trailing comment nor a long
// string's line folding. Nothing is ever written that the author did not set (no defaults); a new key goes in the
// CRD schema's order.
import * as YAML from "./vendor/yaml.js";

export { YAML };

const PRINT = { lineWidth: 0, flowCollectionPadding: false };
const ITEM_LISTS = new Set(["steps", "finally", "compensations", "triggers", "params"]);

// The Workflow models' field order (schemas/workflow.schema.json): where a new key goes.
export const ORDER = {
  top: ["apiVersion", "kind", "metadata", "spec"],
  metadata: ["name", "namespace", "labels", "annotations"],
  spec: ["params", "triggers", "steps", "finally", "compensations", "policy", "suspend", "subflow",
    "approvalNotifications", "outputs"],
  step: ["id", "action", "with", "approval", "wait", "workflow", "needs", "when", "runIfSkipped", "forEach", "retry",
    "timeoutSeconds", "resources", "podMetadata", "onFailure", "credentials", "egress", "allowHosts",
    "allowPrivateNetworks"],
  trigger: ["name", "schedule", "webhook", "cloudEvent", "params"],
  param: ["name", "type", "default", "description", "required"],
  approval: ["message", "approvers", "fourEyes", "expiresAfter"],
  verify: ["scheme", "secretRef", "publicKeyRef", "toleranceSeconds", "allowUnsigned", "signatureHeader",
    "timestampHeader"],
  secretRef: ["name", "key"],
  schedule: ["cron", "timeZone", "concurrencyPolicy", "startingDeadlineSeconds"],
  webhook: ["verify", "maxBodyBytes", "rateLimitPerMinute", "contentTypes", "deliveryId", "data", "filter",
    "maxDataBytes"],
  cloudEvent: ["verify", "types", "sources", "filter", "data", "maxBodyBytes", "rateLimitPerMinute", "maxDataBytes"],
};

// The order for a map at `path` (a list of keys and indexes); `withOrder(action)` answers the with: order.
function orderFor(path, withOrder) {
  const keys = path.filter((k) => typeof k === "string");
  const last = keys[keys.length - 1];
  if (path.length === 0) return ORDER.top;
  if (path.length === 1) return ORDER[last] || [];
  if (path.length === 3 && path[0] === "spec" && typeof path[2] === "number") {
    return { triggers: ORDER.trigger, params: ORDER.param }[path[1]] || ORDER.step;
  }
  if (last === "with" && withOrder) return withOrder(path) || [];
  return ORDER[last] || [];
}

// A parse of the whole text: every document (a file may hold several), the Workflow's index, and problems.
export function parse(text) {
  const docs = YAML.parseAllDocuments(text, { prettyErrors: true });
  const list = Array.isArray(docs) ? docs : [docs];
  const errors = list.flatMap((doc) => doc.errors || []).map((error) => ({
    path: "", source: "yaml", message: error.message.split("\n")[0],
  }));
  let index = list.findIndex((doc) => doc.contents && doc.get && doc.get("kind") === "Workflow");
  if (index < 0) index = 0;
  return { docs: list, index, errors };
}

// The Workflow document's plain value (null when the text does not parse to a mapping).
export function workflowOf(parsed, which) {
  const doc = parsed.docs[which ?? parsed.index];
  if (!doc || parsed.errors.length) return null;
  const value = doc.toJS({ maxAliasCount: 50 });
  return value && typeof value === "object" && !Array.isArray(value) ? value : null;
}

const lineStart = (text, at) => text.lastIndexOf("\n", at - 1) + 1;
function lineEnd(text, at) {
  const end = text.indexOf("\n", at);
  return end < 0 ? text.length : end + 1;
}

// The last offset of a node's own text (its value, not the blank lines and comments after it).
function nodeEnd(text, node) {
  let end = node.range[1];
  while (end > node.range[0] && /\s/.test(text[end - 1])) end -= 1;
  return end;
}

// Collections made by the editor read as the project writes them: a small map or list of scalars on one line.
function styleNew(node) {
  if (!YAML.isCollection(node)) return;
  const items = node.items.map((item) => (YAML.isPair(item) ? item.value : item));
  for (const item of items) styleNew(item);
  if (items.length && items.length <= 4 && items.every((item) => YAML.isScalar(item))
      && items.every((item) => String(item.value).length < 40)) node.flow = true;
}

function render(kind, key, node, indent) {
  const doc = new YAML.Document();
  const clone = node.clone();
  clone.commentBefore = undefined;
  clone.spaceBefore = false;
  if (kind === "item") doc.contents = new YAML.YAMLSeq();
  else doc.contents = new YAML.YAMLMap();
  doc.contents.items.push(kind === "item" ? clone : doc.createPair(key, clone));
  if (kind === "pair") doc.contents.items[0].value = clone;
  const printed = doc.toString(PRINT);
  const pad = " ".repeat(indent);
  return printed.split("\n").map((line) => (line ? pad + line : line)).join("\n");
}

// Set (value undefined: delete) what `path` names inside node, creating maps on the way, new keys in order.
function setInNode(doc, node, path, value, base, withOrder) {
  const [key, ...rest] = path;
  if (value !== undefined && node.flow && (!node.items.length || node.items.length >= 4 || typeof value === "object")) {
    node.flow = false;
  }
  if (YAML.isSeq(node)) {
    if (!rest.length) {
      const top = base.length === 2 && base[0] === "spec" && ITEM_LISTS.has(base[1]);
      if (value === undefined) node.items.splice(key, 1);
      else if (key >= node.items.length) node.items.push(fresh(doc, value, top));
      else node.items[key] = fresh(doc, value, top);
      return;
    }
    return setInNode(doc, node.items[key], rest, value, [...base, key], withOrder);
  }
  let pair = node.items.find((p) => YAML.isScalar(p.key) ? p.key.value === key : p.key === key);
  if (!rest.length) {
    if (value === undefined) {
      if (pair) node.items.splice(node.items.indexOf(pair), 1);
      return;
    }
    if (pair) {
      const old = pair.value;
      // A scalar keeps its quoting and its comment; anything else is new.
      if (YAML.isScalar(old) && (value === null || typeof value !== "object")) old.value = value;
      else pair.value = fresh(doc, value);
      // A one-line map the editor made goes back to lines once a value grows long (a message typed into it).
      if (node.flow && String(value).length >= 40) node.flow = false;
      return;
    }
    insertOrdered(node, doc.createPair(key, fresh(doc, value)), orderFor(base, withOrder));
    return;
  }
  let made = false;
  if (!pair) {
    if (value === undefined) return;
    const child = typeof rest[0] === "number" ? new YAML.YAMLSeq() : new YAML.YAMLMap();
    pair = doc.createPair(key, child);
    insertOrdered(node, pair, orderFor(base, withOrder));
    made = true;
  }
  setInNode(doc, pair.value, rest, value, [...base, key], withOrder);
  if (made) styleNew(pair.value);
  if (value === undefined && YAML.isCollection(pair.value) && !pair.value.items.length) {
    node.items.splice(node.items.indexOf(pair), 1);
  }
}

// A new value; `top` (a whole step, trigger or param) stays in block style, what is inside may be one line.
function fresh(doc, value, top = false) {
  const node = doc.createNode(value);
  if (top && YAML.isCollection(node)) {
    for (const item of node.items) styleNew(YAML.isPair(item) ? item.value : item);
  } else styleNew(node);
  return node;
}

function insertOrdered(map, pair, order) {
  const rank = (p) => { const i = order.indexOf(YAML.isScalar(p.key) ? p.key.value : p.key); return i < 0 ? 1e9 : i; };
  const mine = rank(pair);
  const at = map.items.findIndex((p) => rank(p) > mine);
  if (at < 0) map.items.push(pair); else map.items.splice(at, 0, pair);
}

const keyOf = (p) => (YAML.isScalar(p.key) ? p.key.value : p.key);

// The text with `path` (within the Workflow document) set to `value`, or removed when `value` is undefined.
export function setIn(text, path, value, withOrder) {
  const parsed = parse(text);
  if (parsed.errors.length) throw new Error("the YAML does not parse: fix it in the text first");
  const doc = parsed.docs[parsed.index];
  return spliceItem(text, doc, path, value, withOrder) ?? splicePair(text, doc, path, value, withOrder)
    ?? reprint(text, parsed, doc, path, value, withOrder);
}

// One item of a block list under spec: re-print the item alone.
function spliceItem(text, doc, path, value, withOrder) {
  if (path[0] !== "spec" || !ITEM_LISTS.has(path[1]) || typeof path[2] !== "number") return null;
  const seq = doc.getIn(["spec", path[1]], true);
  if (!YAML.isSeq(seq) || seq.flow || !seq.items.length) return null;
  const index = path[2];
  const first = seq.items[0];
  const indent = first.range[0] - lineStart(text, first.range[0]) - 2;
  if (!/^ *- $/.test(text.slice(lineStart(text, first.range[0]), first.range[0]))) return null;
  if (index === seq.items.length) {
    if (path.length !== 3 || value === undefined) return null;
    const last = seq.items[seq.items.length - 1];
    const at = lineEnd(text, nodeEnd(text, last));
    const printed = render("item", null, fresh(doc, value, true), indent);
    return text.slice(0, at) + (text[at - 1] === "\n" || !at ? "" : "\n") + printed + text.slice(at);
  }
  const item = seq.items[index];
  if (!item || !item.range) return null;
  const start = lineStart(text, item.range[0]);
  if (!/^ *- $/.test(text.slice(start, item.range[0]))) return null;
  const end = lineEnd(text, nodeEnd(text, item));
  if (path.length === 3 && value === undefined) return text.slice(0, start) + text.slice(end);
  const node = path.length === 3 ? fresh(doc, value, true) : item.clone();
  if (path.length > 3) setInNode(doc, node, path.slice(3), value, path.slice(0, 3), withOrder);
  return text.slice(0, start) + render("item", null, node, indent) + text.slice(end);
}

// One key of metadata, spec or the top: re-print that key alone (or add it in order, or remove it).
function splicePair(text, doc, path, value, withOrder) {
  if (path.length < 1 || path.length > 2 && path[0] !== "spec" && path[0] !== "metadata") return null;
  const parentPath = path.length === 1 ? [] : [path[0]];
  const parent = parentPath.length ? doc.getIn(parentPath, true) : doc.contents;
  if (!YAML.isMap(parent) || parent.flow || !parent.items.length) return null;
  const key = path[parentPath.length];
  const pair = parent.items.find((p) => keyOf(p) === key);
  const firstKey = parent.items[0].key;
  if (!firstKey || !firstKey.range) return null;
  const indent = firstKey.range[0] - lineStart(text, firstKey.range[0]);
  if (pair) {
    if (!pair.key.range || !pair.value || !pair.value.range) return null;
    const start = lineStart(text, pair.key.range[0]);
    if (text.slice(start, pair.key.range[0]).trim()) return null;
    const end = lineEnd(text, nodeEnd(text, pair.value));
    if (path.length === parentPath.length + 1 && value === undefined) return text.slice(0, start) + text.slice(end);
    let node;
    if (path.length === parentPath.length + 1) {
      node = YAML.isScalar(pair.value) && (value === null || typeof value !== "object") ? pair.value.clone()
        : fresh(doc, value);
      if (YAML.isScalar(node)) node.value = value;
    } else {
      node = pair.value.clone();
      setInNode(doc, node, path.slice(parentPath.length + 1), value, path.slice(0, parentPath.length + 1),
        withOrder);
    }
    return text.slice(0, start) + render("pair", pair.key.clone(), node, indent) + text.slice(end);
  }
  if (value === undefined) return text;
  const container = new YAML.YAMLMap();
  setInNode(doc, container, [key, ...path.slice(parentPath.length + 1)], value, parentPath, withOrder);
  const printed = render("pair", container.items[0].key, container.items[0].value, indent);
  const order = orderFor(parentPath, withOrder);
  const mine = order.indexOf(key);
  const next = parent.items.find((p) => order.indexOf(keyOf(p)) > mine && p.key && p.key.range);
  let at;
  if (next && mine >= 0) at = lineStart(text, next.key.range[0]);
  else {
    const last = parent.items[parent.items.length - 1];
    at = lineEnd(text, nodeEnd(text, last.value && last.value.range ? last.value : last.key));
  }
  return text.slice(0, at) + (at && text[at - 1] !== "\n" ? "\n" : "") + printed + text.slice(at);
}

// What no splice can reach (a flow-style spec, an empty document): the library re-prints the Workflow document.
function reprint(text, parsed, doc, path, value, withOrder) {
  if (!YAML.isMap(doc.contents)) doc.contents = new YAML.YAMLMap();
  setInNode(doc, doc.contents, path, value, [], withOrder);
  if (parsed.docs.length === 1) return doc.toString(PRINT);
  const [start, , end] = doc.range;
  return text.slice(0, start) + doc.toString(PRINT).replace(/^---\n/, "") + text.slice(end);
}

// Apply several edits in turn (each re-parses: offsets move).
export function setMany(text, edits, withOrder) {
  return edits.reduce((current, [path, value]) => setIn(current, path, value, withOrder), text);
}

// "spec.steps[2].with.url" <-> ["spec", "steps", 2, "with", "url"]
export function pathText(path) {
  return path.reduce((out, key) => (typeof key === "number" ? `${out}[${key}]` : out ? `${out}.${key}` : key), "");
}

export const EMPTY = "apiVersion: towline.dev/v1alpha1\nkind: Workflow\nmetadata:\n  name: my-workflow\nspec:\n" +
  "  steps: []\n";
