// The blind review page, in two steps: relevance on shuffled candidates, then the answer.
// Keyboard: 1-9 relevant, Shift+1-9 gold, Enter next/submit; f/u faithful yes/no, c/x correct
// yes/no (a shadow pair: for A, and with Shift for B), r/n refusal appropriate yes/no, a corrected
// answer, s skip, Esc leaves a text field. The spans the scorer flagged are shown only once the
// verdict is saved (the submit's answer carries them), never before.
"use strict";
const csrf = document.querySelector('meta[name="csrf-token"]').content;
let current = null;

async function api(path, body, method = "POST") {
  let response;
  try {
    response = await fetch(path, {
      method, credentials: "same-origin",
      headers: method === "POST" ? { "Content-Type": "application/json", "X-CSRF-Token": csrf } : { "X-CSRF-Token": csrf },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (error) {  // no answer at all (the agent stopped, the network dropped): say so, keep the labels
    text("status", `No answer from the server (${error.message}); your labels are still here, try again.`);
    return null;
  }
  if (response.status === 401) { location.reload(); return null; }
  return response;
}

const $ = (id) => document.getElementById(id);
function text(id, value) { $(id).textContent = value; }
function item(tag, value) { const el = document.createElement(tag); el.textContent = value; return el; }

function checkbox(cls, key, label) {
  const wrap = document.createElement("label"), box = document.createElement("input");
  box.type = "checkbox"; box.className = cls; box.value = key;
  wrap.append(box, ` ${label}`);
  return wrap;
}

function showRelevance(view) {
  $("relevance").hidden = false; $("answer-step").hidden = true;
  // nothing of an earlier item's answer step stays in the DOM
  ["answer", "answer-a", "answer-b"].forEach((id) => text(id, ""));
  ["contexts", "contexts-a", "contexts-b", "flagged-answers"].forEach((id) => $(id).replaceChildren());
  $("candidates").replaceChildren(...view.candidates.map((c) => {
    const li = document.createElement("li");
    li.append(item("p", c.content), checkbox("relevant", c.key, "relevant"), checkbox("gold", c.key, "gold"));
    return li;
  }));
  $("left-out").hidden = !view.left_out;
  text("left-out", view.left_out ? `${view.left_out} candidate document(s) were left out: their content was not recorded.` : "");
  $("relevance-submit").focus();
}

function showAnswer(view) {
  $("relevance").hidden = true; $("answer-step").hidden = false; $("flagged").hidden = true;
  const pair = Array.isArray(view.answers);
  $("single-answer").hidden = pair; $("pair-answers").hidden = !pair;
  if (pair) {
    ["a", "b"].forEach((side, i) => {
      text(`answer-${side}`, view.answers[i]);
      $(`contexts-${side}`).replaceChildren(...view.answer_contexts[i].map((c) => item("li", c)));
    });
  } else {
    text("answer", view.answer);
    $("contexts").replaceChildren(...view.contexts.map((c) => item("li", c)));
  }
  document.querySelectorAll("#answer-step input").forEach((r) => { r.checked = false; });
  $("corrected").value = ""; $("note").value = "";
  $("submit").focus();
}

function render(view) {
  current = view;
  $("item").hidden = false; $("flagged").hidden = true; $("flagged-answers").replaceChildren(); $("skip-form").hidden = false;
  text("question", view.question);
  $("skip-reason").value = "";
  if (view.step === "relevance") showRelevance(view); else showAnswer(view);
}

async function progress() {
  const response = await api("/api/review/progress", undefined, "GET");
  if (!response || !response.ok) return;
  const p = await response.json();
  text("mine", `You: ${p.you.reviews} reviewed, ${p.you.recent} in the last hour, ${p.available} more waiting for you.`);
  $("team").tBodies[0].replaceChildren(...p.team.map((r) => {
    const tr = document.createElement("tr"); tr.append(item("td", r.reviewer), item("td", r.reviews), item("td", r.recent)); return tr;
  }));
  $("agreement").tBodies[0].replaceChildren(...p.agreement.map((a) => {
    const tr = document.createElement("tr");
    tr.append(item("td", a.label), item("td", a.kappa === null ? "–" : a.kappa.toFixed(2)), item("td", a.pairs)); return tr;
  }));
}

// `done` ("Saved.", "Skipped.") stays in the status line with the next item, so the reviewer
// sees the last verdict was stored, not a message that flashes for one request.
async function next(done = "") {
  const response = await api("/api/review/claim");
  progress();
  if (!response) return;
  const prefix = done ? `${done} ` : "";
  if (response.status === 204) { $("item").hidden = true; text("status", `${prefix}The queue is empty. Thank you!`); current = null; return; }
  if (!response.ok) { text("status", `${prefix}Could not claim an item (${response.status}).`); return; }
  text("status", done);
  render(await response.json());
}

function radio(name) { const el = document.querySelector(`input[name="${name}"]:checked`); return el ? el.value : null; }
function ticked(cls) { return [...document.querySelectorAll(`#candidates input.${cls}:checked`)].map((b) => b.value); }

async function post(path, body, after) {
  const response = await api(path, body);
  if (!response) return;
  if (!response.ok) { const e = await response.json(); text("status", `Not saved: ${e.error}`); return; }
  await after(response);
}

async function submitRelevance(event) {
  if (event) event.preventDefault();
  if (!current || current.step !== "relevance") return;
  await post(`/api/review/items/${current.item}/relevance`, { relevant: ticked("relevant"), gold: ticked("gold") },
    async (response) => { text("status", ""); render(await response.json()); });
}

async function submitAnswer(event) {
  if (event) event.preventDefault();
  if (!current || current.step !== "answer") return;
  const labels = {
    refusal_appropriate: radio("refusal_appropriate"),
    reasons: [...document.querySelectorAll('input[name="reason"]:checked')].map((b) => b.value),
    corrected_answer: $("corrected").value, note: $("note").value,
  };
  if (Array.isArray(current.answers)) {
    labels.preferred = radio("preferred");
    for (const side of ["a", "b"]) { labels[`faithful_${side}`] = radio(`faithful_${side}`); labels[`correct_${side}`] = radio(`correct_${side}`); }
  } else { labels.faithful = radio("faithful"); labels.correct = radio("correct"); }
  await post(`/api/review/items/${current.item}/labels`, labels, async (response) => {
    const saved = await response.json();
    if (saved.flagged) { text("status", "Saved."); showFlagged(saved.flagged); } else await next("Saved.");
  });
}

// After the verdict is stored: each answer with the parts the scorer flagged marked.
function showFlagged(answers) {
  current = { step: "flagged" };
  $("answer-step").hidden = true; $("skip-form").hidden = true; $("flagged").hidden = false;
  $("flagged-answers").replaceChildren(...answers.map((a) => {
    const wrap = document.createElement("div"), p = document.createElement("p");
    if (a.label) wrap.append(item("h3", a.label));
    p.dir = "auto"; p.className = "flagged-answer";
    p.append(...a.segments.map((s) => (s.flagged ? item("mark", s.text) : document.createTextNode(s.text))));
    wrap.append(p);
    if (!a.scored) wrap.append(item("p", "Not scored by the span model yet."));
    else if (!a.segments.some((s) => s.flagged)) wrap.append(item("p", "Nothing flagged."));
    return wrap;
  }));
  $("next-item").focus();
}

async function skip(event) {
  if (event) event.preventDefault();
  if (!current || current.step === "flagged") return;  // already saved: nothing to skip
  const reason = $("skip-reason").value.trim();
  if (!reason) { text("status", "Say why you skip (type a reason, then Enter)."); $("skip-reason").focus(); return; }
  await post(`/api/review/items/${current.item}/skip`, { reason }, async () => { await next("Skipped."); });
}

function check(name, value) { const el = document.querySelector(`input[name="${name}"][value="${value}"]`); if (el) el.checked = true; }

document.addEventListener("keydown", (event) => {
  const typing = event.target.tagName === "TEXTAREA" || (event.target.tagName === "INPUT" && event.target.type === "text");
  if (typing) { if (event.key === "Escape") event.target.blur(); return; }
  if (!current || event.ctrlKey || event.metaKey || event.altKey) return;
  const digit = /^Digit([1-9])$/.exec(event.code);
  if (current.step === "relevance" && digit) {
    const boxes = document.querySelectorAll(`#candidates li:nth-child(${digit[1]}) input.${event.shiftKey ? "gold" : "relevant"}`);
    boxes.forEach((b) => { b.checked = !b.checked; }); event.preventDefault(); return;
  }
  if (current.step === "flagged") { if (event.key === "Enter" && event.target.tagName !== "BUTTON") { event.preventDefault(); next(); } return; }
  const pair = Array.isArray(current.answers);
  const keys = { f: ["faithful", "yes"], u: ["faithful", "no"], c: ["correct", "yes"], x: ["correct", "no"], r: ["refusal_appropriate", "yes"], n: ["refusal_appropriate", "no"] };
  const key = keys[event.key.toLowerCase()];
  if (current.step === "answer" && key) {
    const side = event.key === event.key.toLowerCase() ? "a" : "b";  // Shift: answer B of a pair
    check(pair && (key[0] === "faithful" || key[0] === "correct") ? `${key[0]}_${side}` : key[0], key[1]); event.preventDefault();
  }
  else if (current.step === "answer" && event.key === "a") { $("corrected").focus(); event.preventDefault(); }
  else if (event.key === "s") { $("skip-reason").focus(); event.preventDefault(); }
  else if (event.key === "Enter" && event.target.tagName !== "BUTTON") {
    event.preventDefault();
    if (current.step === "relevance") submitRelevance(); else submitAnswer();
  }
});
$("relevance").addEventListener("submit", submitRelevance);
$("answer-step").addEventListener("submit", submitAnswer);
$("skip-form").addEventListener("submit", skip);
$("next-item").addEventListener("click", () => next());
$("logout").addEventListener("click", async () => { await api("/review/logout"); location.reload(); });
next();
