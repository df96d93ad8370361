"""A labels table (`--data train.csv`) read, its columns and images found, and every bad input one UserError line."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from image_tree import write_png

from fasttrain.core.errors import UserError
from fasttrain.datasets.data_source import (
    competition_table,
    data_notes,
    find_samples,
    looks_like_split,
)
from fasttrain.datasets.labels_table import (
    Table,
    class_names,
    label_column,
    parse_table,
    split_column,
)
from fasttrain.datasets.table_images import table_data
from fasttrain.profiles.schema import DataSpec


def _table(text: str) -> Table:
    return parse_table(text.encode(), "train.csv")


def _error(fn, *args, **kw) -> str:
    with pytest.raises(UserError) as info:
        fn(*args, **kw)
    assert len(info.value.problems) == 1
    return info.value.problems[0].line()


def _competition(root: Path, labels: list[str], *, folder: str = "train_images", ext: str = ".png",
                 header: str = "id,label", id_ext: bool = False) -> Path:
    """root/train.csv (ids without the extension unless id_ext) and root/<folder>/<id><ext>, real PNG bytes."""
    lines = [header]
    for i, label in enumerate(labels):
        name = f"{i:06x}"
        write_png(root / folder / f"{name}{ext}", seed=i, size=8)
        lines.append(f"{name}{ext if id_ext else ''},{label}")
    (root / "train.csv").write_text("\n".join(lines) + "\n")
    return root / "train.csv"


def _count(read: tuple[list[str], list, list]) -> int:
    return len(read[1]) + len(read[2])


def _read(csv: Path, **kw) -> tuple[list[str], list, list]:
    return find_samples(csv, seed=0, val_fraction=0.25, spec=DataSpec(**kw))


# -- the pure parts: parsing, columns, class names --------------------------------------------------------------
@pytest.mark.parametrize(("raw", "words"), [
    (b"", "is empty"), (b"\n\n  \n", "is empty"), (b"id,label\n", "only a header"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary data"), (b"id,label\n\xff\xfe\xfa,x\n", "not UTF-8"),
    (b"id,label\na,b,c\n", "row 2 has 3 cells"), (b"id,id\na,b\n", "twice"),
])
def test_unreadable_tables_are_one_line(raw: bytes, words: str) -> None:
    line = _error(parse_table, raw, "train.csv")
    assert words in line and "train.csv" in line


def test_tables_with_a_bom_tabs_semicolons_and_blank_lines() -> None:
    assert _table("\ufeffid,label\r\na,1\r\n\r\nb,2\r\n").rows == [["a", "1"], ["b", "2"]]
    assert parse_table(b"id\tlabel\na\t1\n", "t.tsv", tab=True).header == ["id", "label"]
    assert _table("id;label\na;1\n").rows == [["a", "1"]]
    assert _table("id,label,extra\na,1\n").rows == [["a", "1", ""]]  # a short row is padded, not refused


def test_integer_labels_keep_numeric_order() -> None:
    names, index = class_names(["10", "2", "0", "1", "2.0", "10"])
    assert names == ["0", "1", "2", "10"] and index["2.0"] == index["2"] == 2 and index["10"] == 3
    assert class_names(["dog", "cat", "Bird"])[0] == ["Bird", "cat", "dog"]


def test_label_column_by_name_by_content_or_refused() -> None:
    assert label_column(_table("image_id,species,notes\na,x,n1\nb,y,n2\n"), {0}) == 1
    assert label_column(_table("file,cls\na,x\nb,y\n"), {0}) == 1  # the only other column
    rows = "\n".join(f"f{i},{'ab'[i % 2]},{i}" for i in range(20))
    assert label_column(_table("file,kind,size\n" + rows), {0}) == 1  # few distinct values against 20 rows
    two = _error(label_column, _table("id,label,class\na,x,y\nb,y,x\n"), {0})
    assert "label, class" in two and "--set data.label_column=" in two
    rows = "\n".join(f"f{i},{'ab'[i % 2]},{'cd'[i % 2]}" for i in range(20))
    assert "--set data.label_column=" in _error(label_column, _table("file,kind,sort\n" + rows), {0})


def test_split_column_is_valid_and_split_words() -> None:
    assert split_column(_table("id,label,is_valid\na,x,False\nb,y,True\nc,x,0\n"), 0) == (2, ["train", "val", "train"])
    assert split_column(_table("id,label,split\na,x,train\nb,y,valid\nc,x,test\n"), 0)[1] == ["train", "val", "test"]
    assert split_column(_table("id,label,fold\na,x,3\nb,y,4\n"), 0) is None  # k-fold numbers are not a split
    assert split_column(_table("id,label,split\na,x,train\nb,y,train\n"), 0) is None  # nothing marked val


def test_split_like_names() -> None:
    assert all(map(looks_like_split, ["train_images", "test", "Valid", "val2017", "images", "TRAIN"]))
    assert not any(map(looks_like_split, ["cat", "dog", "contest", "image_net"]))


# -- with files: images found, rows dropped or refused -----------------------------------------------------------
def test_ids_without_extension_in_train_images(tmp_path: Path) -> None:
    csv = _competition(tmp_path, ["cat", "dog"] * 6)
    classes, train, val = _read(csv)
    assert classes == ["cat", "dog"] and len(train) + len(val) == 12 and len(val) == 4
    assert all(Path(p).is_file() and "train_images" in p for p, _ in train + val)


@pytest.mark.parametrize(("folder", "id_ext", "ext"), [("train", True, ".jpg"), ("", True, ".png"),
                                                      ("images", False, ".PNG")])
def test_folders_and_extensions(tmp_path: Path, folder: str, id_ext: bool, ext: str) -> None:
    csv = _competition(tmp_path, ["a", "b"] * 4, folder=folder, id_ext=id_ext, ext=ext)
    classes, train, val = _read(csv)
    assert classes == ["a", "b"] and len(train + val) == 8


def test_path_column_and_images_dir(tmp_path: Path) -> None:
    for i in range(6):
        write_png(tmp_path / "pics" / "sub" / f"{i}.png", seed=i, size=8)
    (tmp_path / "train.csv").write_text("path,y\n" + "".join(f"pics/sub/{i}.png,{i % 2}\n" for i in range(6)))
    assert _read(tmp_path / "train.csv")[0] == ["0", "1"]
    (tmp_path / "t2.csv").write_text("name,y\n" + "".join(f"{i},{i % 2}\n" for i in range(6)))
    assert "data.image_column" in _error(_read, tmp_path / "t2.csv")
    assert _count(_read(tmp_path / "t2.csv", images_dir="pics/sub")) == 6
    assert _count(_read(tmp_path / "t2.csv", images_dir=str(tmp_path / "pics" / "sub"))) == 6


def test_set_columns_and_no_such_column(tmp_path: Path) -> None:
    csv = _competition(tmp_path, ["a", "b"] * 4, header="id,label")
    line = _error(_read, csv, label_column="species")
    assert "no column 'species'" in line and "id, label" in line and "data.label_column" in line
    assert "data.image_column" in _error(_read, csv, image_column="file")
    assert _read(csv, label_column="LABEL", image_column="id")[0] == ["a", "b"]  # case does not matter


def test_missing_images_refused_over_five_percent_else_noted(tmp_path: Path) -> None:
    csv = _competition(tmp_path, ["a", "b"] * 20)
    text = csv.read_text()
    csv.write_text(text + "gone1,a\ngone2,b\n")  # 2 of 42: left out with a note
    notes = data_notes(str(csv), DataSpec(), seed=0, val_fraction=0.25)
    assert any("2 of 42 rows with no image file" in n and "'gone1'" in n for n in notes)
    assert _count(_read(csv)) == 40
    csv.write_text(text + "".join(f"gone{i},a\n" for i in range(5)))  # 5 of 45: refused
    line = _error(_read, csv)
    assert "5 of 45 rows with no image file" in line and "'gone0', 'gone1', 'gone2'" in line
    assert "data.images_dir" in line


def test_no_images_at_all_names_what_was_tried(tmp_path: Path) -> None:
    (tmp_path / "train_images").mkdir()
    (tmp_path / "train.csv").write_text("id,label\na,x\nb,y\n")
    line = _error(_read, tmp_path / "train.csv")
    assert "train_images/" in line and ".png" in line and "data.image_column" in line and "data.images_dir" in line


def test_duplicates_kept_once_blank_labels_and_one_class(tmp_path: Path) -> None:
    csv = _competition(tmp_path, ["a", "b"] * 20)
    text = csv.read_text()
    csv.write_text(text + "000000,b\n000001,\n")
    notes = data_notes(str(csv), DataSpec(), seed=0, val_fraction=0.25)
    assert any("1 rows name an image listed before" in n for n in notes)
    assert any("1 of 42 rows with a blank 'label'" in n for n in notes)
    _, train, val = _read(csv)
    assert len(train + val) == 40 and dict(train + val)[str(tmp_path / "train_images" / "000000.png")] == 0
    csv.write_text(text.split("\n", 1)[0] + "\n" + "".join(f"{i:06x},\n" for i in range(40)))
    assert "blank 'label'" in _error(_read, csv)
    csv.write_text(text.replace(",b\n", ",a\n"))
    assert "same label ('a')" in _error(_read, csv)


def test_is_valid_column_chooses_the_validation_rows(tmp_path: Path) -> None:
    csv = _competition(tmp_path, ["a", "b"] * 5)
    lines = csv.read_text().splitlines()
    csv.write_text("\n".join([lines[0] + ",is_valid"] + [f"{ln},{i < 3}" for i, ln in enumerate(lines[1:])]) + "\n")
    _, train, val = _read(csv)
    assert (len(train), len(val)) == (7, 3)
    assert any("the 3 rows column 'is_valid' marks" in n for n in data_notes(str(csv), DataSpec(), seed=0,
                                                                            val_fraction=0.1))


def test_competition_folder_stands_for_its_table(tmp_path: Path) -> None:
    csv = _competition(tmp_path, ["a", "b"] * 4)
    write_png(tmp_path / "test_images" / "t.png", seed=1)
    assert competition_table(tmp_path) == csv
    assert _read(tmp_path)[0] == ["a", "b"]
    write_png(tmp_path / "cat" / "x.png", seed=1)  # a real class folder: an ImageFolder tree, the table ignored
    assert competition_table(tmp_path) is None


def test_sixty_thousand_rows_in_well_under_a_second(tmp_path: Path) -> None:
    images = tmp_path / "train_images"
    images.mkdir()
    png = write_png(tmp_path / "one.png", seed=0, size=4).read_bytes()
    for i in range(60_000):
        (images / f"{i}.png").write_bytes(png)
    (tmp_path / "train.csv").write_text("id,label\n" + "".join(f"{i},{i % 10}\n" for i in range(60_000)))
    started = time.perf_counter()
    classes, train, val = _read(tmp_path / "train.csv")
    assert time.perf_counter() - started < 2.0 and classes == [str(i) for i in range(10)]
    assert len(train) + len(val) == 60_000


# -- hostile input: never a traceback ---------------------------------------------------------------------------
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=400))
def test_random_bytes_are_a_table_or_one_user_error(raw: bytes) -> None:
    try:
        table = parse_table(raw, "train.csv")
    except UserError as exc:
        assert len(exc.problems) == 1
        return
    assert table.rows and all(len(r) == len(table.header) for r in table.rows)


_CELL = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=st.lists(st.one_of(_CELL, st.sampled_from(["id", "label", "is_valid", "path"])), min_size=1,
                       max_size=4),
       rows=st.lists(st.lists(st.sampled_from(["000000", "000001", "000002", "000003", "a", "", "1", "x y", "../x",
                                               "/", "true"]), min_size=0, max_size=5), max_size=8))
def test_random_tables_give_samples_or_one_user_error(tmp_path_factory: pytest.TempPathFactory, header: list[str],
                                                      rows: list[list[str]]) -> None:
    import csv
    import io
    root = tmp_path_factory.getbasetemp() / "hostile"
    if not (root / "train_images" / "000003.png").exists():
        for i in range(4):
            write_png(root / "train_images" / f"{i:06d}.png", seed=i, size=4)
    out = io.StringIO()
    csv.writer(out).writerows([header, *rows])
    try:
        table = parse_table(out.getvalue().encode(), "train.csv")
        data = table_data(table, root, image_column=None, label_name=None, images_dir=None, seed=0, val_fraction=0.5)
    except UserError as exc:
        assert exc.problems and all(p.line() for p in exc.problems)
        return
    assert len(data.classes) >= 2 and data.train and data.val
    assert all(Path(path).is_file() and 0 <= label < len(data.classes) for path, label in data.train + data.val)


def test_a_random_table_can_succeed(tmp_path: Path) -> None:
    """The hostile test above reaches real samples too: the same cells as a table that works."""
    for i in range(4):
        write_png(tmp_path / "train_images" / f"{i:06d}.png", seed=i, size=4)
    table = parse_table(b"id,label\n000000,a\n000001,1\n000002,a\n000003,1\n", "train.csv")
    data = table_data(table, tmp_path, image_column=None, label_name=None, images_dir=None, seed=0, val_fraction=0.5)
    assert data.classes == ["1", "a"] and len(data.train) == 2 and len(data.val) == 2
