// The blind review page: claim an item, label it, submit, repeat. Keyboard shortcuts:
// f/u faithful yes/no, c/x correct yes/no, 1-9 toggle candidate relevance, Enter submit.
"use strict";
const csrf = document.querySelector('meta[name="csrf-token"]').content;
let current = null;

async function api(path, body) {
  const response = await fetch(path, {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401) { location.reload(); return null; }
  return response;
}

function text(id, value) { document.getElementById(id).textContent = value; }

function render(view) {
  current = view;
  document.getElementById("item").hidden = false;
  text("status", "");
  text("question", view.question);
  const pair = Array.isArray(view.answers);
  document.getElementById("single-answer").hidden = pair;
  document.getElementById("pair-answers").hidden = !pair;
  if (pair) { text("answer-a", view.answers[0]); text("answer-b", view.answers[1]); } else { text("answer", view.answer); }
  const contexts = document.getElementById("contexts");
  contexts.replaceChildren(...view.contexts.map((c) => { const li = document.createElement("li"); li.textContent = c; return li; }));
  const candidates = document.getElementById("candidates");
  candidates.replaceChildren(...view.candidates.map((c, i) => {
    const li = document.createElement("li"), label = document.createElement("label"), box = document.createElement("input");
    box.type = "checkbox"; box.value = c.key; box.dataset.index = String(i + 1);
    const span = document.createElement("span"); span.textContent = `${i + 1}. ${c.content}`;
    label.append(box, span); li.append(label); return li;
  }));
  const reasons = document.getElementById("reasons");
  reasons.querySelectorAll("label").forEach((l) => l.remove());
  for (const r of view.reasons) {
    const label = document.createElement("label"), box = document.createElement("input");
    box.type = "checkbox"; box.name = "reason"; box.value = r; label.append(box, ` ${r} `); reasons.append(label);
  }
  document.querySelectorAll('input[type="radio"]').forEach((r) => { r.checked = false; });
  document.getElementById("note").value = "";
}

async function next() {
  const response = await api("/api/review/claim");
  if (!response) return;
  if (response.status === 204) { document.getElementById("item").hidden = true; text("status", "The queue is empty. Thank you!"); current = null; return; }
  if (!response.ok) { text("status", `Could not claim an item (${response.status}).`); return; }
  render(await response.json());
}

function radio(name) { const el = document.querySelector(`input[name="${name}"]:checked`); return el ? el.value : null; }

async function submit() {
  if (!current) return;
  const labels = {
    faithful: radio("faithful"), correct: radio("correct"), refusal_appropriate: radio("refusal_appropriate"),
    relevant: [...document.querySelectorAll("#candidates input:checked")].map((b) => b.value),
    reasons: [...document.querySelectorAll('input[name="reason"]:checked')].map((b) => b.value),
    note: document.getElementById("note").value,
  };
  if (Array.isArray(current.answers)) labels.preferred = radio("preferred");
  const response = await api(`/api/review/items/${current.item}/labels`, labels);
  if (!response) return;
  if (!response.ok) { const e = await response.json(); text("status", `Not saved: ${e.error}`); return; }
  text("status", "Saved.");
  await next();
}

function check(name, value) { const el = document.querySelector(`input[name="${name}"][value="${value}"]`); if (el) el.checked = true; }

document.addEventListener("keydown", (event) => {
  if (event.target.tagName === "TEXTAREA" || event.target.tagName === "INPUT" && event.target.type === "text") return;
  const keys = { f: ["faithful", "yes"], u: ["faithful", "no"], c: ["correct", "yes"], x: ["correct", "no"] };
  if (keys[event.key]) { check(...keys[event.key]); event.preventDefault(); }
  else if (/^[1-9]$/.test(event.key)) { const box = document.querySelector(`#candidates input[data-index="${event.key}"]`); if (box) box.checked = !box.checked; }
  else if (event.key === "Enter") { event.preventDefault(); submit(); }
});
document.getElementById("submit").addEventListener("click", submit);
document.getElementById("logout").addEventListener("click", async () => { await api("/review/logout"); location.reload(); });
next();
