// The visual editor's entry: every page loads this small module; only the editor page loads the editor (and the
// YAML library it imports), so the other pages fetch nothing more.
//
// When a file of the editor does not arrive (the server too busy to answer, a file missing) or does not run, the
// import fails: the page then names the file and how it failed, with a button that loads the page again (a
// browser keeps a failed module import failed until the page is loaded anew), never "Loading…" for ever. This
// module imports nothing, so that much works whatever else is missing.
if (document.body.dataset.page === "editor") import("./editormain.js").catch(failed);

// The page's files that did not arrive: a network error (status 0) or an HTTP error.
function filesThatFailed() {
  return performance.getEntriesByType("resource")
    .filter((entry) => entry.responseStatus === 0 || entry.responseStatus >= 400)
    .map((entry) => `${new URL(entry.name).pathname} (${entry.responseStatus ? `HTTP ${entry.responseStatus}`
      : "no answer"})`);
}

function failed(error) {
  const files = filesThatFailed();
  const box = document.createElement("div");
  box.id = "editor-load-failed";
  box.className = "result refused";
  box.setAttribute("role", "alert");
  const said = document.createElement("p");
  said.textContent = files.length
    ? `The editor could not be loaded: ${files.join(", ")} did not arrive. `
    : `The editor could not be loaded: ${error && error.message ? error.message : error}. `;
  const again = document.createElement("button");
  again.type = "button";
  again.id = "editor-reload";
  again.textContent = "Load the editor again";
  again.addEventListener("click", () => location.reload());
  said.append(again);
  box.append(said);
  if (files.length && error && error.message) {
    const detail = document.createElement("p");
    detail.className = "muted";
    detail.textContent = `The browser said: ${error.message}`;
    box.append(detail);
  }
  document.getElementById("main").replaceChildren(box);
}
