"""The tasks of `arrcoc-edge` (the console command) and of `invoke` in a checkout: one definition.

`arrcoc-edge build|predict|verify|merge|clean|serve|bench|train|app-tokenize ...` is Invoke's
Program serving this module's tasks (main below, [project.scripts] in pyproject.toml); the root
tasks.py imports the same tasks for `invoke` in a checkout. Numbers are taken as text and checked
by arrcoc_edge.frontends.options: Invoke's own int conversion prints a traceback on a value like
"abc". Every task ends a bad input with one line and exit 2.
"""
from __future__ import annotations

import os
import signal
import sys

from invoke import Exit, Task, task

from arrcoc_edge.errors import BuildInterrupted

NAME = "arrcoc-edge"
TASKS = ("build", "verify", "merge", "predict", "serve", "clean", "bench", "train", "app-tokenize")
INTERRUPTED = BuildInterrupted.exit_code  # 130, as a shell reports a process stopped by Ctrl-C
# Tests: the file this names is created once the early handlers are in place (tasks.py, main).
LOADING_ENV = "ARRCOC_TEST_LOADING_FILE"


def early_interrupt(command: str):
    """A handler for Ctrl-C (or SIGTERM) before a task's own are in place (arrcoc_edge.frontends.cli.guarded):
    while the task imports its modules. Invoke would answer the KeyboardInterrupt with exit 1 and no
    output; nothing has been written yet, so say guarded's one line and leave at once."""
    def handler(signum, frame) -> None:
        name = next((a for a in sys.argv[1:] if a in (*TASKS, "test")), None)
        why = "SIGINT" if signum == signal.SIGINT else "SIGTERM"
        again = f"run `{command} {name}` again" if name else "run the command again"
        line = f"interrupted: {name or command} stopped ({why}) -> fix: nothing was changed by the interrupted step: {again}\n"
        os.write(2, line.encode())
        os._exit(130)

    return handler


def install_early_handlers(command: str) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, early_interrupt(command))
    quiet_when_the_reader_leaves()
    if os.environ.get(LOADING_ENV):
        open(os.environ[LOADING_ENV], "a").close()


def quiet_when_the_reader_leaves() -> None:
    """`arrcoc-edge --list | head`: the reader closes the pipe and the next write to stdout raises
    BrokenPipeError, in Invoke's own printing (no task of ours around it) or in the flush at exit.
    A command stops there quietly, as one killed by SIGPIPE would (exit 141), with nothing on
    stderr. Installed by the command line only (main, tasks.py under `invoke`): the process is the
    command's, not a library caller's."""
    import atexit

    previous = sys.excepthook

    def hook(kind, value, tb) -> None:
        if issubclass(kind, BrokenPipeError):
            _stdout_to_devnull()
            os._exit(141)
        previous(kind, value, tb)

    sys.excepthook = hook
    atexit.register(_flush_stdout)  # registered first: runs after the others, before the final flush


def _flush_stdout() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_to_devnull()  # what is left in the buffer goes nowhere: the reader is gone


def _stdout_to_devnull() -> None:
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    finally:
        os.close(null)


VERBOSE = "show tracebacks"


class HelpKeepsH(Task):
    """A task whose options never take `-h` as their short flag: Invoke gives each option the first
    free letter of its name, so predict's --heatmap took -h and `invoke predict -h` was an error
    instead of the help. Here --heatmap gets -e, and -h stays help."""

    def arg_opts(self, name, default, taken_names):
        return super().arg_opts(name, default, {*taken_names, "h"})


def _exit(code: int) -> None:
    if code == INTERRUPTED:
        # CPython 3.11 remembers a KeyboardInterrupt raised inside exec() of a string (a dataclass
        # being built during a lazy torch import, say) even after it was handled, and at exit kills
        # the process with SIGINT whatever code sys.exit gave (seen as -2 instead of 130). The
        # interrupted build has already cleaned up and printed its line, so leave directly.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if code:
        raise Exit(code=code)


@task(
    help={
        "target": "onnx, onnx-int8, text-encoder, web, tensorrt, coreml, ios, executorch, ptl, android or all (comma-separated)",
        "checkpoint": "checkpoint (.safetensors or reference .pt/.pth); default: the shipped one",
        "out": "output folder; default: artifacts/",
        "verbose": VERBOSE,
        "calibration": "folder of images to calibrate quantised targets (default: the golden calibration split)",
        "calibration_queries": "text file, one sentence a line (8 to 256): the sentences quantised targets "
                               "calibrate on (default: the golden set's calibration sentences)",
        "grid": "patch grid G (G x G patches, input 16*G px); default: the checkpoint's (reference .pt: 32)",
        "top_k": "patches selected K, 1..G*G; default: the checkpoint's (reference .pt: 200)",
        "base_model": "local Qwen3-VL snapshot folder (tokenizer.json, safetensors): the query encoder of a "
                      "reference checkpoint that does not carry its token table",
    }
)
def build(c, target="all", checkpoint=None, out=None, verbose=False, calibration=None, grid=None, top_k=None,
          base_model=None, calibration_queries=None):
    """Export the checkpoint once, build, verify, gate and publish the target(s)."""
    from arrcoc_edge.frontends import cli

    options = {"calibration_dir": calibration} if calibration is not None else {}
    options.update(grid=grid, top_k=top_k, base_model=base_model, calibration_queries=calibration_queries)
    _exit(cli.build(target, checkpoint, out, verbose, options))


@task(help={"out": "output folder; default: artifacts/", "verbose": VERBOSE})
def verify(c, out=None, verbose=False):
    """Re-check published files against the manifest's sizes and sha256 hashes; list unlisted files."""
    from arrcoc_edge.frontends import cli

    _exit(cli.verify(out, verbose))


@task(help={"parts": "published folders to join, comma-separated (built from one checkpoint, e.g. on several hosts)",
            "out": "output folder; default: artifacts/",
            "checkpoint": "the parts' checkpoint, only to draw the report's maps (default: the path they recorded)",
            "verbose": VERBOSE})
def merge(c, parts=None, out=None, checkpoint=None, verbose=False):
    """Join published folders built from one checkpoint into one published folder and manifest."""
    from arrcoc_edge.frontends import cli

    _exit(cli.merge(parts, out, checkpoint, verbose))


def _runtimes_help() -> str:
    from arrcoc_edge.frontends.predict import PREFERRED

    return ("published artifact to run: " + ", ".join(PREFERRED) + " (a target's primary variant, as its manifest declares it), or target:variant "
            "(e.g. executorch:int8, onnx-int8:fp32-ort); default: the fastest published in --out "
            "(by its bench.json when there is one)")


@task(klass=HelpKeepsH, iterable=["image", "query"],
      help={"image": "photo file (JPEG, PNG, WebP...), any size 16..8192 px per side; used whole, as decoded; "
                     "repeat it, or name a folder, for many photos (one model load)",
            "query": "the question as text: through the published text-encoder (arr-coc-0-1's own for reference "
                     "checkpoints), or MiniLM for D=384; repeat it for several questions",
            "query_embedding": "float32 .npy of shape [D]: the query embedding, for any checkpoint",
            "out": "output folder with published artifacts; default: artifacts/",
            "runtime": _runtimes_help(),
            "json": "write {grid, top_k, image_size, runtime, relevance, topk_indices, weights, evidence, confidence, stands_out, verdict} "
                    "to this file "
                    "(several photos or queries: one JSON line each, with photo and query, e.g. --json out.jsonl)",
            "heatmap": "write the photo with the relevance map (the web page's colours), the top-K cells outlined and "
                       "a legend: .png (or .jpg, .webp); several photos or queries: a folder for the heatmaps; short flag -e",
            "all": "list every top-K cell (default: the strongest few, where they are, and whether anything stands out)",
            "verbose": VERBOSE})
def predict(c, image=None, query=None, query_embedding=None, out=None, runtime=None, json=None, heatmap=None,
            verbose=False, all=False):  # noqa: A002 - the option is --all
    """Run a published artifact on whole photos and a query: the strongest cells, the weights, whether anything stands out."""
    from arrcoc_edge.frontends import cli

    _exit(cli.predict(image, query, query_embedding, out, runtime, json, heatmap, verbose, bool(all)))


@task(help={"out": "output folder holding web/; default: artifacts/", "port": "port on localhost (default 8000)",
            "verbose": VERBOSE})
def serve(c, out=None, port=None, verbose=False):
    """Serve the built web demo on localhost with cross-origin isolation (multi-threaded WASM)."""
    from arrcoc_edge.frontends import cli

    _exit(cli.serve(out, port, verbose))


@task(help={"out": "output folder to empty; default: artifacts/", "verbose": VERBOSE})
def clean(c, out=None, verbose=False):
    """Remove published artifacts, the manifest, staging leftovers and the export cache."""
    from arrcoc_edge.frontends import cli

    _exit(cli.clean(out, verbose))


@task(help={"out": "output folder with published artifacts; default: artifacts/",
            "runs": "timed rounds per case, 1 to 100000 (default 50; median and p90 are reported)",
            "photos": "photos (1024x768 JPEG) in the folder run through `invoke predict --image FOLDER`, "
                      "0 to 100000 (default 1000; 0 skips it)",
            "build": "instead: build these targets (as --target takes them) with an empty user cache, then "
                     "again warm, and print each phase's wall and CPU seconds (--out: a new folder for both builds)",
            "verbose": VERBOSE})
def bench(c, out=None, runs=None, verbose=False, photos=None, build=None):
    """Latency of torch eager and every published runtime, side by side (not a test)."""
    from arrcoc_edge.frontends import cli

    _exit(cli.build_bench(build, out, verbose) if build else cli.bench(out, runs, verbose, photos))


@task(help={"out": "checkpoint to write (default: checkpoints/arrcoc-v0.1-trained.safetensors in a checkout, "
                   "./arrcoc-v0.1-trained.safetensors once installed)",
            "steps": "Adam steps (default: arrcoc_edge.training.train.Recipe.steps)",
            "seed": "initialisation and batch-order seed (default 0); same seed -> same bytes",
            "verbose": VERBOSE})
def train(c, out=None, steps=None, seed=None, verbose=False):
    """Train the participatory scorer and tension balancer on scenes with ground truth (CPU, minutes).

    Prints held-out precision@K / R-precision of the trained model next to the untrained
    checkpoint and a query-blind baseline trained in the same run.
    """
    from arrcoc_edge.frontends import cli

    _exit(cli.train(out, steps, seed, verbose))


@task(name="app-tokenize", help={
    "app": "android or ios: whose tokenizer code to run (compiled as `invoke build` compiles it)",
    "tokenizer": "a tokenizer.json (all-MiniLM-L6-v2's or Qwen3's)",
    "text_file": "UTF-8 text, one query per line (split on \\n only; an empty line is an empty query)",
    "max_length": "ids per query, special tokens included, or none (default: the Python encoder's: "
                  "256 for WordPiece, none for byte-level BPE)",
    "verbose": VERBOSE})
def app_tokenize(c, app=None, tokenizer=None, text_file=None, max_length=None, verbose=False):
    """Print the ids an app's own tokenizer gives each line of a text file, one JSON array per line."""
    from arrcoc_edge.frontends import cli

    _exit(cli.app_tokenize(app, tokenizer, text_file, max_length, verbose))


def main() -> None:
    """The `arrcoc-edge` console command: these tasks under Invoke's Program, exit codes as `invoke`'s."""
    install_early_handlers(NAME)
    from invoke import Collection

    from arrcoc_edge import __version__
    from arrcoc_edge.frontends import cli

    cli.COMMAND = NAME  # the messages name the command the user typed
    tasks = Collection(build, verify, merge, predict, serve, clean, bench, train, app_tokenize)
    program = command_program()(namespace=tasks, name=NAME, binary=NAME, version=__version__)
    suggest_the_nearest(program)
    program.run()


# Invoke's core options that mean something for these tasks; the rest (--pty, --hide, --echo, --dry,
# --warn-only, ...) steer Invoke's shell runner, which no task here uses, so --help leaves them out.
SHOWN_CORE_OPTIONS = ("--help", "--list", "--version", "--print-completion-script")


def suggest_the_nearest(program) -> None:
    """A misspelt command or option (`invoke prdict`, `predict --imgae`) made Invoke say "No idea
    what 'prdict' is!" and stop there: this program's parse errors name the nearest command or
    option too. Wraps the instance's parse_tasks (Invoke's own Program under `invoke`, tasks.py
    installs it; the console command's, main below)."""
    from invoke.exceptions import ParseError

    plain = program.parse_tasks

    def parse_tasks() -> None:
        try:
            plain()
        except ParseError as error:
            raise ParseError(with_nearest(str(error), error.context, program), error.context) from None

    program.parse_tasks = parse_tasks


def with_nearest(message: str, context, program) -> str:
    """"No idea what 'prdict' is!" -> the same, then "did you mean `invoke predict`?" when a
    command or option is close (difflib); the message unchanged otherwise."""
    import difflib
    import re

    found = re.fullmatch(r"No idea what '(.+)' is!", message)
    if not found:
        return message
    token = found.group(1).split("=", 1)[0]
    typed = program.called_as or ""  # `invoke`, `inv` or `arrcoc-edge`, as typed; `python -m` runs __main__.py
    binary = typed if typed and not typed.endswith(".py") else (program.binary or NAME)
    if token.startswith("-"):
        flags = [*(context.flags if context is not None else ()), *program.initial_context.flags]
        names = [f for f in flags if f.startswith("--")]
        near = difflib.get_close_matches(token, names, n=1, cutoff=0.6)
        task = f" {context.name}" if context is not None and context.name else ""
        hint = f"`{binary}{task} --help` lists {'its' if task else 'the'} options"
        return f"{message} Did you mean {near[0]}? ({hint})" if near else f"{message} ({hint})"
    names = [name for name in program.parser.contexts if not name.startswith("-")] if program.parser else []
    near = difflib.get_close_matches(token, names, n=1, cutoff=0.6)
    hint = f"`{binary} --list` lists every command"
    return f"{message} Did you mean `{binary} {near[0]}`? ({hint})" if near else f"{message} ({hint})"


def command_program():
    """Invoke's Program whose help reads as this tool's: the commands, and only the core options a
    user of them needs (the others are still accepted, as Invoke defines them)."""
    from invoke import Program

    class Command(Program):
        def print_help(self) -> None:
            print(f"Usage: {self.binary} <command> [--command-options] ...   "
                  f"({self.binary} <command> --help: that command's options)\n\nOptions:\n")
            self.print_columns([row for row in self.initial_context.help_tuples() if _names(row[0]) & set(SHOWN_CORE_OPTIONS)])
            self.list_tasks()

    return Command


def _names(flags: str) -> set[str]:
    """"-h [STRING], --help[=STRING]" -> {"-h", "--help"}."""
    return {part.strip().split(" ")[0].split("[")[0].split("=")[0] for part in flags.split(",")}
