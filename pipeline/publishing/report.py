"""The build report: OUT/report.html (self-contained, opens offline) and a short OUT/REPORT.md.

Everything shown comes from the manifest (statuses, files, parity against gates), OUT/bench.json
(latest `invoke bench`, when present) and the held-out outputs each runtime produced when it was
verified. Those outputs are kept under OUT/.cache/report/ so a later build of another target can
still show them side by side; a runtime's maps are shown only while its manifest entry was built
from the same checkpoint.

Pictures (matplotlib, embedded as base64 PNG): for a few held-out photos, the relevance heatmap
and top-K patches of eager PyTorch next to every runtime that ran, with each panel's top-K
overlap against eager, so disagreement is visible at a glance.
"""
from __future__ import annotations

import contextlib
import html
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from arrcoc_edge.publishing.figures import sample_figure, size_figure
from arrcoc_edge.publishing.parity_views import (METRICS, SUBSET_METRICS, _isa_html, _isa_markdown,  # noqa: F401
                                               _photo_table, _subset_table, fmt_metric, isa_rows, subset_cells)
from arrcoc_edge.stages.golden import GoldenSplit
from arrcoc_edge.stages.parity import size_cells

SHOWN_SAMPLES = ("astronaut/centre", "chelsea/whole", "flower/portrait", "hubble_deep_field/panorama")


def outputs_dir(out: Path) -> Path:
    from arrcoc_edge.publishing.folder_state import cache_root

    return cache_root(out) / "report"


def save_outputs(out: Path, stages, checkpoint_sha: str) -> None:
    """Keep each published variant's held-out outputs for later reports (atomic per file)."""
    folder = outputs_dir(out)
    folder.mkdir(parents=True, exist_ok=True)
    for stage in stages:
        if not stage.publishable:
            continue
        for report in stage.variants:
            if report.outputs is None:
                continue
            path = folder / f"{stage.target.name}.{report.variant.name}.npz"
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".npz")
            with os.fdopen(fd, "wb") as f:
                np.savez_compressed(f, checkpoint=np.array(checkpoint_sha), runtime=np.array(report.runtime or ""),
                                    **{k: np.asarray(v) for k, v in report.outputs.items()})
            os.replace(tmp, path)


def load_outputs(out: Path, manifest: dict) -> list[dict]:
    """Saved runtime outputs that belong to the manifest's current entries, in manifest order."""
    runs = []
    for name, entry in manifest.get("targets", {}).items():
        ckpt = entry.get("provenance", {}).get("checkpoint_sha256")
        for variant in entry.get("variants", {}):
            path = outputs_dir(out) / f"{name}.{variant}.npz"
            if not path.is_file():
                continue
            with np.load(path) as data:
                if str(data["checkpoint"]) != ckpt:
                    continue
                reference = ((entry["variants"][variant] or {}).get("parity") or {}).get("reference", EAGER)
                runs.append({"target": name, "variant": variant, "runtime": str(data["runtime"]),
                             "reference": reference,
                             "relevance": data["relevance"], "topk_indices": data["topk_indices"]})
    return runs


def write_report(out: Path, heldout: GoldenSplit | None, log=print, dest: Path | None = None) -> tuple[Path, Path]:
    """Render report.html and REPORT.md from the manifest in `dest` (default: OUT's published one);
    both replaced atomically in `dest`. A build passes its new generation folder before the switch.
    heldout None (a merge without the checkpoint at hand): no pictures, and the page says why."""
    from arrcoc_edge.publishing.folder_state import current_generation

    dest = dest or current_generation(out) or out  # OUT/report.html links into the current generation
    manifest = json.loads((dest / "manifest.json").read_text())
    bench = _read_bench(out)
    runs = load_outputs(out, manifest)
    weights = preset_weights(dest, manifest, log)
    page = render_html(manifest, bench, runs, heldout, weights)
    html_path, md_path = dest / "report.html", dest / "REPORT.md"
    _write_atomic(html_path, page)
    _write_atomic(md_path, render_markdown(manifest, bench, weights))
    log(f"report: {out / html_path.name} ({len(page) // 1024} KB)")
    return html_path, md_path


@contextlib.contextmanager
def never_fails(log):
    """The report describes what is already published: failing to draw it must not undo that."""
    try:
        yield
    except ImportError as exc:
        log(f"report: not written ({exc}); install the 'report' extra (pip install -e '.[report]')")
    except Exception as exc:  # noqa: BLE001 - a plotting bug must not turn a good build into a failed one
        log(f"report: not written ({type(exc).__name__}: {exc}); the artifacts and manifest are published")


def _read_bench(out: Path) -> dict | None:
    path = out / "bench.json"
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except ValueError:
        return None


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)  # mkstemp makes 0600; the report is meant to be read and served
    os.replace(tmp, path)


# ---------------------------------------------------------------- numbers

def fmt_bytes(n) -> str:
    if n is None:
        return "-"
    return f"{n / 1024:.1f} KB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.2f} MB"


def variant_rows(manifest: dict) -> list[dict]:
    rows = []
    for name, entry in manifest.get("targets", {}).items():
        variants = entry.get("variants") or {"-": {"status": entry.get("status"), "reason": entry.get("reason")}}
        for vname, v in variants.items():
            parity = v.get("parity") or {}
            rows.append({
                "target": name, "variant": vname, "status": status_words(entry.get("status"), v.get("status")),
                "variant_status": v.get("status", entry.get("status")),
                "target_status": entry.get("status"), "reason": v.get("reason") or entry.get("reason") or "",
                "bytes": (v.get("size") or {}).get("bytes"), "budget": (v.get("size") or {}).get("budget"),
                "metrics": parity.get("metrics") or {}, "gate": parity.get("gate") or {},
                "subsets": parity.get("subsets") or {}, "photos": parity.get("photos") or {},
                "runtime": parity.get("runtime") or _not_measured(entry.get("status")), "measured": parity.get("measured"),
            })
            rows += _not_built_rows(name, v)
    return rows


def _not_built_rows(target: str, variant: dict) -> list[dict]:
    """Variants a target chose not to build (TensorRT's fp16/int8 plans on a backend without them),
    as the manifest records them in a built variant's info.not_built: shown with their reason, so
    the report says what the build log says."""
    skipped = (variant.get("info") or {}).get("not_built") or {}
    return [{"target": target, "variant": str(name), "status": "not built", "variant_status": "not-built",
             "target_status": None, "reason": str(reason), "bytes": None, "budget": None, "metrics": {},
             "gate": {}, "subsets": {}, "runtime": "not built", "measured": None}
            for name, reason in (skipped.items() if isinstance(skipped, dict) else ())]


EAGER = "eager PyTorch float32"


def status_words(target_status, variant_status) -> str:
    """The terminal's words (pipeline/cli.summary_rows): the target's status, and the variant's own
    in brackets when it is not what that status implies (a published target's variants are verified)."""
    expected = "verified" if target_status == "published" else target_status
    if variant_status in (None, expected):
        return str(target_status)
    return f"{target_status} ({variant_status})"


def _not_measured(target_status) -> str:
    if target_status == "failed":
        return "not measured: the target failed before or during verification (see its reason)"
    return "not run on this host"


def _gate_text(gate: dict, metric: str) -> str:
    if metric in gate.get("max", {}):
        return f"≤ {gate['max'][metric]:g}"
    if metric in gate.get("min", {}):
        return f"≥ {gate['min'][metric]:g}"
    return ""


# ---------------------------------------------------------------- pictures


# ---------------------------------------------------------------- documents

_CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0 20px}
td,th{border:1px solid #ccc;padding:3px 7px;font-size:12px;vertical-align:top}th{background:#f3f3f3}
.published,.verified{color:#17692e}.unverified{color:#8a6100}.failed{color:#b00020}.skipped,.not-built{color:#666}
.pass{color:#17692e}.fail{color:#b00020;font-weight:600}img{max-width:100%}code{font-size:12px}"""


def preset_weights(folder: Path, manifest: dict, log=print) -> dict | None:
    """{sample: {preset query: [information, perspectival, participatory]}}: the balancer's weights
    for the published page's presets on its sample photos, from the checkpoint's model in eager
    float32 (what every artifact is held to). None when there is no page or no checkpoint at hand."""
    web = folder / "web"
    path = Path(str((manifest.get("checkpoint") or {}).get("path")))
    if (manifest.get("targets") or {}).get("web", {}).get("status") != "published" or not path.is_file():
        return None
    import torch

    from arrcoc_edge.relevance.checkpoint import load_checkpoint
    from arrcoc_edge.stages.golden import load_photo

    ckpt = load_checkpoint(path)
    if ckpt.sha256 != manifest["checkpoint"].get("sha256"):
        log("report: the checkpoint at its path changed since the build; no preset weights")
        return None
    presets = json.loads((web / "presets.json").read_text())
    samples = json.loads((web / "config.json").read_text())["samples"]
    queries = torch.tensor(np.asarray(presets["embeddings"], np.float32))
    out = {}
    with torch.no_grad():
        for sample in samples:
            photo = torch.from_numpy(np.array(load_photo(web / sample["file"])))[None].expand(len(queries), -1, -1, -1)
            weights = ckpt.model(photo.contiguous(), queries)[2].numpy()
            out[sample["name"]] = {q: [round(float(x), 3) for x in w] for q, w in zip(presets["queries"], weights)}
    return out


def _weights_html(weights: dict | None) -> str:
    if not weights:
        return "<p>No page in this publish (or its checkpoint is not at hand): no preset weights.</p>"
    samples = list(weights)
    head = "".join(f"<th>{html.escape(s)}</th>" for s in samples)
    rows = "".join(f"<tr><td>{html.escape(q)}</td>" + "".join(
        f"<td data-weights='{html.escape(s)}'>{' / '.join(f'{x:.3f}' for x in weights[s][q])}</td>" for s in samples) + "</tr>"
        for q in weights[samples[0]])
    return ("<p>information / perspectival / participatory, eager float32 on the page's sample photos: "
            "how much each way of knowing decides each preset.</p>"
            f"<table><tr><th>preset</th>{head}</tr>{rows}</table>")


def _weights_markdown(weights: dict | None) -> list[str]:
    if not weights:
        return []
    samples = list(weights)
    lines = ["", "## Balancer weights per preset (information / perspectival / participatory, eager float32)", "",
             "| preset | " + " | ".join(samples) + " |", "|---|" + "---|" * len(samples)]
    lines += [f"| {q} | " + " | ".join(" / ".join(f"{x:.3f}" for x in weights[s][q]) for s in samples) + " |"
              for q in weights[samples[0]]]
    return lines


def render_html(manifest: dict, bench: dict | None, runs: list[dict], heldout: GoldenSplit | None,
                weights: dict | None = None) -> str:
    rows = variant_rows(manifest)
    onnx = manifest.get("targets", {}).get("onnx", {})
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>arrcoc-edge build report</title>",
        "<link rel='icon' href='data:,'>", f"<style>{_CSS}</style></head><body>",
        "<h1>arrcoc-edge build report</h1>", _header(manifest),
        "<h2>Targets</h2>", _status_table(manifest), "<h2>Parity against the gates</h2>", _parity_table(rows),
        "<h2>Parity on sentences and on vectors</h2>", _subset_table(rows),
        "<h2>Parity per photo kind</h2>", _photo_table(rows),
        "<h2>Parity per instruction set</h2>", _isa_html(manifest),
        "<h2>Balancer weights per preset</h2>", _weights_html(weights),
        "<h2>Sample apps: compiled and tested on this host</h2>", _apps_html(manifest),
        "<h2>Sizes</h2>", (f"<img alt='sizes' src='data:image/png;base64,{size_figure(rows, onnx.get('size', {}).get('bytes'))}'>"
                           if any(r["bytes"] for r in rows) else "<p>Nothing with a size in this publish.</p>"),
        "<h2>Latency (latest invoke bench)</h2>", _bench_table(bench),
        "<h2>Relevance maps side by side</h2>", _pictures(heldout, runs, manifest),
        "</body></html>",
    ]
    return "\n".join(parts)


def _header(m: dict) -> str:
    ckpt = m.get("checkpoint", {})
    prov = ckpt.get("provenance", {})
    trained = "trained" if prov.get("trained") else "NOT trained (seeded initialisation)" if prov.get("trained") is False else ""
    tool = ", ".join(f"{k} {v}" for k, v in m.get("toolchain", {}).items())
    return (f"<p>Checkpoint <code>{html.escape(str(ckpt.get('path')))}</code> sha256 <code>{ckpt.get('sha256', '')[:16]}…</code> "
            f"{html.escape(trained)}<br>Exported program <code>{html.escape(str(m.get('exported_program', {}).get('path')))}</code>"
            f"<br>Host {html.escape(str(m.get('host')))}; toolchain: {html.escape(tool)}"
            f"<br>Report written {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}</p>{_merge_header(m)}")


def _merge_header(m: dict) -> str:
    """A merged manifest: which part (host) each target came from, and whether the .pt2 matched."""
    merge = m.get("merge")
    if not merge:
        return ""
    rows = "".join(f"<li><code>{html.escape(p['path'])}</code> on {html.escape(_host_text(p.get('host') or {}))}: "
                   f"{html.escape(', '.join(p.get('targets', [])) or 'nothing kept')}; .pt2 sha256 "
                   f"<code>{str(p.get('exported_program_sha256'))[:16]}…</code></li>" for p in merge.get("parts", []))
    return (f"<p>Merged {html.escape(str(merge.get('merged_at')))} from {len(merge.get('parts', []))} parts "
            f"(exported program {'reproducible' if merge.get('exported_program_reproducible') else 'NOT reproducible'}: "
            f"{html.escape(str(merge.get('exported_program_note')))}):</p><ul>{rows}</ul>")


def _host_text(host: dict) -> str:
    return f"{host.get('os', '?')} {host.get('machine', '?')}, Python {host.get('python', '?')}"


def _status_table(m: dict) -> str:
    out = ["<table><tr><th>target</th><th>status</th><th>reason / notes</th><th>files</th></tr>"]
    for name, e in m.get("targets", {}).items():
        files = "<br>".join(f"{html.escape(f['path'])} ({fmt_bytes(f['bytes'])})" for f in e.get("files", []))
        note = " ".join(x for x in (e.get("reason"), e.get("notes")) if x)
        if e.get("merge"):
            note += f" Built and verified on {_host_text(e['merge'].get('built_and_verified_on') or {})}."
        out.append(f"<tr data-target='{html.escape(name)}'><td>{html.escape(name)}</td>"
                   f"<td class='{e.get('status')}' data-field='status'>{e.get('status')}</td>"
                   f"<td>{html.escape(note)}</td><td>{files}</td></tr>")
    return "".join(out) + "</table>"


def _parity_table(rows: list[dict]) -> str:
    head = "".join(f"<th>{m}</th>" for m in METRICS)
    out = [f"<table><tr><th>target</th><th>variant</th><th>status</th><th>size / budget</th>{head}<th>runtime</th></tr>"]
    for r in rows:
        cells = []
        for metric in METRICS:
            value, gate = r["metrics"].get(metric), _gate_text(r["gate"], metric)
            # an unverified variant's open parity limits are "not measured", not failures
            failed = _fails(r["gate"], metric, value) and not (value is None and r["variant_status"] == "unverified")
            klass = "fail" if failed else ("pass" if gate and value is not None else "")
            cells.append(f"<td class='{klass}' data-metric='{metric}'>{fmt_metric(value)}"
                         f"{'<br><small>' + gate + '</small>' if gate else ''}</td>")
        out.append(f"<tr data-target='{html.escape(r['target'])}' data-variant='{html.escape(r['variant'])}'>"
                   f"<td>{html.escape(r['target'])}</td><td>{html.escape(r['variant'])}</td>"
                   f"<td class='{r['variant_status']}'>{html.escape(r['status'])}<br><small>{html.escape(r['reason'])}</small></td>"
                   f"<td data-metric='size_bytes'>{' '.join(size_cells(r['bytes'], r['budget']))}</td>"
                   f"{''.join(cells)}<td><small>{html.escape(r['runtime'])}</small></td></tr>")
    return "".join(out) + "</table>"


def app_builds(manifest: dict) -> list[tuple[str, dict]]:
    """(target, record) for every published variant that records how its app was compiled and
    tested (`info.app_build`, written by the app targets)."""
    return [(name, v["info"]["app_build"]) for name, e in manifest.get("targets", {}).items()
            for v in (e.get("variants") or {}).values() if (v.get("info") or {}).get("app_build")]


def _apps_html(manifest: dict) -> str:
    builds = app_builds(manifest)
    if not builds:
        return "<p>No app target in this publish.</p>"
    out = ["<table><tr><th>app</th><th>status</th><th>compiler, compiled against</th><th>files compiled</th>"
           "<th>tests</th><th>not verified here</th></tr>"]
    for name, b in builds:
        t = b.get("tests") or {}
        files = b.get("files_compiled") or []
        against = "".join(f"<br><small>{html.escape(str(x))}</small>" for x in b.get("compiled_against") or [])
        out.append(
            f"<tr data-app='{html.escape(name)}'><td>{html.escape(name)}</td>"
            f"<td class='{'pass' if b.get('status') == 'passed' else 'fail' if b.get('status') == 'failed' else ''}' "
            f"data-field='app-status'>{html.escape(str(b.get('status')))}<br><small>{html.escape(b.get('reason') or '')}</small></td>"
            f"<td>{html.escape(str(b.get('compiler') or '-'))}{against}</td>"
            f"<td><details><summary>{len(files)} files</summary><small>{'<br>'.join(html.escape(f) for f in files)}</small></details></td>"
            f"<td>{t.get('passed', 0)} of {t.get('run', 0)} passed ({html.escape(str(t.get('runner', '-')))})"
            f"<details><summary>names</summary><small>{'<br>'.join(html.escape(n) for n in t.get('names') or [])}</small></details></td>"
            f"<td><small>{'<br>'.join(html.escape(x) for x in b.get('not_verified') or [])}</small></td></tr>")
    return "".join(out) + "</table>"


def _apps_markdown(manifest: dict) -> list[str]:
    builds = app_builds(manifest)
    if not builds:
        return []
    lines = ["", "## Sample apps: compiled and tested on this host", "",
             "| app | status | compiler | files compiled | tests passed | not verified here |", "|---|---|---|---|---|---|"]
    for name, b in builds:
        t = b.get("tests") or {}
        lines.append(f"| {name} | {b.get('status')} {b.get('reason') or ''} | {b.get('compiler') or '-'} | "
                     f"{len(b.get('files_compiled') or [])} | {t.get('passed', 0)} of {t.get('run', 0)} | "
                     f"{'; '.join(b.get('not_verified') or [])} |".replace("\n", " "))
    return lines


def _fails(gate: dict, metric: str, value) -> bool:
    if value is None:
        return metric in gate.get("max", {}) or metric in gate.get("min", {})
    if metric in gate.get("max", {}):
        return value > gate["max"][metric]
    if metric in gate.get("min", {}):
        return value < gate["min"][metric]
    return False


def _bench_table(bench: dict | None) -> str:
    if not bench or not bench.get("rows"):
        return "<p>No benchmark yet: run <code>invoke bench</code>.</p>"
    out = [f"<p>{html.escape(str(bench.get('host', '')))} {html.escape(str(bench.get('timestamp', '')))}</p><table>"
           "<tr><th>case</th><th>runtime</th><th>batch</th><th>threads</th><th>median ms</th><th>p90 ms</th><th>runs</th></tr>"]
    for r in bench["rows"]:
        out.append("<tr>" + "".join(f"<td>{html.escape(fmt_metric(r.get(k)))}</td>"
                                    for k in ("case", "runtime", "batch", "threads", "median_ms", "p90_ms", "runs")) + "</tr>")
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in bench.get("notes") or [])
    return "".join(out) + "</table>" + (f"<ul>{notes}</ul>" if notes else "")


def _pictures(heldout: GoldenSplit | None, runs: list[dict], manifest: dict) -> str:
    not_run = [f"{r['target']} {r['variant']}" for r in variant_rows(manifest) if r["variant_status"] != "not-built"
               and not any(x["target"] == r["target"] and x["variant"] == r["variant"] for x in runs)]
    if heldout is None:
        return ("<p>No maps: the checkpoint these artifacts were built from was not at hand when this report "
                "was written (a merge draws them when given <code>--checkpoint</code>).</p>")
    parts = ["<p>Heatmap in the page's colours: relevance 0 blue (faint) through green to 1 red (strong); "
             "white squares with a black edge: the top-K patches. "
             "Each panel's caption gives its top-K overlap with eager PyTorch on that photo.</p>"]
    # a variant held to another reference (the text encoder: its own queries) ran other inputs:
    # its maps beside eager's would read as a parity failure that its table row does not have
    other = [r for r in runs if r.get("reference", EAGER) != EAGER]
    if other:
        parts.append("<p>Not drawn, because they ran other queries than these maps: "
                     + html.escape("; ".join(f"{r['target']} {r['variant']} (compared with {r['reference']}, "
                                             f"see the parity table)" for r in other)) + "</p>")
        runs = [r for r in runs if r not in other]
    missing = (manifest.get("merge") or {}).get("missing_outputs")
    if missing:
        parts.append(f"<p>Saved outputs missing from their merged part (uploaded without <code>.cache/report</code>): "
                     f"{html.escape(', '.join(missing))}</p>")
    if not_run:
        parts.append(f"<p>No maps (runtime not run on this host, or not rebuilt since the checkpoint changed): "
                     f"{html.escape(', '.join(not_run))}</p>")
    for name in SHOWN_SAMPLES:
        if name in heldout.names:
            png = sample_figure(heldout, heldout.names.index(name), runs)
            parts.append(f"<h3>{html.escape(name)}</h3><img alt='{html.escape(name)}' src='data:image/png;base64,{png}'>")
    return "\n".join(parts)


def render_markdown(manifest: dict, bench: dict | None, weights: dict | None = None) -> str:
    lines = ["# arrcoc-edge build report", "",
             f"Checkpoint `{manifest.get('checkpoint', {}).get('path')}` "
             f"(sha256 `{manifest.get('checkpoint', {}).get('sha256', '')[:16]}…`). Full report with pictures: `report.html`.", "",
             "| target | variant | status | size / budget | relevance max abs | top-K mean | top-K min | reason |",
             "|---|---|---|---|---|---|---|---|"]
    for r in variant_rows(manifest):
        m = r["metrics"]
        lines.append(f"| {r['target']} | {r['variant']} | {r['status']} | {' '.join(size_cells(r['bytes'], r['budget']))} | "
                     f"{fmt_metric(m.get('relevance_max_abs'))} | {fmt_metric(m.get('topk_overlap_mean'))} | "
                     f"{fmt_metric(m.get('topk_overlap_min'))} | {r['reason'].replace('|', '/')} |")
    measured = [r for r in variant_rows(manifest) if r.get("subsets")]
    if measured:
        lines += ["", "## Parity on sentences | vectors (held-out, each gated on its own)", "",
                  "| target | variant | " + " | ".join(SUBSET_METRICS) + " |", "|---|---|" + "---|" * len(SUBSET_METRICS)]
        lines += [f"| {r['target']} | {r['variant']} | " + " | ".join(f"{a} / {b}" for _, a, b in subset_cells(r)) + " |"
                  for r in measured]
    lines += _isa_markdown(manifest)
    lines += _weights_markdown(weights)
    lines += _apps_markdown(manifest)
    if bench and bench.get("rows"):
        lines += ["", "## Latency (latest `invoke bench`)", "", "| case | runtime | batch | threads | median ms |", "|---|---|---|---|---|"]
        lines += [f"| {r.get('case')} | {r.get('runtime')} | {r.get('batch')} | {r.get('threads')} | {fmt_metric(r.get('median_ms'))} |"
                  for r in bench["rows"]]
        lines += [""] + [f"- {n}" for n in bench.get("notes") or []]
    return "\n".join(lines) + "\n"
