"""Command-line entry points behind tasks.py: argument handling, the summary table, exit codes."""
from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

from arrcoc_edge.errors import ArrcocError
from arrcoc_edge.frontends import options as opts
from arrcoc_edge.frontends import redirect
from arrcoc_edge.frontends.options import DEFAULT_CHECKPOINT, DEFAULT_OUT
from arrcoc_edge.frontends.verify import _verify
from arrcoc_edge.stages.parity import size_cells

# The command the user typed, as messages name it: `invoke` in a checkout, `arrcoc-edge` once installed
# (arrcoc_edge.frontends.commands.main sets it).
COMMAND = "invoke"


def parity_cell(report) -> str:
    if report is None:
        return "-"
    m = report.metrics
    if "topk_overlap_mean" not in m:
        return "not measured"
    text = f"rel max {m['relevance_max_abs']:.1e}, top-K {m['topk_overlap_mean']:.3f}" + _other_isas(report)
    source = report.variant.info.get("parity_from")  # numbers measured by another stage (app bundles)
    if source:
        return f"{text} (from {source.split(',')[0]})"
    return text if report.status != "unverified" else text + " (reference check)"


def _other_isas(report) -> str:
    """The variant's runs on other instruction sets' kernels (the phones' arm64, emulated), in a few
    words: how many passed the same gate, or that none could be measured here."""
    from arrcoc_edge.building.build import host_isa

    others = [r for isa, r in (getattr(report, "by_isa", None) or {}).items() if isa != host_isa()]
    if not others:
        return ""
    measured = [r for r in others if r.get("measured")]
    if not measured:
        return "; emulated ISAs not measured"
    return f"; emulated ISAs: {sum(bool(r.get('passed')) for r in measured)} of {len(others)} passed"


def summary_rows(result) -> list[list[str]]:
    """One labelled row per variant: its target, name, status, size and size rule, parity."""
    rows = []
    for stage in result.stages:
        if not stage.variants:
            rows.append([stage.target.name, "-", stage.status, "-", "-", "-", f"{stage.seconds:.1f}s"])
        for i, report in enumerate(stage.variants):
            status = stage.status
            if report.status != ("verified" if stage.status == "published" else stage.status):
                status = f"{status} ({report.status})"
            size, rule = size_cells(report.metrics.get("size_bytes"), report.variant.size_budget)
            rows.append([stage.target.name, report.variant.name, status, size, rule, parity_cell(report),
                         f"{stage.seconds:.1f}s" if i == 0 else ""])
    return rows


def format_table(rows: list[list[str]], header=("target", "variant", "status", "size", "size rule", "parity", "time")) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def print_reasons(result) -> None:
    for stage in result.stages:
        if stage.reason and stage.status != "published":
            print(f"  {stage.target.name}: {stage.status}: {stage.reason}")


# The tasks that import torch: its MKL cannot load in a deleted working folder, even by absolute paths
# (predict and verify check before they load a runtime that imports it: errors.check_torch_loadable).
TORCH_TASKS = ("build", "train", "merge", "bench")


def guarded(task, verbose: bool, name: str = "task") -> int:
    """Run a task body and return its exit code. A typed error prints its one line; anything else
    (a bug or a library error nobody anticipated) prints one line too: tracebacks need --verbose.
    Ctrl-C (or SIGTERM) at any moment of any task is exit 130 and one line: Invoke would answer a
    KeyboardInterrupt that reaches it with exit 1 and no message. The signal is recorded as well
    as raised (locking.record_interrupt), so one whose exception a library swallowed (a weakref
    callback, a __del__) is still exit 130."""
    import signal

    from arrcoc_edge.publishing import locking

    gone = _working_folder_gone(absolute_ok=False) if name in TORCH_TASKS else None
    if gone is not None:  # torch's MKL would exit from C at import ("oneMKL FATAL ERROR"), before any line of ours
        redirect.to_terminal(gone.one_line())
        return gone.exit_code
    locking.reset_interrupts()
    previous = {s: signal.signal(s, locking.record_interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        _announce_ready()
        with redirect.command_line():  # the process is the command's: its fds 1 and 2 may be quieted
            code = task() or 0
        locking.check_interrupted()  # one lost after the task's last check still ends as an interrupt
        return code
    except ArrcocError as exc:
        if locking.interrupted():  # a Ctrl-C recorded during an import, not raised yet: it comes first
            return _stopped(name, locking.interrupted())
        if verbose:
            traceback.print_exc()
        redirect.to_terminal(exc.one_line())
        return exc.exit_code
    except KeyboardInterrupt as exc:
        return _stopped(name, str(exc) or "SIGINT")
    except BrokenPipeError:
        # the reader went away (`invoke predict ... | head`): stop quietly, as a tool killed by
        # SIGPIPE would (128 + 13), and keep Python from reporting the pipe again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:  # noqa: BLE001 - the promise is one line, whatever went wrong
        if _interrupted(exc):
            return guarded(lambda: _reraise(KeyboardInterrupt("SIGINT")), verbose, name)
        if verbose:
            traceback.print_exc()
        if locking.interrupted():
            # A library swallowed the Ctrl-C and failed afterwards, unchained to it (seen: exit 1,
            # "TypeError: expected str, bytes or os.PathLike object, not BufferedReader", 3 s into a
            # build): the user asked to stop, and that is what happened first.
            return _stopped(name, locking.interrupted())
        gone = _working_folder_gone()
        if gone is not None:  # a relative path met a deleted working folder: the cause, not its symptom
            redirect.to_terminal(gone.one_line())
            return gone.exit_code
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        redirect.to_terminal(f"internal error: {type(exc).__name__}: {first} -> fix: rerun with --verbose and "
                             "report the traceback")
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        locking.reset_interrupts()  # the record belongs to this task only


def _working_folder_gone(absolute_ok: bool = True):
    """The InputError for a working folder deleted after the shell entered it (os.getcwd() fails, so
    does every relative path), or None. Absolute paths still work there, but for TORCH_TASKS."""
    from arrcoc_edge.errors import InputError

    try:
        os.getcwd()
    except OSError:
        return InputError("the working folder no longer exists (it was deleted after the shell entered it)",
                          "cd into an existing folder" + (", or pass absolute paths," if absolute_ok else "")
                          + " and run the command again")
    return None


def _stopped(name: str, why: str) -> int:
    """The interrupted task's one line; exit 130."""
    from arrcoc_edge.errors import BuildInterrupted

    fix = (f"nothing to fix: `{COMMAND} serve` starts it again" if name == "serve" else
           f"nothing was changed by the interrupted step: run `{COMMAND} {name}` again")
    redirect.to_terminal(BuildInterrupted(f"{name} stopped ({why})", fix).one_line())
    return BuildInterrupted.exit_code


def _interrupted(exc: BaseException) -> bool:
    """A Ctrl-C that landed inside a C extension's module import comes back as another error
    ("ImportError: initialization failed") chained to the KeyboardInterrupt: still an interrupt."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _reraise(exc: BaseException):
    raise exc


# Tests: the file this names is created once a task's handlers are in place, so an interrupt test
# can wait for it instead of guessing how long Python and Invoke take to start on a loaded machine.
READY_ENV = "ARRCOC_TEST_READY_FILE"


def _announce_ready() -> None:
    import os

    path = os.environ.get(READY_ENV)
    if path:
        Path(path).touch()


def need_build_extra(task: str) -> None:
    """Building, training and bench run torch: without the build extra (the inference install) say
    so in one line with the install command, before anything is read or written."""
    import importlib.util

    from arrcoc_edge.errors import MissingExtraError, install_fix

    missing = [m for m in ("torch", "onnx", "safetensors") if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtraError(f"`{COMMAND} {task}` needs {', '.join(missing)} (the build extra), which is not "
                                "installed: this install runs published folders only", install_fix("build"))


def build(targets: str, checkpoint: str | None, out: str | None, verbose: bool, options: dict | None = None) -> int:
    """`invoke build`: returns the process exit code."""
    return guarded(lambda: _build(targets, checkpoint, out, verbose, options or {}), verbose, "build")


def _build(targets, checkpoint, out, verbose, options) -> int:
    """The build is arrcoc_edge.frontends.api's (arrcoc_edge.build() runs the same function); this prints its table."""
    need_build_extra("build")
    from arrcoc_edge.frontends.api import build_stages
    from arrcoc_edge.frontends.console import LOG_NAME
    from arrcoc_edge.publishing.folder_state import state_dir

    result, root = build_stages(targets, checkpoint, out, options, verbose)
    if not verbose:
        print(f"third-party messages (warnings, converter output): {state_dir(root) / LOG_NAME}")
    print()
    print(format_table(summary_rows(result)))
    print_reasons(result)
    if verbose:
        for stage in result.stages:
            if stage.error is not None:
                traceback.print_exception(stage.error)
    cache = "cache hit" if result.exported_cache_hit else "fresh export"
    print(f"\n{len(result.stages)} target(s) in {result.seconds:.1f}s ({cache}); manifest: {result.out / 'manifest.json'}")
    if not result.ok:
        failed = [s for s in result.stages if s.status == "failed"]
        print(f"error: {', '.join(s.target.name for s in failed)} failed; nothing of those was published "
              f"-> fix: {next_step(failed[0], root, verbose)}", file=sys.stderr)
        return 3
    return 0


def next_step(stage, root: Path, verbose: bool) -> str:
    """The closing line's action for the first failed target: its own error's fix when it carries
    one (`kind: problem -> fix: action`), else how to see why (the gate's numbers, a converter's
    traceback and its third-party output)."""
    from arrcoc_edge.frontends.console import LOG_NAME
    from arrcoc_edge.publishing.folder_state import state_dir

    reason = stage.reason or ""
    if " -> fix: " in reason:
        return f"{stage.target.name}: {reason.split(' -> fix: ', 1)[1]}"
    rerun = f"{COMMAND} build --target {stage.target.name} --out {root}" + ("" if verbose else " --verbose")
    return f"run `{rerun}` and read its reason above and {state_dir(root) / LOG_NAME}"


def verify(out: str | None, verbose: bool = False) -> int:
    """`invoke verify`: every file the manifest lists exists with its bytes and sha256, and the
    published folders hold nothing the manifest does not list (no other file, no link)."""
    return guarded(lambda: _verify(opts.release_folder(out, DEFAULT_OUT)), verbose, "verify")


def merge(parts: str | None, out: str | None, checkpoint: str | None = None, verbose: bool = False) -> int:
    """`invoke merge`: join published folders of one checkpoint (built on several hosts) into one."""
    return guarded(lambda: _merge(parts, out, checkpoint), verbose, "merge")


def _merge(parts, out, checkpoint) -> int:
    folders = opts.part_folders(parts)
    root = opts.out_folder(out, DEFAULT_OUT)
    ckpt = opts.existing_file("checkpoint", checkpoint) if checkpoint is not None else None
    from arrcoc_edge.building.merge import run_merge

    data = run_merge(folders, root, ckpt, DEFAULT_CHECKPOINT, log=lambda m: print(m, flush=True))
    rows = [[name, e.get("status"), e["merge"]["from_part"], _host_cell(e["merge"]["built_and_verified_on"])]
            for name, e in data["targets"].items()]
    print()
    print(format_table(rows, header=("target", "status", "from part", "built and verified on")))
    same = "identical" if data["merge"]["exported_program_reproducible"] else "DIFFERENT (not reproducible)"
    print(f"\n{len(rows)} target(s) from {len(folders)} parts; .pt2 across parts: {same}; "
          f"manifest: {root / 'manifest.json'}")
    return 0


def _host_cell(host: dict) -> str:
    return f"{host.get('os')} {host.get('machine')}, Python {host.get('python')}"


def clean(out: str | None, verbose: bool = False) -> int:
    """`invoke clean`: remove what builds wrote, as their ledger records it (never anything else)."""
    return guarded(lambda: _clean(opts.out_folder(out, DEFAULT_OUT)), verbose, "clean")


def _clean(root: Path) -> int:
    from arrcoc_edge.publishing import cleaning, folder_state

    state = folder_state.state_dir(root)
    # lexists, not is_file: a ledger that is a FIFO or a link is the state's, refused by cleaning.clean
    if not os.path.lexists(state / folder_state.LEDGER) and folder_state._old_layout_generation(root) is None:
        print(f"nothing to clean: {root} is not an output folder of arrcoc-edge (no {state.name}/"
              f"{folder_state.LEDGER}); nothing was removed")
        return 0
    try:
        kept = cleaning.clean(root, lambda m: print(m, flush=True))
    except OSError as exc:
        from arrcoc_edge.errors import OutputDirError

        raise OutputDirError(f"cannot clean {root} ({exc.strerror or exc})",
                             "fix its permissions (chmod, chattr -i) and run clean again") from exc
    print(f"cleaned {root}")
    for path in kept:
        print(f"kept {path}")
    return 0


def bench(out: str | None, runs, verbose: bool = False, photos=None) -> int:
    """`invoke bench`: latency of every published runtime side by side; writes OUT/bench.json."""
    from arrcoc_edge.frontends.bench import FOLDER_PHOTOS

    return guarded(lambda: _bench(opts.in_folder(out, DEFAULT_OUT), opts.integer("runs", runs, 1, opts.MAX_BENCH_RUNS, 50),
                                  opts.integer("photos", photos, 0, opts.MAX_BENCH_PHOTOS, FOLDER_PHOTOS)),
                   verbose, "bench")


def build_bench(targets: str, out: str | None, verbose: bool = False) -> int:
    """`invoke bench --build TARGETS`: a cold and a warm build, their wall and CPU seconds per phase."""
    def run() -> int:
        need_build_extra("bench")
        from arrcoc_edge.frontends.build_bench import format_build_bench, run_build_bench

        record = run_build_bench(targets, Path(out).absolute() if out else None, log=lambda m: print(m, flush=True))
        print()
        print(format_build_bench(record))
        print(f"\n{record['host']}, commit {record['commit'] or 'not recorded'}; written to "
              f"{Path(record['folder']) / 'build_bench.json'} (scripts/speed_table.py makes a table of it)")
        return 0 if all(r["exit"] == 0 for r in record["runs"].values()) else 3

    return guarded(run, verbose, "bench")


def _bench(root: Path, runs: int, photos: int) -> int:
    need_build_extra("bench")
    from arrcoc_edge import targets as target_table
    from arrcoc_edge.frontends.bench import format_rows, run_bench

    result = run_bench(root, target_table.TARGETS, runs=runs, log=lambda m: print(m, flush=True), photos=photos)
    print()
    print(format_rows(result["rows"]))
    for note in result.get("notes") or []:
        print(f"note: {note}")
    if result.get("felt"):
        from arrcoc_edge.frontends.bench_felt import format_felt

        print()
        print(format_felt(result["felt"]))
    print(f"\nmedian of {runs} interleaved rounds per case on {result['host']} (rotating order, each timed "
          f"call right after an untimed one of the same case, onnxruntime pools not spinning); x = torch eager "
          f"median / this median, 1-thread rows only (default-thread rows show their p10-p90 spread instead); "
          f"written to {root / 'bench.json'}")
    return 0


def predict(image, query, query_embedding, out, runtime, json_path, heatmap, verbose: bool = False,
            every_cell: bool = False) -> int:
    """`invoke predict`: whole photos (a file, several, or a folder) and queries through a published
    artifact. image and query: one value or a list (the options may be repeated). every_cell
    (--all): every selected cell on the terminal, not only the strongest few."""
    return guarded(lambda: _predict(image, query, query_embedding, out, runtime, json_path, heatmap, verbose,
                                    every_cell), verbose, "predict")


def _predict(image, query, query_embedding, out, runtime, json_path, heatmap, verbose=False, every_cell=False) -> int:
    """Every option is checked before the model runs: a bad output path found after it would
    throw the answer away (and a path over an input would destroy the input)."""
    from arrcoc_edge.errors import InputError
    from arrcoc_edge.frontends import batch
    from arrcoc_edge.frontends import predict as pr
    from arrcoc_edge.frontends.queries import check_query_text, embedding_file, warn_unknown_words

    images, queries = _listed(image), _listed(query)
    if not images:
        raise InputError("--image is required (the photo to run the model on)", "pass --image PHOTO, e.g. --image photo.jpg")
    if (not queries) == (query_embedding is None):
        raise InputError("give exactly one of --query TEXT and --query-embedding FILE.npy",
                         "e.g. --query 'something red' or --query-embedding q.npy (float32 [D])")
    for text in queries:
        check_query_text(text)
    photos, several = batch.photo_inputs(images)
    embedding = opts.existing_file("query-embedding", query_embedding) if query_embedding is not None else None
    root = opts.release_folder(out, DEFAULT_OUT)  # only read: a kept release too
    opts.published_folder(root, out, COMMAND)  # a file, a target's folder, nothing there: said as such
    if several or len(queries) > 1:
        return _predict_many(images, photos, queries, embedding, root, runtime, json_path, heatmap, verbose, every_cell)
    photo = photos[0]
    inputs = [photo] + ([embedding] if embedding else [])
    json_file = pr.output_file("json", json_path, inputs, root) if json_path is not None else None
    heatmap_file = pr.output_file("heatmap", heatmap, inputs, root) if heatmap is not None else None
    fmt = pr.heatmap_format("heatmap", heatmap_file) if heatmap_file else None
    if json_file and heatmap_file and os.path.realpath(json_file) == os.path.realpath(heatmap_file):
        raise InputError(f"--json and --heatmap name one file ({json_file})", "give them two different file names")
    with _model(root, runtime, verbose, sentences=bool(queries)) as model:  # arrcoc_edge.load: what a Python caller runs
        query = queries[0] if queries else embedding_file(embedding, model.query_dim)[0]
        result = model._predict_one(photo, query, timed=True)
        warn_unknown_words(model, queries[0] if queries else None)
    # the files first: a reader that leaves early (`| head`) must not cost them
    saved = pr.save_outputs(result, json_file, heatmap_file, fmt, say=None)
    print(pr.describe(result.record, queries[0] if queries else None, every_cell))
    for line in saved:
        print(line)
    return 0


def _listed(value) -> list:
    """An option given once (a value), repeated (a list) or not at all (None or [])."""
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _model(root: Path, runtime, verbose: bool, sentences: bool = False):
    from arrcoc_edge.errors import InputError
    from arrcoc_edge.frontends.api import load
    from arrcoc_edge.publishing.folder_state import pinned
    from arrcoc_edge.publishing.reading import read_manifest

    if not read_manifest(pinned(root)).get("targets"):
        raise InputError(f"nothing is published in {root}", f"run `{COMMAND} build --target onnx` first (or pass --out)")
    return load(root, runtime, verbose=verbose, sentences=sentences)


def _predict_many(given, photos, queries, embedding, root, runtime, json_path, heatmap, verbose, every_cell=False) -> int:
    """Several photos or queries (pipeline/frontends/batch.py): outputs checked first, then one model load."""
    from arrcoc_edge.frontends import batch
    from arrcoc_edge.frontends import predict as pr
    from arrcoc_edge.frontends.queries import embedding_file, warn_unknown_words

    inputs = photos + ([embedding] if embedding else [])
    json_file = pr.output_file("json", json_path, inputs, root) if json_path is not None else None
    heatmaps = (batch.heatmap_folder(heatmap, photos, inputs, root, max(1, len(queries)), given)
                if heatmap is not None else None)
    with _model(root, runtime, verbose, sentences=bool(queries)) as model:
        wanted = ([("query", text, text) for text in queries] if queries else
                  [("query_embedding", str(embedding), embedding_file(embedding, model.query_dim)[0])])
        for text in queries:
            warn_unknown_words(model, text)
        return batch.run(model, photos, wanted, json_file, heatmaps, every_cell)


def serve(out: str | None, port, verbose: bool = False) -> int:
    """`invoke serve`: the built web demo on localhost until Ctrl-C."""
    from arrcoc_edge.serve import serve_forever

    def run():
        number = opts.port(port)
        serve_forever(opts.release_folder(out, DEFAULT_OUT) / "web", number, tracebacks=verbose)

    return guarded(run, verbose, "serve")


def train(out: str | None, steps, seed, verbose: bool = False) -> int:
    """`invoke train`: options checked here, before minutes of training."""
    def run():
        path = opts.writable_file("out", out) if out is not None else None
        n_steps = opts.integer("steps", steps, 1, opts.MAX_TRAIN_STEPS) if steps is not None else None
        n_seed = opts.integer("seed", seed, 0, opts.MAX_SEED) if seed is not None else None
        need_build_extra("train")
        from arrcoc_edge.training.train import DEFAULT_OUT as TRAINED
        from arrcoc_edge.training.train import check_out, main

        check_out(path or TRAINED, roots=(DEFAULT_OUT,))  # before minutes of training, not after
        return main(str(path) if path else None, n_steps, n_seed, roots=(DEFAULT_OUT,))

    return guarded(run, verbose, "train")


def app_tokenize(app, tokenizer, text_file, max_length, verbose: bool = False) -> int:
    """`invoke app-tokenize`: an app's own tokenizer code on each line of a text file, one JSON
    array of ids per line (targets/app_tokenize.py)."""
    return guarded(lambda: _app_tokenize(app, tokenizer, text_file, max_length, verbose), verbose, "app-tokenize")


def _app_tokenize(app, tokenizer, text_file, max_length, verbose: bool) -> int:
    import json

    from arrcoc_edge.errors import InputError
    from arrcoc_edge import targets as target_table

    if app not in target_table.TOKENIZER_APPS:
        raise InputError(f"--app {app!r} is not android or ios", "pass --app android or --app ios")
    tok = opts.existing_file("tokenizer", tokenizer)
    text = opts.existing_file("text-file", text_file)
    limit = "default" if max_length is None else (
        None if str(max_length).strip() == "none" else opts.integer("max-length", max_length, 1, 2**31 - 1))
    # the compile's progress only with --verbose: stderr stays one line on an error
    log = (lambda m: print(m, file=sys.stderr, flush=True)) if verbose else (lambda m: None)
    rows = target_table.tokenize_for_app(app, tok, text, limit, log=log)
    sys.stdout.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))
    return 0
