// kimicode's page: the sessions of the server that served it, each session's live turn, approvals, the
// message box (queue or steer), branches side by side, the context window over the turns, cost per turn.
// Plain JavaScript, no dependency. The token comes from the URL's fragment (never sent to a server) and
// is kept in sessionStorage; every request carries it as `Authorization: Bearer`. Events are read with
// fetch() streaming (EventSource cannot send the header). All text from the server is inserted as text
// (textContent) or through the escaping Markdown renderer.
"use strict";

(function () {
  const md = window.kimicodeMarkdown;
  const $ = function (sel) { return document.querySelector(sel); };
  const CATEGORIES = ["system", "tools", "user", "assistant", "reasoning", "tool_calls", "tool_results"];

  let token = "";
  let current = null;     // the open session's id
  let stream = null;      // AbortController of the event stream
  let lastSeq = 0;
  let live = null;        // the live turn's elements
  const calls = {};       // tool call id -> its element

  // -- helpers --------------------------------------------------------------------------------------

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function showError(text) {
    $("#error").textContent = text || "";
  }

  async function api(method, path, body) {
    const options = { method: method, headers: { "Authorization": "Bearer " + token } };
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    const response = await fetch(path, options);
    if (response.status === 204) return null;
    const data = await response.json().catch(function () { return {}; });
    if (!response.ok) throw new Error(data.error || ("HTTP " + response.status));
    return data;
  }

  function usd(value) {
    return value === null || value === undefined ? "—" : "$" + Number(value).toFixed(4);
  }

  function diffView(text) {
    const pre = el("pre", "diff");
    for (const line of String(text || "").split("\n")) {
      let cls = "";
      if (line.startsWith("+++") || line.startsWith("---")) cls = "file";
      else if (line.startsWith("+")) cls = "add";
      else if (line.startsWith("-")) cls = "del";
      else if (line.startsWith("@@")) cls = "hunk";
      pre.appendChild(el("span", cls, line || " "));
    }
    return pre;
  }

  function argsSummary(name, args) {
    if (!args) return "";
    if (typeof args.command === "string") return args.command;
    if (typeof args.path === "string") return args.path;
    if (typeof args.pattern === "string") return args.pattern;
    const text = JSON.stringify(args);
    return text.length > 200 ? text.slice(0, 200) + "…" : text;
  }

  // -- sessions list ----------------------------------------------------------------------------------

  async function refreshSessions() {
    let data;
    try { data = await api("GET", "/sessions"); } catch (err) { showError(err.message); return; }
    const list = $("#sessions");
    list.textContent = "";
    for (const s of data.sessions) {
      const item = el("li", s.id === current ? "current" : "");
      const link = el("a", "", (s.title || "(new)") + " ");
      link.href = "#";
      link.dataset.id = s.id;
      link.addEventListener("click", function (e) { e.preventDefault(); openSession(s.id); });
      item.appendChild(link);
      item.appendChild(el("span", "badge " + s.status, s.status));
      item.appendChild(el("div", "sub", s.workspace + " · " + s.model + " · " + s.permission_mode));
      list.appendChild(item);
    }
    const saved = $("#saved");
    saved.textContent = "";
    for (const s of data.saved.filter(function (x) { return !x.live; }).slice(0, 30)) {
      const item = el("li");
      item.appendChild(el("div", "", (s.first_prompt || s.id).slice(0, 60)));
      item.appendChild(el("div", "sub", s.workspace + " · " + s.turns + " turns"));
      const resume = el("button", "small", "Resume");
      resume.type = "button";
      resume.addEventListener("click", async function () {
        try { const made = await api("POST", "/sessions", { resume: s.id }); openSession(made.id); }
        catch (err) { showError(err.message); }
      });
      item.appendChild(resume);
      saved.appendChild(item);
    }
  }

  // -- one session ------------------------------------------------------------------------------------

  async function openSession(id) {
    if (stream) stream.abort();
    current = id;
    live = null;
    for (const key of Object.keys(calls)) delete calls[key];
    let state;
    try { state = await api("GET", "/sessions/" + encodeURIComponent(id)); } catch (err) { showError(err.message); return; }
    showError("");
    $("#empty").hidden = true;
    $("#session").hidden = false;
    renderState(state);
    renderHistory(state.history);
    $("#approvals").textContent = "";
    for (const p of state.pending_permissions) addApproval(p);
    renderBranches(state.explorations);
    lastSeq = state.seq;
    follow(id);
    refreshSessions();
  }

  function setStatus(status) {
    $("#status").textContent = status;
    $("#status").className = "badge " + status;
  }

  function renderState(state) {
    $("#title").textContent = state.title || state.id;
    setStatus(state.status);
    $("#meta").textContent = state.workspace + " · " + state.model + " · " + state.permission_mode;
    $("#total-cost").textContent = "total " + usd(state.cost.total);
    const queue = $("#queue");
    queue.textContent = "";
    for (const q of state.queue) queue.appendChild(el("div", "queued", "queued: " + q.text));
    renderCost(state.turn_records, state.cost.total);
    renderContext(state.turn_records, state.context);
  }

  async function refreshState() {
    if (!current) return;
    try { renderState(await api("GET", "/sessions/" + encodeURIComponent(current))); } catch (err) { /* closed */ }
  }

  function renderHistory(history) {
    const turns = $("#turns");
    turns.textContent = "";
    let turn = null;
    for (const m of history) {
      if (m.role === "user") {
        turn = newTurn(typeof m.content === "string" ? m.content : "[attachment]");
      } else if (m.role === "assistant") {
        if (!turn) turn = newTurn("");
        const step = newStep(turn);
        if (m.reasoning_content) step.reasoning.textContent = m.reasoning_content;
        step.reasoningBox.hidden = !m.reasoning_content;
        if (typeof m.content === "string") { step.raw = m.content; step.content.innerHTML = md.render(m.content); }
        for (const call of m.tool_calls || []) {
          let args = {};
          try { args = JSON.parse(call.function.arguments || "{}"); } catch (e) { args = {}; }
          addCall(step, call.id, call.function.name, args);
        }
      } else if (m.role === "tool" && calls[m.tool_call_id]) {
        finishCall(m.tool_call_id, typeof m.content === "string" ? m.content : JSON.stringify(m.content), false, null);
      }
    }
  }

  function newTurn(prompt) {
    const box = el("div", "turn");
    if (prompt) box.appendChild(el("div", "user", prompt));
    const steps = el("div", "steps");
    box.appendChild(steps);
    const footer = el("div", "footer");
    box.appendChild(footer);
    $("#turns").appendChild(box);
    return { box: box, steps: steps, footer: footer, step: null };
  }

  function newStep(turn) {
    const box = el("div", "assistant");
    const reasoningBox = el("details", "reasoning");
    reasoningBox.appendChild(el("summary", "", "reasoning"));
    const reasoning = el("div", "reasoning-text");
    reasoningBox.appendChild(reasoning);
    reasoningBox.hidden = true;
    const content = el("div", "answer");
    const tools = el("div", "tools");
    box.appendChild(reasoningBox);
    box.appendChild(content);
    box.appendChild(tools);
    turn.steps.appendChild(box);
    turn.step = { box: box, reasoningBox: reasoningBox, reasoning: reasoning, content: content, tools: tools, raw: "" };
    return turn.step;
  }

  function addCall(step, id, name, args) {
    const box = el("div", "tool running");
    const head = el("div", "tool-head");
    head.appendChild(el("span", "tool-name", name));
    head.appendChild(el("code", "tool-args", argsSummary(name, args)));
    box.appendChild(head);
    const output = el("pre", "tool-output");
    output.hidden = true;
    box.appendChild(output);
    step.tools.appendChild(box);
    calls[id] = { box: box, output: output };
  }

  function finishCall(id, content, isError, display) {
    const call = calls[id];
    if (!call) return;
    call.box.className = "tool " + (isError ? "error" : "done");
    call.output.hidden = false;
    call.output.textContent = content.length > 4000 ? content.slice(0, 4000) + "\n…" : content;
    if (display && display.diff) call.box.appendChild(diffView(display.diff));
  }

  function liveStep() {
    if (!live) live = newTurn("");
    return live.step || newStep(live);
  }

  // -- events -----------------------------------------------------------------------------------------

  async function follow(id) {
    const controller = new AbortController();
    stream = controller;
    while (current === id && !controller.signal.aborted) {
      try {
        const response = await fetch("/sessions/" + encodeURIComponent(id) + "/events?after=" + lastSeq,
          { headers: { "Authorization": "Bearer " + token }, signal: controller.signal });
        if (!response.ok) { showError("events: HTTP " + response.status); return; }
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const chunk = await reader.read();
          if (chunk.done) break;
          buffer += decoder.decode(chunk.value, { stream: true });
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const data = block.split("\n").filter(function (l) { return l.startsWith("data:"); })
              .map(function (l) { return l.slice(5).replace(/^ /, ""); }).join("\n");
            if (data) handle(JSON.parse(data));
          }
        }
      } catch (err) {
        if (controller.signal.aborted) return;
      }
      await new Promise(function (r) { setTimeout(r, 1000); });
    }
  }

  const handlers = {
    TurnStarted: function (e) { live = newTurn(e.prompt); },
    StepStarted: function () { if (!live) live = newTurn(""); newStep(live); },
    ReasoningDelta: function (e) {
      const step = liveStep();
      step.reasoningBox.hidden = false;
      step.reasoning.textContent += e.text;
    },
    ContentDelta: function (e) {
      const step = liveStep();
      step.raw += e.text;
      step.content.innerHTML = md.render(step.raw);
    },
    ToolCallStarted: function (e) { addCall(liveStep(), e.call_id, e.name, e.arguments); },
    ToolOutputDelta: function (e) {
      const call = calls[e.call_id];
      if (call) { call.output.hidden = false; call.output.textContent += e.text; }
    },
    ToolCallFinished: function (e) { finishCall(e.call_id, e.content, e.is_error, e.display); },
    StatusChanged: function (e) { setStatus(e.status); },
    PermissionRequested: function (e) { addApproval(e); setStatus("waiting"); },
    PermissionResolved: function (e) {
      setStatus("running");
      const card = document.querySelector('.approval[data-request="' + CSS.escape(e.request_id) + '"]');
      if (card) card.remove();
    },
    PermissionDenied: function (e) { liveStep().tools.appendChild(el("div", "denied", "refused " + e.name + ": " + e.reason)); },
    Notice: function (e) { (live ? live.footer : $("#turns")).appendChild(el("div", "notice " + e.level, e.text)); },
    Queued: function () { refreshState(); },
    Steered: function (e) { if (live) live.steps.appendChild(el("div", "user steered", e.text)); },
    TurnFinished: function (e) {
      if (live) {
        live.footer.appendChild(el("div", "status " + e.status, e.status + (e.error ? ": " + e.error : "")));
        live = null;
      }
      refreshState();
      refreshSessions();
    },
    TurnCost: function () { refreshState(); },
    ExplorationStarted: function (e) { $("#explorations").prepend(el("div", "notice", "exploring in " + e.n + " branches: " + e.prompt)); },
    ExplorationFinished: function () { openSession(current); },
    Rewound: function () { openSession(current); },
    Overflow: function () { /* the loop reconnects after lastSeq */ },
  };

  function handle(event) {
    if (typeof event.seq === "number") lastSeq = Math.max(lastSeq, event.seq);
    const handler = handlers[event.type];
    if (handler) handler(event);
  }

  function addApproval(e) {
    if (document.querySelector('.approval[data-request="' + CSS.escape(e.request_id) + '"]')) return;
    const card = el("div", "approval");
    card.dataset.request = e.request_id;
    card.appendChild(el("div", "question", "Allow " + e.tool + "? " + (e.reason ? "(" + e.reason + ")" : "")));
    if (e.preview) card.appendChild(diffView(e.preview));
    else card.appendChild(el("code", "command", argsSummary(e.tool, e.arguments)));
    const buttons = el("div", "buttons");
    const choices = [["allow", "Allow once"], ["allow_always", e.always_rule ? "Always allow " + e.always_rule : "Always allow this call"], ["deny", "Deny"]];
    for (const choice of choices) {
      const button = el("button", "decision " + choice[0], choice[1]);
      button.type = "button";
      button.dataset.decision = choice[0];
      button.addEventListener("click", async function () {
        try { await api("POST", "/sessions/" + encodeURIComponent(current) + "/permissions/" + encodeURIComponent(e.request_id), { decision: choice[0] }); card.remove(); }
        catch (err) { showError(err.message); }
      });
      buttons.appendChild(button);
    }
    card.appendChild(buttons);
    $("#approvals").appendChild(card);
  }

  // -- views: cost, context, branches, diff -----------------------------------------------------------

  function renderCost(records, total) {
    const body = $("#cost-table tbody");
    body.textContent = "";
    const costs = records.map(function (r) { return r.cost || 0; });
    const most = Math.max.apply(null, costs.concat([1e-9]));
    for (const r of records) {
      const row = el("tr");
      const cells = [r.turn, r.prompt.slice(0, 60), r.status, r.usage.prompt_tokens || 0, r.usage.cached_tokens || 0,
        r.usage.completion_tokens || 0, usd(r.cost)];
      for (const c of cells) row.appendChild(el("td", "", c));
      const barCell = el("td");
      const bar = el("div", "bar");
      bar.style.width = Math.round(100 * (r.cost || 0) / most) + "%";
      barCell.appendChild(bar);
      row.appendChild(barCell);
      body.appendChild(row);
    }
    const foot = el("tr", "total");
    foot.appendChild(el("td", "", "all"));
    foot.appendChild(el("td", "", "this session (turns served here)"));
    for (let i = 0; i < 4; i++) foot.appendChild(el("td"));
    foot.appendChild(el("td", "", usd(total)));
    body.appendChild(foot);
  }

  function renderContext(records, now) {
    const legend = $("#context-legend");
    legend.textContent = "";
    for (const name of CATEGORIES.concat(["free"])) legend.appendChild(el("span", "key c-" + name, name));
    const chart = $("#context-chart");
    chart.textContent = "";
    const rows = records.map(function (r) { return { label: "turn " + r.turn, c: r.context, compacted: r.compacted }; });
    rows.push({ label: "now", c: Object.assign({ used: now.used, window: now.window }, now.breakdown), compacted: false });
    const windowSize = Math.max.apply(null, rows.map(function (r) { return r.c.window || 1; }));
    const most = Math.max.apply(null, rows.map(function (r) { return r.c.used || 0; }));
    // a window far larger than what is used would leave every bar a sliver: scale to the largest use then
    const scale = most > windowSize / 4 ? windowSize : Math.max(1, Math.ceil(most * 1.25));
    legend.appendChild(el("span", "sub", scale === windowSize ? "bars: the whole window (" + windowSize + " tokens)"
      : "bars scaled to " + scale + " tokens; the window is " + windowSize));
    for (const row of rows) {
      const line = el("div", "ctx-row");
      line.appendChild(el("span", "ctx-label", row.label + (row.compacted ? " ⟲ compacted" : "")));
      const bar = el("div", "ctx-bar");
      let used = 0;
      for (const name of CATEGORIES) {
        const value = row.c[name] || 0;
        used += value;
        const part = el("span", "seg c-" + name);
        part.style.width = (100 * value / scale) + "%";
        part.title = name + ": " + value + " tokens";
        bar.appendChild(part);
      }
      const rowWindow = row.c.window || windowSize;
      bar.title = "free: " + Math.max(0, rowWindow - used) + " of " + rowWindow + " tokens";
      line.appendChild(bar);
      line.appendChild(el("span", "ctx-num", (row.c.used || used) + " / " + rowWindow));
      chart.appendChild(line);
    }
  }

  function renderBranches(explorations) {
    const box = $("#explorations");
    box.textContent = "";
    for (const x of explorations.slice().reverse()) {
      const section = el("div", "exploration");
      section.appendChild(el("div", "x-head", "exploration " + x.exploration + " · " + x.exploration_status +
        " · verify: " + (x.verify || "none") + " · total " + usd(x.cost_usd_total) + " · per verified " + usd(x.cost_usd_per_verified)));
      const grid = el("div", "branch-grid");
      for (const b of x.branches) {
        const card = el("div", "branch" + (b.id === x.chosen ? " chosen" : ""));
        card.dataset.branch = b.id;
        card.appendChild(el("div", "b-head", b.id + (b.id === x.chosen ? " ★ chosen" : "")));
        card.appendChild(el("div", "b-verify " + (b.verified ? "ok" : "failed"),
          (b.verified ? "✓ verified" : "✗ not verified") + (b.verify_exit !== null && b.verify_exit !== undefined ? " (exit " + b.verify_exit + ")" : "")));
        card.appendChild(el("div", "b-meta", b.status + " · " + (Array.isArray(b.changes) ? b.changes.length : (b.changes || 0)) + " files · " + usd(b.cost_usd)));
        if (b.answer) { const a = el("div", "b-answer"); a.innerHTML = md.render(b.answer); card.appendChild(a); }
        card.appendChild(diffView(b.diff || "(no changes)"));
        grid.appendChild(card);
      }
      section.appendChild(grid);
      if (x.chosen_reason) section.appendChild(el("div", "sub", x.chosen_reason));
      box.appendChild(section);
    }
  }

  async function showDiff() {
    try {
      const data = await api("GET", "/sessions/" + encodeURIComponent(current) + "/diff");
      const target = $("#diff");
      target.replaceWith(diffView(data.diff || "(no file changes in this session)"));
      document.querySelector("#changes pre").id = "diff";
    } catch (err) { showError(err.message); }
  }

  // -- wiring -----------------------------------------------------------------------------------------

  async function send(steer) {
    const text = $("#prompt").value.trim();
    if (!text || !current) return;
    try {
      await api("POST", "/sessions/" + encodeURIComponent(current) + "/messages", { text: text, steer: steer });
      $("#prompt").value = "";
    } catch (err) { showError(err.message); }
  }

  function start() {
    const fragment = new URLSearchParams(location.hash.slice(1));
    if (fragment.get("token")) {
      sessionStorage.setItem("kimicode-token", fragment.get("token"));
      history.replaceState(null, "", location.pathname + location.search);
    }
    token = sessionStorage.getItem("kimicode-token") || "";
    if (!token) { showError("no token: open the address `kimicode web` printed (it ends in #token=…)"); return; }

    $("#new-session").addEventListener("submit", async function (e) {
      e.preventDefault();
      const body = { workspace: $("#workspace").value.trim(), permission_mode: $("#mode").value };
      if ($("#model").value.trim()) body.model = $("#model").value.trim();
      try { const made = await api("POST", "/sessions", body); openSession(made.id); } catch (err) { showError(err.message); }
    });
    $("#composer").addEventListener("submit", function (e) { e.preventDefault(); send(false); });
    $("#prompt").addEventListener("keydown", function (e) {
      if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); send(false); }
    });
    $("#steer").addEventListener("click", function () { send(true); });
    $("#interrupt").addEventListener("click", function () { api("POST", "/sessions/" + encodeURIComponent(current) + "/interrupt").catch(function (err) { showError(err.message); }); });
    $("#undo").addEventListener("click", async function () {
      try { await api("POST", "/sessions/" + encodeURIComponent(current) + "/undo", {}); openSession(current); } catch (err) { showError(err.message); }
    });
    $("#fork").addEventListener("click", async function () {
      try { const made = await api("POST", "/sessions/" + encodeURIComponent(current) + "/fork", {}); openSession(made.id); } catch (err) { showError(err.message); }
    });
    $("#explore").addEventListener("submit", async function (e) {
      e.preventDefault();
      const body = { text: $("#explore-prompt").value.trim(), n: Number($("#explore-n").value) || 2 };
      if ($("#explore-verify").value.trim()) body.verify = $("#explore-verify").value.trim();
      try { await api("POST", "/sessions/" + encodeURIComponent(current) + "/explore", body); } catch (err) { showError(err.message); }
    });
    for (const button of document.querySelectorAll("#tabs button")) {
      button.addEventListener("click", function () {
        for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b === button);
        for (const tab of document.querySelectorAll(".tab")) tab.hidden = tab.id !== button.dataset.tab;
        if (button.dataset.tab === "changes") showDiff();
      });
    }
    refreshSessions();
    setInterval(refreshSessions, 5000);
  }

  document.addEventListener("DOMContentLoaded", start);
})();
