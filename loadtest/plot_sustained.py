#!/usr/bin/env python3
"""Plots write throughput and sorted runs over time from loadtest JSON reports (their
`samples`) as one SVG, no dependencies: plot_sustained.py OUT.svg LABEL=report.json ...

Each report is one phase (e.g. the closed loop to capacity, then the open loop at 95% of
it); phases are drawn one after another on a shared time axis."""
import json
import sys


def phases(runs):
    out, t0 = [], 0.0
    for label, path in runs:
        r = json.load(open(path))
        s = r["samples"]
        pts = []
        for a, b in zip(s, s[1:]):
            dt = b["seconds"] - a["seconds"]
            if dt <= 0:
                continue
            pts.append((t0 + b["seconds"], (b["ops"] - a["ops"]) / dt, b.get("tree", {}).get("sorted_runs", 0)))
        out.append((label, t0, pts))
        t0 += s[-1]["seconds"] if s else 0.0
    return out, t0


def main():
    svg_path, runs = sys.argv[1], [a.split("=", 1) for a in sys.argv[2:]]
    data, t_end = phases(runs)
    W, H, L, R, T = 900, 460, 70, 70, 30
    pw, ph = W - L - R, H - T - 70
    tput_max = max((p[1] for _, _, pts in data for p in pts), default=1.0) * 1.1 or 1.0
    runs_max = max(max((p[2] for _, _, pts in data for p in pts), default=1), 1) + 1
    x = lambda t: L + pw * t / max(t_end, 1e-9)
    y1 = lambda v: T + ph - ph * v / tput_max
    y2 = lambda v: T + ph - ph * v / runs_max
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
             f'<rect width="{W}" height="{H}" fill="white"/>',
             f'<text x="{L}" y="18">Writes per second (blue, left) and sorted runs (red, right) over time</text>',
             f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>']
    for i in range(6):
        v = tput_max * i / 5
        parts.append(f'<text x="{L - 6}" y="{y1(v) + 4:.1f}" text-anchor="end" fill="#1f77b4">{v / 1000:.0f}k</text>')
        r = runs_max * i / 5
        parts.append(f'<text x="{L + pw + 6}" y="{y2(r) + 4:.1f}" fill="#d62728">{r:.0f}</text>')
    for i in range(11):
        t = t_end * i / 10
        parts.append(f'<text x="{x(t):.1f}" y="{T + ph + 16}" text-anchor="middle">{t:.0f}</text>')
    parts.append(f'<text x="{L + pw / 2}" y="{T + ph + 34}" text-anchor="middle">seconds</text>')
    for label, t0, pts in data:
        parts.append(f'<line x1="{x(t0):.1f}" y1="{T}" x2="{x(t0):.1f}" y2="{T + ph}" stroke="#bbb" stroke-dasharray="4"/>')
        parts.append(f'<text x="{x(t0) + 4:.1f}" y="{T + 14}" fill="#555">{label}</text>')
        if pts:
            tp = " ".join(f"{x(t):.1f},{y1(v):.1f}" for t, v, _ in pts)
            sr = " ".join(f"{x(t):.1f},{y2(r):.1f}" for t, _, r in pts)
            parts.append(f'<polyline points="{tp}" fill="none" stroke="#1f77b4" stroke-width="1.2"/>')
            parts.append(f'<polyline points="{sr}" fill="none" stroke="#d62728" stroke-width="1.2"/>')
    parts.append("</svg>")
    open(svg_path, "w").write("\n".join(parts))


if __name__ == "__main__":
    main()
