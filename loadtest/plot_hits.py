#!/usr/bin/env python3
"""Plots the NVMe hit rate and throughput over time from loadtest JSON reports (their
`samples`) as one SVG, no dependencies: plot_hits.py OUT.svg LABEL=report.json ..."""
import json
import sys


def series(path):
    r = json.load(open(path))
    out = []
    s = r["samples"]
    for a, b in zip(s, s[1:]):
        dt = b["seconds"] - a["seconds"]
        if dt <= 0:
            continue
        fast = sum(b["reads"][k] - a["reads"][k] for k in ("memtable", "nvme", "promotion_cache"))
        slow = b["reads"]["s3"] - a["reads"]["s3"]
        hit = fast / (fast + slow) if fast + slow else None
        out.append((b["ops"], hit, (b["ops"] - a["ops"]) / dt))
    return out, r["args"]["ops"], r["args"].get("stages")


def main():
    svg_path, runs = sys.argv[1], [a.split("=", 1) for a in sys.argv[2:]]
    W, H, L, T = 900, 420, 60, 30
    colors = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
             f'<rect width="{W}" height="{H}" fill="white"/>']
    pw, ph = W - L - 20, H - T - 60
    parts.append(f'<text x="{L}" y="18">NVMe hit rate of point reads over the run (per sample)</text>')
    for i in range(0, 11):
        y = T + ph - ph * i / 10
        parts.append(f'<line x1="{L}" y1="{y}" x2="{L + pw}" y2="{y}" stroke="#eee"/>')
        parts.append(f'<text x="{L - 8}" y="{y + 4}" text-anchor="end">{i * 10}%</text>')
    stages = None
    for n, (label, path) in enumerate(runs):
        pts, ops, st = series(path)
        stages = stages or st
        coords = [(L + pw * o / ops, T + ph - ph * h) for o, h, _ in pts if h is not None]
        if coords:
            d = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            parts.append(f'<polyline points="{d}" fill="none" stroke="{colors[n % 4]}" stroke-width="2"/>')
        parts.append(f'<text x="{L + 10 + 160 * n}" y="{H - 12}" fill="{colors[n % 4]}">{label}</text>')
    if stages:
        names = stages.split(",")
        for i, name in enumerate(names):
            x = L + pw * i / len(names)
            parts.append(f'<line x1="{x}" y1="{T}" x2="{x}" y2="{T + ph}" stroke="#999" stroke-dasharray="4,3"/>')
            parts.append(f'<text x="{x + 4}" y="{T + ph + 16}">{name}</text>')
    parts.append(f'<text x="{L + pw / 2}" y="{T + ph + 34}" text-anchor="middle">operations (stages of equal length)</text>')
    parts.append("</svg>")
    open(svg_path, "w").write("\n".join(parts))


if __name__ == "__main__":
    main()
