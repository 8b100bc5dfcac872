"""The report's parity views: one number format, and the tables of parity per query kind
(sentences | vectors) and per instruction set (this host's kernels and the emulated arm64 ones)."""
from __future__ import annotations

import html

METRICS = ("relevance_max_abs", "relevance_mean_abs", "weights_max_abs", "topk_overlap_mean", "topk_overlap_min")


def fmt_metric(value) -> str:
    """One format for every number the report prints (tests parse it back)."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:.4g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.3e}"


def isa_rows(manifest: dict) -> list[dict]:
    """One row per variant and instruction set whose kernels ran it (parity.by_isa): this host's
    and the emulated ones, each measured against the same gate or "not measured: <reason>"."""
    rows = []
    for name, entry in manifest.get("targets", {}).items():
        for vname, v in (entry.get("variants") or {}).items():
            parity = (v or {}).get("parity") or {}
            # this host's kernels first, then the emulated ones
            for isa, rec in sorted((parity.get("by_isa") or {}).items(), key=lambda kv: "emulated" in kv[0]):
                facts = rec.get("facts") or {}
                if not rec.get("measured"):
                    status = rec.get("reason") or "not measured"
                else:
                    status = "passed" if rec.get("passed") else "FAILED: " + "; ".join(rec.get("failures") or [])
                rows.append({"target": name, "variant": vname, "isa": isa, "status": status,
                             "measured": bool(rec.get("measured")), "passed": rec.get("passed"),
                             "metrics": rec.get("metrics") or {}, "gate": parity.get("gate") or {},
                             "runtime": rec.get("runtime") or "-", "ms_per_call": facts.get("ms_per_call_median"),
                             "vs_host": (rec.get("vs_host") or {}).get("relevance_max_abs")})
    return rows


def _isa_html(manifest: dict) -> str:
    rows = isa_rows(manifest)
    if not rows:
        return "<p>No variant in this publish is also checked on another instruction set's kernels.</p>"
    head = "".join(f"<th>{m}</th>" for m in METRICS)
    out = ["<p>The phones run arm64 kernels; where this host can emulate them (qemu-user), the same held-out "
           "split runs there and is held to the same gate. ms/call: median per call in the emulator "
           "(emulation is many times slower than a phone; only parity is compared).</p>",
           f"<table><tr><th>target</th><th>variant</th><th>instruction set</th><th>status</th>{head}"
           "<th>relevance max abs vs this host</th><th>ms/call</th><th>runtime</th></tr>"]
    for r in rows:
        klass = "failed" if r["measured"] and not r["passed"] else ("verified" if r["measured"] else "unverified")
        # attributes of their own: the parity table's data-target/data-variant/data-metric cells are
        # this host's numbers, and a reader of those must not pick up another ISA's
        cells = "".join(f"<td data-isa-metric='{m}'>{fmt_metric(r['metrics'].get(m))}</td>" for m in METRICS)
        out.append(f"<tr data-isa-target='{html.escape(r['target'])}' data-isa-variant='{html.escape(r['variant'])}' "
                   f"data-isa='{html.escape(r['isa'])}'><td>{html.escape(r['target'])}</td><td>{html.escape(r['variant'])}</td>"
                   f"<td>{html.escape(r['isa'])}</td><td class='{klass}' data-field='isa-status'>{html.escape(r['status'])}</td>"
                   f"{cells}<td>{fmt_metric(r['vs_host'])}</td><td>{fmt_metric(r['ms_per_call'])}</td>"
                   f"<td><small>{html.escape(r['runtime'])}</small></td></tr>")
    return "".join(out) + "</table>"


def _isa_markdown(manifest: dict) -> list[str]:
    rows = isa_rows(manifest)
    if not rows:
        return []
    lines = ["", "## Parity per instruction set", "",
             "| target | variant | instruction set | status | relevance mean abs | top-K mean | top-K min | ms/call |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['target']} | {r['variant']} | {r['isa']} | {r['status'].replace('|', '/')} | "
              f"{fmt_metric(r['metrics'].get('relevance_mean_abs'))} | {fmt_metric(r['metrics'].get('topk_overlap_mean'))} | "
              f"{fmt_metric(r['metrics'].get('topk_overlap_min'))} | {fmt_metric(r['ms_per_call'])} |" for r in rows]
    return lines



SUBSET_METRICS = ("topk_overlap_mean", "topk_overlap_min", "relevance_mean_abs", "relevance_max_abs")


def subset_cells(r: dict) -> list[tuple[str, str, str]]:
    """(metric, sentences, vectors) for a row: the held-out set's two query kinds side by side."""
    sub = r.get("subsets") or {}
    return [(m, fmt_metric((sub.get("sentences") or {}).get(m)), fmt_metric((sub.get("vectors") or {}).get(m)))
            for m in SUBSET_METRICS]


def _subset_table(rows: list[dict]) -> str:
    """Each variant's parity on typed sentences (through the published query encoder) and on seeded
    unit vectors; the gate holds on each alone."""
    measured = [r for r in rows if r.get("subsets")]
    if not measured:
        return "<p>No variant was measured per query kind (a manifest written before issue 41, or nothing measured).</p>"
    head = "".join(f"<th>{m}<br><small>sentences | vectors</small></th>" for m in SUBSET_METRICS)
    out = [f"<table class='subsets'><tr><th>target</th><th>variant</th>{head}</tr>"]
    for r in measured:
        # data-subset-metric, not data-metric: the parity table's cells are found by (target, variant, metric)
        cells = "".join(f"<td data-subset-metric='{m}'>{a} | {b}</td>" for m, a, b in subset_cells(r))
        out.append(f"<tr data-target='{html.escape(r['target'])}' data-variant='{html.escape(r['variant'])}'>"
                   f"<td>{html.escape(r['target'])}</td><td>{html.escape(r['variant'])}</td>{cells}</tr>")
    return "".join(out) + "</table>"


def _photo_table(rows: list[dict]) -> str:
    """Each measured variant's top-K min / relevance max error on each photo kind of the held-out
    split (greyscale, fine texture, document scan, small or upscaled) and its hardest sample: where
    a quantised model is weakest, beside the gate that holds on every sample."""
    measured = [r for r in rows if (r.get("photos") or {}).get("kinds")]
    if not measured:
        return "<p>No variant was measured per photo kind (a manifest written before the held-out split had them).</p>"
    kinds = list(dict.fromkeys(k for r in measured for k in r["photos"]["kinds"]))
    head = "".join(f"<th>{html.escape(k)}<br><small>top-K min | rel max</small></th>" for k in kinds)
    out = [f"<table class='photos'><tr><th>target</th><th>variant</th>{head}<th>hardest sample (top-K)</th></tr>"]
    for r in measured:
        got = r["photos"]["kinds"]
        cells = "".join(f"<td data-photo-kind='{html.escape(k)}'>{fmt_metric(got.get(k, {}).get('topk_overlap_min'))} | "
                        f"{fmt_metric(got.get(k, {}).get('relevance_max_abs'))}</td>" for k in kinds)
        hardest = (r["photos"].get("hardest") or {}).get("topk_overlap") or {}
        out.append(f"<tr data-target='{html.escape(r['target'])}' data-variant='{html.escape(r['variant'])}'>"
                   f"<td>{html.escape(r['target'])}</td><td>{html.escape(r['variant'])}</td>{cells}"
                   f"<td>{html.escape(str(hardest.get('sample', '')))} {fmt_metric(hardest.get('value'))}</td></tr>")
    return "".join(out) + "</table>"
