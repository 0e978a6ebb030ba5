"""``when_imported``: a patch runs right after the script imports a module, never before."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

from hyperscope.capture._imports import when_imported


def test_a_patch_runs_once_the_module_is_imported_and_a_failing_one_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "hs_lazy_mod.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[int] = []

    def patch(module: ModuleType) -> None:
        seen.append(module.VALUE)
        module.VALUE = 2

    def broken(module: ModuleType) -> None:
        raise RuntimeError("no such hook")

    when_imported("hs_lazy_mod", broken)
    when_imported("hs_lazy_mod", patch)
    assert seen == [] and "hs_lazy_mod" not in sys.modules  # nothing imported for the patch
    try:
        import hs_lazy_mod  # type: ignore[import-not-found]

        assert seen == [1] and hs_lazy_mod.VALUE == 2
        assert "cannot hook into hs_lazy_mod" in caplog.text
        when_imported("hs_lazy_mod", patch)  # already imported: runs at once
        assert seen == [1, 2]
    finally:
        sys.modules.pop("hs_lazy_mod", None)
