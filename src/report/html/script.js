(() => {
  "use strict";
  const data = JSON.parse(document.getElementById("deltabench-data").textContent);
  const detail = document.getElementById("trial-detail");
  const key = (task, agent) => task + "\u0000" + agent;
  const byCell = new Map();
  for (const t of data.trials) {
    const k = key(t.task, t.agent);
    if (!byCell.has(k)) byCell.set(k, []);
    byCell.get(k).push(t);
  }
  for (const list of byCell.values()) list.sort((a, b) => a.trial - b.trial);

  // Builds an element; text children become text nodes, so run data is never parsed as HTML.
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined) node.setAttribute(name, value);
    }
    for (const child of children.flat()) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }
  const secs = (ms) => (ms / 1000).toFixed(2) + " s";
  const OUTCOME = { pass: "pass", fail: "fail", invalid: "invalid", infra_error: "infra error" };

  function verifyText(v) {
    if (!v) return "did not run";
    if (v.timed_out) return "timed out after " + secs(v.duration_ms);
    const end = v.exit_code === null ? "ended without an exit code" : "exit " + v.exit_code;
    return end + " after " + secs(v.duration_ms);
  }

  function diffPre(text) {
    const pre = h("pre", { class: "diff" });
    for (const line of text.replace(/\n$/, "").split("\n")) {
      let kind = "ctx";
      if (/^(diff |index |--- |\+\+\+ |new file|deleted file|similarity|rename |Binary )/.test(line)) kind = "meta";
      else if (line.startsWith("@@")) kind = "hunk";
      else if (line.startsWith("+")) kind = "add";
      else if (line.startsWith("-")) kind = "del";
      pre.append(h("span", { class: kind }, line));
    }
    return pre;
  }

  function section(title, note, body) {
    return h("details", { open: "" }, h("summary", null, title),
      note ? h("p", { class: "note" }, note) : null, body);
  }

  function artifact(title, art, render) {
    let body = null;
    if (art.text === "") body = h("p", { class: "note" }, "(empty)");
    else if (art.text !== null) body = render(art.text);
    return section(title, art.note, body);
  }

  function card(t) {
    const facts = h("dl", { class: "facts" });
    const fact = (name, value) => {
      if (value !== null && value !== undefined && value !== "") facts.append(h("dt", null, name), h("dd", null, String(value)));
    };
    fact("agent status", t.status === null ? "no agent ran" : t.status);
    if (t.error) fact("agent error", t.error.message + " (" + t.error.code + ")");
    fact("infra error", t.infra_error);
    fact("invalid", t.invalid);
    if (t.tampered) fact("tampered", t.tampered.join(", "));
    fact("verify", verifyText(t.verify));
    if (t.diff) fact("diff", t.diff.files + " file(s), +" + t.diff.insertions + " \u2212" + t.diff.deletions);
    fact("score", t.score === null ? "not scored" : t.score + " (" + t.metric + ")");
    fact("duration", secs(t.duration_ms));
    if (t.usage) {
      const cost = t.usage.cost_usd === null || t.usage.cost_usd === undefined ? "" : ", $" + t.usage.cost_usd.toFixed(4);
      fact("usage", t.usage.input_tokens + " input, " + t.usage.output_tokens + " output tokens" + cost);
    }
    fact("agent's own summary (not scored)", t.agent_text);
    const timeline = t.events.length
      ? h("ol", { class: "timeline" }, t.events.map((e) => h("li", null, h("span", { class: "etype" }, e.type), e.summary)))
      : null;
    return h("article", { class: "trial-card", "data-trial": String(t.trial) },
      h("h3", null, "#" + t.trial + " ", h("span", { class: "badge " + t.outcome }, OUTCOME[t.outcome] || t.outcome)),
      facts,
      artifact("diff.patch", t.diff_patch, diffPre),
      artifact("verify.log (last " + data.log_tail_lines + " lines)", t.verify_log, (text) => h("pre", { class: "log" }, text)),
      section("events (" + t.events.length + ")", t.events_note, timeline));
  }

  // The task's instruction, the same for every agent: open, above the trials.
  function instruction(art) {
    if (!art) return null;
    return h("details", { class: "instruction", open: "" }, h("summary", null, "Task instruction"),
      art.note ? h("p", { class: "note" }, art.note) : null,
      art.text === null ? null : h("pre", { class: "instruction-text" }, art.text));
  }

  const cells = Array.from(document.querySelectorAll("#heatmap g.cell"));
  const rows = Array.from(document.querySelectorAll("#trial-list tbody tr"));

  function show(task, agent, trial) {
    for (const node of document.querySelectorAll(".selected")) node.classList.remove("selected");
    for (const node of cells.concat(rows)) {
      if (node.dataset.task === task && node.dataset.agent === agent) node.classList.add("selected");
    }
    const trials = byCell.get(key(task, agent)) || [];
    detail.replaceChildren(
      h("h2", null, "Trial details: " + task + " \u00d7 " + agent),
      instruction(data.instructions[task]),
      ...(trials.length ? trials.map(card) : [h("p", { class: "note" }, "No trials were recorded for this cell.")]));
    detail.dataset.task = task;
    detail.dataset.agent = agent;
    detail.dataset.rendered = "true";
    const focus = trial && detail.querySelector('[data-trial="' + trial + '"]');
    if (focus) focus.classList.add("focus");
    return focus || detail;
  }

  function activate(node, go) {
    node.setAttribute("tabindex", "0");
    node.setAttribute("role", "button");
    node.addEventListener("click", go);
    node.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        go();
      }
    });
    node.dataset.rendered = "true";
  }
  for (const cell of cells) {
    cell.setAttribute("aria-label", cell.querySelector("title").textContent);
    activate(cell, () => show(cell.dataset.task, cell.dataset.agent).scrollIntoView({ block: "start" }));
  }
  for (const row of rows) {
    activate(row, () => show(row.dataset.task, row.dataset.agent, row.dataset.trial).scrollIntoView({ block: "start" }));
  }

  // Open on the first cell that did not fully pass: that is usually what a reader came for.
  const first = cells.find((c) => c.dataset.passed !== c.dataset.scored || c.dataset.infra !== "0") || cells[0];
  if (first) show(first.dataset.task, first.dataset.agent);
})();
