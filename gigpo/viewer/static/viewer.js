// gigpo view: plain JavaScript, no build step and no network beyond the viewer's own server.
// Data: the run overview (metrics, record index) and records (gzipped JSONL, see gigpo/viewer/record_files.py),
// fetched from the server, or embedded base64 in an exported file. Views are hash routes:
//   #/                      run overview: curves and the iteration table
//   #/r/NAME                an iteration's groups, with filters
//   #/r/NAME/g/G            a group's trajectories side by side, aligned by step
//   #/r/NAME/g/G/s/SG       a step group: every action from one state, sorted by advantage
//   #/diff?a=NAME&b=NAME    episodes of the same task seed in two records
"use strict";
(function () {
  const BUNDLE = JSON.parse(document.getElementById("gigpo-bundle").textContent);
  const TOKEN = new URLSearchParams(location.search).get("token");
  const PALETTE = ["#f6c85f", "#9dd3f0", "#b6e3a8", "#f4a6a6", "#cdb4f0", "#f8c89c", "#a7e0d5", "#f2b5dc",
                   "#d7d98a", "#b4c6f5", "#e9b98b", "#c4e8f4", "#e3c1c1", "#c9e7b5", "#f0d9a0", "#d3c2e8"];
  const PER_PAGE = {iterations: 100, groups: 50, steps: 200, seeds: 100};
  const main = document.getElementById("main");
  const crumbs = document.getElementById("crumbs");
  const records = new Map();  // name -> parsed record (the last few)
  let run = null;

  // ------------------------------------------------------------------ formatting
  const esc = (s) => String(s == null ? "" : s).replace(/[&<>"']/g,
    (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  const signed = (x, d = 3) => x == null ? "—" : `<span class="${x > 0 ? "pos" : x < 0 ? "neg" : ""}">${x >= 0 ? "+" : "−"}${Math.abs(x).toFixed(d)}</span>`;
  const fixed = (x, d = 3) => x == null || Number.isNaN(x) ? "—" : Number(x).toFixed(d);
  const pct = (x) => x == null || Number.isNaN(x) ? "—" : (100 * x).toFixed(1) + "%";
  // reduce, not Math.max(...xs): spreading a long array overflows the call stack
  const maxOf = (xs, init = -Infinity) => { let m = init; for (const x of xs) if (x > m) m = x; return m; };
  const minOf = (xs, init = Infinity) => { let m = init; for (const x of xs) if (x < m) m = x; return m; };
  const mean = (xs) => xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null;
  const link = (hash, text, cls = "") => `<a href="#${esc(hash)}"${cls ? ` class="${cls}"` : ""}>${text}</a>`;
  const actionText = (st) => st.valid ? esc(st.action == null ? "(none)" : st.action) : "invalid";
  const withQuery = (path, q) => { const s = q.toString(); return s ? `${path}?${s}` : path; };

  class ViewError extends Error {}

  // ------------------------------------------------------------------ data
  const api = (path) => TOKEN ? `${path}?token=${encodeURIComponent(TOKEN)}` : path;

  async function loadRun() {
    if (run) return run;
    if (BUNDLE.mode === "export") {
      run = BUNDLE.run;
    } else {
      const r = await fetch(api("/api/run"), {cache: "no-store"});
      if (!r.ok) throw new ViewError(`the server answered ${r.status}: ${await r.text()}`);
      run = await r.json();
    }
    run.byName = new Map(run.records.map((h) => [h.name, h]));
    return run;
  }

  async function gunzipBase64(b64) {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    if (typeof DecompressionStream === "undefined") throw new ViewError("this browser cannot read the embedded records (no DecompressionStream); open the file in a current Chromium, Firefox or Safari");
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return await new Response(stream).text();
  }

  async function loadRecord(name) {
    if (records.has(name)) return records.get(name);
    if (!run.byName.has(name)) throw new ViewError(`this run has no record ${name}`);
    let text;
    if (BUNDLE.mode === "export") {
      if (!BUNDLE.records[name]) throw new ViewError(`record ${name} was left out of this export to keep it under its size bound; open the run with gigpo view to see it`);
      text = await gunzipBase64(BUNDLE.records[name]);
    } else {
      const r = await fetch(api(`/api/record/${encodeURIComponent(name)}`));
      if (!r.ok) throw new ViewError(`record ${name}: the server answered ${r.status}`);
      text = await r.text();
    }
    const record = parseRecord(name, text);
    if (records.size >= 6) records.delete(records.keys().next().value);
    records.set(name, record);
    return record;
  }

  function parseRecord(name, text) {
    const lines = text.split("\n").filter((l) => l.trim());
    const header = JSON.parse(lines[0]);
    const trajs = lines.slice(1).map((l) => JSON.parse(l));
    const groups = new Map();
    const stepGroups = new Map();
    const train = header.phase === "train";
    for (const tr of trajs) {
      if (!groups.has(tr.group)) groups.set(tr.group, {id: tr.group, seed: tr.seed, trajs: []});
      groups.get(tr.group).trajs.push(tr);
      for (const st of tr.steps) {
        if (!stepGroups.has(st.sg)) stepGroups.set(st.sg, []);
        stepGroups.get(st.sg).push({tr, st});
      }
    }
    const maxSteps = header.max_steps || maxOf(trajs.map((t) => t.length), 1);
    for (const g of groups.values()) {
      const steps = g.trajs.flatMap((t) => t.steps);
      const shared = new Set(steps.filter((s) => s.sg_size > 1).map((s) => s.sg));
      g.won = g.trajs.filter((t) => t.won).length;
      g.meanReturn = mean(g.trajs.map((t) => t.return));
      g.meanLength = mean(g.trajs.map((t) => t.length));
      g.invalid = g.trajs.reduce((a, t) => a + t.invalid_steps, 0);
      g.long = g.trajs.some((t) => t.length >= maxSteps);
      g.sharedGroups = shared.size;
      g.maxSg = maxOf(steps.map((s) => s.sg_size), 1);
      g.meanAbsAdv = train ? mean(steps.map((s) => Math.abs(s.adv || 0))) : null;
      g.nSteps = steps.length;
    }
    const allSteps = trajs.flatMap((t) => t.steps);
    const sizes = [...stepGroups.values()].map((m) => m.length);
    const hist = new Map();
    for (const s of sizes) hist.set(s, (hist.get(s) || 0) + 1);
    const stats = {
      success: mean(trajs.map((t) => t.won ? 1 : 0)), ret: mean(trajs.map((t) => t.return)),
      invalid: allSteps.length ? allSteps.filter((s) => !s.valid).length / allSteps.length : null,
      length: mean(trajs.map((t) => t.length)), steps: allSteps.length, stepGroups: sizes.length,
      multiShare: allSteps.length ? allSteps.filter((s) => s.sg_size > 1).length / allSteps.length : null,
      meanSize: sizes.length ? allSteps.length / sizes.length : null, maxSize: maxOf(sizes, 0), hist,
      versions: [...new Set(allSteps.map((s) => s.version))].sort((a, b) => a - b),
    };
    const sortBy = allSteps.some((s) => s.adv_step != null) ? ["adv_step", "step advantage"]
      : allSteps.some((s) => s.adv != null) ? ["adv", "advantage"] : ["return", "return"];
    return {name, header, trajs, groups, stepGroups, stats, maxSteps, train, sortBy};
  }

  // ------------------------------------------------------------------ shared pieces
  function colourMap(keys) {
    // keys that occur more than once get a palette colour, in first-seen order; the rest none
    const count = new Map();
    for (const k of keys) count.set(k, (count.get(k) || 0) + 1);
    const colour = new Map();
    for (const k of keys) if (count.get(k) > 1 && !colour.has(k)) colour.set(k, PALETTE[colour.size % PALETTE.length]);
    return colour;
  }

  function pager(total, per, page, hrefFor) {
    const pages = Math.max(1, Math.ceil(total / per));
    if (pages === 1) return "";
    const prev = page > 1 ? link(hrefFor(page - 1), "‹ previous") : "<span class=muted>‹ previous</span>";
    const next = page < pages ? link(hrefFor(page + 1), "next ›") : "<span class=muted>next ›</span>";
    return `<div class="pager">${prev}<span>page ${page} of ${pages}</span>${next}</div>`;
  }

  function pageOf(q, total, per) {
    const pages = Math.max(1, Math.ceil(total / per));
    return Math.min(Math.max(1, parseInt(q.get("page") || "1", 10) || 1), pages);
  }

  function stepCell(rec, g, tr, st, colour, extraClass = "", colourKey = st.sg) {
    const bg = colour.get(colourKey);
    const cls = ["cell", st.valid ? "" : "invalid", bg ? "shared" : "", extraClass].filter(Boolean).join(" ");
    const tip = `state ${st.anchor.slice(0, 8)} · step group of ${st.sg_size}\nresponse: ${st.response}${st.valid ? "" : `\ninvalid: ${st.reason}`}`;
    const advs = rec.train
      ? `<div class="nums">A<sub>ep</sub> <span class="v-adv-episode">${signed(st.adv_episode)}</span> · A<sub>step</sub> <span class="v-adv-step">${signed(st.adv_step)}</span></div>
         <div class="nums">A <span class="v-adv">${signed(st.adv)}</span>${st.value == null ? "" : ` · V ${fixed(st.value)}`}</div>`
      : "";
    return `<td class="${cls}"${bg ? ` style="background:${bg}"` : ""} data-traj="${tr.traj}" data-t="${st.t}" data-sg="${st.sg}" data-sg-size="${st.sg_size}" data-anchor="${st.anchor}" title="${esc(tip)}">
      ${link(`/r/${rec.name}/g/${g}/s/${st.sg}`, `<span class="act">${actionText(st)}</span>`)}
      <div class="nums">r <span class="v-reward">${signed(st.reward, 2)}</span> · R <span class="v-return">${signed(st.return)}</span></div>
      ${advs}<pre class="obs">${esc(st.obs)}</pre><div class="resp">${esc(st.response)}</div></td>`;
  }

  function trajHead(tr, label = "") {
    const outcome = tr.won == null ? "" : tr.won ? "<span class=pos>won</span>" : "<span class=neg>lost</span>";
    return `<th data-traj="${tr.traj}">${label}traj ${tr.traj} ${outcome}<br><span class="muted">return ${fixed(tr.return, 2)} · ${tr.length} steps${tr.invalid_steps ? ` · ${tr.invalid_steps} invalid` : ""}${tr.error ? ` · error: ${esc(tr.error)}` : ""}</span></th>`;
  }

  function keyValues(pairs) {
    return `<div class="kv">${pairs.filter(([, v]) => v != null && v !== "").map(([k, v]) => `<span>${esc(k)} <b>${v}</b></span>`).join("")}</div>`;
  }

  function sharedSeeds(phase) {
    // task seeds found in two or more records of `phase` (evaluation seeds are fixed; training ones rarely repeat)
    const seen = new Map();
    for (const h of run.records) if (h.phase === phase) for (const s of new Set(h.seeds)) seen.set(s, (seen.get(s) || 0) + 1);
    return [...seen.values()].filter((n) => n > 1).length;
  }

  function recordLabel(h) { return `iteration ${h.iteration} ${h.phase}`; }

  function setCrumbs(parts) { crumbs.innerHTML = parts.map(([hash, text]) => link(hash, esc(text))).join(" › "); }

  // ------------------------------------------------------------------ views
  function curveSvg(xs, ys, title) {
    const W = 300, H = 170, L = 46, R = 10, T = 22, B = 24;
    let lo = minOf(ys), hi = maxOf(ys);
    if (lo === hi) { lo -= 0.5; hi += 0.5; }
    const x0 = minOf(xs), x1 = maxOf(xs) === x0 ? x0 + 1 : maxOf(xs);
    const px = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
    const py = (y) => T + (hi - y) / (hi - lo) * (H - T - B);
    const d = xs.map((x, i) => `${i ? "L" : "M"}${px(x).toFixed(1)},${py(ys[i]).toFixed(1)}`).join("");
    const dots = xs.length <= 60 ? xs.map((x, i) => `<circle cx="${px(x).toFixed(1)}" cy="${py(ys[i]).toFixed(1)}" r="2" fill="#2f6fbf"><title>iteration ${x}: ${ys[i].toFixed(4)}</title></circle>`).join("") : "";
    const g = (v) => Math.abs(v) >= 1000 || (Math.abs(v) < 0.01 && v !== 0) ? v.toExponential(1) : v.toFixed(Math.abs(v) < 10 ? 2 : 0);
    return `<svg class="curve" width="${W}" height="${H}" role="img" aria-label="${esc(title)}">
      <text class="title" x="${L}" y="14">${esc(title)}</text>
      <line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="#ccc"/><line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="#ccc"/>
      <text x="${L - 4}" y="${T + 8}" text-anchor="end">${g(hi)}</text><text x="${L - 4}" y="${H - B}" text-anchor="end">${g(lo)}</text>
      <text x="${L}" y="${H - 8}">${x0}</text><text x="${W - R}" y="${H - 8}" text-anchor="end">${x1}</text>
      <path d="${d}"/>${dots}</svg>`;
  }

  function viewOverview(q) {
    setCrumbs([["/", run.name]]);
    const cfg = run.config || {};
    const byIteration = new Map();
    for (const m of run.metrics) byIteration.set(m.iteration, {metrics: m, records: []});
    for (const h of run.records) {
      if (!byIteration.has(h.iteration)) byIteration.set(h.iteration, {metrics: {iteration: h.iteration}, records: []});
      byIteration.get(h.iteration).records.push(h);
    }
    let rows = [...byIteration.entries()].sort((a, b) => a[0] - b[0]);
    if (q.get("recorded") === "1") rows = rows.filter(([, v]) => v.records.length);
    const page = pageOf(q, rows.length, PER_PAGE.iterations);
    const shown = rows.slice((page - 1) * PER_PAGE.iterations, page * PER_PAGE.iterations);
    const curves = run.curves.map(([key, title]) => {
      const pts = run.metrics.filter((m) => typeof m[key] === "number");
      return pts.length ? curveSvg(pts.map((m) => m.iteration), pts.map((m) => m[key]), title) : "";
    }).join("");
    const cols = [["rollout/success", "success", pct], ["rollout/return", "return", fixed], ["rollout/invalid_action_rate", "invalid", pct],
      ["rollout/episode_length", "length", (x) => fixed(x, 1)], ["eval/success", "eval success", pct], ["adv/step_groups", "step groups", (x) => fixed(x, 0)],
      ["adv/step_group_size_mean", "mean size", (x) => fixed(x, 2)], ["adv/step_group_size_max", "max size", (x) => fixed(x, 0)],
      ["adv/singleton_row_share", "singleton rows", pct], ["revisit/self_revisit_share", "self revisits", pct]]
      .filter(([k]) => run.metrics.some((m) => k in m));
    const body = shown.map(([it, v]) => `<tr data-iteration="${it}"><td>${it}</td>${cols.map(([k, , f]) => `<td>${f(v.metrics[k])}</td>`).join("")}
      <td class="l">${v.records.map((h) => link(`/r/${h.name}`, h.phase)).join(" ")}</td></tr>`).join("");
    const q2 = new URLSearchParams(q);
    const diffable = [...new Set(run.records.map((h) => h.phase))].filter((p) => sharedSeeds(p) > 0);
    const recToggle = new URLSearchParams(q); recToggle.delete("page");
    if (q.get("recorded") === "1") recToggle.delete("recorded"); else recToggle.set("recorded", "1");
    return `<h1>${esc(run.name)}</h1>
      ${keyValues([["estimator", esc(cfg["algorithm.estimator"])], ["env", esc(cfg["env.id"])],
        ["groups × size", cfg["env.num_groups"] != null ? `${cfg["env.num_groups"]} × ${cfg["env.group_size"]}` : null],
        ["γ", cfg["algorithm.gamma"]], ["iterations logged", run.metrics.length], ["records", run.records.length]])}
      ${run.notices.map((n) => `<div class="notice">${esc(n)}</div>`).join("")}
      ${diffable.length ? `<p>${diffable.map((p) => link(`/diff?phase=${p}`, `compare ${p} episodes of the same task seeds between iterations`)).join(" · ")}</p>` : ""}
      <h2>Curves</h2><div class="curves">${curves || "<span class=muted>no curves logged yet</span>"}</div>
      <h2>Iterations</h2>
      <p>${link(withQuery("/", recToggle), q.get("recorded") === "1" ? "show every iteration" : "only iterations with records")}</p>
      ${pager(rows.length, PER_PAGE.iterations, page, (p) => { q2.set("page", p); return withQuery("/", q2); })}
      <table class="data" id="iterations"><thead><tr><th>iteration</th>${cols.map(([, t]) => `<th>${t}</th>`).join("")}<th class="l">records</th></tr></thead>
      <tbody>${body}</tbody></table>`;
  }

  const OUTCOMES = {any: () => true, all: (g) => g.won === g.trajs.length, some: (g) => g.won > 0,
                    none: (g) => g.won === 0, mixed: (g) => g.won > 0 && g.won < g.trajs.length};
  const SORTS = {group: (a, b) => a.id - b.id, "return": (a, b) => b.meanReturn - a.meanReturn,
                 invalid: (a, b) => b.invalid - a.invalid, size: (a, b) => b.maxSg - a.maxSg,
                 adv: (a, b) => (b.meanAbsAdv || 0) - (a.meanAbsAdv || 0)};

  function viewIteration(rec, q) {
    const h = rec.header;
    setCrumbs([["/", run.name], [`/r/${rec.name}`, recordLabel(h)]]);
    const outcome = OUTCOMES[q.get("outcome")] ? q.get("outcome") : "any";
    const sort = SORTS[q.get("sort")] ? q.get("sort") : "group";
    const minSize = parseInt(q.get("size") || "0", 10) || 0;
    let groups = [...rec.groups.values()].filter(OUTCOMES[outcome])
      .filter((g) => q.get("invalid") !== "1" || g.invalid > 0).filter((g) => q.get("long") !== "1" || g.long)
      .filter((g) => g.maxSg >= minSize).sort(SORTS[sort]);
    const page = pageOf(q, groups.length, PER_PAGE.groups);
    const shown = groups.slice((page - 1) * PER_PAGE.groups, page * PER_PAGE.groups);
    const s = rec.stats;
    const histMax = maxOf(s.hist.values(), 1);
    const hist = [...s.hist.entries()].sort((a, b) => a[0] - b[0]).slice(0, 24)
      .map(([size, n]) => `<div style="height:${Math.max(2, 40 * n / histMax)}px" title="${n} step groups of size ${size}"></div>`).join("");
    const cut = h.groups_kept < h.groups_total
      ? `<div class="notice">this record keeps ${h.groups_kept} of ${h.groups_total} groups (${h.steps_kept} of ${h.steps_total} steps): logging.rollouts_max_mb=${(h.max_bytes / 1e6).toFixed(1)} bounds its size</div>` : "";
    const opt = (name, value, label, current) => `<option value="${value}"${current === value ? " selected" : ""}>${label}</option>`;
    const box = (name, label) => `<label><input type="checkbox" name="${name}" value="1"${q.get(name) === "1" ? " checked" : ""}> ${label}</label>`;
    const rows = shown.map((g) => `<tr data-group="${g.id}"><td>${link(`/r/${rec.name}/g/${g.id}`, `group ${g.id}`)}</td><td>${g.seed ?? "—"}</td>
      <td>${g.won}/${g.trajs.length}</td><td>${fixed(g.meanReturn)}</td><td>${fixed(g.meanLength, 1)}</td><td>${g.invalid}</td>
      <td>${g.sharedGroups}</td><td>${g.maxSg}</td>${rec.train ? `<td>${fixed(g.meanAbsAdv)}</td>` : ""}</tr>`).join("");
    const q2 = new URLSearchParams(q);
    return `<h1>${esc(recordLabel(h))}</h1>
      ${keyValues([["estimator", esc(h.estimator)], ["policy version", s.versions.join(", ")], ["groups", `${h.groups_kept}`],
        ["trajectories", h.trajs_kept], ["steps", h.steps_kept], ["success", pct(s.success)], ["return", fixed(s.ret)],
        ["invalid", pct(s.invalid)], ["length", fixed(s.length, 2)]])}
      ${keyValues([["step groups", s.stepGroups], ["rows in groups > 1", pct(s.multiShare)], ["mean size", fixed(s.meanSize, 2)],
        ["max size", s.maxSize], ["sizes", `<span class="hist">${hist}</span>`]])}
      ${cut}
      <form class="filters" id="filters">
        <label>outcome <select name="outcome">${opt("outcome", "any", "any", outcome)}${opt("outcome", "all", "all won", outcome)}${opt("outcome", "some", "some won", outcome)}${opt("outcome", "none", "none won", outcome)}${opt("outcome", "mixed", "mixed", outcome)}</select></label>
        ${box("invalid", "with invalid actions")} ${box("long", `long (a trajectory reaches ${rec.maxSteps} steps)`)}
        <label>largest step group ≥ <input type="number" name="size" min="0" style="width:4em" value="${minSize || ""}"></label>
        <label>sort <select name="sort">${Object.keys(SORTS).filter((k) => k !== "adv" || rec.train).map((k) => opt("sort", k, k === "adv" ? "mean |A|" : k === "size" ? "largest step group" : k, sort)).join("")}</select></label>
        <span class="muted">${groups.length} of ${rec.groups.size} groups</span>
      </form>
      ${pager(groups.length, PER_PAGE.groups, page, (p) => { q2.set("page", p); return withQuery(`/r/${rec.name}`, q2); })}
      <table class="data" id="groups"><thead><tr><th>group</th><th>seed</th><th>won</th><th>mean return</th><th>mean length</th><th>invalid steps</th>
      <th>shared states</th><th>largest step group</th>${rec.train ? "<th>mean |A|</th>" : ""}</tr></thead><tbody>${rows}</tbody></table>`;
  }

  function groupOf(rec, gid) {
    const g = rec.groups.get(gid);
    if (!g) throw new ViewError(`${recordLabel(rec.header)} has no group ${gid} (it keeps groups ${[...rec.groups.keys()].slice(0, 20).join(", ")}…)`);
    return g;
  }

  function stepGrid(columns, colour, rec, page, colourKey, marks = () => "") {
    // columns: [{head, gid, tr, rec?}]; rows are step indices, so trajectories line up by step
    const length = maxOf(columns.map((c) => c.tr.steps.length ? c.tr.steps[c.tr.steps.length - 1].t + 1 : 0), 0);
    const from = (page - 1) * PER_PAGE.steps, to = Math.min(length, page * PER_PAGE.steps);
    const at = columns.map((c) => new Map(c.tr.steps.map((st) => [st.t, st])));
    let body = "";
    for (let t = from; t < to; t++) {
      body += `<tr><th class="t">${t}</th>${columns.map((c, i) => {
        const st = at[i].get(t);
        return st ? stepCell(c.rec || rec, c.gid, c.tr, st, colour, marks(i, t), colourKey(st)) : `<td class="empty"></td>`;
      }).join("")}</tr>`;
    }
    return {length, html: `<table class="grid" id="steps"><thead><tr><th class="t">step</th>${columns.map((c) => c.head).join("")}</tr></thead><tbody>${body}</tbody></table>`};
  }

  function viewGroup(rec, gid, q) {
    const g = groupOf(rec, gid);
    setCrumbs([["/", run.name], [`/r/${rec.name}`, recordLabel(rec.header)], [`/r/${rec.name}/g/${gid}`, `group ${gid}`]]);
    const cells = [];
    for (const tr of g.trajs) for (const st of tr.steps) cells.push([st.t, tr.traj, st.sg]);
    cells.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    const colour = colourMap(cells.map((c) => c[2]));
    const length = maxOf(g.trajs.map((t) => t.steps.length ? t.steps[t.steps.length - 1].t + 1 : 0), 0);
    const page = pageOf(q, length, PER_PAGE.steps);
    const grid = stepGrid(g.trajs.map((tr) => ({head: trajHead(tr), gid, tr})), colour, rec, page, (st) => st.sg);
    const shared = [...colour.keys()].map((sg) => ({sg, members: rec.stepGroups.get(sg)}))
      .sort((a, b) => b.members.length - a.members.length || a.sg - b.sg);
    const list = shared.map(({sg, members}) => {
      const rets = members.map((m) => m.st.return);
      const actions = new Set(members.map((m) => m.st.valid ? m.st.action : "invalid"));
      return `<tr data-sg="${sg}"><td class="l"><span class="swatch" style="background:${colour.get(sg)}"></span> ${link(`/r/${rec.name}/g/${gid}/s/${sg}`, `step group ${sg}`)}</td>
        <td>${members.length}</td><td>${actions.size}</td><td>${fixed(maxOf(rets) - minOf(rets))}</td></tr>`;
    }).join("");
    const q2 = new URLSearchParams(q);
    return `<h1>group ${gid} <span class="muted">of ${esc(recordLabel(rec.header))}</span></h1>
      ${keyValues([["task seed", g.seed], ["trajectories", g.trajs.length], ["won", `${g.won}/${g.trajs.length}`],
        ["mean return", fixed(g.meanReturn)], ["shared states", g.sharedGroups]])}
      <p class="muted">Trajectories side by side, aligned by step. Cells of the same colour start from the same state (one step group); white cells' states occur once. Click an action to see its step group. Each cell: action, reward r, discounted return R${rec.train ? ", episode, step and final advantage" : ""}.</p>
      ${pager(length, PER_PAGE.steps, page, (p) => { q2.set("page", p); return withQuery(`/r/${rec.name}/g/${gid}`, q2); })}
      ${grid.html}
      <h2>Step groups with more than one action</h2>
      ${list ? `<table class="data" id="stepgroups"><thead><tr><th class="l">step group</th><th>actions taken</th><th>distinct</th><th>return spread</th></tr></thead><tbody>${list}</tbody></table>` : "<p class=muted>no state occurs twice in this group</p>"}`;
  }

  function viewStepGroup(rec, gid, sg) {
    groupOf(rec, gid);
    const members = rec.stepGroups.get(sg);
    if (!members || members[0].tr.group !== gid) throw new ViewError(`group ${gid} of ${recordLabel(rec.header)} has no step group ${sg}`);
    setCrumbs([["/", run.name], [`/r/${rec.name}`, recordLabel(rec.header)], [`/r/${rec.name}/g/${gid}`, `group ${gid}`],
      [`/r/${rec.name}/g/${gid}/s/${sg}`, `step group ${sg}`]]);
    const [field, label] = rec.sortBy;  // the step advantage; the final one, or the return, where there is none
    const key = (m) => m.st[field];
    const sorted = [...members].sort((a, b) => key(b) - key(a) || b.st.return - a.st.return || a.tr.traj - b.tr.traj || a.st.t - b.st.t);
    const scale = maxOf(sorted.map((m) => Math.abs(key(m))), 1e-9);
    const bar = (x) => `<span class="bar ${x >= 0 ? "pos" : "neg"}" style="width:${(100 * Math.abs(x) / scale).toFixed(1)}px;margin-left:${x >= 0 ? 100 : 100 - 100 * Math.abs(x) / scale}px"></span>`;
    const rows = sorted.map((m) => `<tr data-traj="${m.tr.traj}" data-t="${m.st.t}"><td>${m.tr.traj}</td><td>${m.st.t}</td>
      <td class="l"><span class="act">${actionText(m.st)}</span></td><td class="l muted">${esc(m.st.response.slice(0, 60))}</td>
      <td class="v-reward">${signed(m.st.reward, 2)}</td><td class="v-return">${signed(m.st.return)}</td>
      ${rec.train ? `<td class="v-adv-episode">${signed(m.st.adv_episode)}</td><td class="v-adv-step">${signed(m.st.adv_step)}</td><td class="v-adv">${signed(m.st.adv)}</td>` : ""}
      <td class="barcell">${bar(key(m))}</td></tr>`).join("");
    const byAction = new Map();
    for (const m of members) {
      const a = m.st.valid ? m.st.action : "invalid";
      if (!byAction.has(a)) byAction.set(a, []);
      byAction.get(a).push(m);
    }
    const actions = [...byAction.entries()].map(([a, ms]) => ({a, n: ms.length, ret: mean(ms.map((m) => m.st.return)), adv: mean(ms.map(key))}))
      .sort((x, y) => y.adv - x.adv || y.ret - x.ret);
    const siblings = [...new Set(groupOf(rec, gid).trajs.flatMap((t) => t.steps).filter((s) => s.sg_size > 1).map((s) => s.sg))].sort((a, b) => a - b);
    const i = siblings.indexOf(sg);
    const nav = [i > 0 ? link(`/r/${rec.name}/g/${gid}/s/${siblings[i - 1]}`, "‹ previous step group") : "",
                 i >= 0 && i < siblings.length - 1 ? link(`/r/${rec.name}/g/${gid}/s/${siblings[i + 1]}`, "next step group ›") : ""].filter(Boolean).join(" · ");
    return `<h1>step group ${sg} <span class="muted">group ${gid} of ${esc(recordLabel(rec.header))}</span></h1>
      <p class="muted">Every action taken from this state across the group (${members.length}), sorted by ${label}, as in the GiGPO paper's Figure 3. ${nav}</p>
      <pre class="state" id="anchor-state">${esc(members[0].st.obs)}</pre>
      <h2>Actions</h2>
      <table class="data" id="members"><thead><tr><th>traj</th><th>step</th><th class="l">action</th><th class="l">response</th><th>reward</th><th>return R</th>
      ${rec.train ? "<th>A episode</th><th>A step</th><th>A final</th>" : ""}<th class="l">${label}</th></tr></thead><tbody>${rows}</tbody></table>
      <h2>By action</h2>
      <table class="data" id="by-action"><thead><tr><th class="l">action</th><th>times</th><th>mean return</th>${field !== "return" ? `<th>mean ${label}</th>` : ""}</tr></thead>
      <tbody>${actions.map((x) => `<tr><td class="l act">${esc(x.a)}</td><td>${x.n}</td><td>${signed(x.ret)}</td>${field !== "return" ? `<td>${signed(x.adv)}</td>` : ""}</tr>`).join("")}</tbody></table>`;
  }

  async function viewDiff(q) {
    setCrumbs([["/", run.name], ["/diff", "compare"]]);
    const phases = [...new Set(run.records.map((h) => h.phase))];
    const phase = phases.includes(q.get("phase")) ? q.get("phase") : phases.includes("eval") ? "eval" : phases[0];
    const choices = run.records.filter((h) => h.phase === phase);
    if (choices.length < 2) return `<h1>compare</h1><p class="notice">the run has fewer than two ${esc(phase || "")} records: nothing to compare</p>`;
    const aName = run.byName.has(q.get("a")) ? q.get("a") : choices[0].name;
    const bName = run.byName.has(q.get("b")) ? q.get("b") : choices[choices.length - 1].name;
    const [A, B] = [await loadRecord(aName), await loadRecord(bName)];
    const bySeed = (rec) => { const m = new Map(); for (const g of rec.groups.values()) if (g.seed != null) m.set(g.seed, g); return m; };
    const sa = bySeed(A), sb = bySeed(B);
    const common = [...sa.keys()].filter((s) => sb.has(s)).sort((x, y) => x - y);
    const select = (name, current) => `<select name="${name}">${choices.map((h) => `<option value="${h.name}"${h.name === current ? " selected" : ""}>${esc(recordLabel(h))}</option>`).join("")}</select>`;
    const form = `<form class="filters" id="diff-form"><input type="hidden" name="phase" value="${esc(phase)}">
      <label>A ${select("a", aName)}</label><label>B ${select("b", bName)}</label>
      <label><input type="checkbox" name="changed" value="1"${q.get("changed") === "1" ? " checked" : ""}> only seeds whose outcome changed</label>
      <span class="muted">${common.length} task seeds in both</span></form>`;
    const seed = q.get("seed") == null ? null : Number(q.get("seed"));
    if (seed == null || !sa.has(seed) || !sb.has(seed)) {
      const rate = (g) => g.won / g.trajs.length;
      let rows = common.map((s) => ({s, a: sa.get(s), b: sb.get(s)}));
      if (q.get("changed") === "1") rows = rows.filter((r) => rate(r.a) !== rate(r.b));
      rows.sort((x, y) => Math.abs(rate(y.b) - rate(y.a)) - Math.abs(rate(x.b) - rate(x.a)) || x.s - y.s);
      const page = pageOf(q, rows.length, PER_PAGE.seeds);
      const q2 = new URLSearchParams(q);
      const cell = (g) => `<td>${g.won}/${g.trajs.length}</td><td>${fixed(g.meanReturn)}</td><td>${fixed(g.meanLength, 1)}</td>`;
      const body = rows.slice((page - 1) * PER_PAGE.seeds, page * PER_PAGE.seeds).map((r) => {
        const q3 = new URLSearchParams(q); q3.set("seed", r.s); q3.set("a", aName); q3.set("b", bName); q3.delete("page");
        const change = rate(r.b) > rate(r.a) ? "<span class=pos>better</span>" : rate(r.b) < rate(r.a) ? "<span class=neg>worse</span>" : "same";
        return `<tr data-seed="${r.s}"><td>${link(withQuery("/diff", q3), String(r.s))}</td>${cell(r.a)}${cell(r.b)}<td>${change}</td></tr>`;
      }).join("");
      return `<h1>compare ${esc(phase)} episodes by task seed</h1>${form}
        ${pager(rows.length, PER_PAGE.seeds, page, (p) => { q2.set("page", p); return withQuery("/diff", q2); })}
        <table class="data" id="seeds"><thead><tr><th rowspan="2">seed</th><th colspan="3">A: ${esc(recordLabel(A.header))}</th><th colspan="3">B: ${esc(recordLabel(B.header))}</th><th rowspan="2">B vs A</th></tr>
        <tr><th>won</th><th>return</th><th>length</th><th>won</th><th>return</th><th>length</th></tr></thead><tbody>${body}</tbody></table>`;
    }
    const ga = sa.get(seed), gb = sb.get(seed);
    const columns = [...ga.trajs.map((tr) => ({head: trajHead(tr, "A · "), gid: ga.id, tr, rec: A})),
                     ...gb.trajs.map((tr) => ({head: trajHead(tr, "B · "), gid: gb.id, tr, rec: B}))];
    const keys = [];
    for (const c of columns) for (const st of c.tr.steps) keys.push(st.anchor);
    const colour = colourMap(keys);
    const first = [ga.trajs[0], gb.trajs[0]].map((tr) => new Map(tr.steps.map((st) => [st.t, st])));
    const side = (i) => i < ga.trajs.length ? 0 : 1;
    const marks = (i, t) => {
      const mine = first[side(i)].get(t), other = first[1 - side(i)].get(t);
      return mine && other && (mine.anchor !== other.anchor || mine.action !== other.action) ? "differs" : "";
    };
    const length = maxOf(columns.map((c) => c.tr.steps.length ? c.tr.steps[c.tr.steps.length - 1].t + 1 : 0), 0);
    const page = pageOf(q, length, PER_PAGE.steps);
    const grid = stepGrid(columns, colour, A, page, (st) => st.anchor, marks);
    const back = new URLSearchParams(q); back.delete("seed"); back.delete("page");
    return `<h1>task seed ${seed}: ${esc(recordLabel(A.header))} vs ${esc(recordLabel(B.header))}</h1>${form}
      <p>${link(withQuery("/diff", back), "‹ all seeds")} · <span class="muted">Aligned by step; cells of one colour show the same state, on either side; an orange outline marks a step where the two first trajectories differ in state or action.</span></p>
      ${grid.html}`;
  }

  // ------------------------------------------------------------------ routing
  function parseHash() {
    const raw = location.hash.slice(1) || "/";
    const [path, query] = raw.split("?");
    return {parts: path.split("/").filter(Boolean).map(decodeURIComponent), q: new URLSearchParams(query || "")};
  }

  async function route() {
    const t0 = performance.now();
    const {parts, q} = parseHash();
    document.body.removeAttribute("data-rendered");
    try {
      await loadRun();
      let html;
      if (parts.length === 0) html = viewOverview(q);
      else if (parts[0] === "diff") html = await viewDiff(q);
      else if (parts[0] === "r" && parts.length >= 2) {
        const rec = await loadRecord(parts[1]);
        if (parts.length === 2) html = viewIteration(rec, q);
        else if (parts[2] === "g" && parts.length === 4) html = viewGroup(rec, Number(parts[3]), q);
        else if (parts[2] === "g" && parts[4] === "s" && parts.length === 6) html = viewStepGroup(rec, Number(parts[3]), Number(parts[5]));
      }
      if (html == null) throw new ViewError(`no such page: #${location.hash.slice(1)}`);
      main.innerHTML = html;
    } catch (err) {
      main.innerHTML = `<div class="error">${esc(err instanceof ViewError ? err.message : `${err.name}: ${err.message}`)}</div>`;
      if (!(err instanceof ViewError)) console.error(err);
    }
    window.gigpoRenderMs = performance.now() - t0;
    document.body.setAttribute("data-rendered", location.hash || "#/");
  }

  function formToHash(form) {
    const {parts} = parseHash();
    const q = new URLSearchParams();
    for (const el of form.elements) {
      if (!el.name || (el.type === "checkbox" && !el.checked) || el.value === "") continue;
      q.set(el.name, el.value);
    }
    location.hash = withQuery("/" + parts.map(encodeURIComponent).join("/"), q);
  }

  document.addEventListener("change", (e) => {
    const form = e.target.closest("form.filters");
    if (form) formToHash(form);
  });
  document.addEventListener("submit", (e) => { e.preventDefault(); formToHash(e.target); });
  const toggle = document.getElementById("show-text");
  toggle.addEventListener("change", () => document.body.classList.toggle("show-text", toggle.checked));
  window.addEventListener("hashchange", route);
  route();
})();
