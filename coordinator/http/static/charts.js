// The dashboard's charts, drawn as SVG by hand: stacked bars of counts over time, and
// lines of durations. A chart is an SVG string the page puts in place; no library, no
// build step (the node may have no internet, and the CSP allows only its own files).
"use strict";

const CHART = { width: 560, height: 160, left: 48, right: 8, top: 10, bottom: 22 };

function svgEsc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

// A round step for an axis from 0 to max, and the top it reaches.
function niceTop(max) {
  if (!(max > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 2, 2.5, 5, 10]) {
    if (m * power >= max) return m * power;
  }
  return 10 * power;
}

function axes(top, format, labels) {
  const { width, height, left, right, top: t, bottom } = CHART;
  const plotH = height - t - bottom;
  let out = "";
  for (const f of [0, 0.5, 1]) {
    const y = t + plotH * (1 - f);
    out += `<line class="grid" x1="${left}" x2="${width - right}" y1="${y}" y2="${y}"/>`;
    out += `<text class="axis" x="${left - 4}" y="${y + 4}" text-anchor="end">${svgEsc(format(top * f))}</text>`;
  }
  for (const [x, text] of labels) {
    out += `<text class="axis" x="${x}" y="${height - 6}" text-anchor="middle">${svgEsc(text)}</text>`;
  }
  return out;
}

function legend(series) {
  return `<div class="legend">${series.map((s) => `<span><i class="swatch ${svgEsc(s.cls)}"></i>${svgEsc(s.label)}</span>`).join("")}</div>`;
}

// Stacked bars: buckets [{label, values: {key: n}}], series [{key, label, cls}] bottom
// first. Each bar's title says its counts (a person hovering sees them).
function stackedBars(id, buckets, series, xLabels) {
  const { width, height, left, right, top: t, bottom } = CHART;
  const plotW = width - left - right;
  const plotH = height - t - bottom;
  const totals = buckets.map((b) => series.reduce((n, s) => n + (b.values[s.key] || 0), 0));
  const top = niceTop(Math.max(0, ...totals));
  const step = plotW / Math.max(1, buckets.length);
  const barW = Math.max(1, step * 0.8);
  let bars = "";
  buckets.forEach((b, i) => {
    let y = t + plotH;
    const x = left + i * step + (step - barW) / 2;
    const title = `${b.label}: ${series.map((s) => `${b.values[s.key] || 0} ${s.label}`).join(", ")}`;
    let parts = "";
    for (const s of series) {
      const n = b.values[s.key] || 0;
      if (!n) continue;
      const h = (n / top) * plotH;
      y -= h;
      parts += `<rect class="${svgEsc(s.cls)}" x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${barW.toFixed(1)}" height="${h.toFixed(1)}"/>`;
    }
    if (parts) bars += `<g data-bucket="${i}"><title>${svgEsc(title)}</title>${parts}</g>`;
  });
  const labels = (xLabels || []).map(([i, text]) => [left + (i + 0.5) * step, text]);
  return `<svg id="${svgEsc(id)}" class="chart" viewBox="0 0 ${width} ${height}" role="img">${axes(top, (v) => String(+v.toFixed(1)), labels)}${bars}</svg>${legend(series)}`;
}

// Lines: points [{label, values: {key: seconds or null}}], series [{key, label, cls}].
function lines(id, points, series, xLabels, format) {
  const { width, height, left, right, top: t, bottom } = CHART;
  const plotW = width - left - right;
  const plotH = height - t - bottom;
  const all = points.flatMap((p) => series.map((s) => p.values[s.key])).filter((v) => v != null);
  const top = niceTop(Math.max(0, ...all));
  const step = plotW / Math.max(1, points.length);
  const x = (i) => left + (i + 0.5) * step;
  const y = (v) => t + plotH * (1 - v / top);
  let paths = "";
  for (const s of series) {
    let d = "";
    let dots = "";
    points.forEach((p, i) => {
      const v = p.values[s.key];
      if (v == null) return;
      d += `${d ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
      dots += `<circle class="${svgEsc(s.cls)}" cx="${x(i).toFixed(1)}" cy="${y(v).toFixed(1)}" r="2.5"><title>${svgEsc(`${p.label}: ${s.label} ${format(v)}`)}</title></circle>`;
    });
    if (d) paths += `<path class="line ${svgEsc(s.cls)}" d="${d}"/>${dots}`;
  }
  const labels = (xLabels || []).map(([i, text]) => [x(i), text]);
  return `<svg id="${svgEsc(id)}" class="chart" viewBox="0 0 ${width} ${height}" role="img">${axes(top, format, labels)}${paths}</svg>${legend(series)}`;
}

// Seconds as a person reads them on an axis.
function seconds(v) {
  if (v === 0) return "0";
  if (v < 1) return `${Math.round(v * 1000)} ms`;
  if (v < 120) return `${+v.toFixed(1)} s`;
  return `${+(v / 60).toFixed(1)} min`;
}

window.charts = { stackedBars, lines, seconds };
