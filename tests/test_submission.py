"""The sample submission read and rows laid out as it asks (datasets/submission.py): pure, no model."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fasttrain.core.errors import UserError
from fasttrain.datasets.submission import (
    Sample,
    csv_text,
    id_keys,
    lay_out,
    match_ids,
    parse_sample,
)

CLASSES = ["cat", "dog", "fox"]
FILES = ["a1.png", "b2.png", "c3.png"]
PROBS = [[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.3, 0.5]]


def test_a_two_column_sample_gives_its_ids_order_and_column_names() -> None:
    sample = parse_sample("\ufeffimage_id,label\nc3,cat\na1,cat\nb2,cat\n", CLASSES)
    assert sample == Sample(["image_id", "label"], ["c3", "a1", "b2"], per_class=False)
    out = lay_out(FILES, PROBS, CLASSES, sample)
    assert out.columns == ["image_id", "label"] and out.dropped == []
    assert out.rows == [{"image_id": "c3", "label": "fox"}, {"image_id": "a1", "label": "cat"},
                        {"image_id": "b2", "label": "dog"}]
    assert csv_text(out) == "image_id,label\nc3,fox\na1,cat\nb2,dog\n"


@pytest.mark.parametrize("ids", [["a1.png", "c3.png"], ["a1", "c3"]])
def test_ids_match_with_or_without_the_extension_and_unnamed_images_are_dropped(ids: list[str]) -> None:
    sample = parse_sample("id,label\n" + "".join(f"{i},x\n" for i in ids), CLASSES)
    out = lay_out(FILES, PROBS, CLASSES, sample)
    assert [r["id"] for r in out.rows] == ids and [r["label"] for r in out.rows] == ["cat", "fox"]
    assert out.dropped == ["b2.png"]


def test_nested_paths_match_by_path_or_by_name() -> None:
    files = ["x/a.png", "y/a.png", "y/b.png"]
    assert match_ids(["y/b", "x/a", "y/a"], files) == ([2, 0, 1], [])
    assert match_ids(["x/a.png"], files) == ([0], ["y/a.png", "y/b.png"])
    assert match_ids(["b"], files) == ([2], ["x/a.png", "y/a.png"])
    with pytest.raises(UserError, match="more than one image"):  # two files answer to the name 'a'
        match_ids(["a", "b"], files)
    assert id_keys("x/a.b.png") == ["x/a.b.png", "x/a.b", "a.b.png", "a.b"]


def test_sample_ids_with_no_image_are_one_error_with_the_count_and_examples() -> None:
    with pytest.raises(UserError) as err:
        match_ids(["a1", "zz1", "zz2", "zz3", "zz4"], FILES)
    line = str(err.value)
    assert "4 of the sample's 5 ids have no image" in line and "'zz1'" in line and "1 more" in line


def test_a_sample_with_one_column_per_class_gets_probabilities_in_its_column_order() -> None:
    sample = parse_sample("id,fox,cat,dog\nb2,0,0,0\na1,0,0,0\n", CLASSES)
    assert sample.per_class
    out = lay_out(FILES, PROBS, CLASSES, sample)
    assert out.columns == ["id", "fox", "cat", "dog"]
    assert out.rows[0] == {"id": "b2", "fox": 0.1, "cat": 0.1, "dog": 0.8}
    assert csv_text(out).splitlines()[2] == "a1,0.100000,0.700000,0.200000"


def test_probabilities_asked_for_give_a_column_per_class() -> None:
    sample = parse_sample("id,label\na1,x\n", CLASSES)
    out = lay_out(FILES, PROBS, CLASSES, sample, per_class=True)
    assert out.columns == ["id", *CLASSES] and out.rows == [{"id": "a1", "cat": 0.7, "dog": 0.2, "fox": 0.1}]
    plain = lay_out(FILES, PROBS, CLASSES, None, per_class=True)
    assert plain.columns == ["file", *CLASSES] and len(plain.rows) == 3


def test_without_a_sample_the_rows_stay_file_class_confidence() -> None:
    out = lay_out(FILES, PROBS, CLASSES, None)
    assert out.columns == ["file", "class", "confidence"]
    assert csv_text(out).splitlines()[1] == "a1.png,cat,0.7000"


@pytest.mark.parametrize("text, needle", [
    ("", "empty"), ("\n\n", "empty"), ("id\na\n", "needs an id column"), ("id,label\n", "no rows"),
    ("id,id\na,b\n", "twice"), ("id,label\na,x\na,y\n", "more than once"), ("id,label\n,x\n", "no id"),
    ("id,cat,dog\na,1,2\n", "neither an id and one label column"), (",label\na,b\n", "all named"),
])
def test_a_sample_that_is_not_one_is_a_user_error(text: str, needle: str) -> None:
    with pytest.raises(UserError, match=needle) as err:
        parse_sample(text, CLASSES)
    assert len(err.value.problems) == 1


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('ab,"\n\r \t\ufeff\x00cat')), max_size=60))
def test_hostile_sample_text_is_a_sample_or_a_user_error(text: str) -> None:
    try:
        sample = parse_sample(text, CLASSES)
    except UserError as exc:
        assert len(exc.problems) == 1
        return
    assert sample.ids and len(set(sample.ids)) == len(sample.ids) and len(sample.columns) >= 2
