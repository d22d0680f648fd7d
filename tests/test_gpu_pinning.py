"""tests/conftest.py's GPU pinning of pytest-xdist workers (TCSPMM_XDIST_GPUS)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("tests_root_conftest", Path(__file__).with_name("conftest.py"))
_conftest = sys.modules.setdefault(_spec.name, importlib.util.module_from_spec(_spec))  # dataclasses look it up
_spec.loader.exec_module(_conftest)
_pin_xdist_worker_gpu = _conftest._pin_xdist_worker_gpu


def test_each_xdist_worker_sees_one_gpu_of_the_list():
    for worker, gpu in (("gw0", "2"), ("gw1", "3"), ("gw2", "2")):
        env = {"TCSPMM_XDIST_GPUS": "2, 3", "PYTEST_XDIST_WORKER": worker}
        _pin_xdist_worker_gpu(env)
        assert env["CUDA_VISIBLE_DEVICES"] == gpu


def test_no_list_or_no_worker_leaves_the_devices_alone():
    for env in ({"PYTEST_XDIST_WORKER": "gw1"}, {"TCSPMM_XDIST_GPUS": "0,1"},
                {"TCSPMM_XDIST_GPUS": "0,1", "PYTEST_XDIST_WORKER": "master"}):
        _pin_xdist_worker_gpu(env)
        assert "CUDA_VISIBLE_DEVICES" not in env
