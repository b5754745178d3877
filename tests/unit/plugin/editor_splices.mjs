// Run by test_ui_editor_splices.py: each edit the editor makes to each example, as JSON lines for Python to check.
import { readFileSync } from "node:fs";
import { parse, setIn, workflowOf } from "../../../operator/towline/plugin/ui/static/editoryaml.js";

const lineStart = (text, at) => text.lastIndexOf("\n", at - 1) + 1;
function lineEnd(text, at) {
  const end = text.indexOf("\n", at);
  return end < 0 ? text.length : end + 1;
}

// The lines a step's text takes: from its `- ` to the end of its last value's line.
function lines(text, item) {
  let end = item.range[1];
  while (end > item.range[0] && /\s/.test(text[end - 1])) end -= 1;
  return [lineStart(text, item.range[0]), lineEnd(text, end - 1)];
}

// Whether `after` keeps every byte of `before` outside [start, end).
const keptOutside = (before, after, [start, end]) => after.startsWith(before.slice(0, start))
  && after.endsWith(before.slice(end)) && after.length >= start + before.length - end;

for (const file of process.argv.slice(2)) {
  const text = readFileSync(file, "utf8");
  const parsed = parse(text);
  const workflow = workflowOf(parsed);
  const seq = parsed.docs[parsed.index].getIn(["spec", "steps"], true);
  const edits = [];
  seq.items.forEach((item, index) => {
    const region = lines(text, item);
    edits.push({ op: "when", index, path: ["spec", "steps", index, "when"], value: "true", region });
    edits.push({ op: "delete", index, path: ["spec", "steps", index], value: undefined, region });
  });
  const spec = parsed.docs[parsed.index].contents.get("spec", true);
  edits.push({ op: "label", path: ["metadata", "labels", "team"], value: "platform",
    region: [0, lineStart(text, spec.range[0])] });
  for (const edit of edits) {
    const after = setIn(text, edit.path, edit.value);
    console.log(JSON.stringify({ file, op: edit.op, index: edit.index, path: edit.path, value: edit.value ?? null,
      before: workflow, after: workflowOf(parse(after)), keptOutside: keptOutside(text, after, edit.region),
      kept: edit.region, length: text.length }));
  }
}
