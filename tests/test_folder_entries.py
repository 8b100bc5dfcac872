"""A folder of photos as predict takes it: an entry named as a photo that is no photo file (a FIFO,
a link to a device) is refused and reported, one line each, never silently left out; a photo whose
name holds a newline stays on its one output line. On a hand-made publish (tests/contract_publish.py)."""
from __future__ import annotations

import os

import numpy as np
import pytest
from PIL import Image

import arrcoc_edge
from arrcoc_edge.errors import InputError
from arrcoc_edge.frontends import batch

from tests.contract_publish import DIM, contract_model, publish


@pytest.fixture
def model(tmp_path):
    with arrcoc_edge.load(publish(tmp_path / "out", contract_model())) as loaded:
        yield loaded


def query() -> np.ndarray:
    return np.ones(DIM, np.float32) / np.sqrt(DIM)


def test_a_fifo_and_a_device_link_in_a_folder_are_reported_not_dropped(model, tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    Image.fromarray(np.full((40, 30, 3), 90, np.uint8)).save(folder / "a.png")
    os.mkfifo(folder / "b.png")
    (folder / "c.jpg").symlink_to("/dev/zero")
    (folder / "d.png").mkdir()  # a subfolder is not a photo of this folder
    assert [p.name for p in batch.folder_photos(folder)] == ["a.png", "b.png", "c.jpg"]
    refused = []
    done = list(model.predict_many(folder, query(), on_error=lambda photo, err: refused.append((photo.name, err.one_line()))))
    assert [p.source.name for p in done] == ["a.png"]
    assert [name for name, _ in refused] == ["b.png", "c.jpg"]
    assert "is not a file (a FIFO)" in refused[0][1] and "is not a file (a device)" in refused[1][1], refused
    with pytest.raises(InputError, match="b.png' is not a file"):  # without on_error: raised, after a.png
        list(model.predict_many(folder, query()))


def test_a_newline_in_a_photo_name_stays_on_its_one_line(model, tmp_path):
    photo = tmp_path / "two\nlines\u2028.png"
    Image.fromarray(np.full((40, 30, 3), 90, np.uint8)).save(photo)
    p = model.predict(photo, query())
    line = batch.line(p, None)
    assert len(line.splitlines()) == 1 and "two\\nlines\\u2028.png: 40 x 30 px" in line, line
