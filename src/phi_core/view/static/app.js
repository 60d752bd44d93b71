// phi view: one page over the JSON API (/api/...). Every value from the server goes into the
// DOM as text (textContent / text nodes), never as HTML: answers are model-written.
"use strict";

(() => {
  const main = document.getElementById("main");

  // ------------------------------------------------------------------ helpers

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") el.className = value;
      else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
      else el.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }

  class ApiError extends Error {
    constructor(message, status) {
      super(message);
      this.status = status;
    }
  }

  async function api(path) {
    const response = await fetch(path, { headers: { Accept: "application/json" } });
    let body;
    try {
      body = await response.json();
    } catch (_err) {
      throw new ApiError(`The server answered ${response.status} without JSON.`, response.status);
    }
    if (!response.ok) throw new ApiError(body.error || `HTTP ${response.status}`, response.status);
    return body;
  }

  const money = (v) => (v === null || v === undefined ? "—" : v === 0 ? "$0" : `$${Number(v).toFixed(v >= 1 ? 2 : 5)}`);
  const secs = (v) => (v === null || v === undefined ? "—" : `${Number(v).toFixed(2)} s`);
  const num = (v, digits = 3) => (v === null || v === undefined ? "—" : Number(v).toFixed(digits));
  const pct = (v) => (v === null || v === undefined ? "—" : `${(100 * Number(v)).toFixed(0)} %`);
  const when = (iso) => (iso ? iso.replace("T", " ").replace(/\.\d+Z$/, " UTC") : "—");
  const short = (text, n = 110) => (text && text.length > n ? `${text.slice(0, n - 1)}…` : text || "");
  const runHref = (run) => (run.kind === "select" ? "#/selections/" : "#/runs/") + encodeURIComponent(run.id);
  const plain = (value) => (typeof value === "string" ? value : JSON.stringify(value));

  function badge(status) {
    const ok = status === "ok" || status === "completed";
    return h("span", { class: `badge ${ok ? "ok" : "bad"}` }, status || "—");
  }

  // A chart from the server, inlined (its points' <title>s become tooltips). The server
  // escapes every label; anything active is dropped all the same before it reaches the page.
  async function svgChart(url, label) {
    const response = await fetch(url);
    const text = await response.text();
    if (!response.ok) return errorBox(`The chart could not be drawn: ${text}`);
    const doc = new DOMParser().parseFromString(text, "image/svg+xml");
    const svg = doc.documentElement;
    if (svg.nodeName !== "svg" || doc.getElementsByTagName("parsererror").length) {
      return errorBox("The chart could not be read.");
    }
    for (const el of svg.querySelectorAll("script, foreignObject, a, use, image")) el.remove();
    for (const el of [svg, ...svg.querySelectorAll("*")]) {
      for (const attr of [...el.attributes]) if (/^on|href$/i.test(attr.name)) el.removeAttribute(attr.name);
    }
    const figure = h("figure", { class: "chart", role: "img", "aria-label": label });
    figure.append(document.importNode(svg, true));
    return figure;
  }

  function errorBox(err) {
    return h("div", { class: "error", role: "alert" }, err instanceof Error ? err.message : String(err));
  }

  function table(headers, rows, cls) {
    return h("table", { class: cls || "grid" },
      h("thead", {}, h("tr", {}, headers.map((name) => h("th", { scope: "col" }, name)))),
      h("tbody", {}, rows));
  }

  function figures(pairs) {
    return h("dl", { class: "figures" },
      pairs.filter(([, v]) => v !== null && v !== undefined && v !== "")
        .map(([k, v]) => [h("dt", {}, k), h("dd", {}, v instanceof Node ? v : plain(v))]));
  }

  function show(title, ...content) {
    document.title = `${title} · phi view`;
    main.replaceChildren(...content.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  }

  // ------------------------------------------------------------------ runs list

  async function runsView(params) {
    const query = new URLSearchParams(params);
    const [page, facets] = await Promise.all([api(`/api/runs?${query}`), api("/api/facets")]);
    const field = (name) => query.get(name) || "";
    const select = (name, label, values) => h("label", {}, label,
      h("select", { name },
        h("option", { value: "" }, "any"),
        values.map((v) => h("option", { value: v, selected: v === field(name) }, v))));
    const form = h("form", { class: "search", role: "search", onsubmit: (event) => {
      event.preventDefault();
      const next = new URLSearchParams();
      for (const [k, v] of new FormData(form)) if (String(v).trim()) next.set(k, String(v).trim());
      location.hash = `#/?${next}`;
    } },
    h("label", {}, "Search", h("input", { type: "search", name: "q", value: field("q"), placeholder: "words in prompts, answers, models" })),
    select("model", "Model", facets.models),
    select("strategy", "Strategy", facets.strategies),
    select("kind", "Kind", facets.kinds),
    select("status", "Status", facets.statuses),
    h("label", {}, "Since", h("input", { type: "text", name: "since", value: field("since"), placeholder: "2026-01-02 or 7d", size: 12 })),
    h("label", {}, "Until", h("input", { type: "text", name: "until", value: field("until"), placeholder: "2026-01-31", size: 12 })),
    h("button", { type: "submit" }, "Search"),
    h("a", { href: "#/", class: "clear" }, "Clear"));

    const rows = page.runs.map((run) => h("tr", { class: "run-row", "data-id": run.id },
      h("td", { class: "nowrap" }, when(run.created_at)),
      h("td", {}, run.kind),
      h("td", {}, h("a", { href: runHref(run) }, short(run.prompt) || "(no prompt)")),
      h("td", {}, run.strategy || "—"),
      h("td", { class: "models" }, run.models.join(", ")),
      h("td", {}, run.winner || "—"),
      h("td", {}, badge(run.status)),
      h("td", { class: "num" }, money(run.cost_usd)),
      h("td", { class: "num" }, secs(run.duration_s))));
    const first = page.total ? page.offset + 1 : 0;
    const last = page.offset + page.runs.length;
    const go = (offset) => {
      query.set("offset", String(Math.max(0, offset)));
      location.hash = `#/?${query}`;
    };
    const pager = h("div", { class: "pager" },
      h("button", { type: "button", disabled: page.offset <= 0, onclick: () => go(page.offset - page.limit) }, "← Newer"),
      h("span", { class: "count" }, `${first}–${last} of ${page.total} runs`),
      h("button", { type: "button", disabled: last >= page.total, onclick: () => go(page.offset + page.limit) }, "Older →"));
    show("Runs",
      h("h1", {}, "Runs"),
      form,
      page.note ? h("p", { class: "note" }, page.note) : null,
      page.runs.length
        ? table(["When", "Kind", "Prompt", "Strategy", "Models", "Winner", "Status", "Cost", "Time"], rows, "grid runs")
        : h("p", { class: "muted" }, page.note ? "" : "No runs match."),
      pager);
  }

  // ------------------------------------------------------------------ one run

  function verdictView(run) {
    const v = run.verdict || {};
    const labels = Object.fromEntries(run.branches.map((b) => [String(b.index), b.label]));
    const details = v.details || {};
    const pairs = [
      ["Strategy", v.strategy || run.strategy],
      ["Judge", v.judge],
      ["Flip rate", details.flip_rate !== undefined ? pct(details.flip_rate) : null],
      ["Tie", v.tie ? "yes (a tie-break rule decided)" : null],
      ["Fallback", v.fallback ? "yes (the strategy fell back to its default)" : null],
      ["Early accept", v.early_accept ? "yes" : null],
      ["Router action", v.action],
      ["Quality", v.quality !== undefined && v.quality !== null ? num(v.quality) : null],
      ["Verified", v.verified === null || v.verified === undefined ? null : String(v.verified)],
      ["Contenders", Array.isArray(v.contenders) ? v.contenders.join(", ") : null],
      ["Evaluation cost", v.evaluation_cost_usd !== undefined ? money(v.evaluation_cost_usd) : null],
      ["Error", v.error],
    ];
    const empty = (value) => value === null || value === "" || (typeof value === "object" && Object.keys(value).length === 0);
    for (const [key, value] of Object.entries(details)) {
      // Internal ids (the judge's loop id) say nothing to a reader.
      if (key !== "flip_rate" && key !== "pairs" && !key.endsWith("_id") && !empty(value)) pairs.push([key.replace(/_/g, " "), value]);
    }
    const scores = Object.entries(v.scores || {});
    const rewards = Object.entries(v.rewards || {});
    return h("section", { class: "verdict", id: "verdict" },
      h("h2", {}, "Verdict"),
      h("p", { class: "winner" }, run.winner
        ? ["Winner: ", h("strong", {}, run.winner), run.winner_model && run.winner_model !== run.winner ? ` (${run.winner_model})` : ""]
        : "No winner."),
      v.rationale ? h("blockquote", { class: "rationale" }, v.rationale) : null,
      figures(pairs),
      Array.isArray(details.pairs) && details.pairs.length ? pairwiseTable(details.pairs, labels) : null,
      scores.length ? table(["Branch", "Score"], scores.map(([k, s]) => h("tr", {}, h("td", {}, labels[k] || k), h("td", { class: "num" }, num(s))))) : null,
      rewards.length ? table(["Arm", "Reward"], rewards.map(([k, r]) => h("tr", {}, h("td", {}, k), h("td", { class: "num" }, num(r))))) : null,
      Array.isArray(v.ranking) && v.ranking.length ? h("ul", { class: "ranking" }, v.ranking.map((line) => h("li", {}, line))) : null);
  }

  // A pairwise judge asks each pair twice, in both orders; a flip is a verdict that changed
  // with the order (position bias), and such a pair is left undecided.
  function pairwiseTable(rows, labels) {
    const name = (index) => (index === null || index === undefined ? "—" : labels[String(index)] || String(index));
    return table(["Pair", "First order", "Swapped order", "Winner", "Flipped"], rows.map((p) => h("tr", {},
      h("td", {}, (p.pair || []).map(name).join(" vs ")),
      h("td", {}, name(p.forward)),
      h("td", {}, name(p.backward)),
      h("td", {}, p.winner === null || p.winner === undefined ? "undecided" : name(p.winner)),
      h("td", {}, p.flipped ? "yes" : "no"))), "grid pairs");
  }

  function branchCard(b) {
    return h("article", { class: `branch${b.winner ? " won" : ""}`, "data-index": b.index },
      h("header", {},
        h("h3", {}, b.label, b.winner ? h("span", { class: "crown", title: "winner" }, " ★ winner") : null),
        h("div", { class: "model" }, b.model, b.phase ? ` · ${b.phase}` : "")),
      figures([
        ["Status", badge(b.status)],
        ["Error kind", b.error_kind],
        ["Tokens", `${b.input_tokens} in · ${b.output_tokens} out`],
        ["Cost", money(b.cost_usd)],
        ["Latency", secs(b.latency_s)],
        ["Score", b.score === null || b.score === undefined ? null : num(b.score)],
      ]),
      b.error ? h("p", { class: "branch-error" }, b.error) : null,
      h("pre", { class: "answer" }, b.text || (b.error ? "" : "(no text)")));
  }

  function routeEventsView(events) {
    if (!events.length) return null;
    const rows = events.map((e) => {
      const p = e.payload || {};
      let what = "";
      if (e.type === "route_decision") {
        what = (p.ranking || []).map((r) => `${r.arm}: score ${num(r.score)} (mean ${num(r.mean)} ± ${num(r.width)}, n=${r.n})`).join("; ");
      } else {
        what = (p.rewards || []).map((r) => `${r.arm}: reward ${num(r.reward)} (${r.source})`).join("; ");
      }
      return h("tr", {},
        h("td", {}, e.type.replace("route_", "")),
        h("td", {}, e.namespace ? h("a", { href: `#/routes/${encodeURIComponent(e.namespace)}` }, e.namespace) : "—"),
        h("td", {}, e.action || "—"),
        h("td", {}, (p.contenders || []).join(", ") || "—"),
        h("td", {}, what || p.reason || "—"));
    });
    return h("section", { class: "route-events" }, h("h2", {}, "Router decisions"),
      table(["Event", "Namespace", "Action", "Contenders", "Ranking / rewards"], rows));
  }

  async function runView(id) {
    const run = await api(`/api/runs/${encodeURIComponent(id)}`);
    if (run.kind === "select") {
      location.replace(`#/selections/${encodeURIComponent(run.id)}`);
      return;
    }
    show(`Run ${run.id}`,
      h("p", { class: "crumbs" }, h("a", { href: "#/" }, "← Runs")),
      h("h1", {}, `${run.kind === "bandit" ? "Bandit race" : run.kind === "race" ? "Race" : "Run"} ${run.id}`),
      figures([
        ["When", when(run.created_at)],
        ["Status", badge(run.status)],
        ["Strategy", run.strategy],
        ["Tokens", `${run.input_tokens} in · ${run.output_tokens} out`],
        ["Cost", money(run.cost_usd)],
        ["Duration", secs(run.duration_s)],
        ["Conversation", run.conversation_id],
        ["Source", run.source],
      ]),
      run.system ? h("section", {}, h("h2", {}, "System"), h("pre", { class: "prompt" }, run.system)) : null,
      h("section", {}, h("h2", {}, "Prompt"), h("pre", { class: "prompt" }, run.prompt)),
      verdictView(run),
      h("section", {}, h("h2", {}, `Branches (${run.branches.length})`),
        h("div", { class: "branches", id: "branches" }, run.branches.map(branchCard))),
      routeEventsView(run.route_events || []),
      run.warnings && run.warnings.length ? h("section", {}, h("h2", {}, "Warnings"), h("ul", {}, run.warnings.map((w) => h("li", {}, w)))) : null);
  }

  // ------------------------------------------------------------------ router state

  function armsTable(arms) {
    return table(["Arm", "Observations", "Mean reward", "", "SD", "95 % ±", "Updated"], arms.map((a) => h("tr", {},
      h("td", {}, a.arm),
      h("td", { class: "num" }, num(a.n, 1)),
      h("td", { class: "num" }, num(a.mean_reward)),
      h("td", {}, a.mean_reward === null ? "" : h("meter", { min: 0, max: 1, value: Math.max(0, Math.min(1, a.mean_reward)) })),
      h("td", { class: "num" }, num(a.reward_sd)),
      h("td", { class: "num" }, num(a.ci95)),
      h("td", { class: "nowrap" }, a.updated_at ? when(new Date(a.updated_at * 1000).toISOString()) : "—"))), "grid arms");
  }

  async function routesView() {
    const state = await api("/api/routes");
    show("Router",
      h("h1", {}, "Router state"),
      h("p", { class: "muted" }, "State: ", h("code", {}, state.location)),
      state.note ? h("p", { class: "note" }, state.note) : null,
      state.namespaces.map((ns) => h("section", { class: "namespace" },
        h("h2", {}, h("a", { href: `#/routes/${encodeURIComponent(ns.namespace)}` }, ns.namespace)),
        armsTable(ns.arms))));
  }

  async function routeView(namespace) {
    const state = await api(`/api/routes/${encodeURIComponent(namespace)}`);
    const rows = state.decisions.map((d) => h("tr", {},
      h("td", { class: "nowrap" }, d.timestamp ? when(new Date(d.timestamp > 1e12 ? d.timestamp : d.timestamp * 1000).toISOString()) : "—"),
      h("td", {}, h("a", { href: `#/runs/${encodeURIComponent(d.run_id)}` }, d.run_id.slice(0, 10))),
      h("td", {}, d.type.replace("route_", "")),
      h("td", {}, d.action || "—"),
      h("td", {}, d.type === "route_decision"
        ? d.ranking.map((r) => `${r.arm} ${num(r.score)}`).join(" > ")
        : d.rewards.map((r) => `${r.arm}: ${num(r.reward)}`).join("; "))));
    show(`Router · ${namespace}`,
      h("p", { class: "crumbs" }, h("a", { href: "#/routes" }, "← Router")),
      h("h1", {}, namespace),
      armsTable(state.arms),
      h("h2", {}, "Decisions over time"),
      await svgChart(`/api/routes/${encodeURIComponent(namespace)}/rewards.svg`, `Rewards over time in ${namespace}`),
      rows.length ? table(["When", "Run", "Event", "Action", "Ranking / rewards"], rows) : h("p", { class: "muted" }, "No decisions logged for this namespace."));
  }

  // ------------------------------------------------------------------ selections

  async function selectionsView(params) {
    const page = await api(`/api/selections?${new URLSearchParams(params)}`);
    show("Selections",
      h("h1", {}, "Selections"),
      page.note ? h("p", { class: "note" }, page.note) : null,
      page.runs.length
        ? table(["When", "Algorithm", "Prompt / dataset", "Best", "Status", "Cost", "Time"], page.runs.map((run) => h("tr", {},
          h("td", { class: "nowrap" }, when(run.created_at)),
          h("td", {}, run.strategy || "—"),
          h("td", {}, h("a", { href: runHref(run) }, short(run.prompt) || "(selection)")),
          h("td", {}, run.winner || "—"),
          h("td", {}, badge(run.status)),
          h("td", { class: "num" }, money(run.cost_usd)),
          h("td", { class: "num" }, secs(run.duration_s)))))
        : h("p", { class: "muted" }, page.note ? "" : "No selection runs logged yet (`phi select …`)."));
  }

  async function selectionView(id) {
    const sel = await api(`/api/selections/${encodeURIComponent(id)}`);
    const rows = sel.combinations.map((c) => h("tr", { class: c.best ? "best" : "" },
      h("td", {}, c.name, c.best ? h("span", { class: "crown" }, " ★") : null),
      h("td", { class: "models" }, Object.entries(c.models).map(([step, model]) => `${step}=${model}`).join(", ")),
      h("td", { class: "num" }, num(c.accuracy)),
      h("td", { class: "num" }, String(c.evaluations)),
      h("td", { class: "num" }, money(c.cost_per_datapoint)),
      h("td", { class: "num" }, secs(c.latency_s)),
      h("td", {}, c.pareto ? "on the front" : "")));
    show(`Selection ${sel.id}`,
      h("p", { class: "crumbs" }, h("a", { href: "#/selections" }, "← Selections")),
      h("h1", {}, `Selection ${sel.id}`),
      figures([
        ["When", when(sel.created_at)],
        ["Algorithm", sel.algorithm],
        ["Status", badge(sel.status)],
        ["Best", sel.best],
        ["Accuracy", sel.accuracy === null ? null : `${num(sel.accuracy)}${sel.ci ? ` (95 % ${num(sel.ci[0])}–${num(sel.ci[1])})` : ""}`],
        ["Evaluations", sel.evaluations === null ? null : `${sel.evaluations} of ${sel.grid_evaluations} (grid)`],
        ["Cost", money(sel.cost_usd)],
        ["Duration", secs(sel.duration_s)],
      ]),
      await svgChart(`/api/selections/${encodeURIComponent(sel.id)}/pareto.svg`, "Pareto chart: accuracy against cost and latency"),
      table(["Combination", "Models", "Accuracy", "Evaluations", "Cost / datapoint", "Latency p50", "Pareto"], rows),
      sel.warnings.length ? h("section", {}, h("h2", {}, "Failures"), h("ul", {}, sel.warnings.map((w) => h("li", {}, w)))) : null);
  }

  // ------------------------------------------------------------------ routing

  async function route() {
    const hash = location.hash.replace(/^#/, "") || "/";
    const [path, queryString] = hash.split("?");
    const params = Object.fromEntries(new URLSearchParams(queryString || ""));
    const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
    const section = parts[0] || "runs";
    for (const link of document.querySelectorAll("nav a")) {
      link.classList.toggle("active", link.dataset.nav === section);
    }
    try {
      if (section === "runs" && parts.length > 1) await runView(parts[1]);
      else if (section === "runs") await runsView(params);
      else if (section === "routes" && parts.length > 1) await routeView(parts.slice(1).join("/"));
      else if (section === "routes") await routesView();
      else if (section === "selections" && parts.length > 1) await selectionView(parts[1]);
      else if (section === "selections") await selectionsView(params);
      else show("Not found", h("h1", {}, "Not found"), errorBox(`No page ${hash}; start at the runs list.`));
    } catch (err) {
      show("Error", h("p", { class: "crumbs" }, h("a", { href: "#/" }, "← Runs")), errorBox(err));
    }
    main.dataset.ready = hash;
  }

  window.addEventListener("hashchange", route);
  route();
})();
