"""The two deployment manifests describe the same app: README.md's front matter (Hugging Face Space)
and Spacefile (Deta Space v0), and both agree with requirements.txt and app.py."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import ast
import platform

import pytest
import torch
import yaml
from huggingface_hub import SpaceHardware
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def front_matter() -> dict:
    text = (ROOT / "README.md").read_text()
    match = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    assert match, "README.md must start with YAML front matter between --- lines"
    return yaml.safe_load(match.group(1))


@pytest.fixture(scope="module")
def spacefile() -> dict:
    return yaml.safe_load((ROOT / "Spacefile").read_text())


ZEROGPU_TORCH = {"2.8.0", "2.9.1", "2.10.0", "2.11.0"}  # what ZeroGPU accepts (its configuration check)
# The CUDA each release's PyPI wheel for Linux x86_64 is built with, read from the wheel's metadata
# (Requires-Dist: cuda-toolkit==13.0.2 for 2.11.0). sm_120 kernels need CUDA 12.8 or newer; cu126 has none.
PYPI_LINUX_CUDA = {"2.11.0": (13, 0)}
LOCAL_CPU_TORCH = "2.14.1"  # the CPU build this project's machines keep on disk


def requirements(path: Path = ROOT / "requirements.txt") -> list[Requirement]:
    lines = [line.split(" #")[0].strip() for line in path.read_text().splitlines()]
    return [Requirement(line) for line in lines if line and not line.startswith(("#", "-"))]


def torch_for(environment: dict) -> list[Requirement]:
    return [r for r in requirements() if r.name == "torch" and (r.marker is None or r.marker.evaluate(environment))]


def pinned_gradio() -> str:
    pins = [line.split("==")[1].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()
            if line.startswith("gradio==")]
    assert len(pins) == 1, "requirements.txt pins gradio exactly once"
    return pins[0]


def test_front_matter_is_a_gradio_space_running_app_py(front_matter):
    assert front_matter["sdk"] == "gradio"
    assert str(front_matter["sdk_version"]) == pinned_gradio()
    assert (ROOT / front_matter["app_file"]).is_file() and front_matter["app_file"] == "app.py"
    assert front_matter["title"] and front_matter["emoji"]
    assert len(front_matter["short_description"]) <= 60
    assert front_matter["suggested_hardware"] in {h.value for h in SpaceHardware}


def test_spacefile_is_a_deta_v0_manifest_running_the_same_app(spacefile, front_matter):
    assert spacefile["v"] == 0
    (micro,) = spacefile["micros"]
    assert micro["src"] == "."
    assert micro["engine"] == "python3.9"
    assert shlex.split(micro["run"])[-1] == front_matter["app_file"]
    assert micro["public_routes"] == ["/*"]
    assert all({"name", "description"} <= set(env) for env in micro["presets"]["env"])


def test_app_serves_on_the_port_the_host_gives_and_without_ssr(monkeypatch):
    """`python app.py` launches on $PORT (Deta sets it; gradio itself reads $GRADIO_SERVER_PORT) without SSR
    (embedding with <gradio-app> and iframes wants client-side rendering)."""
    import runpy

    import gradio as gr

    import handlers

    launched, ended = {}, []
    monkeypatch.setattr(gr.Blocks, "launch", lambda self, **kwargs: launched.update(kwargs))
    monkeypatch.setattr(handlers, "end_process", lambda code=0: ended.append(code))  # its os._exit would end pytest
    monkeypatch.setenv("PORT", "8123")
    runpy.run_path(str(ROOT / "app.py"), run_name="__main__")
    assert launched["server_port"] == 8123 and launched["ssr_mode"] is False
    assert ended == [0]  # the server closed (here: never started): the process ends, whatever its exit would do


def test_readme_names_the_ci_test_command():
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    readme = (ROOT / "README.md").read_text()
    assert ci in readme
    assert "pip install -r requirements.txt && python app.py" in readme


def test_the_space_installs_a_torch_zero_gpu_runs_with_sm120_kernels(front_matter):
    """On the Space (Linux x86_64, the front matter's Python) exactly one torch line applies: a pinned
    release ZeroGPU accepts, whose PyPI wheel is built with CUDA >= 12.8; no index of cu126 wheels."""
    space = {"python_version": str(front_matter["python_version"]), "python_full_version": "3.10.13",
             "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
             "os_name": "posix", "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    (torch_line,) = torch_for(space)
    (pin,) = torch_line.specifier
    assert pin.operator == "==" and pin.version in ZEROGPU_TORCH
    assert PYPI_LINUX_CUDA[pin.version] >= (12, 8)
    options = [line for line in (ROOT / "requirements.txt").read_text().splitlines() if line.startswith("-")]
    assert options == []  # no other index: the wheel is PyPI's (an index of cu126 wheels would lack sm_120)


def test_this_machine_resolves_the_same_file_to_the_torch_it_has():
    """`pip install -r requirements.txt` on a CPU machine keeps the installed torch (or the local CPU wheel)."""
    here = {"python_version": platform.python_version().rsplit(".", 1)[0]}
    (torch_line,) = torch_for(here | {"python_full_version": platform.python_version()})
    installed = torch.__version__.split("+")[0]
    assert torch_line.specifier.contains(installed) and torch_line.specifier.contains(LOCAL_CPU_TORCH)
    if here["python_version"] != "3.10":
        assert not torch_line.specifier.contains("2.11.0") or len(torch_line.specifier) == 1


def test_the_code_parses_as_the_space_s_python(front_matter):
    version = tuple(map(int, str(front_matter["python_version"]).split(".")))
    for path in ROOT.rglob("*.py"):
        if ".git" not in path.parts:
            ast.parse(path.read_text(), filename=str(path), feature_version=version)


def test_requirements_files_parse_and_dev_includes_the_app_s():
    assert {r.name for r in requirements()} >= {"torch", "gradio", "pandas", "matplotlib", "spaces"}
    dev = (ROOT / "requirements-dev.txt").read_text().splitlines()
    assert "-r requirements.txt" in dev
    assert Version(pinned_gradio())


def test_what_only_the_tests_import_is_a_dev_requirement_and_never_the_spaces():
    """scipy is the verdict's independent oracle in the tests: installed by requirements-dev.txt, imported by no
    module the Space runs (app.py, serving.py, profiling/, attention_variants/), so the Space needs no scipy."""
    dev = [Requirement(line.split(" #")[0].strip()) for line in (ROOT / "requirements-dev.txt").read_text().splitlines()
           if line.strip() and not line.startswith(("#", "-"))]
    assert "scipy" in {r.name for r in dev} and "scipy" not in {r.name for r in requirements()}
    served = [ROOT / "app.py", ROOT / "serving.py", *(ROOT / "profiling").rglob("*.py"),
              *(ROOT / "attention_variants").rglob("*.py")]
    for path in served:
        imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(ast.parse(path.read_text()))
                     if isinstance(node, ast.ImportFrom) and node.module and not node.level}
        assert "scipy" not in imported, path


def test_flash_attention_4_is_pinned_for_the_space_only_as_the_variant_says():
    """The Space (Python 3.10, Linux x86_64) installs the pair seen working on the H200; this machine and a laptop on
    another Python do not, and the app and tests run without it."""
    from attention_variants import fa4
    space = {"python_version": "3.10", "sys_platform": "linux", "platform_machine": "x86_64"}
    pins = {r.name: r for r in requirements() if r.name in ("flash-attn-4", "nvidia-cutlass-dsl")}
    assert str(pins["flash-attn-4"].specifier) == f"=={fa4.PIN}" and pins["flash-attn-4"].extras == {"cu13"}
    assert str(pins["nvidia-cutlass-dsl"].specifier) == f"=={fa4.CUTLASS_PIN}"
    for r in pins.values():
        assert r.marker.evaluate(space)
        assert not r.marker.evaluate(space | {"python_version": "3.11"})
        assert not r.marker.evaluate(space | {"sys_platform": "darwin", "platform_machine": "arm64"})


def test_the_serving_engines_are_pinned_for_the_space_only_as_their_files_say():
    """Each optional library a variant calls is pinned at the release its file names (`LIBRARY.pin`), for the Space's
    Python and platform only: elsewhere the variant gives the same line as its install command."""
    from attention_variants import cudnn_frontend, fa3, flashinfer
    space = {"python_version": "3.10", "sys_platform": "linux", "platform_machine": "x86_64"}
    pins = {r.name: r for r in requirements()}
    for library in (fa3.LIBRARY, cudnn_frontend.LIBRARY, flashinfer.LIBRARY):
        r = pins[library.dist]
        assert str(r.specifier) == f"=={library.pin}"
        assert library.install_line() == f'pip install "{r.name}{r.specifier}"'
        assert r.marker.evaluate(space) and not r.marker.evaluate(space | {"python_version": "3.11"})
