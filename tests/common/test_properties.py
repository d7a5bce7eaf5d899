"""tierlog.common.properties, the one home of Kafka's .properties format: Java's reading rules, and
a writer whose output reads back exactly, whatever the keys and values hold."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.common.properties import format_properties, read_properties, write_properties
from tierlog.errors import PropertiesError


def test_reading_follows_javas_format(tmp_path: Path) -> None:
    path = tmp_path / "a.properties"
    path.write_text("a=1\n  b : two words  \nc three\n# x=1\n! y=2\nd=\\\n  continued\\\\\n"
                    "e=tab\\there\nf\\=g=h\nempty=\n\\u0041=unicode\n")
    assert read_properties(path) == {"a": "1", "b": "two words  ", "c": "three",
                                     "d": "continued\\", "e": "tab\there", "f=g": "h",
                                     "empty": "", "A": "unicode"}


@pytest.mark.parametrize(("content", "message"), [
    (None, "does not exist"),
    (b"a=\xff\n", "not UTF-8"),
    (b"a=\\u00zz\n", "malformed \\\\u escape"),
])
def test_unreadable_files_name_the_file(tmp_path: Path, content: bytes | None,
                                         message: str) -> None:
    path = tmp_path / "bad.properties"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(PropertiesError, match=message) as info:
        read_properties(path)
    assert "bad.properties" in str(info.value)


# Text a user could put in a key or value: separators, comment marks, escapes, blanks, line
# breaks, non-ASCII. Keys are not empty (an empty key is not a setting).
TEXT = st.text(alphabet=st.sampled_from(list("ab=: #!\\\t\n\r\fé中x1.,")), max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(TEXT.filter(bool), TEXT, max_size=6))
def test_what_is_written_reads_back_exactly(tmp_path_factory: pytest.TempPathFactory,
                                            values: dict[str, str]) -> None:
    path = tmp_path_factory.mktemp("props") / "t.properties"
    write_properties(path, values)
    assert read_properties(path) == values


def test_lists_and_booleans_are_written_as_kafka_reads_them() -> None:
    text = format_properties({"cleanup.policy": ("compact", "delete"), "preallocate": True})
    assert text == "cleanup.policy=compact,delete\npreallocate=true\n"
