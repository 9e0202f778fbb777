"""The outputs of ``npu sweep``: one row per point, the Pareto front, the table, JSON, CSV and
the plots.

:func:`collect` joins each point's model result, its configuration's area and its RTL check
(if sampled) into a flat row (:data:`COLUMNS`); :func:`mark_pareto` marks the rows on the
cycles-versus-LUT4 Pareto front of their workload and DRAM timing (a point is on the front if
no other point of the same workload and DRAM timing has at most its cycles and at most its
LUT4 and is better in one; the DRAM timing is the environment, not a design choice, so
points under different timings are not compared).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

__all__ = ["COLUMNS", "collect", "mark_pareto", "format_table", "write_outputs",
           "pareto_png", "sweep_roofline_png"]

#: Columns of the table, the CSV and each row (in this order).
COLUMNS = ("config", "rows", "cols", "spad_rows", "acc_rows", "axi_data_bits",
           "dma_outstanding", "n_queues", "dram", "dram_spec", "workload", "format", "backend",
           "status",
           "cycles", "utilization", "bound", "compute_bound", "memory_limit", "intensity",
           "sqnr_db", "bit_exact", "model_seconds", "lut4", "ff", "mult18", "dp16kd",
           "fmax_mhz", "rtl_cycles", "model_error", "rtl_bit_exact", "pareto", "error")


def _model_fields(res: dict | None) -> dict:
    if res is None:
        return {"status": "missing"}
    if res.get("status") != "ok":
        return {"status": "error", "error": res.get("error")}
    rl = res["roofline"]
    return {"status": "ok", "backend": res["backend"], "cycles": res["cycles"],
            "utilization": res["utilization"],
            "bound": rl["bound"], "compute_bound": rl["compute_bound"],
            "memory_limit": rl["memory_limit"], "intensity": rl["intensity"],
            "sqnr_db": res["sqnr_db"], "bit_exact": res["bit_exact"],
            "model_seconds": res["seconds"]}


def _area_fields(res: dict | None) -> dict:
    if not res or res.get("status") != "ok":
        return {}
    return {k: res[k] for k in ("lut4", "ff", "mult18", "dp16kd", "fmax_mhz")}


def _rtl_fields(res: dict | None, model_cycles) -> dict:
    if not res:
        return {}
    if res.get("status") != "ok":
        return {"rtl_cycles": None, "rtl_error": res.get("error")}
    err = (model_cycles - res["cycles"]) / res["cycles"] if model_cycles and res["cycles"] \
        else None
    return {"rtl_cycles": res["cycles"], "model_error": err, "rtl_bit_exact": res["bit_exact"]}


def _fresh(p, res: dict | None) -> dict | None:
    from cosim.bench.sweep_tasks import with_roofline
    return None if res is None else with_roofline(p.config, p.dram, res)


def collect(grid, results: dict[str, dict], ids: dict) -> list[dict]:
    """One row per point of ``grid`` (columns :data:`COLUMNS`, plus ``details``: the model's
    full result, with counters and stages, and the RTL's), Pareto front marked."""
    rows = []
    for p in grid.points():
        c = p.config
        row = {"config": c.spec, **{k: getattr(c, k) for k in COLUMNS[1:8]},
               "dram": p.dram.name, "dram_spec": p.dram.spec(), "workload": p.workload.name,
               "format": p.workload.fmt}
        mid, rid = ids["points"][p.label]
        model = _fresh(p, results.get(mid))
        rtl = _fresh(p, results.get(rid)) if rid else None
        why = p.workload.unsupported(c)
        if why:
            row |= {"status": "unsupported", "error": why}
        else:
            row |= _model_fields(model)
        row |= _area_fields(results.get(ids["area"].get(c.spec)))
        row |= _rtl_fields(rtl, row.get("cycles"))
        row["details"] = {"model": model, "rtl": rtl,
                          "area": results.get(ids["area"].get(c.spec))}
        rows.append({k: row.get(k) for k in COLUMNS} | {"details": row["details"]}
                    | ({"rtl_error": row["rtl_error"]} if "rtl_error" in row else {}))
    mark_pareto(rows)
    return rows


def mark_pareto(rows: list[dict]) -> None:
    """Set ``pareto`` on each row with cycles and LUT4: True on the front of its workload and
    DRAM timing (see the module docstring), False off it; None without both figures."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        r["pareto"] = None
        if r.get("cycles") and r.get("lut4"):
            groups.setdefault((r["workload"], r["dram_spec"]), []).append(r)
    for group in groups.values():
        for r in group:
            r["pareto"] = not any(
                o["cycles"] <= r["cycles"] and o["lut4"] <= r["lut4"]
                and (o["cycles"] < r["cycles"] or o["lut4"] < r["lut4"]) for o in group)


def _fmt(v, kind: str = "") -> str:
    if v is None:
        return "-"
    if kind == "pct":
        return f"{100 * v:.1f}%"
    if kind == "err":
        return f"{100 * v:+.2f}%"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def format_table(rows: list[dict]) -> str:
    """The fixed-width table: one line per point, ``*`` on the Pareto front; a point that did
    not run has its status and a note number in the cycles column (``unsupported [1]``), and
    the notes below the table give each distinct error in full (as ``sweep.json`` has it)."""
    head = ("config", "DRAM", "workload", "cycles", "util", "bound", "SQNR dB", "LUT4", "FF",
            "MULT18", "DP16KD", "RTL cycles", "model err", "")
    body = []
    notes: dict[str, int] = {}      # error message -> note number
    for r in rows:
        if r["status"] != "ok":
            error = r.get("error")
            note = f" [{notes.setdefault(error, len(notes) + 1)}]" if error else ""
            body.append((r["config"], r["dram"], r["workload"], r["status"] + note, "", "", "",
                         _fmt(r["lut4"]), _fmt(r["ff"]), _fmt(r["mult18"]), _fmt(r["dp16kd"]),
                         "", "", ""))
            continue
        body.append((r["config"], r["dram"], r["workload"], str(r["cycles"]),
                     _fmt(r["utilization"], "pct"), _fmt(r["bound"], "pct"),
                     _fmt(r["sqnr_db"]) + ("" if r["bit_exact"] else " (not exact)"),
                     _fmt(r["lut4"]), _fmt(r["ff"]), _fmt(r["mult18"]), _fmt(r["dp16kd"]),
                     _fmt(r["rtl_cycles"]), _fmt(r["model_error"], "err"),
                     "*" if r["pareto"] else ""))
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h)
              for i, h in enumerate(head)]
    left = 3
    lines = ["  ".join(h.ljust(w) if i < left else h.rjust(w)
                       for i, (h, w) in enumerate(zip(head, widths, strict=True))).rstrip()]
    for b in body:
        lines.append("  ".join(v.ljust(w) if i < left or i == len(b) - 1 else v.rjust(w)
                               for i, (v, w) in enumerate(zip(b, widths, strict=True))).rstrip())
    if notes:
        lines += ["", *(f"[{n}] {error}" for error, n in notes.items())]
    return "\n".join(lines)


def write_outputs(doc: dict, out_dir: Path, *, plots: bool = True, roofline: bool = False
                  ) -> dict[str, Path]:
    """Write ``sweep.json`` (the whole document), ``sweep.csv`` (:data:`COLUMNS`),
    ``table.txt``, with ``plots`` ``pareto.png`` and with ``roofline`` ``roofline.png`` into
    ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "sweep.json", "csv": out_dir / "sweep.csv",
             "table": out_dir / "table.txt"}
    paths["json"].write_text(json.dumps(doc, indent=1, default=_json_default) + "\n")
    with paths["csv"].open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(doc["rows"])
    paths["table"].write_text(format_table(doc["rows"]) + "\n")
    if plots and any(r["pareto"] is not None for r in doc["rows"]):
        paths["pareto"] = pareto_png(out_dir / "pareto.png", doc["rows"])
    if roofline and any(r["status"] == "ok" for r in doc["rows"]):
        paths["roofline"] = sweep_roofline_png(out_dir / "roofline.png", doc["rows"])
    return paths


def _json_default(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return str(v)


def pareto_png(path: Path, rows: list[dict]) -> Path:
    """Cycles against LUT4, one panel per workload, one colour per DRAM timing; the Pareto
    front of each (workload, DRAM timing) drawn as a step line through its points, which are
    ringed and numbered, the numbers' configurations listed under the panel (labels beside
    the points overlap where fronts are dense)."""
    from cosim.bench.roofline import _pyplot
    plt = _pyplot()
    pts = [r for r in rows if r["pareto"] is not None]
    workloads = list(dict.fromkeys(r["workload"] for r in pts))
    drams = list(dict.fromkeys(r["dram"] for r in pts))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    from matplotlib.ticker import FuncFormatter
    fig, axes = plt.subplots(1, len(workloads), figsize=(5.5 * len(workloads), 6.4),
                             squeeze=False)
    for ax, wl in zip(axes[0], workloads, strict=True):
        keys: list[str] = []
        for di, dram in enumerate(drams):
            group = [r for r in pts if r["workload"] == wl and r["dram"] == dram]
            if not group:
                continue
            col = colours[di % len(colours)]
            ax.scatter([r["lut4"] for r in group], [r["cycles"] for r in group], s=18,
                       color=col, alpha=0.6, label=f"DRAM {dram}")
            front = sorted((r for r in group if r["pareto"]), key=lambda r: r["lut4"])
            ax.step([r["lut4"] for r in front], [r["cycles"] for r in front], where="post",
                    color=col, lw=1.2)
            ax.scatter([r["lut4"] for r in front], [r["cycles"] for r in front], s=60,
                       facecolors="none", edgecolors="k", lw=1.0)
            for r in front:
                keys.append(f"{len(keys) + 1}: {r['config']}"
                            + (f" ({dram})" if len(drams) > 1 else ""))
                ax.annotate(str(len(keys)), (r["lut4"], r["cycles"]), fontsize=7,
                            xytext=(4, 4), textcoords="offset points")
        ax.text(0, -0.16, "\n".join(keys), transform=ax.transAxes, fontsize=7, va="top",
                family="monospace")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1000:g}k"))
        ax.set_yscale("log")
        ax.set_title(wl)
        ax.set_xlabel("ECP5 LUT4")
        ax.set_ylabel("cycles (performance model)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("npu sweep: cycles against LUT4 (ringed and numbered: Pareto front per DRAM "
                 "timing)")
    fig.tight_layout()
    fig.subplots_adjust(bottom=0.33)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def sweep_roofline_png(path: Path, rows: list[dict]) -> Path:
    """Every measured point against the roofs of its configuration and DRAM timing
    (:func:`cosim.bench.roofline.roofline_png`): the compute roof ``rows * cols`` and the
    machine's memory roof (:func:`cosim.bench.roofline.memory_roof` of the traffic of all the
    configuration's points under that timing, without a burst profile); each point at its
    actual DRAM traffic (counters)."""
    from cosim.bench.roofline import Roof, RooflinePoint, memory_roof, roofline_png
    from hw.config import NPUConfig
    ok = [r for r in rows if r["status"] == "ok"]
    traffic: dict[tuple, list[int]] = {}
    for r in ok:
        c = r["details"]["model"]["counters"]
        t = traffic.setdefault((r["config"], r["dram_spec"]), [0, 0])
        t[0] += c["bytes_read"]
        t[1] += c["bytes_written"]
    roofs = {}
    for (spec, dram), (reads, writes) in traffic.items():
        cfg = NPUConfig.parse(spec)
        bw = memory_roof(cfg, reads, writes, dram)["bytes_per_cycle"]
        name = next(r["dram"] for r in ok if r["dram_spec"] == dram)
        roofs[spec, dram] = Roof(f"{spec}, {name}", cfg.n_pes, bw)
    points = [RooflinePoint(f"{r['workload']} ({r['config']}, {r['dram']})",
                            r["details"]["model"]["macs"],
                            r["details"]["model"]["roofline"]["dram_bytes"], r["cycles"],
                            roofs[r["config"], r["dram_spec"]]) for r in ok]
    return roofline_png(path, points, title="npu sweep: measured points (performance model)")
