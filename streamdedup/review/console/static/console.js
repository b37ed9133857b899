// The review console's buttons: decisions and verdicts go to the server as JSON; no framework, no build step.
"use strict";

async function post(url, body) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  let answer;
  try {
    answer = await response.json();
  } catch (error) {
    answer = { ok: false, error: `the server answered ${response.status}` };
  }
  return { status: response.status, answer };
}

function say(button, text, kind) {
  const box = button.closest(".actions")?.querySelector(".message") ?? document.getElementById("toast");
  box.textContent = text;
  box.className = `message ${kind}`;
  box.hidden = false;
}

async function decide(button) {
  const body = { decision: button.dataset.decision };
  if (button.dataset.pair) {
    body.pair = button.dataset.pair.split(":");
  } else if (button.dataset.sourceId) {
    body.source_id = button.dataset.sourceId;
  } else {
    body.collection = button.dataset.collection;
    body.line = button.dataset.line;
  }
  const { status, answer } = await post("/api/decision", body);
  if (!answer.ok) {
    say(button, answer.error ?? `refused (${status})`, status === 409 ? "error refused" : "error");
    return;
  }
  say(button, answer.message, "ok");
  if (answer.applied) {
    window.location.reload();
  }
}

async function judge(button) {
  const item = button.closest(".sample");
  const again = button.getAttribute("aria-pressed") === "true";
  const verdict = again ? null : button.dataset.verdict;  // a second click on the same verdict takes it back
  const { status, answer } = await post("/api/verdict", { key: button.dataset.key, verdict });
  if (!answer.ok) {
    say(button, answer.error ?? `refused (${status})`, "error");
    return;
  }
  for (const other of item.querySelectorAll("button[data-verdict]")) {
    other.setAttribute("aria-pressed", String(other.dataset.verdict === verdict));
  }
  item.classList.remove("judged-correct", "judged-incorrect");
  if (verdict) {
    item.classList.add(`judged-${verdict}`);
  }
  item.querySelector(".verdict").textContent = verdict ?? "not judged";
  document.getElementById("figures").innerHTML = answer.html;
}

document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-decision], button[data-verdict]");
  if (!button || button.disabled) {
    return;
  }
  button.disabled = true;
  const done = button.dataset.decision ? decide(button) : judge(button);
  done
    .catch((error) => say(button, `failed: ${error}`, "error"))
    .finally(() => { button.disabled = false; });
});
