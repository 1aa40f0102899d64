"""The app's settings: one table of defaults, one typed getter, and a corrupted or wrong-typed stored value
read as its default (never an exception at start-up)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import QByteArray

from specscope.app.pair_choice import PairChoice
from specscope.app.settings import DEFAULTS, AppSettings, make_qsettings
from specscope.core.controls import DEFAULT_MAX_NEW_TOKENS
from specscope.core.drafter_catalogue import adaptive_k_default, default_k
from specscope.core.records import ControlValues


def settings_at(path) -> AppSettings:
    return AppSettings(make_qsettings(str(path)))


def drafter_defaults(drafter: str) -> ControlValues:
    return ControlValues(k=default_k(drafter), adaptive_k=adaptive_k_default(drafter))


def test_a_fresh_store_reads_the_table_of_defaults(tmp_path) -> None:
    s = settings_at(tmp_path / "settings.ini")
    assert s.run_options() == (DEFAULT_MAX_NEW_TOKENS, 0)
    assert s.keep_sessions() == DEFAULTS["keep_sessions"]
    assert not s.adaptive_chosen() and s.prompt() is None and s.last_dir() == ""
    assert s.pair_choice() is None and s.geometry() is None and s.state() is None
    assert s.token_layout() == (False, [])
    for drafter in ("model", "lookup", "eagle"):
        assert s.controls(drafter) == drafter_defaults(drafter)


def test_what_is_stored_is_read_back_after_a_relaunch(tmp_path) -> None:
    path = tmp_path / "settings.ini"
    s = settings_at(path)
    s.set_run_options(77, -1)
    s.set_keep_sessions(3)
    s.set_adaptive_chosen(True)
    s.set_prompt("one, two; three\nfour")
    s.set_last_dir("/tmp/somewhere")
    s.set_pair_choice(PairChoice(target="demo", drafter="lookup"))
    s.set_controls(ControlValues(k=9, temperature=0.8, top_k=5, top_p=0.9, adaptive_k=True))
    s.set_layout(QByteArray(b"geometry bytes"), QByteArray(b"state bytes"), [1600, 1000])
    s.set_token_layout(True, [300, 500])
    s.sync()
    again = settings_at(path)
    assert again.run_options() == (77, -1)
    assert again.keep_sessions() == 3 and again.adaptive_chosen()
    assert again.prompt() == "one, two; three\nfour" and again.last_dir() == "/tmp/somewhere"
    assert again.pair_choice() == PairChoice(target="demo", drafter="lookup")
    assert again.controls("model") == ControlValues(k=9, temperature=0.8, top_k=5, top_p=0.9, adaptive_k=True)
    assert again.geometry() == QByteArray(b"geometry bytes") and again.state() == QByteArray(b"state bytes")
    assert again.token_layout() == (True, [300, 500]) and again.screen_room() == [1600, 1000]


def test_a_split_from_a_file_written_before_dragged_splits_were_told_apart_reads_as_the_default(tmp_path) -> None:
    path = tmp_path / "settings.ini"
    s = settings_at(path)
    # what the window wrote before: the sizes after a run at 1280x720, whose lines had taken the tokens' room
    s.qs.setValue("window/tokens", json.dumps({"beside": False, "sizes": [491, 91]}))
    s.sync()
    assert settings_at(path).token_layout() == (False, [])
    assert settings_at(path).screen_room() == []  # and its geometry's screen is unknown: not restored


def test_a_corrupted_file_reads_as_the_defaults(tmp_path) -> None:
    path = tmp_path / "settings.ini"
    path.write_text("[General]\nkeep_sessions=lots\nadaptive_k_chosen=maybe\nrun={not json\n"
                    "controls=[1, 2\npair=\"[1, 2]\"\nlast_dir=@Invalid()\n\n[window]\ngeometry=not bytes\n"
                    "tokens=\"{\\\"beside\\\": \\\"sideways\\\", \\\"sizes\\\": [10, \\\"x\\\"]}\"\n")
    s = settings_at(path)
    assert s.keep_sessions() == DEFAULTS["keep_sessions"]
    assert not s.adaptive_chosen()
    assert s.run_options() == (DEFAULT_MAX_NEW_TOKENS, 0)
    assert s.controls("lookup") == drafter_defaults("lookup")
    assert s.pair_choice() is None and s.last_dir() == "" and s.geometry() is None
    assert s.token_layout() == (False, [])


@pytest.mark.parametrize(("key", "stored"), [
    ("keep_sessions", "3.5"),
    ("keep_sessions", "true"),
    ("adaptive_k_chosen", "2"),
    ("run", json.dumps(["max_new_tokens", 5])),  # JSON, but not an object
    ("window/tokens", json.dumps({"beside": 1, "sizes": "300,500"})),
    ("pair", json.dumps("demo")),
    ("run", "[" * 100_000),  # nested too deep for the JSON parser
])
def test_a_value_of_the_wrong_type_reads_as_the_default(tmp_path, key: str, stored: str) -> None:
    s = settings_at(tmp_path / "settings.ini")
    s.qs.setValue(key, stored)
    kind = type(DEFAULTS[key])
    assert s.get(key, kind) == DEFAULTS[key]


def test_one_unreadable_field_of_a_group_keeps_the_others(tmp_path) -> None:
    s = settings_at(tmp_path / "settings.ini")
    s.qs.setValue("run", json.dumps({"max_new_tokens": True, "seed": 12}))  # a yes/no is not a token count
    assert s.run_options() == (DEFAULT_MAX_NEW_TOKENS, 12)
    s.qs.setValue("controls", json.dumps({"k": "seven", "temperature": 0.5, "top_p": "nan"}))
    assert s.controls("eagle") == replace(drafter_defaults("eagle"), temperature=0.5)


def test_controls_that_are_invalid_together_read_as_the_drafters_defaults(tmp_path) -> None:
    s = settings_at(tmp_path / "settings.ini")
    s.qs.setValue("controls", json.dumps({"k": 99, "temperature": 0.5}))  # k beyond K_MAX
    assert s.controls("model") == drafter_defaults("model")


def test_storing_a_value_of_another_type_is_a_programming_error(tmp_path) -> None:
    s = settings_at(tmp_path / "settings.ini")
    with pytest.raises(TypeError):
        s.put("keep_sessions", "3")
    with pytest.raises(TypeError):
        s.put("adaptive_k_chosen", 1)
    with pytest.raises(TypeError):
        s.get("keep_sessions", str)

