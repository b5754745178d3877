// The editor's forms, generated from JSON schemas: a built-in action's `with:` from its editor schema
// (towline.validation.editorschema, through the catalog), a StepType's from its `spec.inputs`. Types, required
// fields and enums shape the controls; a default is shown as the placeholder and never written unless typed.
// Each control carries `data-path` (the field path the API server names, `spec.steps[2].with.url`), so a
// problem the server reports is shown under its field.
import { h } from "./editordom.js";
import { YAML, pathText } from "./editoryaml.js";

const BINDING = /\$\{\{/;

// A schema with its `${{ }}` alternative and its $refs taken away: what the field's own value looks like.
export function plain(schema, root) {
  let current = schema || {};
  for (let guard = 0; guard < 8; guard += 1) {
    if (current.$ref) {
      const name = current.$ref.split("/").pop();
      const defs = (root && (root.definitions || root.$defs)) || {};
      const target = defs[name];
      if (!target || name === "binding") return {};
      current = { ...target, description: current.description || target.description,
        default: current.default ?? target.default };
      continue;
    }
    const choices = current.anyOf || current.oneOf;
    if (choices) {
      const real = choices.filter((c) => !(c.$ref && c.$ref.endsWith("/binding")) && c.type !== "null");
      if (!real.length) return { description: current.description };
      const chosen = real[0];
      current = { ...chosen, description: current.description || chosen.description,
        default: current.default ?? chosen.default };
      continue;
    }
    return current;
  }
  return current;
}

function problemsAt(ctx, path) {
  const found = ctx.problems.get(pathText(path)) || [];
  return found.map((p) => h("div", { class: "field-error", "data-problem": pathText(path) }, p.message));
}

function show(value) {
  if (value === undefined || value === null) return "";
  if (typeof value === "object") return YAML.stringify(value, { flowCollectionPadding: false, lineWidth: 0 }).trimEnd();
  return String(value);
}

// A text the person typed, read as the field's type; "" removes the key (nothing is written that nobody set).
function read(text, type) {
  if (text === "") return { value: undefined };
  if (BINDING.test(text)) return { value: text };
  if (type === "integer" || type === "number") {
    const n = Number(text);
    return Number.isFinite(n) && text.trim() !== "" ? { value: n } : { value: text };
  }
  if (type === "string" || type === undefined) return { value: text };
  try {
    return { value: YAML.parse(text) };
  } catch (error) {
    return { error: `not YAML: ${error.message.split("\n")[0]}` };
  }
}

let listCount = 0;

// One field: label, control, help and its problems. `options.datalist` offers values (bindings, Secret names).
export function field(ctx, path, schema, options = {}) {
  const info = schema || {};
  const name = options.label || String(path[path.length - 1]);
  const current = ctx.get(path);
  const placeholder = info.default === undefined ? options.placeholder || "" : show(info.default);
  const key = pathText(path);
  const note = h("div", { class: "field-note" });
  const commit = (text) => {
    const { value, error } = read(text, info.type);
    note.textContent = error || "";
    if (!error) ctx.set(path, value, key);
  };
  let control;
  if (info.enum || info.type === "boolean") {
    const choices = info.enum || [true, false];
    control = h("select", { onchange: (e) => commit(e.target.value) },
      h("option", { value: "" }, placeholder ? `(unset: ${placeholder})` : "(unset)"),
      choices.map((choice) => h("option", { value: String(choice), selected: show(current) === String(choice) },
        String(choice))));
  } else if (info.type === "object" || info.type === "array" || (!info.type && options.complex)) {
    control = h("textarea", { rows: Math.min(8, Math.max(2, show(current).split("\n").length)), placeholder,
      oninput: (e) => commit(e.target.value), spellcheck: "false" }, show(current));
  } else {
    const list = options.datalist && options.datalist.length ? `editor-list-${(listCount += 1)}` : undefined;
    control = h("input", { value: show(current), placeholder, list, spellcheck: "false",
      oninput: (e) => commit(e.target.value) });
    if (list) control = [control, h("datalist", { id: list }, options.datalist.map((v) => h("option", { value: v })))];
  }
  const controls = [control].flat();
  controls[0].setAttribute("data-path", key);
  controls[0].setAttribute("aria-label", name);
  return h("label", { class: "field", "data-field": key },
    h("span", { class: "field-name" }, name, options.required ? h("span", { class: "required" }, " *") : ""),
    ...controls, info.description ? h("span", { class: "field-help" }, info.description) : null, note,
    problemsAt(ctx, path));
}

// Every property of an object schema, in the schema's order, required ones first marked.
export function objectFields(ctx, path, schema, root, options = {}) {
  const object = plain(schema, root);
  const required = new Set(object.required || []);
  return Object.entries(object.properties || {}).map(([key, property]) => {
    const resolved = plain(property, root);
    const textual = !resolved.type || resolved.type === "string";
    return field(ctx, [...path, key], resolved, { required: required.has(key), complex: !resolved.type,
      datalist: textual ? options.bindings : undefined });
  });
}

// What a step's `${{ }}` may read: the params, the trigger's data, and the outputs of the steps it needs (and theirs).
export function bindingsFor(workflow, step) {
  const spec = (workflow && workflow.spec) || {};
  const params = (spec.params || []).map((p) => `\${{ params.${p.name} }}`);
  const steps = [...(spec.steps || [])];
  const byId = new Map(steps.map((s) => [s.id, s]));
  const upstream = new Set();
  const visit = (id) => {
    const found = byId.get(id);
    if (!found || upstream.has(id)) return;
    upstream.add(id);
    for (const need of found.needs || []) visit(need);
  };
  for (const need of (step && step.needs) || []) visit(need);
  const finallyStep = (spec.finally || []).includes(step);
  const outputs = [...(finallyStep ? steps.map((s) => s.id) : upstream)].map((id) => `\${{ steps.${id}.output }}`);
  return [...params, "${{ trigger.data }}", "${{ run.name }}", ...outputs];
}

const APPROVAL = { type: "object", properties: {
  message: { type: "string", description: "What the approver is asked; may bind ${{ }} values." },
  approvers: { type: "object", description: "users: [...] and groups: [...] who may decide (YAML)." },
  fourEyes: { type: "boolean", default: false, description: "The run's requester may not approve it." },
  expiresAfter: { type: "string", default: "24h", description: "e.g. 30m, 4h, 2d." } } };
const WAIT = { type: "object", properties: {
  duration: { type: "string", description: "How long to wait, e.g. 10m." },
  until: { type: "string", description: "An RFC 3339 time or a ${{ }} binding." } } };
const SUBFLOW = { type: "object", required: ["name"], properties: {
  name: { type: "string", description: "A Workflow of this namespace that allows subflow calls." },
  params: { type: "object", description: "Its params (YAML)." } } };

// A step's kind as the editor shows it, and the schema of what the kind configures.
export function stepKind(step, catalog) {
  if (step.approval !== undefined) return { kind: "approval", label: "approval" };
  if (step.wait !== undefined) return { kind: "wait", label: "wait" };
  if (step.workflow !== undefined) return { kind: "workflow", label: `workflow ${step.workflow?.name || ""}` };
  const action = step.action || "";
  const typed = action.match(/^(steptype|clustersteptype)\/(.+)$/);
  if (typed) {
    const kind = typed[1] === "steptype" ? "StepType" : "ClusterStepType";
    const found = (catalog.stepTypes || []).find((t) => t.kind === kind && t.name === typed[2]);
    return { kind: "stepType", label: action, schema: found && found.schema, credentials: found ? found.credentials : [] };
  }
  const found = (catalog.actions || []).find((a) => a.name === action);
  return { kind: action.startsWith("code.") ? "code" : "action", label: action || "(no action)",
    schema: found && found.schema, credentials: found ? found.credentials || [] : [] };
}

// The form of one step (`section` is steps, finally or compensations).
export function stepForm(ctx, section, index) {
  const workflow = ctx.value;
  const step = ((workflow.spec || {})[section] || [])[index] || {};
  const base = ["spec", section, index];
  const kind = stepKind(step, ctx.catalog);
  const bindings = bindingsFor(workflow, step);
  const others = ((workflow.spec || {})[section] || []).map((s) => s.id).filter((id) => id && id !== step.id);
  const needs = new Set(step.needs || []);
  const parts = [
    h("h2", {}, `Step ${step.id || ""}`, h("span", { class: "muted" }, ` · ${kind.label}`)),
    field(ctx, [...base, "id"], { type: "string", description: "snake_case; other steps read its output as steps.<id>." },
      { required: true }),
    field(ctx, [...base, "when"], { type: "string", description: "CEL: run the step only when this holds." }),
    h("fieldset", { class: "needs", "data-field": pathText([...base, "needs"]) }, h("legend", {}, "Needs (runs after)"),
      others.length ? others.map((id) => h("label", { class: "check" }, h("input", { type: "checkbox", checked: needs.has(id),
        "data-need": id, onchange: (e) => ctx.setNeed(section, index, id, e.target.checked) }), ` ${id}`))
        : h("span", { class: "muted" }, "no other step"), problemsAt(ctx, [...base, "needs"])),
  ];
  if (kind.kind === "approval") parts.push(h("h3", {}, "Approval"), objectFields(ctx, [...base, "approval"], APPROVAL, null, { bindings }));
  else if (kind.kind === "wait") parts.push(h("h3", {}, "Wait"), objectFields(ctx, [...base, "wait"], WAIT, null, { bindings }));
  else if (kind.kind === "workflow") parts.push(h("h3", {}, "Workflow"), objectFields(ctx, [...base, "workflow"], SUBFLOW, null));
  else {
    parts.push(field(ctx, [...base, "action"], { type: "string" }, { required: true }));
    if (kind.credentials && kind.credentials.length) {
      parts.push(h("h3", {}, "Credentials (Secret names)"), kind.credentials.map((slot) => field(ctx,
        [...base, "credentials", slot], { type: "string", description: `The Secret mounted as ${slot}.` },
        { label: slot, datalist: ctx.catalog.secrets || [], placeholder: ctx.catalog.secretsListable === false
          ? "you may not list Secrets: type the name" : "" })));
    }
    parts.push(h("h3", {}, "Inputs (with)"), kind.schema ? objectFields(ctx, [...base, "with"], kind.schema, kind.schema,
      { bindings }) : field(ctx, [...base, "with"], { type: "object", description: "No schema is known for this action: YAML." }));
  }
  parts.push(problemsAt(ctx, base));
  return h("div", { class: "step-form", "data-form": pathText(base) }, parts);
}

const TRIGGER_KINDS = {
  webhook: { verify: true, fields: [] },
  schedule: { fields: [["cron", { type: "string", description: "e.g. 0 8 * * 1-5" }, true],
    ["timeZone", { type: "string", default: "UTC" }],
    ["concurrencyPolicy", { type: "string", enum: ["Allow", "Forbid", "Replace"], default: "Allow" }]] },
  cloudEvent: { verify: true, fields: [["types", { type: "array", description: "CloudEvent types, YAML list" }, true]] },
};
const SCHEMES = ["github", "standard-webhooks", "hmac", "bearer", "gitlab", "slack", "stripe", "shopify", "none"];

function triggerKind(trigger) {
  return ["schedule", "webhook", "cloudEvent"].find((k) => trigger[k] !== undefined) || "manual";
}

// The Workflow's own settings: its name, triggers and params.
export function workflowForm(ctx) {
  const spec = ctx.value.spec || {};
  const triggers = (spec.triggers || []).map((trigger, i) => {
    const kind = triggerKind(trigger);
    const base = ["spec", "triggers", i];
    const spec2 = TRIGGER_KINDS[kind];
    return h("div", { class: "item", "data-trigger": i },
      h("div", { class: "item-head" }, h("strong", {}, kind), h("button", { type: "button", class: "small",
        "aria-label": `remove trigger ${trigger.name || i}`, onclick: () => ctx.set(base, undefined) }, "Remove")),
      field(ctx, [...base, "name"], { type: "string" }, { required: true }),
      spec2 && spec2.verify ? [
        field(ctx, [...base, kind, "verify", "scheme"], { type: "string", enum: SCHEMES }, { label: "verify.scheme", required: true }),
        field(ctx, [...base, kind, "verify", "secretRef", "name"], { type: "string" },
          { label: "verify.secretRef.name", datalist: ctx.catalog.secrets || [] }),
        field(ctx, [...base, kind, "verify", "secretRef", "key"], { type: "string" }, { label: "verify.secretRef.key" }),
      ] : null,
      spec2 ? spec2.fields.map(([name, schema, required]) => field(ctx, [...base, kind, name], schema, { required })) : null,
      problemsAt(ctx, base));
  });
  const params = (spec.params || []).map((param, i) => {
    const base = ["spec", "params", i];
    return h("div", { class: "item", "data-param": i },
      h("div", { class: "item-head" }, h("strong", {}, param.name || "param"), h("button", { type: "button", class: "small",
        onclick: () => ctx.set(base, undefined) }, "Remove")),
      field(ctx, [...base, "name"], { type: "string" }, { required: true }),
      field(ctx, [...base, "type"], { type: "string", enum: ["string", "integer", "number", "boolean", "object", "array"],
        default: "string" }),
      field(ctx, [...base, "default"], { type: param.type === "string" || !param.type ? "string" : param.type }),
      field(ctx, [...base, "required"], { type: "boolean", default: false }),
      field(ctx, [...base, "description"], { type: "string" }), problemsAt(ctx, base));
  });
  const addTrigger = (kind) => {
    const n = (spec.triggers || []).length;
    const value = { name: `${kind === "schedule" ? "cron" : kind.toLowerCase()}_${n + 1}` };
    if (kind !== "manual") value[kind] = kind === "schedule" ? {} : { verify: {} };
    ctx.set(["spec", "triggers", n], value);
  };
  return h("div", { class: "workflow-form", "data-form": "workflow" },
    h("h2", {}, "Workflow"),
    field(ctx, ["metadata", "name"], { type: "string", description: "lowercase letters, digits and '-'" }, { required: true }),
    h("h3", {}, "Triggers ", h("span", { class: "muted" }, "(a run can always be started by hand)")), triggers,
    h("div", { class: "adders" }, [["webhook", "webhook"], ["schedule", "cron"], ["cloudEvent", "cloudEvent"],
      ].map(([kind, text]) => h("button", { type: "button", "data-add-trigger": text,
      onclick: () => addTrigger(kind) }, `+ ${text}`))),
    h("h3", {}, "Params"), params,
    h("button", { type: "button", "data-add-param": "", onclick: () => ctx.set(["spec", "params", (spec.params || []).length],
      { name: `param_${(spec.params || []).length + 1}` }) }, "+ param"),
    problemsAt(ctx, ["spec"]), problemsAt(ctx, ["metadata"]));
}
