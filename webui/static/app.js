// cdc-mirror admin: the only script. Confirms deletions; polls a running replay's progress (GET, session cookie)
// and updates the page until the run reaches a final state.
"use strict";
// Forms that delete something ask first (no inline handlers: the pages' CSP forbids them).
document.addEventListener("submit", (event) => {
  const question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});
(function () {
  const box = document.getElementById("replay-progress");
  if (!box || box.dataset.final === "yes") return;
  const runId = box.dataset.runId;
  const finalStates = new Set(["succeeded", "failed", "cancelled"]);
  const text = (id, value) => { const el = document.getElementById(id); if (el) el.textContent = value; };
  async function poll() {
    let status;
    try {
      const response = await fetch("/api/replays/" + encodeURIComponent(runId), {credentials: "same-origin"});
      if (!response.ok) throw new Error("HTTP " + response.status);
      status = await response.json();
    } catch (err) {
      text("replay-error", "Progress unavailable (" + err.message + "); retrying.");
      document.getElementById("replay-error").hidden = false;
      setTimeout(poll, 3000);
      return;
    }
    // rows_total is an estimate from table statistics while running; a finished run is 100 %.
    const percent = status.state === "succeeded" ? 100
      : (status.rows_total ? Math.min(100, 100 * status.rows_done / status.rows_total) : 0);
    document.getElementById("replay-bar").value = percent;
    text("replay-rows", String(status.rows_done));
    if (status.rows_total) text("replay-total", String(status.rows_total));
    text("replay-percent", percent.toFixed(0));
    const state = document.getElementById("replay-state");
    state.textContent = status.state;
    state.className = "state-" + status.state;
    const error = document.getElementById("replay-error");
    error.hidden = !status.error;
    if (status.error) error.textContent = status.error;
    if (finalStates.has(status.state)) {
      box.dataset.final = "yes";
      const cancel = document.getElementById("cancel-form");
      if (cancel) cancel.remove();
      return;
    }
    setTimeout(poll, 1000);
  }
  setTimeout(poll, 1000);
})();
