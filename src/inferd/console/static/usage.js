// The console's usage page: spend or requests per UTC day as a stacked Chart.js bar chart, split
// by model or by key, and the totals table beside it. Uses console.js's api(), query(), format.
"use strict";

const CHART_GROUPS = 8; // groups drawn on their own; the rest are summed as "other"
const COLOURS = ["#2563eb", "#16a34a", "#ea580c", "#9333ea", "#0891b2", "#dc2626", "#ca8a04", "#db2777", "#64748b"];

function daysBetween(first, last) {
  const days = [];
  for (let day = first; day <= last && days.length < 400; day = addDays(day, 1)) days.push(day);
  return days;
}

document.addEventListener("alpine:init", () => {
  // Usage: /v1/usage/summary has one level of grouping, so the chart is drawn from one call per
  // group: group_by=<model|key_id> ranks the groups; group_by=day gives the day totals; then
  // group_by=day filtered on each of the CHART_GROUPS largest groups. "Other" is the day total
  // less those. At most CHART_GROUPS + 3 calls, each bounded by the 366-day window.
  Alpine.data("usage", () => {
    let chart = null; // outside Alpine's reactive proxies: Chart.js keeps its own state
    let ticket = 0; // only the newest load draws
    const today = isoDay(new Date());
    return {
      ...format,
      from: addDays(today, -29),
      to: today,
      split: "model",
      shownSplit: "model",
      metric: "cost_usd",
      loading: false,
      error: "",
      groups: [],
      total: { requests: 0, total_tokens: 0, cost_usd: 0 },
      folded: 0,
      series: { days: [], lines: [] },
      names: {},

      init() {
        this.$watch("split", () => this.load());
        this.$watch("metric", () => this.draw());
        this.load();
      },
      destroy() {
        if (chart) chart.destroy();
        chart = null;
      },
      get chartTitle() {
        return this.metric === "cost_usd" ? "Spend per day" : "Requests per day";
      },
      get foldedNote() {
        return this.folded > 0 ? `The ${this.folded} smallest groups are shown together as “other”.` : "";
      },
      get splitHeading() {
        return this.shownSplit === "model" ? "Model" : "Key";
      },
      get empty() {
        return !this.loading && this.groups.length === 0;
      },
      label(value) {
        if (value === null || value === undefined) return "(none)";
        if (this.shownSplit === "key_id" && this.names[value]) return `${this.names[value]} (${value})`;
        return value;
      },
      async summary(groupBy, filter = {}) {
        const range = { from: this.from, to: addDays(this.to, 1), group_by: groupBy, limit: 1000 };
        const reply = await api("/v1/usage/summary?" + query({ ...range, ...filter }));
        return reply.data;
      },
      async load() {
        if (!this.from || !this.to || this.to < this.from) {
          this.error = "Choose a range whose end is on or after its start.";
          return;
        }
        const mine = ++ticket;
        this.loading = true;
        this.error = "";
        try {
          const split = this.split;
          const [groups, dayTotals] = await Promise.all([this.summary(split), this.summary("day")]);
          if (split === "key_id") {
            const keys = await api("/v1/admin/keys");
            this.names = Object.fromEntries(keys.data.filter((k) => k.name).map((k) => [k.access_key_id, k.name]));
          }
          const drawn = groups.filter((group) => group.group_value !== null).slice(0, CHART_GROUPS);
          const perGroup = await Promise.all(drawn.map((group) => this.summary("day", { [split]: group.group_value })));
          if (mine !== ticket) return;
          const days = daysBetween(this.from, this.to);
          const lines = drawn.map((group, index) => ({
            group: group.group_value,
            byDay: Object.fromEntries(perGroup[index].map((row) => [row.group_value, row])),
          }));
          this.folded = Math.max(groups.length - drawn.length, 0);
          if (this.folded > 0) {
            const byDay = {};
            for (const row of dayTotals) {
              const rest = { requests: row.requests, cost_usd: row.cost_usd };
              for (const line of lines) {
                const part = line.byDay[row.group_value];
                if (part) {
                  rest.requests -= part.requests;
                  rest.cost_usd -= part.cost_usd;
                }
              }
              byDay[row.group_value] = { requests: Math.max(rest.requests, 0), cost_usd: Math.max(rest.cost_usd, 0) };
            }
            lines.push({ group: null, other: true, byDay });
          }
          this.shownSplit = split;
          this.groups = groups;
          this.total = dayTotals.reduce((sum, row) => ({
            requests: sum.requests + row.requests,
            total_tokens: sum.total_tokens + row.total_tokens,
            cost_usd: sum.cost_usd + row.cost_usd,
          }), { requests: 0, total_tokens: 0, cost_usd: 0 });
          this.series = { days, lines };
          this.draw();
        } catch (failure) {
          if (mine === ticket) this.error = `Could not load usage: ${failure.message}`;
        } finally {
          if (mine === ticket) this.loading = false;
        }
      },
      draw() {
        const canvas = this.$root.querySelector("#usage-chart");
        const metric = this.metric;
        const { days, lines } = Alpine.raw(this.series);
        const datasets = lines.map((line, index) => ({
          label: line.other ? "other" : this.label(line.group),
          data: days.map((day) => (line.byDay[day] ? line.byDay[day][metric] : 0)),
          backgroundColor: line.other ? COLOURS[COLOURS.length - 1] : COLOURS[index % (COLOURS.length - 1)],
          stack: "usage",
        }));
        const money = metric === "cost_usd";
        if (chart) chart.destroy();
        chart = new Chart(canvas, {
          type: "bar",
          data: { labels: days, datasets },
          options: {
            animation: false,
            responsive: true,
            maintainAspectRatio: false,
            interaction: { mode: "index", intersect: false },
            scales: {
              x: { stacked: true, ticks: { maxRotation: 0, autoSkip: true } },
              y: {
                stacked: true, beginAtZero: true,
                title: { display: true, text: money ? "USD" : "requests" },
                ticks: money ? { callback: (value) => format.money(value) } : { precision: 0 },
              },
            },
            plugins: {
              legend: { position: "bottom" },
              tooltip: {
                callbacks: {
                  label: (item) => `${item.dataset.label}: ${money ? format.money(item.raw) : format.count(item.raw)}`,
                },
              },
            },
          },
        });
      },
    };
  });
});
