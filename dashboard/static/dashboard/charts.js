/* Draws the Charts page (templates/dashboard/charts.html) with the vendored Chart.js.
 *
 * The server embeds the figures as JSON (json_script "chart-data", shaped by
 * dashboard/charts.py): integers, micro-USD for money. They are formatted here for display
 * only, the way core/money.py does, so a tooltip reads like the tables under the charts.
 */
"use strict";

(() => {
  const MICRO_PER_USD = 1000000;
  const MICRO_PER_CENT = 10000;
  // Blue and orange: told apart with any common colour blindness.
  const COLOURS = { platform: "#2c59c8", team: "#d97706", "": "#6b7587", total: "#2c59c8" };
  const LABEL_CHARS = 22; // a longer bar name is cut on the axis; its tooltip has it whole
  const RANKED_BAR_PX = 30;
  const DAY = new Intl.DateTimeFormat("en-US", { month: "short", day: "numeric", timeZone: "UTC" });
  const FULL_DAY = new Intl.DateTimeFormat("en-US", {
    weekday: "short", year: "numeric", month: "short", day: "numeric", timeZone: "UTC",
  });
  const COMPACT = new Intl.NumberFormat("en-US", { notation: "compact" });

  function grouped(whole) {
    return whole.toLocaleString("en-US");
  }

  // Micro-USD as people read dollars: cents, more digits only under a cent, cents rounded
  // half up (core.money.format_usd). Exact for integers up to 2^53 micro-USD (~$9 billion).
  function formatUsd(micro) {
    const sign = micro < 0 ? "-" : "";
    const size = Math.abs(Math.trunc(micro));
    if (size > 0 && size < MICRO_PER_CENT) {
      return `${sign}$0.${String(size).padStart(6, "0").replace(/0+$/, "")}`;
    }
    const cents = Math.floor((size + MICRO_PER_CENT / 2) / MICRO_PER_CENT);
    return `${sign}$${grouped(Math.floor(cents / 100))}.${String(cents % 100).padStart(2, "0")}`;
  }

  // Every digit that is not zero, cents at least (core.money.format_usd_exact).
  function formatUsdExact(micro) {
    const sign = micro < 0 ? "-" : "";
    const size = Math.abs(Math.trunc(micro));
    const rest = String(size % MICRO_PER_USD).padStart(6, "0").replace(/0+$/, "").padEnd(2, "0");
    return `${sign}$${grouped(Math.floor(size / MICRO_PER_USD))}.${rest}`;
  }

  function shortened(label) {
    return label.length > LABEL_CHARS ? `${label.slice(0, LABEL_CHARS - 1)}…` : label;
  }

  function utcDay(iso) {
    return new Date(`${iso}T00:00:00Z`);
  }

  // The value's lines in a tooltip: the amount as read, and every digit when cents round it.
  function valueLines(chart, name, value) {
    if (chart.unit !== "usd") return [`${name}: ${grouped(value)} tokens`];
    const shown = formatUsd(value);
    const exact = formatUsdExact(value);
    return shown === exact ? [`${name}: ${shown}`] : [`${name}: ${shown}`, `  exactly ${exact}`];
  }

  function options(chart) {
    const perDay = chart.layout === "days";
    const stacked = chart.series.length > 1;
    const valueAxis = {
      stacked,
      beginAtZero: true,
      grace: "5%",
      ticks: {
        precision: 0, // integer micro-USD and token counts: no tick between two of them
        callback: (value) => (chart.unit === "usd" ? formatUsd(value) : COMPACT.format(value)),
      },
    };
    const labelAxis = {
      stacked,
      grid: { display: false },
      ticks: perDay
        ? {
            autoSkip: true,
            autoSkipPadding: 12,
            maxRotation: 0,
            callback(value) {
              return DAY.format(utcDay(this.getLabelForValue(value)));
            },
          }
        : {
            autoSkip: false,
            callback(value) {
              return shortened(this.getLabelForValue(value));
            },
          },
    };
    return {
      indexAxis: perDay ? "x" : "y",
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      interaction: perDay ? { mode: "index", intersect: false } : { mode: "nearest", intersect: true },
      scales: perDay ? { x: labelAxis, y: valueAxis } : { x: valueAxis, y: labelAxis },
      plugins: {
        legend: { display: stacked, position: "top", align: "start" },
        tooltip: {
          callbacks: {
            title: (items) => {
              const label = items[0].label;
              return perDay ? FULL_DAY.format(utcDay(label)) : label;
            },
            label: (item) => valueLines(chart, item.dataset.label, item.raw),
            footer: (items) => {
              if (!stacked) return "";
              const total = items.reduce((sum, item) => sum + item.raw, 0);
              return chart.unit === "usd" ? `Total: ${formatUsd(total)}` : `Total: ${grouped(total)} tokens`;
            },
          },
        },
      },
    };
  }

  function draw(canvas, chart) {
    if (chart.layout !== "days") {
      // One row per bar, so a name is never squeezed; the box grows with the bars.
      canvas.parentElement.style.height = `${48 + RANKED_BAR_PX * chart.labels.length}px`;
    }
    return new window.Chart(canvas, {
      type: "bar",
      data: {
        labels: chart.labels,
        datasets: chart.series.map((series) => ({
          label: series.name,
          data: series.values,
          // A bar per payer takes that payer's colour; otherwise the series has one.
          backgroundColor: chart.bar_keys
            ? chart.bar_keys.map((key) => COLOURS[key])
            : COLOURS[series.key] ?? COLOURS.total,
          maxBarThickness: 48,
          borderRadius: 2,
        })),
      },
      options: options(chart),
    });
  }

  window.TollgateCharts = { formatUsd, formatUsdExact, drawn: {} };
  const data = document.getElementById("chart-data");
  if (!data || !window.Chart) return; // no charts, or the library did not load: tables stay
  const body = getComputedStyle(document.body);
  window.Chart.defaults.font.family = body.fontFamily;
  window.Chart.defaults.color = "#556072"; // dashboard.css --muted
  for (const chart of JSON.parse(data.textContent).charts) {
    const canvas = document.querySelector(`canvas[data-chart="${chart.slug}"]`);
    if (canvas) window.TollgateCharts.drawn[chart.slug] = draw(canvas, chart);
  }
})();
