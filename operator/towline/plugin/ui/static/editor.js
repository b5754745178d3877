// The visual editor's entry: every page loads this small module; only the editor page loads the editor (and the
// YAML library it imports), so the other pages fetch nothing more.
if (document.body.dataset.page === "editor") import("./editormain.js");
